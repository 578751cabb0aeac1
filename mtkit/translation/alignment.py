"""Attention weights of one sentence pair, and the word alignments they give (Pharaoh format).

The weights are recorded only on request (MultiHeadAttention.keep_weights), by an explicit
softmax; training and translation do not keep them. `mtkit translate --alignment` and
`mtkit attention` both read them from here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

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
    model: Transformer, src_rows: Sequence[Sequence[int]], tgt_rows: Sequence[Sequence[int]], layers: int
) -> list[torch.Tensor]:
    """attention_weights(...)["cross"] of the first `layers` decoder layers, for many pairs in one
    padded batch (the later layers and the output layer are not run): each pair's (layers, heads,
    T + 1, S + 1)."""
    device = next(model.parameters()).device
    src = pad_batch([list(row) + [EOS_ID] for row in src_rows], device)
    tgt_in = pad_batch([[BOS_ID, *row] for row in tgt_rows], device)
    modules = attention_modules(model, "cross")[:layers]
    for module in modules:
        module.keep_weights = True
    try:
        memory, src_mask = model.encode(src)
        x = model.tgt_embed(tgt_in)
        for layer in model.decoder_layers[:layers]:
            x = layer(x, layer.cross_attn.keys_values(memory), src_mask)
        weights = torch.stack([m.weights.float() for m in modules], dim=1).cpu()  # (B, layers, heads, T, S)
    finally:
        for module in modules:
            module.keep_weights, module.weights = False, None
    return [weights[b, :, :, : len(t) + 1, : len(s) + 1] for b, (s, t) in enumerate(zip(src_rows, tgt_rows))]


def alignment_layer(model: Transformer) -> int:
    """The decoder layer whose cross-attention word alignments come from: the penultimate."""
    return max(0, len(model.decoder_layers) - 2)


def word_starts(tokens: Sequence[str]) -> list[int]:
    """The word index of each subword: a new word starts at every token that begins with '▁'."""
    index, out = -1, []
    for token in tokens:
        if token.startswith("▁") or index < 0:
            index += 1
        out.append(index)
    return out


def word_alignment(
    cross: torch.Tensor, src_tokens: Sequence[str], tgt_tokens: Sequence[str], layer: int | None = None
) -> list[tuple[int, int]]:
    """Hard source-target word alignment (i, j) from cross-attention (layers, heads, T + 1, S + 1).

    Each target subword is linked to the source subword it attends to most in `layer` (by default
    the penultimate of those given), averaged over heads; subword links become word links.
    """
    layer = max(0, cross.size(0) - 2) if layer is None else layer
    weights = cross[layer].mean(dim=0)[: len(tgt_tokens), : len(src_tokens)]  # drop </s> row and column
    if weights.numel() == 0:
        return []
    src_words, tgt_words = word_starts(src_tokens), word_starts(tgt_tokens)
    links = {(src_words[int(s)], tgt_words[t]) for t, s in enumerate(weights.argmax(dim=1).tolist())}
    return sorted(links)


def pharaoh(links: Sequence[tuple[int, int]]) -> str:
    return " ".join(f"{i}-{j}" for i, j in links)
