"""Inspection: heatmaps of one sentence pair's attention weights (mtkit.translation.alignment records them),
drawn as PNG/SVG with matplotlib or as dependency-free HTML, and training curves."""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mtkit.core.errors import MtkitError
from mtkit.core.textio import atomic_path, read_records, write_text_atomic
from mtkit.decoding.constraints import without_line_breaks
from mtkit.decoding.search import translate_ids
from mtkit.decoding.search_rules import SearchConfig
from mtkit.model.files import ModelFile
from mtkit.translation.alignment import KINDS, attention_weights

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
        write_heatmaps_html(view.maps, view.rows, view.columns, output)
    else:
        draw_heatmaps(view.maps, view.rows, view.columns, output, view.grid_columns, pixels)


DPI = 100


def pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MtkitError("drawing needs matplotlib: pip install 'mtkit[plot]' (or pip install matplotlib)") from None
    return plt


def heatmap_size(n_maps: int, columns: int, rows: int, cols: int) -> tuple[int, int]:
    """Pixels for a grid of n_maps heatmaps of rows x cols cells, `columns` maps per row."""
    grid_rows = math.ceil(n_maps / columns)
    cell = 28
    width = columns * (cols * cell + 160) + 80
    height = grid_rows * (rows * cell + 150) + 40
    return width, height


def draw_heatmaps(
    maps: list[tuple[str, Any]],
    row_labels: list[str],
    col_labels: list[str],
    path: Path,
    columns: int,
    size: tuple[int, int] | None = None,
) -> tuple[int, int]:
    """Draw each (title, matrix) as a heatmap in a grid and save as PNG or SVG; returns the size in pixels."""
    plt = pyplot()
    width, height = size or heatmap_size(len(maps), columns, len(row_labels), len(col_labels))
    grid_rows = math.ceil(len(maps) / columns)
    fig, axes = plt.subplots(grid_rows, columns, figsize=(width / DPI, height / DPI), dpi=DPI, squeeze=False)
    for ax in axes.flat[len(maps) :]:
        ax.axis("off")
    for ax, (title, matrix) in zip(axes.flat, maps):
        image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_title(title, fontsize=10)
        ax.set_xticks(range(len(col_labels)), col_labels, rotation=90, fontsize=8)
        ax.set_yticks(range(len(row_labels)), row_labels, fontsize=8)
        fig.colorbar(image, ax=ax, fraction=0.04)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".").lower(), dpi=DPI)
    plt.close(fig)
    return width, height


def write_heatmaps_html(maps: list[tuple[str, Any]], row_labels: list[str], col_labels: list[str], path: Path) -> None:
    """A self-contained HTML page: one table per map, each cell shaded by its weight (no scripts)."""
    parts = [
        "<!doctype html><meta charset='utf-8'><title>mtkit attention</title>",
        "<style>body{font-family:sans-serif} table{border-collapse:collapse;margin:1em 0} "
        "td{width:2em;height:2em;text-align:center;font-size:9px} th{font-weight:normal;font-size:12px} "
        "thead th{writing-mode:vertical-rl}</style>",
    ]
    for title, matrix in maps:
        parts.append(f"<h3>{html.escape(title)}</h3><table><thead><tr><th></th>")
        parts.extend(f"<th>{html.escape(label)}</th>" for label in col_labels)
        parts.append("</tr></thead><tbody>")
        for label, row in zip(row_labels, matrix.tolist()):
            parts.append(f"<tr><th>{html.escape(label)}</th>")
            for weight in row:
                shade = int(255 * (1.0 - weight))
                text = "#fff" if weight > 0.5 else "#000"
                parts.append(
                    f"<td style='background:rgb({shade},{shade},255);color:{text}' title='{weight:.3f}'>{weight:.2f}</td>"
                )
            parts.append("</tr>")
        parts.append("</tbody></table>")
    write_text_atomic(path, "".join(parts) + "\n")


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every complete line of a metrics.jsonl (a run still writing may leave a partial last line)."""
    if not path.is_file():
        raise MtkitError(f"{path}: no such file (is this a run directory?)")
    records = read_records(path)
    if not records:
        raise MtkitError(f"{path}: no metrics yet")
    return records


PANELS = [
    ("loss (nats/token)", [("loss", "train (smoothed)"), ("nll", "train NLL"), ("valid_loss", "valid NLL")]),
    ("perplexity", [("ppl", "train"), ("valid_ppl", "valid")]),
    ("valid BLEU / chrF", [("valid_bleu", "BLEU"), ("valid_chrf", "chrF")]),
    ("learning rate", [("lr", "lr")]),
    ("target tokens/s", [("tokens_per_s", "tokens/s")]),
]


def plot_training(run_dir: Path, output: Path) -> None:
    plt = pyplot()
    records = read_metrics(Path(run_dir) / "metrics.jsonl")
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(8, 2.4 * len(PANELS)), dpi=DPI, sharex=True)
    for ax, (title, series) in zip(axes, PANELS):
        for key, label in series:
            points = [(r["step"], r[key]) for r in records if key in r]
            if points:
                steps, values = zip(*points)
                ax.plot(steps, values, marker="o" if len(points) < 30 else None, markersize=3, label=label)
        if title == "perplexity":
            ax.set_yscale("log")
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    axes[-1].set_xlabel("update step")
    fig.suptitle(f"{run_dir}")
    fig.tight_layout()
    with atomic_path(output) as tmp:
        fig.savefig(tmp, format=output.suffix.lstrip(".").lower() or "png", dpi=DPI)
    plt.close(fig)
