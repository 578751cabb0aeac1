"""Commands that decode: translate, evaluate."""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from mtkit.cli.app import app, handle_errors
from mtkit.cli.options import (
    BatchSizeOption,
    CheckpointOption,
    CudaGraphsOption,
    DeviceOption,
    EngineOption,
    EpsilonOption,
    FormatOption,
    LangPairsOption,
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
    PrecisionOption,
    SplitSentencesOption,
    SrcLangOption,
    TgtLangOption,
    check_markup_options,
    input_lines,
    mbr_config,
    model_beam,
    parse_lang_pairs,
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
    split_sentences: SplitSentencesOption = False,
    max_source_len: MaxSourceLenOption = 0,
    src_lang: SrcLangOption = None,
    tgt_lang: TgtLangOption = None,
    markup: FormatOption = "text",
    confidence: Annotated[
        bool, typer.Option("--confidence", help="Print CONFIDENCE<TAB>TRANSLATION: 0 to 1, low ones worth checking.")
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

    With --confidence each line is `confidence<TAB>translation`, the confidence the sentence chrF it
    can expect, from the calibration `mtkit calibrate` fitted (or exp of its mean log-probability).

    With --format html (or xml) each line is markup: block elements cut it into segments translated
    separately, and inline elements are put back around the target words aligned to their source
    words; attributes, comments, scripts, styles, code and translate="no" are kept as they are.

    Example: [bold]echo "A dog runs on the beach." | mtkit translate -m model.pt[/bold]
    """
    from mtkit.core.textio import atomic_path, check_input_file, check_output_file, progress_size
    from mtkit.interop.engines import make_translator
    from mtkit.translation.markup import MarkupTranslator
    from mtkit.translation.output import paired_with_prefixes, write_translations

    mbr_cfg = mbr_config(mbr, mbr_source, epsilon, mbr_utility, sample)
    beam = model_beam(beam, engine, model, checkpoint)
    cfg = search_config(
        max(beam, nbest) if mbr_cfg else beam,  # --mbr's n-best are of its candidates
        lenpen,
        max_len_a,
        max_len_b,
        min_len,
        nbest,
        no_repeat_ngram,
        loop_ngram,
        loop_repeats,
        sample,
        temperature,
        top_k,
        top_p,
        seed,
    )
    check_markup_options(markup, **{"--nbest": nbest > 1, "--alignment": alignment,
                                    "--prefix-file": bool(prefix_file), "--prefix-in-input": prefix_in_input})  # fmt: skip
    if alignment and (engine != "pytorch" or len(model) > 1):
        raise MtkitError("--alignment needs one model and --engine pytorch")
    if alignment and split_sentences:
        raise MtkitError("--alignment and --split-sentences exclude each other: an alignment is of one sentence")
    if confidence and (nbest > 1 or markup != "text" or engine != "pytorch" or alignment):
        raise MtkitError("--confidence is for one plain-text translation a line (not --nbest, --format, --alignment) "
                         "with --engine pytorch")  # fmt: skip
    if prefix_file and prefix_in_input:
        raise MtkitError("--prefix-file and --prefix-in-input: give one of them")
    if prefix_file:
        check_input_file(prefix_file)
    if input:
        check_input_file(input)  # before the model loads
    if output:
        check_output_file(output)
    translator = make_translator(
        engine, model, checkpoint, cfg, device, precision, batch_size, max_tokens, cuda_graphs,
        split_sentences and markup == "text", max_source_len, tgt_lang, src_lang, mbr_cfg,
    )  # fmt: skip
    if markup != "text":  # it splits each segment's sentences itself, keeping count of the words
        translator = MarkupTranslator(translator, markup, split_sentences)
    interactive = input is None and sys.stdin.isatty()
    lines = paired_with_prefixes(input_lines(input), str(input or "stdin"), prefix_file, prefix_in_input)
    with_prefixes = bool(prefix_file or prefix_in_input)
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
        return write_translations(
            translator, lines, with_prefixes, out, nbest, align, chunk, interactive, total, scored
        )

    if output:
        with atomic_path(output) as tmp, open(tmp, "w", encoding="utf-8") as out:
            n = write_all(out)
        console.info(f"wrote {n:,} translations to {output}")
    else:
        write_all(sys.stdout)
    report_pieces(translator)


def report_pieces(translator) -> None:
    """The count of lines translated in pieces for being long, on stderr."""
    if translator.lines_in_pieces:
        console.warn(
            f"{translator.lines_in_pieces:,} lines longer than {translator.segmenter.max_len:,} subwords "
            "(--max-source-len) were translated in pieces"
        )


@app.command()
@handle_errors
def evaluate(
    ref: Annotated[
        list[Path] | None, typer.Option("--ref", "-r", help="Reference file (raw text); repeat for several.")
    ] = None,
    model: Annotated[
        list[Path] | None,
        typer.Option("--model", "-m", help="Model file or run directory to translate with; repeat for an ensemble."),
    ] = None,
    src: Annotated[Path | None, typer.Option(help="Source file to translate.")] = None,
    hyp: Annotated[Path | None, typer.Option(help="Score existing translations instead of translating.")] = None,
    test: Annotated[
        list[Path] | None,
        typer.Option(help="With --lang-pairs: PREFIX of PREFIX.SRC and PREFIX.TGT for every pair; repeat for several."),
    ] = None,
    lang_pairs: LangPairsOption = None,
    metrics: Annotated[str, typer.Option(help="Comma-separated: bleu, chrf, ter.")] = "bleu,chrf,ter",
    lowercase: Annotated[bool, typer.Option(help="Case-insensitive scores.")] = False,
    tokenize: Annotated[str | None, typer.Option(help="sacrebleu BLEU tokenizer (default 13a).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Also write the translations here.")] = None,
    checkpoint: CheckpointOption = "best",
    beam: ModelBeamOption = None,
    lenpen: LenpenOption = 0.6,
    max_len_a: MaxLenAOption = 1.0,
    max_len_b: MaxLenBOption = 50,
    min_len: MinLenOption = 1,
    no_repeat_ngram: NoRepeatOption = 0,
    loop_ngram: LoopNgramOption = 4,
    loop_repeats: LoopRepeatsOption = 2,
    mbr: MbrOption = 0,
    mbr_source: MbrSourceOption = "sample",
    epsilon: EpsilonOption = 0.02,
    mbr_utility: MbrUtilityOption = "chrf",
    seed: Annotated[int, typer.Option(help="Random seed of --mbr's samples.")] = 0,
    split_sentences: SplitSentencesOption = False,
    max_source_len: MaxSourceLenOption = 0,
    src_lang: SrcLangOption = None,
    tgt_lang: TgtLangOption = None,
    batch_size: BatchSizeOption = 128,
    max_tokens: MaxTokensOption = 8192,
    markup: FormatOption = "text",
    engine: EngineOption = "pytorch",
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    cuda_graphs: CudaGraphsOption = False,
) -> None:
    """Translate a test set (or take translations) and score it with sacrebleu: BLEU, chrF, TER.

    With --format html or xml the sources are markup (see translate), and translations and
    references are scored on their text alone.

    Example: [bold]mtkit evaluate -m model.pt --src test2016.en --ref test2016.de[/bold]
    """
    from mtkit.core.textio import check_output_file
    from mtkit.translation.evaluate import (
        check_line_counts,
        corpus_scores,
        direction_scores,
        parse_metrics,
        print_direction_scores,
        read_lines_checked,
        report_json,
        report_table,
    )

    names = parse_metrics(metrics)
    mbr_cfg = mbr_config(mbr, mbr_source, epsilon, mbr_utility)
    check_markup_options(markup, **{"--lang-pairs": lang_pairs is not None})
    if lang_pairs is not None or hyp is None:  # a model translates
        from mtkit.interop.engines import make_translator
    if lang_pairs is not None:
        if not (model and test) or src or hyp or ref:
            raise MtkitError("--lang-pairs evaluates --test PREFIX with --model (not --src, --ref or --hyp)")
        pairs = parse_lang_pairs(lang_pairs)
        beam = model_beam(beam, engine, model, checkpoint)
        cfg = search_config(beam, lenpen, max_len_a, max_len_b, min_len, 1, no_repeat_ngram, loop_ngram, loop_repeats,
                            seed=seed)  # fmt: skip
        translator = make_translator(
            engine, model, checkpoint, cfg, device, precision, batch_size, max_tokens, cuda_graphs, split_sentences,
            max_source_len, pairs[0][1], pairs[0][0], mbr_cfg,
        )  # fmt: skip
        print_direction_scores(direction_scores(translator, test, pairs, names, lowercase, tokenize), as_json)
        return
    if not ref:
        raise MtkitError("--ref: give the reference translations (or --lang-pairs with --test)")
    if hyp is not None and model:
        raise MtkitError("--model and --hyp exclude each other: --hyp scores existing translations, --model makes them")
    if (hyp is None) == (src is None) or (src is not None and not model):
        raise MtkitError("give either --model and --src (to translate), or --hyp (to score existing translations)")
    if output:
        check_output_file(output)
    references = {path: read_lines_checked(path) for path in ref}
    source_path = src or hyp
    assert source_path is not None
    sources = read_lines_checked(source_path)
    check_line_counts({source_path: sources, **references})
    if not sources:
        raise MtkitError(f"{source_path}: no lines to score (the file is empty)")
    started = time.perf_counter()
    if hyp is not None:
        hypotheses = sources
    else:
        beam = model_beam(beam, engine, model, checkpoint)
        cfg = search_config(beam, lenpen, max_len_a, max_len_b, min_len, 1, no_repeat_ngram, loop_ngram, loop_repeats,
                            seed=seed)  # fmt: skip
        translator = make_translator(
            engine, model, checkpoint, cfg, device, precision, batch_size, max_tokens, cuda_graphs,
            split_sentences and markup == "text", max_source_len, tgt_lang, src_lang, mbr_cfg,
        )  # fmt: skip
        if markup != "text":
            from mtkit.translation.markup import MarkupTranslator

            translator = MarkupTranslator(translator, markup, split_sentences)
        started = time.perf_counter()  # translation only, not model loading
        hypotheses = translator.translate(sources)
        report_pieces(translator)
    seconds = time.perf_counter() - started
    if output:
        from mtkit.core.textio import write_text_atomic

        write_text_atomic(output, "".join(line + "\n" for line in hypotheses))
    if markup != "text":  # scored on the text alone
        from mtkit.translation.markup import without_markup

        hypotheses, references = (
            without_markup(hypotheses, markup),
            {p: without_markup(r, markup) for p, r in references.items()},
        )
    scores = corpus_scores(hypotheses, list(references.values()), names, lowercase, tokenize)
    if as_json:
        print(report_json(scores, len(hypotheses), seconds, translated=hyp is None))
    else:
        Console(soft_wrap=False).print(report_table(scores, f"{source_path} ({len(hypotheses)} sentences)"))
