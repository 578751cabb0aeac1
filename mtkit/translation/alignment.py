"""Attention weights of one sentence pair, and the word alignments they give (Pharaoh format).

The weights are recorded only on request (MultiHeadAttention.keep_weights), by an explicit
softmax; training and translation do not keep them. `mtkit translate --alignment` and
`mtkit attention` both read them from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import numpy
import torch

from mtkit.data.batching import pad_batch
from mtkit.model.transformer import MultiHeadAttention, Transformer
from mtkit.text.tokenizer import BOS_ID, EOS_ID

KINDS = ("cross", "encoder", "decoder")


def attention_modules(model: Transformer, kind: str) -> list[MultiHeadAttention]:
    if kind == "encoder":
        return [layer.self_attn for layer in model.encoder_layers]
    if kind == "decoder":
        return [layer.self_attn for layer in model.decoder_layers]
    if kind == "cross":
        return [layer.cross_attn for layer in model.decoder_layers]
    raise ValueError(f"unknown attention kind {kind!r}")


@contextmanager
def recording(model: Transformer) -> Iterator[None]:
    modules = [m for kind in KINDS for m in attention_modules(model, kind)]
    for module in modules:
        module.keep_weights = True
    try:
        yield
    finally:
        for module in modules:
            module.keep_weights, module.weights = False, None


@torch.no_grad()
def attention_weights(model: Transformer, src_ids: Sequence[int], tgt_ids: Sequence[int]) -> dict[str, torch.Tensor]:
    """Teacher-force tgt_ids after src_ids; weights per kind as (layers, heads, queries, keys).

    Source positions are src_ids + </s>; decoder positions are <s> + tgt_ids, and the query at
    position t is the one that predicts tgt_ids[t] (</s> for the last).
    """
    device = next(model.parameters()).device
    src = torch.tensor([list(src_ids) + [EOS_ID]], device=device)
    tgt_in = torch.tensor([[BOS_ID] + list(tgt_ids)], device=device)
    with recording(model):
        model(src, tgt_in)
        return {
            kind: torch.stack([m.weights[0].float().cpu() for m in attention_modules(model, kind)]) for kind in KINDS
        }


@torch.no_grad()
def cross_attention_batch(
    model: Transformer, src_rows: Sequence[Sequence[int]], tgt_rows: Sequence[Sequence[int]], layers: Sequence[int]
) -> list[torch.Tensor]:
    """The cross-attention of the decoder layers `layers`, averaged over them and their heads, for many
    pairs in one padded batch (the layers above them and the output layer are not run): each pair's
    (T + 1, S + 1), rows and columns as attention_weights' (a search that keeps its attention,
    SearchConfig.attention_layers, gives the same rows)."""
    device = next(model.parameters()).device
    src = pad_batch([list(row) + [EOS_ID] for row in src_rows], device)
    tgt_in = pad_batch([[BOS_ID, *row] for row in tgt_rows], device)
    modules = [attention_modules(model, "cross")[i] for i in layers]
    for module in modules:
        module.keep_weights = True
    try:
        memory, src_mask = model.encode(src)
        x = model.tgt_embed(tgt_in)
        for layer in model.decoder_layers[: max(layers) + 1]:
            x = layer(x, layer.cross_attn.keys_values(memory), src_mask)
        weights = torch.stack([m.weights.float() for m in modules]).mean(dim=(0, 2)).cpu()  # (B, T, S)
    finally:
        for module in modules:
            module.keep_weights, module.weights = False, None
    return [weights[b, : len(t) + 1, : len(s) + 1] for b, (s, t) in enumerate(zip(src_rows, tgt_rows))]


def cross_attention_batches(
    model: Transformer, src_rows: Sequence[Sequence[int]], tgt_rows: Sequence[Sequence[int]], batch_size: int = 128
) -> list[torch.Tensor]:
    """cross_attention_batch of many pairs in batches of like lengths (less padding), the alignment layers'."""
    order = sorted(range(len(src_rows)), key=lambda i: (len(src_rows[i]), len(tgt_rows[i])))
    out: list[torch.Tensor] = [torch.empty(0)] * len(order)
    layers = alignment_layers(model)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        found = cross_attention_batch(model, [src_rows[i] for i in chunk], [tgt_rows[i] for i in chunk], layers)
        for i, weights in zip(chunk, found):
            out[i] = weights
    return out


def alignment_layers(model: Transformer) -> tuple[int, ...]:
    """The decoder layers whose cross-attention word alignments come from: the last two (chosen on
    Multi30k's val against eflomal's alignments: docs/RESULTS.md, Markup)."""
    return tuple(range(max(0, len(model.decoder_layers) - 2), len(model.decoder_layers)))


def word_starts(tokens: Sequence[str]) -> list[int]:
    """The word index of each subword: a new word starts at every token that begins with '▁'."""
    index, out = -1, []
    for token in tokens:
        if token.startswith("▁") or index < 0:
            index += 1
        out.append(index)
    return out


def word_alignment(
    weights: torch.Tensor, src_tokens: Sequence[str], tgt_tokens: Sequence[str]
) -> list[tuple[int, int]]:
    """Word alignment (i, j) from cross-attention weights (T + 1, S + 1) (rows: target subwords then
    </s>; columns: source subwords then </s>, which are left out).

    Word to word, a target word's weight on a source word is the sum over the source word's subwords,
    averaged over the target word's; each source word is linked to the target word that weighs on it
    most. So every source word has exactly one link, and a target word none or several.
    """
    weights = weights[: len(tgt_tokens), : len(src_tokens)].float().numpy()
    if weights.size == 0:
        return []
    src_words, tgt_words = word_starts(src_tokens), word_starts(tgt_tokens)
    summed = numpy.eye(src_words[-1] + 1, dtype=numpy.float32)[src_words]  # (subwords, words): one-hot
    averaged = numpy.eye(tgt_words[-1] + 1, dtype=numpy.float32)[tgt_words]
    averaged /= averaged.sum(axis=0)
    by_words = averaged.T @ weights @ summed  # (target words, source words); small: numpy, not torch's dispatch
    return list(enumerate(by_words.argmax(axis=0).tolist()))


def pharaoh(links: Sequence[tuple[int, int]]) -> str:
    return " ".join(f"{i}-{j}" for i, j in links)


def composed(first: Iterable[tuple[int, int]], second: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """Two word alignments one after the other (through a pivot): source word i goes with target word k
    where i goes with a pivot word j that goes with k."""
    after: dict[int, set[int]] = {}
    for j, k in second:
        after.setdefault(j, set()).add(k)
    return {(i, k) for i, j in first for k in after.get(j, ())}
