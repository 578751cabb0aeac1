"""Inspection: attention weights of one sentence pair, heatmaps of them, and word alignments from them.

The weights are recorded only on request (MultiHeadAttention.keep_weights), by an explicit
softmax; training and translation do not keep them (see MultiHeadAttention.forward).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from mtkit.checkpoint import ModelFile
from mtkit.errors import MtkitError
from mtkit.model import MultiHeadAttention, Transformer
from mtkit.search import SearchConfig
from mtkit.tokenizer import BOS_ID, EOS_ID

KINDS = ("cross", "encoder", "decoder")
FORMATS = ("png", "svg", "html", "json")


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


def word_starts(tokens: Sequence[str]) -> list[int]:
    """The word index of each subword: a new word starts at every token that begins with '▁'."""
    index, out = -1, []
    for token in tokens:
        if token.startswith("▁") or index < 0:
            index += 1
        out.append(index)
    return out


ALIGNMENT_LAYER_NOTE = "the penultimate decoder layer's cross-attention, averaged over heads (Garg et al., 2019)"


def word_alignment(cross: torch.Tensor, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> list[tuple[int, int]]:
    """Hard source-target word alignment (i, j) from cross-attention (layers, heads, T + 1, S + 1).

    Each target subword is linked to the source subword it attends to most in the
    penultimate layer (averaged over heads); subword links become word links.
    """
    layer = max(0, cross.size(0) - 2)
    weights = cross[layer].mean(dim=0)[: len(tgt_tokens), : len(src_tokens)]  # drop </s> row and column
    if weights.numel() == 0:
        return []
    src_words, tgt_words = word_starts(src_tokens), word_starts(tgt_tokens)
    links = {(src_words[int(s)], tgt_words[t]) for t, s in enumerate(weights.argmax(dim=1).tolist())}
    return sorted(links)


def pharaoh(links: Sequence[tuple[int, int]]) -> str:
    return " ".join(f"{i}-{j}" for i, j in links)


# --- heatmaps of one sentence ----------------------------------------------------------------


@dataclass
class AttentionView:
    """The heatmaps asked for: (title, (rows, columns) weights) each, with the token labels of both axes."""

    kind: str
    source: str
    translation: str
    rows: list[str]
    columns: list[str]
    maps: list[tuple[str, torch.Tensor]]
    grid_columns: int  # heatmaps per row of an image

    def to_json(self) -> str:
        return json.dumps(
            {
                "kind": self.kind,
                "source": self.source,
                "target": self.translation,
                "rows": self.rows,
                "columns": self.columns,
                "maps": [{"title": title, "weights": matrix.tolist()} for title, matrix in self.maps],
            }
        )


def attention_view(
    model_file: ModelFile, src: str, tgt: str | None, kind: str, layer: str, head: str, beam: int
) -> AttentionView:
    """Attention of `kind` for one source sentence and its translation (or the forced target `tgt`).

    layer: 1..N, last or all; head: 1..h, mean (over heads) or all.
    """
    from mtkit.translate import translate_ids, without_line_breaks

    if kind not in KINDS:
        raise MtkitError(f"--kind {kind}: must be one of {', '.join(KINDS)}")
    model = model_file.build_model("cpu")
    src_tok, tgt_tok = model_file.src_tokenizer, model_file.tgt_tokenizer
    src_ids = src_tok.encode_batch([src.strip()])[0]
    if tgt is not None:
        tgt_ids = tgt_tok.encode_batch([tgt.strip()])[0]
    else:
        search_cfg = without_line_breaks(SearchConfig(beam=beam, lenpen=0.6), tgt_tok)
        tgt_ids = translate_ids(model, [src_ids], search_cfg, model.tgt_embed.tokens.weight.device)[0][0].tokens
    weights = attention_weights(model, src_ids, tgt_ids)[kind]  # (layers, heads, queries, keys)
    src_labels = [src_tok.id_to_token(i) for i in src_ids] + ["</s>"]
    tgt_inputs = ["<s>"] + [tgt_tok.id_to_token(i) for i in tgt_ids]
    tgt_outputs = tgt_inputs[1:] + ["</s>"]
    rows, columns = {
        "cross": (tgt_outputs, src_labels),
        "encoder": (src_labels, src_labels),
        "decoder": (tgt_inputs, tgt_inputs),
    }[kind]
    n_layers, n_heads = weights.shape[:2]
    if layer in ("all", "last"):
        layers = list(range(n_layers)) if layer == "all" else [n_layers - 1]
    else:
        layers = _pick(layer, n_layers, "layer", ("all", "last"))
    heads = _pick(head, n_heads, "head", ("mean", "all"))
    maps = []
    for lay in layers:
        if heads == "mean":
            maps.append((f"{kind} attention, layer {lay + 1}, mean of {n_heads} heads", weights[lay].mean(0)))
        else:
            for h in range(n_heads) if heads == "all" else heads:
                maps.append((f"{kind} attention, layer {lay + 1}, head {h + 1}", weights[lay, h]))
    translation = tgt_tok.decode_batch([tgt_ids])[0]
    return AttentionView(kind, src, translation, rows, columns, maps, n_heads if heads == "all" else 1)


def _pick(value: str, count: int, what: str, extra: tuple[str, ...]) -> list[int] | str:
    """A 1-based index, or one of the words in `extra`."""
    if value in extra:
        return value
    try:
        index = int(value)
    except ValueError:
        raise MtkitError(f"--{what} {value}: expected 1..{count} or {'/'.join(extra)}") from None
    if not 1 <= index <= count:
        raise MtkitError(f"--{what} {value}: the model has {what}s 1..{count}")
    return [index - 1]


def save_attention(view: AttentionView, output: Path, fmt: str, pixels: tuple[int, int] | None = None) -> None:
    """Write the heatmaps as an image (png, svg: needs matplotlib), a self-contained html page, or json."""
    if fmt == "json":
        from mtkit.textio import write_text_atomic

        write_text_atomic(output, view.to_json() + "\n")
    elif fmt == "html":
        from mtkit.plots import write_heatmaps_html

        write_heatmaps_html(view.maps, view.rows, view.columns, output)
    else:
        from mtkit.plots import draw_heatmaps

        draw_heatmaps(view.maps, view.rows, view.columns, output, view.grid_columns, pixels)
