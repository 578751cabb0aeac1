"""The translate command: raw text in, translations out."""

from __future__ import annotations

import dataclasses
import functools
import sys
from pathlib import Path
from typing import Annotated

import typer

from mtkit.cli.app import app, handle_errors
from mtkit.cli.options import (
    BatchSizeOption,
    CaseSensitiveTermsOption,
    CheckpointOption,
    CudaGraphsOption,
    DeviceOption,
    EngineOption,
    EpsilonOption,
    FormatOption,
    GlossaryOption,
    KeepSpansOption,
    LenpenOption,
    LoopNgramOption,
    LoopRepeatsOption,
    MaxLenAOption,
    MaxLenBOption,
    MaxSourceLenOption,
    MaxTokensOption,
    MbrOption,
    MbrSourceOption,
    MbrUtilityOption,
    MinLenOption,
    ModelBeamOption,
    ModelsOption,
    NoRepeatOption,
    PivotOption,
    PrecisionOption,
    RecaseOption,
    SrcLangOption,
    TgtLangOption,
    ThenOption,
    TmNameOption,
    TmOption,
    TmSteerOption,
    chained,
    check_markup_options,
    input_lines,
    load_glossary,
    mbr_config,
    model_beam,
    report_pieces,
    search_config,
)
from mtkit.core import console
from mtkit.core.errors import MtkitError


