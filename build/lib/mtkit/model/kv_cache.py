"""Incremental decoding: the keys and values each decoder layer keeps between steps, and the
state a search carries (which rows belong to which sentence, where each sentence began)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from mtkit.model.kernels import attention_dtype

CACHE_CHUNK = 32  # decoder positions a self-attention cache grows by


class LayerCache:
    """One decoder layer's keys and values: self-attention grows per step and has a row per beam;
    cross-attention is fixed and has a row per sentence (every beam of a sentence reads the same).

    Self-attention keys and values live in one (rows, 2h, capacity, d_k) buffer, k heads then v
    heads, with room for CACHE_CHUNK more positions. Beam reordering gathers the filled positions
    into a second buffer of the same size and swaps the two: one copy per step, and no new
    allocation until the capacity is used up.
    """

    def __init__(self, cross_k: Tensor, cross_v: Tensor):
        # Kept in attention's dtype: under CPU autocast, converted once rather than at every step.
        self.cross_k, self.cross_v = (t.to(attention_dtype(t)) for t in (cross_k, cross_v))
        self.length = 0
        self._buffers: list[Tensor] = []  # [current, spare]; the current rows are the first `rows`
        self.rows = 0

    def append(self, kv: Tensor) -> tuple[Tensor, Tensor]:
        """Store one position's (rows, 2h, 1, d_k) keys and values; returns all keys and values
        so far as (rows, h, length, d_k) views."""
        rows, heads2, _, d_k = kv.shape
        if not self._buffers or self.length == self._buffers[0].size(2):
            self._grow(rows, heads2, d_k, kv)
        self.rows = rows
        current = self._buffers[0][:rows]
        current[:, :, self.length] = kv[:, :, 0]
        self.length += 1
        filled = current[:, :, : self.length]
        return filled[:, : heads2 // 2], filled[:, heads2 // 2 :]

    def _grow(self, rows: int, heads2: int, d_k: int, like: Tensor) -> None:
        capacity = self.length + CACHE_CHUNK
        fresh = [like.new_empty(rows, heads2, capacity, d_k, dtype=attention_dtype(like)) for _ in range(2)]
        if self._buffers:
            fresh[0][:, :, : self.length] = self._buffers[0][:rows, :, : self.length]
        self._buffers = fresh

    def select(self, rows: Tensor, sentences: Tensor | None, drop: int = 0) -> None:
        """Keep `rows` (and the cross-attention rows of `sentences`), and drop the first `drop`
        positions, which no kept row attends to."""
        if sentences is not None:
            self.cross_k, self.cross_v = (
                self.cross_k.index_select(0, sentences),
                self.cross_v.index_select(0, sentences),
            )
        if self.length:
            current, spare = self._buffers
            if rows.numel() > spare.size(0):  # more rows than ever before (not in beam search)
                spare = current.new_empty(rows.numel(), *current.shape[1:])
            filled = current[: self.rows, :, drop : self.length]
            torch.index_select(filled, 0, rows, out=spare[: rows.numel(), :, : self.length - drop])
            self._buffers = [spare, current]
            self.rows = rows.numel()
            self.length -= drop

    def join(self, other: LayerCache, new_rows: int) -> None:
        """Append the sentences of a fresh cache (no positions yet) and their `new_rows` rows; the
        new rows' earlier positions are zeros (their self-attention mask hides them)."""
        self.cross_k, self.cross_v = (
            torch.cat(pad_to_common_length([mine, theirs], dim=2))
            for mine, theirs in ((self.cross_k, other.cross_k), (self.cross_v, other.cross_v))
        )
        if not self.length:
            return
        current = self._buffers[0]
        rows = self.rows + new_rows
        if rows > current.size(0):  # room for half as many rows again: joins come one after another
            grown = [current.new_empty(rows + rows // 2, *current.shape[1:]) for _ in range(2)]
            grown[0][: self.rows, :, : self.length] = current[: self.rows, :, : self.length]
            self._buffers, current = grown, grown[0]
        current[self.rows : rows, :, : self.length] = 0
        self.rows = rows


def pad_to_common_length(tensors: list[Tensor], dim: int, value: float | bool = 0) -> list[Tensor]:
    """Pad each tensor at the end of `dim` to the longest one's size there."""
    longest = max(t.size(dim) for t in tensors)
    padded = []
    for t in tensors:
        shape = list(t.shape)
        shape[dim] = longest - t.size(dim)
        padded.append(torch.cat([t, t.new_full(shape, value)], dim=dim) if shape[dim] else t)
    return padded


@dataclass
class DecoderState:
    """What incremental decoding carries between steps: `beams` consecutive rows per sentence."""

    layers: list[LayerCache]
    src_mask: Tensor  # (sentences, 1, 1, S)
    beams: int = 1
    step: int = 0  # cached positions: where the next token goes
    starts: Tensor | None = None  # (sentences,) the cached position where each sentence began; None: all at 0

    def select(self, rows: Tensor, sentences: Tensor | None = None) -> None:
        """Keep/reorder rows (beam reordering, dropping finished sentences). With one beam, rows
        are sentences; with more, `sentences` are the kept sentences (None: all, in order).
        Positions before every kept sentence's start are dropped from the cache."""
        sentences = rows if self.beams == 1 else sentences
        drop = 0
        if sentences is not None and self.starts is not None:
            self.starts = self.starts.index_select(0, sentences)
            drop = int(self.starts.min())
            self.starts -= drop
            self.step -= drop
        for layer in self.layers:
            layer.select(rows, sentences, drop)
        if sentences is not None:
            self.src_mask = self.src_mask.index_select(0, sentences)

    def join(self, other: DecoderState) -> None:
        """Append the sentences of a fresh state (start_decoding, same beams): they decode from
        the next step on, each at its own positions, alongside the sentences already here."""
        sentences = self.src_mask.size(0)
        new_sentences = other.src_mask.size(0)
        for mine, theirs in zip(self.layers, other.layers):
            mine.join(theirs, new_sentences * self.beams)
        self.src_mask = torch.cat(pad_to_common_length([self.src_mask, other.src_mask], dim=3, value=False))
        starts = self.starts if self.starts is not None else self.src_mask.new_zeros(sentences, dtype=torch.long)
        self.starts = torch.cat([starts, starts.new_full((new_sentences,), self.step)])

    def positions(self) -> int | Tensor:
        """The position of each row's next token: an int when every sentence began together."""
        if self.starts is None:
            return self.step
        return (self.step - self.starts).repeat_interleave(self.beams)

    def self_attention_mask(self) -> Tensor | None:
        """(rows, 1, 1, step + 1): which cached positions (this step's included) each row may see."""
        if self.starts is None:
            return None
        visible = torch.arange(self.step + 1, device=self.starts.device)[None, :] >= self.starts[:, None]
        return visible.repeat_interleave(self.beams, dim=0)[:, None, None, :]
