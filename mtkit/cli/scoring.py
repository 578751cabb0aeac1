"""The score command: a model's log-probability of given translations, and the filter built on it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from mtkit.cli.app import app, handle_errors
from mtkit.cli.options import (
    CheckpointOption,
    DeviceOption,
    MaxTokensOption,
    ModelOption,
    PrecisionOption,
    SrcLangOption,
    TgtLangOption,
)
from mtkit.core import console
from mtkit.core.errors import MtkitError


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
    src_lang: SrcLangOption = None,
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
    scorer = Scorer(load_model_file(model, checkpoint), device, precision, max_tokens, tgt_lang, src_lang)
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
