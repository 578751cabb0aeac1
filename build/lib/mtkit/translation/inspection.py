"""Inspection: heatmaps of one sentence pair's attention weights (mtkit.translation.alignment records them)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from mtkit.core.errors import MtkitError
from mtkit.decoding.search_rules import SearchConfig
from mtkit.model.files import ModelFile
from mtkit.translation.alignment import KINDS, attention_weights
from mtkit.translation.translate import translate_ids, without_line_breaks

FORMATS = ("png", "svg", "html", "json")


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
        from mtkit.core.textio import write_text_atomic

        write_text_atomic(output, view.to_json() + "\n")
    elif fmt == "html":
        from mtkit.translation.plots import write_heatmaps_html

        write_heatmaps_html(view.maps, view.rows, view.columns, output)
    else:
        from mtkit.translation.plots import draw_heatmaps

        draw_heatmaps(view.maps, view.rows, view.columns, output, view.grid_columns, pixels)