@app.command()
@handle_errors
def translate(
    model: ModelsOption,
    input: Annotated[Path | None, typer.Option("--input", "-i", help="Source text file (default: stdin).")] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write translations here (default: stdout).")
    ] = None,
    checkpoint: CheckpointOption = "best",
    beam: ModelBeamOption = None,
    lenpen: LenpenOption = 0.6,
    nbest: Annotated[int, typer.Option(help="Print N lines per input: index<TAB>score<TAB>translation.")] = 1,
    max_len_a: MaxLenAOption = 1.0,
    max_len_b: MaxLenBOption = 50,
    min_len: MinLenOption = 1,
    no_repeat_ngram: NoRepeatOption = 0,
    loop_ngram: LoopNgramOption = 4,
    loop_repeats: LoopRepeatsOption = 2,
    sample: Annotated[bool, typer.Option(help="Sample instead of searching (use --beam 1).")] = False,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 1.0,
    top_k: Annotated[int, typer.Option(help="Sample among the k likeliest tokens (0: all).")] = 0,
    top_p: Annotated[float, typer.Option(help="Sample from the smallest set with this much probability.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Random seed for sampling.")] = 0,
    mbr: MbrOption = 0,
    mbr_source: MbrSourceOption = "sample",
    epsilon: EpsilonOption = 0.02,
    mbr_utility: MbrUtilityOption = "chrf",
    batch_size: BatchSizeOption = 128,
    max_tokens: MaxTokensOption = 8192,
    buffer_size: Annotated[int, typer.Option(help="Lines read before translating (1 on a terminal).")] = 2000,
    alignment: Annotated[
        bool, typer.Option(help="Append <TAB> and a source-target word alignment (i-j pairs).")
    ] = False,
    prefix_file: Annotated[
        Path | None, typer.Option(help="Per input line, text its translation must begin with (blank: none).")
    ] = None,
    prefix_in_input: Annotated[
        bool, typer.Option(help="Input lines are source<TAB>prefix: the translation begins with the prefix.")
    ] = False,
    split_sentences: Annotated[
        bool | None,
        typer.Option(
            "--split-sentences/--no-split-sentences",
            help="Translate each line sentence by sentence, joined on one line (default: yes, but with --alignment).",
        ),
    ] = None,
    keep_spans: KeepSpansOption = True,
    recase: RecaseOption = True,
    max_source_len: MaxSourceLenOption = 0,
    src_lang: SrcLangOption = None,
    tgt_lang: TgtLangOption = None,
    markup: FormatOption = "text",
    glossary: GlossaryOption = None,
    case_sensitive_terms: CaseSensitiveTermsOption = False,
    constraints: Annotated[
        Path | None,
        typer.Option(help="Per input line, target phrases its translation must contain, tab-separated (blank: none)."),
    ] = None,
    confidence: Annotated[
        bool, typer.Option("--confidence", help="Print CONFIDENCE<TAB>TRANSLATION: 0 to 1, low ones worth checking.")
    ] = False,
    then: ThenOption = None,
    pivot: PivotOption = None,
    tm: TmOption = None,
    tm_name: TmNameOption = "default",
    tm_steer: TmSteerOption = 0,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help='One JSON object a line: {"translation", "origin"} ("mt", "tm 100", "tm 83 + mt", ...).'
        ),
    ] = False,
    calibration: Annotated[
        Path | None, typer.Option(help="--confidence's calibration (default: MODEL.confidence.json where it exists).")
    ] = None,
    engine: EngineOption = "pytorch",
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    cuda_graphs: CudaGraphsOption = False,
) -> None:
    """Translate raw text, one output line per input line, in order (stdin to stdout by default).

    With --alignment each line is `translation<TAB>i-j ...`: source word i aligned to target word j
    (0-based, whitespace-separated words), each to the target word that attends to it most (last two
    decoder layers). With --prefix-file or --prefix-in-input each translation begins with the
    given target text and continues as the model's best completion (both engines).

    With --glossary or --constraints, beam search makes each translation contain its terms, as written
    (dynamic beam allocation); a line cut at the length limit before it held them all is named on stderr.

    With --confidence each line is `confidence<TAB>translation`, the confidence the sentence chrF it
    can expect, from the calibration `mtkit calibrate` fitted (or exp of its mean log-probability).

    With --format html (or xml) each line is markup: block elements cut it into segments translated
    separately, and inline elements are put back around the target words aligned to their source
    words; attributes, comments, scripts, styles, code and translate="no" are kept as they are.

    With --tm (a memory built by mtkit tm import), a sentence the memory holds, spans aside, is its
    stored translation with the sentence's spans; --json says where each line's came from.

    Example: [bold]echo "A dog runs on the beach." | mtkit translate -m model.pt[/bold]
    """
    from mtkit.core.textio import atomic_path, check_input_file, check_output_file, progress_size
    from mtkit.interop.engines import Decoding, build_translator
    from mtkit.translation.markup import MarkupTranslator
    from mtkit.translation.output import paired_inputs, write_translations

    mbr_cfg = mbr_config(mbr, mbr_source, epsilon, mbr_utility, sample)
    beam = model_beam(beam, engine, model, checkpoint)
    cfg = search_config(beam=max(beam, nbest) if mbr_cfg else beam,  # --mbr's n-best are of its candidates
                        lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b, min_len=min_len, nbest=nbest,
                        no_repeat_ngram=no_repeat_ngram, loop_ngram=loop_ngram, loop_repeats=loop_repeats,
                        sample=sample, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)  # fmt: skip
    check_markup_options(markup, **{"--nbest": nbest > 1, "--alignment": alignment,
                                    "--prefix-file": bool(prefix_file), "--prefix-in-input": prefix_in_input,
                                    "--constraints": bool(constraints)})  # fmt: skip
    if alignment and (engine != "pytorch" or len(model) > 1):
        raise MtkitError("--alignment needs one model and --engine pytorch")
    if alignment and split_sentences:
        raise MtkitError("--alignment and --split-sentences exclude each other: an alignment is of one sentence")
    split_sentences = not alignment if split_sentences is None else split_sentences
    if confidence and (nbest > 1 or markup != "text" or engine != "pytorch" or alignment):
        raise MtkitError("--confidence is for one plain-text translation a line (not --nbest, --format, --alignment) "
                         "with --engine pytorch")  # fmt: skip
    if prefix_file and prefix_in_input:
        raise MtkitError("--prefix-file and --prefix-in-input: give one of them")
    for given in (prefix_file, constraints, glossary):
        if given:
            check_input_file(given)
    if input:
        check_input_file(input)  # before the model loads
    if output:
        check_output_file(output)
    if tm and (nbest > 1 or markup != "text" or alignment or confidence or prefix_file or prefix_in_input):
        raise MtkitError("--tm gives one plain-text translation a line: not with --nbest, --format, --alignment, "
                         "--confidence or target prefixes")  # fmt: skip
    if as_json and (nbest > 1 or alignment or confidence):
        raise MtkitError("--json prints one translation a line: not with --nbest, --alignment or --confidence")
    if then and (glossary or confidence):
        raise MtkitError(f"--then: {'--glossary' if glossary else '--confidence'} is of one model, not a chain")

    decoding = Decoding(search=cfg, engine=engine, checkpoint=checkpoint, device=device, precision=precision,
                        batch_size=batch_size, max_tokens=max_tokens, cuda_graphs=cuda_graphs,
                        split_sentences=split_sentences and markup == "text", max_source_len=max_source_len,
                        keep_spans=keep_spans, recase=recase)  # fmt: skip
    last = dataclasses.replace(decoding, mbr=mbr_cfg)  # --mbr is the last model's (the chain's output)
    first = build_translator(decoding if then else last, model, src_lang, pivot if then else tgt_lang)
    translator = chained(first, then, pivot, tgt_lang, model,
                         lambda m, s, t: build_translator(last if m == then[-1] else decoding, [m], s, t))  # fmt: skip
    load_glossary(translator, glossary, src_lang, tgt_lang, case_sensitive_terms)
    steer = steering(tm_steer, tm, engine, model, checkpoint, then)
    if tm:
        translator = with_memory(translator, tm, tm_name, src_lang, tgt_lang, steer)
    if markup != "text":  # it splits each segment's sentences itself, keeping count of the words
        translator = MarkupTranslator(translator, markup, split_sentences)
    interactive = input is None and sys.stdin.isatty()
    lines = paired_inputs(input_lines(input), str(input or "stdin"), prefix_file, prefix_in_input, constraints)
    paired = bool(prefix_file or prefix_in_input or constraints)
    chunk = 1 if interactive else max(1, buffer_size)
    total = progress_size(input) if input else None  # a regular file: progress by bytes, read only once
    if alignment:
        translator.keep_attention()  # a greedy search's alignments come with it
    align = (lambda line, hypothesis: translator.alignments([line], [hypothesis])[0]) if alignment else None

    scored = None
    if confidence:
        from mtkit.model.files import resolve_model_path
        from mtkit.translation.confidence import calibration_for, confidences

        calibrated = calibration_for(calibration, resolve_model_path(model[0], checkpoint))
        scored = functools.partial(confidences, calibrated, translator)

    def write_all(out) -> int:
        return write_translations(translator, lines, paired, out, nbest, align, chunk, interactive, total, scored,
                                  as_json)  # fmt: skip

    if output:
        with atomic_path(output) as tmp, open(tmp, "w", encoding="utf-8") as out:
            n = write_all(out)
        console.info(f"wrote {n:,} translations to {output}")
    else:
        write_all(sys.stdout)
    report_pieces(translator)
    if tm:
        report_memory(translator, tm, tm_steer)


