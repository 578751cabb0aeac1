"""Batches by tokens: sentences of similar length together, so that little of a batch is padding.

One packer serves training (source + target budget, shuffled per epoch) and translation
(source budget, longest first), and one helper pads ids into tensors. Training reads its
batches through a BatchStream: updates of world_size x update_freq batches, each rank's share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

from mtkit.core import console
from mtkit.core.config import TrainConfig
from mtkit.core.distributed import Distributed
from mtkit.core.errors import MtkitError
from mtkit.data.dataset import ParallelDataset, TrainingSamples
from mtkit.data.sentence_packing import PackedLayout, into_rows, pack_rows, pairs_of
from mtkit.text.tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    src: torch.Tensor  # (B, S): ids + </s>, right-padded
    tgt_in: torch.Tensor  # (B, T): <s> + ids
    tgt_out: torch.Tensor  # (B, T): ids + </s>
    indices: np.ndarray  # which sentences of the dataset (packed: the plan, see mtkit.data.sentence_packing)
    layout: PackedLayout | None = None  # packed rows: where each sentence sits

    @property
    def tgt_tokens(self) -> int:
        return int((self.tgt_out != PAD_ID).sum())

    @property
    def src_tokens(self) -> int:
        return int((self.src != PAD_ID).sum())

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        move = {"device": device, "non_blocking": non_blocking}
        layout = self.layout.to(**move) if self.layout else None
        return Batch(self.src.to(**move), self.tgt_in.to(**move), self.tgt_out.to(**move), self.indices, layout)

    def pin_memory(self) -> Batch:
        """The batch in page-locked memory, so that copies to a GPU can overlap with compute."""
        layout = self.layout.pin_memory() if self.layout else None
        tensors = (self.src.pin_memory(), self.tgt_in.pin_memory(), self.tgt_out.pin_memory())
        return Batch(*tensors, self.indices, layout)


def pack_by_tokens(
    order: Sequence[int] | np.ndarray, widths: np.ndarray, max_tokens: int, max_sentences: int = 0
) -> list[np.ndarray]:
    """Cut `order` into consecutive batches of indices whose padded size stays within `max_tokens`.

    `widths` is (N, k): each sentence's width in each of k padded tensors (source, target, ...);
    a batch costs its sentences x the sum of its widest widths. `max_sentences` (0: no limit) caps
    the sentences of a batch. A sentence wider than the budget on its own gets a batch of its own.

    Greedy, in order: a batch takes sentences while the cost allows. The cost of a batch's first n
    sentences only grows with n, so each batch's length is the first n whose cost is over, found
    with array operations over a window of candidates (doubled until it holds the answer).
    """
    order = np.asarray(order, dtype=np.int64)
    in_order = widths[order]
    batches: list[np.ndarray] = []
    start, window = 0, 64
    while start < len(order):
        end = min(len(order), start + window)
        widest = np.maximum.accumulate(in_order[start:end], axis=0).sum(axis=1)
        over = np.flatnonzero(np.arange(1, end - start + 1) * widest > max_tokens)
        capped = max_sentences and end - start >= max_sentences
        if not over.size and end < len(order) and not capped:
            window *= 2  # the batch may be longer than the window: look further
            continue
        length = max(1, int(over[0])) if over.size else end - start
        length = min(length, max_sentences) if max_sentences else length
        batches.append(order[start : start + length])
        start, window = start + length, max(64, 2 * length)
    return batches


def make_batches(
    src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int, seed: int, epoch: int, shuffle: bool = True
) -> tuple[list[np.ndarray], np.ndarray]:
    """Group sentence indices into batches whose padded size, sentences x (longest source + longest
    target, </s> and <s> included), stays within max_tokens. Returns (batches, skipped indices):
    a sentence pair that alone exceeds max_tokens cannot be batched and is skipped.

    Sentences are sorted by length, ties broken at random per epoch, and the batch order is
    shuffled per epoch, both from (seed, epoch), so an epoch's batches can be rebuilt exactly.
    """
    # int32 widths: at tens of millions of pairs, each array here is a copy of the corpus's size
    src_cost, tgt_cost = src_lengths.astype(np.int32) + 1, tgt_lengths.astype(np.int32) + 1
    rng = np.random.default_rng([seed, epoch])
    tie_break = rng.random(len(src_cost)) if shuffle else np.arange(len(src_cost))
    # Sorted by (source, target) as one key: one sort pass fewer than lexsort over both, the same order.
    span = int(tgt_cost.max(initial=0)) + 1
    key_type = np.int32 if (int(src_cost.max(initial=0)) + 1) * span < 2**31 else np.int64
    order = np.lexsort((tie_break, src_cost.astype(key_type) * span + tgt_cost))
    del tie_break
    fits = (src_cost + tgt_cost)[order] <= max_tokens
    skipped, order = order[~fits], order[fits]
    batches = pack_by_tokens(order, np.stack([src_cost, tgt_cost], axis=1), max_tokens)
    if shuffle:
        rng.shuffle(batches)  # type: ignore[arg-type]
    return batches, skipped


def length_batches(lengths: Sequence[int], batch_size: int, max_tokens: int) -> list[np.ndarray]:
    """Indices grouped longest first, each group within batch_size sentences and max_tokens source tokens (+ </s>)."""
    widths = np.asarray(lengths, dtype=np.int64).reshape(-1, 1) + 1
    order = np.argsort(-widths[:, 0], kind="stable")
    return pack_by_tokens(order, widths, max_tokens, batch_size)


def pad_batch(
    sentences: Sequence[Sequence[int]],
    device: torch.device | str = "cpu",
    prefix: int | None = None,
    suffix: int | None = None,
) -> torch.Tensor:
    """Right-pad sequences of ids into a (B, L) tensor, optionally adding a token before and after each."""
    head = np.array([prefix] if prefix is not None else [], dtype=np.int64)
    tail = np.array([suffix] if suffix is not None else [], dtype=np.int64)
    rows = [torch.from_numpy(np.concatenate([head, np.asarray(s, dtype=np.int64), tail])) for s in sentences]
    return pad_sequence(rows, batch_first=True, padding_value=PAD_ID).to(device)


def collate(dataset: ParallelDataset | TrainingSamples, indices: np.ndarray) -> Batch:
    """The batch of these sentence pairs: sources + </s>, <s> + targets, targets + </s>, right-padded."""
    indices = np.asarray(indices, dtype=np.int64)
    parts = dataset.locate(indices) if isinstance(dataset, TrainingSamples) else [(dataset, indices, slice(None))]
    tensors = []
    for array, prefix, suffix in (("src", None, EOS_ID), ("tgt", BOS_ID, None), ("tgt", None, EOS_ID)):
        width = max(int(getattr(part, array).lengths[rows].max()) for part, rows, _ in parts) + 1
        out = np.full((len(indices), width), PAD_ID, dtype=np.int64)
        for part, rows, where in parts:
            block = getattr(part, array).padded(rows, prefix, suffix, PAD_ID)
            out[where, : block.shape[1]] = block
        tensors.append(torch.from_numpy(out))
    return Batch(*tensors, indices)


def collate_rows(dataset: TrainingSamples, plan: np.ndarray, length: int, flex: bool = False) -> Batch:
    """The packed batch of a plan (mtkit.data.sentence_packing): (R, length) rows of several sentence pairs each;
    flex: its attention masks are FlexAttention's BlockMasks."""
    dense = collate(dataset, pairs_of(plan))
    packed, layout = into_rows(plan, [t.numpy() for t in (dense.src, dense.tgt_in, dense.tgt_out)], length)
    return Batch(*map(torch.from_numpy, packed), plan, PackedLayout(*map(torch.from_numpy, layout), flex))


