"""Packed training batches: several sentence pairs share one row of a fixed length, instead of one
pair per row padded to the longest.

A packed batch is (R, L) source ids and (R, L) target ids, the same shape for every batch, so a
compiled model sees one shape (and can be replayed as a CUDA graph). Pair k of a row holds the
same segment number, k + 1, on both sides; 0 marks padding. Positions restart at 0 in every
segment, and attention keeps to a segment: a source token sees its own sentence, a target token
its own sentence's earlier tokens and its own source sentence. Padding queries may see every key
(so that no softmax is over nothing); no real query ever sees them, and the loss ignores them.

A batch's plan is an (R, k) array of pair indices, row by row, with -1 after a row's last pair.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, create_block_mask

from mtkit.text.tokenizer import PAD_ID


class PackedLayout(NamedTuple):
    """Where each packed sentence sits: (R, L) segment numbers (0 = padding) and positions.
    flex: the masks are FlexAttention BlockMasks instead of dense (R, 1, L, L) boolean arrays."""

    src_segments: Tensor
    tgt_segments: Tensor
    src_positions: Tensor
    tgt_positions: Tensor
    flex: bool = False

    def to(self, device: torch.device, non_blocking: bool = False) -> PackedLayout:
        return PackedLayout(*(t.to(device, non_blocking=non_blocking) for t in self[:4]), self.flex)

    def pin_memory(self) -> PackedLayout:
        return PackedLayout(*(t.pin_memory() for t in self[:4]), self.flex)

    def encoder_mask(self) -> Tensor | BlockMask:
        """(R, 1, L, L), True where a source query may look: its own sentence."""
        return self._mask(self.src_segments, self.src_segments, causal=False)

    def decoder_mask(self) -> Tensor | BlockMask:
        """(R, 1, L, L): its own sentence's tokens up to itself (causal within a segment)."""
        return self._mask(self.tgt_segments, self.tgt_segments, causal=True)

    def cross_mask(self) -> Tensor | BlockMask:
        """(R, 1, L, L): a target query looks at the source sentence of its own pair."""
        return self._mask(self.tgt_segments, self.src_segments, causal=False)

    def _mask(self, queries: Tensor, keys: Tensor, causal: bool) -> Tensor | BlockMask:
        if self.flex:
            return _block_mask(queries, keys, causal)
        q = torch.arange(queries.size(1), device=queries.device)[:, None]
        k = torch.arange(keys.size(1), device=keys.device)
        return _allowed(queries[:, :, None], keys[:, None, :], q, k, causal)[:, None]


PAD_SEGMENT = 0


def _allowed(query_segment: Tensor, key_segment: Tensor, q: Tensor, k: Tensor, causal: bool) -> Tensor:
    """True where the query and key are in one segment (and, causal, the key is not after the
    query), and on every key of a padding query (so that no softmax is over nothing)."""
    same = query_segment == key_segment
    if causal:
        same = same & (k <= q)
    return same | (query_segment == PAD_SEGMENT)


def _block_mask(queries: Tensor, keys: Tensor, causal: bool) -> BlockMask:
    def mask_mod(b: Tensor, h: Tensor, q: Tensor, k: Tensor) -> Tensor:
        return _allowed(queries[b, q], keys[b, k], q, k, causal)

    return create_block_mask(mask_mod, queries.size(0), None, queries.size(1), keys.size(1), device=queries.device)


