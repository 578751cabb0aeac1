"""The score command: a model's log-probability of given translations, and the filter built on it; the
calibrate command: which signal of the model's uncertainty tells its good translations from its bad ones."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from mtkit.cli.app import app, handle_errors
from mtkit.cli.options import (
    BatchSizeOption,
    CheckpointOption,
    DeviceOption,
    EpsilonOption,
    LenpenOption,
    MaxTokensOption,
    MbrOption,
    MbrSourceOption,
    MbrUtilityOption,
    ModelBeamOption,
    ModelOption,
    ModelsOption,
    PrecisionOption,
    SrcLangOption,
    TgtLangOption,
    mbr_config,
    model_beam,
    search_config,
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


@app.command()
@handle_errors
def calibrate(
    model: ModelsOption,
    src: Annotated[Path, typer.Option(help="The validation set's sources.")],
    ref: Annotated[Path, typer.Option(help="Their reference translations.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="The calibration file (default: MODEL.confidence.json).")
    ] = None,
    signals: Annotated[
        str | None,
        typer.Option(help="Signals to try (default: logprob, entropy, agreement, dropout, and logprob+each other)."),
    ] = None,
    checkpoint: CheckpointOption = "best",
    beam: ModelBeamOption = None,
    lenpen: LenpenOption = 0.6,
    mbr: MbrOption = 0,
    mbr_source: MbrSourceOption = "both",
    epsilon: EpsilonOption = 0.02,
    mbr_utility: MbrUtilityOption = "chrf",
    batch_size: BatchSizeOption = 128,
    max_tokens: MaxTokensOption = 8192,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print the reports as JSON instead of a table.")] = False,
) -> None:
    """Choose the signal that tells a model's good translations from its bad ones on a validation set,
    and fit the map from it to a confidence in [0, 1] (translate --confidence, serve).

    Translates SRC as translate would with the same search options, scores each translation with
    sentence chrF against REF, and for each signal prints its Spearman correlation with that chrF and
    the mean chrF of its lowest 10% against the rest; the signal of the highest correlation is
    calibrated (isotonic regression onto chrF / 100) and written to the calibration file.

    Example: [bold]mtkit calibrate -m model.pt --src val.en --ref val.de --lenpen 2.2[/bold]
    """
    import json
    from dataclasses import asdict

    from rich.console import Console
    from rich.table import Table

    from mtkit.core.textio import check_output_file
    from mtkit.interop.engines import Decoding, build_translator
    from mtkit.model.files import resolve_model_path
    from mtkit.translation.confidence import DEFAULT_SIGNALS, calibration_path, fit_calibration, parse_signal
    from mtkit.translation.evaluate import check_line_counts, read_lines_checked

    chosen = [name.strip() for name in (signals or DEFAULT_SIGNALS).split(",") if name.strip()]
    if not chosen:
        raise MtkitError("--signals: name at least one signal")
    for name in chosen:
        parse_signal(name)
    output = output or calibration_path(resolve_model_path(model[0], checkpoint))
    check_output_file(output)
    sources, references = read_lines_checked(src), read_lines_checked(ref)
    check_line_counts({src: sources, ref: references})
    if not sources:
        raise MtkitError(f"{src}: no lines to calibrate on (the file is empty)")
    mbr_cfg = mbr_config(mbr, mbr_source, epsilon, mbr_utility)
    beam = model_beam(beam, "pytorch", model, checkpoint)
    cfg = search_config(beam=beam, lenpen=lenpen, nbest=beam)  # the n-best, for the agreement signal
    decoding = Decoding(search=cfg, checkpoint=checkpoint, device=device, precision=precision, batch_size=batch_size,
                        max_tokens=max_tokens, mbr=mbr_cfg)  # fmt: skip
    translator = build_translator(decoding, model)
    calibration, reports = fit_calibration(translator, sources, references, chosen)
    calibration.fitted_on.update(src=str(src), beam=beam, lenpen=lenpen, mbr=asdict(mbr_cfg) if mbr_cfg else None)
    calibration.save(output)
    if as_json:
        print(json.dumps({"chosen": calibration.signal, "signals": [asdict(report) for report in reports]}))
    else:
        table = Table(title=f"{src} ({len(sources)} sentences): sentence chrF by signal")
        for column in ("signal", "Spearman", "chrF, lowest 10%", "chrF, the rest", "chosen"):
            table.add_column(column, justify="left" if column in ("signal", "chosen") else "right")
        for report in reports:
            mark = "*" if report.signal == calibration.signal else ""
            table.add_row(
                report.signal, f"{report.spearman:.3f}", f"{report.lowest_chrf:.2f}", f"{report.rest_chrf:.2f}", mark
            )
        Console(soft_wrap=False).print(table)
    console.info(f"wrote {output}: confidence from {calibration.signal} ({len(calibration.points)} points)")