class BatchStream:
    """Training's updates, as positions (epoch, batches taken in it) in the per-epoch batch lists.

    `train.max_tokens` is per process: an update is world_size x update_freq batches of up to
    max_tokens each, the same list on every rank, and rank r trains on every world_size-th from r.
    On a GPU a rank's share is collated ahead, in a background thread, into pinned memory.
    With train.pack_length, batches are packed rows (mtkit.data.sentence_packing): max_tokens / (2 x pack_length)
    rows of pack_length source and pack_length target tokens each.
    """

    def __init__(
        self, data: TrainingSamples, cfg: TrainConfig, dist: Distributed, device: torch.device, start: tuple[int, int]
    ):
        self.data, self.cfg, self.dist, self.device, self.start = data, cfg, dist, device, start
        self._epochs: dict[int, list[np.ndarray]] = {}  # the batch lists of the current and next epoch
        self._collator = ThreadPoolExecutor(1, "collate") if device.type == "cuda" else None
        if cfg.flex_attention and device.type != "cuda":
            raise MtkitError("train.flex_attention needs a GPU (FlexAttention has no backward pass on CPUs)")

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        if epoch not in self._epochs:
            max_tokens = self.cfg.max_tokens
            # BPE-dropout: a sample per epoch; weighted corpora: pairs drawn per epoch
            offset, pairs, src_lengths, tgt_lengths = self.data.epoch_sample(epoch, self.cfg.seed)
            if self.cfg.pack_length:
                rows = max_tokens // (2 * self.cfg.pack_length)
                batches, skipped = pack_rows(src_lengths, tgt_lengths, self.cfg.pack_length, rows, self.cfg.seed, epoch)
            else:
                batches, skipped = make_batches(src_lengths, tgt_lengths, max_tokens, self.cfg.seed, epoch)
            if pairs is not None or offset:  # positions in the epoch's sample -> pairs of the dataset
                batches = [_sample_pairs(batch, pairs, offset) for batch in batches]
            resumed_mid_epoch = epoch == self.start[0] and self.start[1] > 0
            if len(skipped) and not resumed_mid_epoch and self.dist.is_main:
                limit = f"train.pack_length={self.cfg.pack_length}" if self.cfg.pack_length else f"train.max_tokens={max_tokens} on their own"  # fmt: skip
                console.warn(f"skipped {len(skipped)} sentence pairs longer than {limit}")
            if not batches:
                raise MtkitError(f"no training batch fits train.max_tokens={max_tokens}: raise it")
            self._epochs = {e: b for e, b in self._epochs.items() if e >= epoch - 1} | {epoch: batches}
        return self._epochs[epoch]

    def upcoming(self, position: tuple[int, int]) -> tuple[list[np.ndarray], tuple[int, int]]:
        """The update after `position`: every rank's batches, moving through epochs, and the position after them."""
        epoch, taken = position
        micro = []
        for _ in range(self.cfg.update_freq * self.dist.world_size):
            if taken >= len(self.epoch_batches(epoch)):
                epoch, taken = epoch + 1, 0
            micro.append(self.epoch_batches(epoch)[taken])
            taken += 1
        return micro, (epoch, taken)

    def prepare(self, micro: list[np.ndarray]) -> Future | _Now:
        """This rank's share of an update as tensors: collated when asked for on a CPU, ahead in a thread on a GPU."""
        mine = micro[self.dist.rank :: self.dist.world_size]
        if self._collator is None:
            return _Now(lambda: self._collate(mine))
        return self._collator.submit(self._collate, mine)

    def collate(self, indices: np.ndarray) -> Batch:
        """One batch of the stream's kind: padded sentences, or packed rows."""
        if self.cfg.pack_length:
            return collate_rows(self.data, indices, self.cfg.pack_length, self.cfg.flex_attention)
        return collate(self.data, indices)

    def _collate(self, mine: list[np.ndarray]) -> list[Batch]:
        batches = [self.collate(indices) for indices in mine]
        return [batch.pin_memory() for batch in batches] if self.device.type == "cuda" else batches

    def close(self) -> None:
        if self._collator:
            self._collator.shutdown(cancel_futures=True)


def _sample_pairs(batch: np.ndarray, pairs: np.ndarray | None, offset: int) -> np.ndarray:
    """A batch's positions in an epoch's sample as pairs of the dataset (a plan's -1 kept)."""
    real = batch >= 0
    out = batch.copy()
    out[real] = (pairs[batch[real]] if pairs is not None else batch[real]) + offset
    return out


class _Now:
    """A Future-like handle whose work runs when its result is asked for (a CPU has no cores to spare)."""

    def __init__(self, work: Callable[[], list[Batch]]):
        self.work = work

    def result(self) -> list[Batch]:
        return self.work()
