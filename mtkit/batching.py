"""Batches by tokens: sentences of similar length together, so that little of a batch is padding."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mtkit.data import ParallelDataset
from mtkit.tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    src: torch.Tensor  # (B, S): ids + </s>, right-padded
    tgt_in: torch.Tensor  # (B, T): <s> + ids
    tgt_out: torch.Tensor  # (B, T): ids + </s>
    indices: np.ndarray  # which sentences of the dataset

    @property
    def tgt_tokens(self) -> int:
        return int((self.tgt_out != PAD_ID).sum())

    @property
    def src_tokens(self) -> int:
        return int((self.src != PAD_ID).sum())

    def to(self, device: torch.device) -> Batch:
        return Batch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device), self.indices)


def make_batches(
    src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int, seed: int, epoch: int, shuffle: bool = True
) -> tuple[list[np.ndarray], np.ndarray]:
    """Group sentence indices into batches whose padded size, sentences x (longest source + longest
    target, </s> and <s> included), stays within max_tokens. Returns (batches, skipped indices):
    a sentence pair that alone exceeds max_tokens cannot be batched and is skipped.

    Sentences are sorted by length, ties broken at random per epoch, and the batch order is
    shuffled per epoch, both from (seed, epoch), so an epoch's batches can be rebuilt exactly.
    """
    src_cost, tgt_cost = src_lengths.astype(np.int64) + 1, tgt_lengths.astype(np.int64) + 1
    rng = np.random.default_rng([seed, epoch])
    tie_break = rng.random(len(src_cost)) if shuffle else np.arange(len(src_cost))
    order = np.lexsort((tie_break, tgt_cost, src_cost))
    batches: list[np.ndarray] = []
    skipped: list[int] = []
    start, longest_src, longest_tgt = 0, 0, 0
    members: list[int] = []
    for index in order.tolist():
        s, t = int(src_cost[index]), int(tgt_cost[index])
        if s + t > max_tokens:
            skipped.append(index)
            continue
        wider_src, wider_tgt = max(longest_src, s), max(longest_tgt, t)
        if members and (len(members) + 1) * (wider_src + wider_tgt) > max_tokens:
            batches.append(np.array(members, dtype=np.int64))
            members, wider_src, wider_tgt = [], s, t
        members.append(index)
        longest_src, longest_tgt = wider_src, wider_tgt
    if members:
        batches.append(np.array(members, dtype=np.int64))
    if shuffle:
        rng.shuffle(batches)  # type: ignore[arg-type]
    return batches, np.array(skipped, dtype=np.int64)


def _pad(rows: list[np.ndarray], prefix: int | None, suffix: int | None) -> torch.Tensor:
    extra = (prefix is not None) + (suffix is not None)
    out = np.full((len(rows), max(len(r) for r in rows) + extra), PAD_ID, dtype=np.int64)
    begin = 1 if prefix is not None else 0
    for i, row in enumerate(rows):
        if prefix is not None:
            out[i, 0] = prefix
        out[i, begin : begin + len(row)] = row
        if suffix is not None:
            out[i, begin + len(row)] = suffix
    return torch.from_numpy(out)


def collate(dataset: ParallelDataset, indices: np.ndarray) -> Batch:
    pairs = [dataset[int(i)] for i in indices]
    src = [s for s, _ in pairs]
    tgt = [t for _, t in pairs]
    return Batch(_pad(src, None, EOS_ID), _pad(tgt, BOS_ID, None), _pad(tgt, None, EOS_ID), np.asarray(indices))