def pack_rows(
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    length: int,
    rows_per_batch: int,
    seed: int,
    epoch: int,
    shuffle: bool = True,
) -> tuple[list[np.ndarray], np.ndarray]:
    """An epoch's packed batches: each an (rows_per_batch, k) plan of pair indices (-1 after a
    row's last pair; the epoch's last batch ends in empty rows), and the pairs skipped because
    one side (+ </s> or <s>) is longer than a row.

    Next fit in an order shuffled from (seed, epoch): a row takes pairs until the next one does not
    fit on either side. Rows are thus in random order, and an epoch can be rebuilt exactly.
    """
    src_cost, tgt_cost = src_lengths.astype(np.int32) + 1, tgt_lengths.astype(np.int32) + 1
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(src_cost)) if shuffle else np.arange(len(src_cost))
    fits = (src_cost[order] <= length) & (tgt_cost[order] <= length)
    skipped, order = order[~fits], order[fits]
    starts = _row_starts(src_cost[order], tgt_cost[order], length)
    bounds = np.append(starts, len(order))
    batches = []
    for first in range(0, len(starts), rows_per_batch):
        rows = range(first, min(first + rows_per_batch, len(starts)))
        plan = np.full((rows_per_batch, int(max(bounds[r + 1] - bounds[r] for r in rows))), -1, dtype=np.int64)
        for r in rows:
            plan[r - first, : bounds[r + 1] - bounds[r]] = order[bounds[r] : bounds[r + 1]]
        batches.append(plan)
    return batches, skipped


def _row_starts(src_cost: np.ndarray, tgt_cost: np.ndarray, length: int, chunk: int = 1 << 20) -> np.ndarray:
    """Next fit: where each row starts in the order, a row taking pairs until the next one does not
    fit on either side. A chunk of pairs at a time is turned into Python ints; one is kept per row."""
    starts = []
    src_used = tgt_used = length + 1  # the first pair opens a row
    for first in range(0, len(src_cost), chunk):
        pairs = zip(src_cost[first : first + chunk].tolist(), tgt_cost[first : first + chunk].tolist())
        for i, (src, tgt) in enumerate(pairs, start=first):
            if src_used + src > length or tgt_used + tgt > length:
                starts.append(i)
                src_used = tgt_used = 0
            src_used, tgt_used = src_used + src, tgt_used + tgt
    return np.array(starts, dtype=np.int64)


def pairs_of(plan: np.ndarray) -> np.ndarray:
    """The pair indices of a batch, packed (a plan) or not (already a flat array), in row order."""
    return plan[plan >= 0]


def into_rows(plan: np.ndarray, padded: list[np.ndarray], length: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Lay the pairs of `plan`, given as right-padded (n, width) id arrays in pairs_of(plan)'s
    order (source, target in, target out), into (R, length) rows. Returns the packed arrays and
    the layout's arrays (source segments, target segments, source positions, target positions)."""
    row_of = np.nonzero(plan >= 0)[0]  # each pair's row, in row-major order
    first_in_row = np.r_[True, row_of[1:] != row_of[:-1]]
    index = np.arange(len(row_of))
    segment = index - np.maximum.accumulate(np.where(first_in_row, index, 0)) + 1  # 1, 2, ... within a row
    packed, layout = [], []
    for side, ids in enumerate(padded):
        lengths = (ids != PAD_ID).sum(axis=1)
        before = np.cumsum(lengths) - lengths  # tokens of the earlier pairs, all rows together
        start = before - np.maximum.accumulate(np.where(first_in_row, before, 0))  # within the row
        columns = np.arange(ids.shape[1])
        real = columns < lengths[:, None]
        where = ((row_of * length + start)[:, None] + columns)[real]  # flat positions in (R * length)
        packed.append(_scatter(where, ids[real], plan.shape[0], length, PAD_ID))
        if side != 1:  # target in and target out share one layout
            layout.append(_scatter(where, np.broadcast_to(segment[:, None], ids.shape)[real], plan.shape[0], length, 0))
            layout.append(_scatter(where, np.broadcast_to(columns, ids.shape)[real], plan.shape[0], length, 0))
    src_segments, src_positions, tgt_segments, tgt_positions = layout
    return packed, [src_segments, tgt_segments, src_positions, tgt_positions]


def _scatter(where: np.ndarray, values: np.ndarray, rows: int, length: int, fill: int) -> np.ndarray:
    out = np.full(rows * length, fill, dtype=np.int64)
    out[where] = values
    return out.reshape(rows, length)