def with_memory(translator, tm: str, name: str, src_lang: str | None, tgt_lang: str | None, steer=None):
    """The translator, taking each sentence the memory holds from it (languages: given, or the model's);
    steer: (the model file, --tm-steer's threshold) where fuzzy matches steer the model."""
    from mtkit.core.database import is_url
    from mtkit.memory.store import TranslationMemory
    from mtkit.memory.translator import MemoryTranslator

    source = src_lang or translator.model_meta.get("src_lang")
    target = tgt_lang or translator.model_meta.get("tgt_lang")
    if not (source and target):
        raise MtkitError("--tm: the model does not say its languages: give --src-lang and --tgt-lang")
    if not is_url(tm) and not Path(tm).is_file():
        raise MtkitError(f"--tm {tm}: no such file (mtkit tm import makes one)")
    memory = TranslationMemory(tm, name)
    if not steer:
        return MemoryTranslator(translator, memory, source, target)
    from mtkit.training.adaptation import Steering

    model_file, threshold = steer
    return MemoryTranslator(translator, memory, source, target, Steering(model_file, translator.cfg), threshold)


def report_memory(translator, tm: str, tm_steer: int = 0) -> None:
    """stderr's count of the sentences a MemoryTranslator took from its memory (and steered)."""
    from mtkit.core.database import without_password

    steered = f", {translator.steered:,} steered by its fuzzy matches" if tm_steer else ""
    where = without_password(tm)
    console.info(f"{translator.remembered:,} of {translator.sentences:,} sentences from the memory {where}{steered}")


def steering(tm_steer: int, tm: str | None, engine: str, models: list[Path], checkpoint: str, then) -> tuple | None:
    """--tm-steer's (model file, threshold), checked: one model of mtkit's engine, which a copy of trains."""
    if not tm_steer:
        return None
    if not tm:
        raise MtkitError("--tm-steer: give the memory its matches come from (--tm)")
    if engine != "pytorch" or len(models) != 1 or then:
        raise MtkitError("--tm-steer: one model and --engine pytorch (a copy of the model trains on the matches)")
    from mtkit.model.files import load_model_file

    return load_model_file(models[0], checkpoint), tm_steer
