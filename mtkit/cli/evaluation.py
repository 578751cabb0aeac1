"""The evaluate command: a test set translated (or translations taken) and scored with sacrebleu."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

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
    NoRepeatOption,
    PrecisionOption,
    RecaseOption,
    SplitSentencesOption,
    SrcLangOption,
    TgtLangOption,
    TmNameOption,
    TmOption,
    TmSteerOption,
    check_markup_options,
    load_glossary,
    mbr_config,
    model_beam,
    parse_lang_pairs,
    report_pieces,
    search_config,
)
from mtkit.core.errors import MtkitError


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
    split_sentences: SplitSentencesOption = True,
    keep_spans: KeepSpansOption = True,
    recase: RecaseOption = True,
    max_source_len: MaxSourceLenOption = 0,
    src_lang: SrcLangOption = None,
    tgt_lang: TgtLangOption = None,
    batch_size: BatchSizeOption = 128,
    max_tokens: MaxTokensOption = 8192,
    markup: FormatOption = "text",
    glossary: GlossaryOption = None,
    case_sensitive_terms: CaseSensitiveTermsOption = False,
    engine: EngineOption = "pytorch",
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    cuda_graphs: CudaGraphsOption = False,
    tm: TmOption = None,
    tm_name: TmNameOption = "default",
    tm_steer: TmSteerOption = 0,
) -> None:
    """Translate a test set (or take translations) and score it with sacrebleu: BLEU, chrF, TER.

    With --format html or xml the sources are markup (see translate), and translations and
    references are scored on their text alone. With --glossary the translations use its terms (see
    translate), and a row TERMS gives the share of the terms the sources called for that the
    translations hold, as written. With --tm each sentence the memory holds is its stored translation
    (see translate), and stderr counts them.

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
        from mtkit.interop.engines import Decoding, build_translator

        def decoding(split: bool) -> Decoding:
            beam_of = model_beam(beam, engine, model, checkpoint)
            cfg = search_config(beam=beam_of, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b, min_len=min_len,
                                no_repeat_ngram=no_repeat_ngram, loop_ngram=loop_ngram, loop_repeats=loop_repeats,
                                seed=seed)  # fmt: skip
            return Decoding(search=cfg, engine=engine, checkpoint=checkpoint, device=device, precision=precision,
                            batch_size=batch_size, max_tokens=max_tokens, cuda_graphs=cuda_graphs, mbr=mbr_cfg,
                            split_sentences=split, max_source_len=max_source_len, keep_spans=keep_spans,
                            recase=recase)  # fmt: skip

    if lang_pairs is not None:
        if not (model and test) or src or hyp or ref or glossary:
            raise MtkitError(
                "--lang-pairs evaluates --test PREFIX with --model (not --src, --ref, --hyp or --glossary)"
            )
        pairs = parse_lang_pairs(lang_pairs)
        translator = build_translator(decoding(split_sentences), model, pairs[0][0], pairs[0][1])
        print_direction_scores(direction_scores(translator, test, pairs, names, lowercase, tokenize), as_json)
        return
    if not ref:
        raise MtkitError("--ref: give the reference translations (or --lang-pairs with --test)")
    if (glossary or tm) and hyp is not None:
        raise MtkitError(
            f"{'--glossary' if glossary else '--tm'} is for translating: give --model and --src, not --hyp"
        )
    if tm and markup != "text":
        raise MtkitError("--tm is for plain text: not with --format")
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
        translator = build_translator(decoding(split_sentences and markup == "text"), model, src_lang, tgt_lang)
        load_glossary(translator, glossary, src_lang, tgt_lang, case_sensitive_terms)
        inner = translator
        if tm or tm_steer:
            from mtkit.cli.translation import steering, with_memory

            steer = steering(tm_steer, tm, engine, model, checkpoint, None)
            translator = with_memory(translator, tm, tm_name, src_lang, tgt_lang, steer)
        if markup != "text":
            from mtkit.translation.markup import MarkupTranslator

            translator = MarkupTranslator(translator, markup, split_sentences)
        started = time.perf_counter()  # translation only, not model loading
        hypotheses = translator.translate(sources)
        report_pieces(translator)
        if tm:
            from mtkit.cli.translation import report_memory

            report_memory(translator, tm, tm_steer)
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
    if glossary:
        scores["terms"] = term_use(inner, sources, hypotheses)
    if as_json:
        print(report_json(scores, len(hypotheses), seconds, translated=hyp is None))
    else:
        Console(soft_wrap=False).print(report_table(scores, f"{source_path} ({len(hypotheses)} sentences)"))


def term_use(translator, sources: list[str], translations: list[str]) -> dict:
    """The share of the glossary's terms in the sources that the translations hold, as a score row."""
    from mtkit.translation.terminology import TermUse, line_terms

    use = TermUse()
    for source, translation in zip(sources, translations):
        use.add(line_terms(translator, source), translation)
    return {"score": 100 * use.share, "signature": f"{use.used:,} of {use.terms:,} glossary terms held, as written"}
