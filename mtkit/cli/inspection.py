"""Commands that look inside: attention, plot."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mtkit.cli.app import app, handle_errors
from mtkit.cli.options import (
    BeamOption,
    CheckpointOption,
    ModelOption,
)
from mtkit.core import console
from mtkit.core.errors import MtkitError


@app.command()
@handle_errors
def attention(
    model: ModelOption,
    src: Annotated[str, typer.Option("--src", help="The source sentence.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="FILE.png, .svg, .html or .json.")] = None,
    tgt: Annotated[
        str | None, typer.Option("--tgt", help="A reference to force-decode instead of translating.")
    ] = None,
    kind: Annotated[str, typer.Option(help="cross (target x source), encoder or decoder self-attention.")] = "cross",
    layer: Annotated[str, typer.Option(help="Layer 1..N, or all (default: the last).")] = "last",
    head: Annotated[str, typer.Option(help="Head 1..h, mean (over heads) or all (a grid).")] = "mean",
    fmt: Annotated[
        str | None,
        typer.Option("--format", help="png, svg, html or json (default: from -o; json prints to stdout)."),
    ] = None,
    size: Annotated[str | None, typer.Option(help="Image size in pixels, WIDTHxHEIGHT.")] = None,
    checkpoint: CheckpointOption = "best",
    beam: BeamOption = 5,
) -> None:
    """Draw the attention weights of one sentence as heatmaps with the subword tokens on both axes.

    Example: [bold]mtkit attention -m model.pt --src "A dog runs on the beach." --head all -o attention.png[/bold]
    """
    from mtkit.model.files import load_model_file
    from mtkit.translation.inspection import FORMATS, KINDS, attention_view, save_attention

    if kind not in KINDS:
        raise MtkitError(f"--kind {kind}: must be one of {', '.join(KINDS)}")
    fmt = fmt or (output.suffix.lstrip(".").lower() if output else "json")
    if fmt not in FORMATS:
        raise MtkitError(f"--format {fmt}: must be png, svg, html or json")
    if fmt != "json" and output is None:
        raise MtkitError(f"--format {fmt} needs -o FILE")
    view = attention_view(load_model_file(model, checkpoint), src, tgt, kind, layer, head, beam)
    if output is None:
        print(view.to_json())
        return
    save_attention(view, output, fmt, _parse_size(size) if size and fmt in ("png", "svg") else None)
    if fmt != "json":
        console.info(
            f"wrote {output}: {len(view.maps)} heatmap(s) of {kind} attention; translation: {view.translation}"
        )


def _parse_size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise MtkitError(f"--size {text}: expected WIDTHxHEIGHT, e.g. 1200x800") from None
    if width < 100 or height < 100:
        raise MtkitError(f"--size {text}: at least 100x100 pixels")
    return width, height


@app.command()
@handle_errors
def plot(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (reads its metrics.jsonl).")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Image file (default: RUN_DIR/curves.png).")
    ] = None,
) -> None:
    """Plot training and validation curves (loss, perplexity, BLEU, learning rate, tokens/s); works while training runs.

    Example: [bold]mtkit plot runs/en-de -o curves.png[/bold]
    """
    from mtkit.translation.inspection import plot_training

    output = output or run_dir / "curves.png"
    plot_training(run_dir, output)
    console.info(f"wrote {output}")
