"""Commands that look inside: attention, plot, and score (a model's log-probability of given translations)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from mtkit.cli.app import app, handle_errors
from mtkit.cli.options import (
    BeamOption,
    CheckpointOption,
    DeviceOption,
    MaxTokensOption,
    ModelOption,
    PrecisionOption,
    TgtLangOption,
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
    from mtkit.translation.plots import plot_training

    output = output or run_dir / "curves.png"
    plot_training(run_dir, output)
    console.info(f"wrote {output}")


@app.command()
@handle_errors
def score(
    model: ModelOption,
    src: Annotated[Path, typer.Option(help="Source sentences, one per line.")],
    tgt: Annotated[Path, typer.Option(help="Their translations to score, line by line.")],
    normalize: Annotated[bool, typer.Option(help="Per target token (</s> included) instead of the sum.")] = False,
    lenpen: Annotated[float, typer.Option(help="Divide by the search's length penalty ((5+n)/6)^lenpen.")] = 0.0,
    drop_worst: Annotated[
        float, typer.Option(help="With --normalize and --kept: drop this share of the pairs, the lowest scored.")
    ] = 0.0,
    kept: Annotated[
        Path | None, typer.Option(help="Write the pairs kept to PREFIX.SRC_SUFFIX and PREFIX.TGT_SUFFIX.")
    ] = None,
    checkpoint: CheckpointOption = "best",
    max_tokens: MaxTokensOption = 8192,
    tgt_lang: TgtLangOption = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
) -> None:
    """Score given translations: log p(target | source) by forced decoding, one number per line.

    With --lenpen A the number is what beam search with --lenpen A ranks by; for filtering and reranking.
    With --normalize --drop-worst 0.05 --kept PREFIX the 5% of pairs with the lowest per-token
    log-probability are left out of PREFIX.en and PREFIX.de (for train.en and train.distilled.de):
    the cross-entropy filter of distilled data.

    Example: [bold]mtkit score -m model.pt --src test.en --tgt test.hyp.de --normalize[/bold]
    """
    from mtkit.model.files import load_model_file
    from mtkit.translation.evaluate import check_line_counts, read_lines_checked
    from mtkit.translation.forced_decoding import Scorer

    if normalize and lenpen:
        raise MtkitError("--normalize and --lenpen exclude each other")
    outputs = _kept_files(src, tgt, drop_worst, kept, normalize)
    sources, targets = read_lines_checked(src), read_lines_checked(tgt)
    check_line_counts({src: sources, tgt: targets})
    scorer = Scorer(load_model_file(model, checkpoint), device, precision, max_tokens, tgt_lang)
    scores = scorer.score(sources, targets, normalize, lenpen)
    sys.stdout.write("".join(f"{value:.6f}\n" for value in scores))
    if outputs:
        _write_kept(outputs, sources, targets, scores, drop_worst)


def _kept_files(
    src: Path, tgt: Path, drop_worst: float, kept: Path | None, normalize: bool
) -> tuple[Path, Path] | None:
    """score --drop-worst's two output files, checked before any work."""
    from mtkit.core.textio import check_output_file

    if not drop_worst and kept is None:
        return None
    if not 0 < drop_worst < 1 or kept is None or not normalize:
        raise MtkitError("--drop-worst takes a share between 0 and 1, with --normalize and --kept PREFIX")
    if not src.suffix or src.suffix == tgt.suffix:
        raise MtkitError(f"--kept: {src} and {tgt} need suffixes of their own (train.en, train.distilled.de)")
    outputs = (kept.with_name(kept.name + src.suffix), kept.with_name(kept.name + tgt.suffix))
    for path in outputs:
        check_output_file(path)
    return outputs


def _write_kept(outputs: tuple[Path, Path], sources: list[str], targets: list[str], scores, drop_worst: float) -> None:
    from mtkit.core.textio import write_text_atomic
    from mtkit.translation.forced_decoding import kept_pairs

    kept = kept_pairs(scores, drop_worst)
    for path, lines in zip(outputs, (sources, targets)):
        write_text_atomic(path, "".join(lines[i] + "\n" for i in kept))
    floor = min(scores[i] for i in kept) if kept else float("nan")
    console.info(
        f"kept {len(kept):,} of {len(scores):,} pairs in {outputs[0]} and {outputs[1]} "
        f"(per-token log-probability at least {floor:.4f})"
    )
