"""The translate-file command: a document in, the same document translated out."""

from __future__ import annotations

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
    GlossaryOption,
    KeepSpansOption,
    LenpenOption,
    LoopNgramOption,
    LoopRepeatsOption,
    MaxLenAOption,
    MaxLenBOption,
    MaxSourceLenOption,
    MaxTokensOption,
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
    chained,
    load_glossary,
    model_beam,
    report_pieces,
    search_config,
)
from mtkit.core import console
from mtkit.core.errors import DOCUMENTS_EXTRA, MtkitError


def require_documents():
    """mtkit.documents.formats, or a one-line error naming the extra to install."""
    try:
        from mtkit.documents import formats
    except ImportError as err:
        raise MtkitError(f"translating files needs {err.name}: {DOCUMENTS_EXTRA}") from None
    return formats


def read_input(path: Path) -> bytes:
    """The whole input, read once ("-": stdin)."""
    from mtkit.core.textio import check_input_file

    if str(path) == "-":
        return sys.stdin.buffer.read()
    check_input_file(path)
    return path.read_bytes()


@app.command("translate-file")
@handle_errors
def translate_file(
    input: Annotated[Path, typer.Argument(help="The file to translate (-: stdin, with --format).", show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", help="The translated file (-: stdout); same format.")],
    model: ModelsOption,
    file_format: Annotated[
        str | None, typer.Option("--format", help="The file's format, where its extension does not say it.")
    ] = None,
    checkpoint: CheckpointOption = "best",
    beam: ModelBeamOption = None,
    lenpen: LenpenOption = 0.6,
    max_len_a: MaxLenAOption = 1.0,
    max_len_b: MaxLenBOption = 50,
    min_len: MinLenOption = 1,
    no_repeat_ngram: NoRepeatOption = 0,
    loop_ngram: LoopNgramOption = 4,
    loop_repeats: LoopRepeatsOption = 2,
    batch_size: BatchSizeOption = 128,
    max_tokens: MaxTokensOption = 8192,
    split_sentences: Annotated[
        bool, typer.Option("--split-sentences/--no-split-sentences", help="Translate paragraphs sentence by sentence.")
    ] = True,
    keep_spans: KeepSpansOption = True,
    recase: RecaseOption = True,
    max_source_len: MaxSourceLenOption = 0,
    src_lang: SrcLangOption = None,
    tgt_lang: TgtLangOption = None,
    retranslate: Annotated[
        bool, typer.Option(help="PO, XLIFF and CSV: translate again the messages already translated.")
    ] = False,
    column: Annotated[
        str | None,
        typer.Option(
            help="CSV: the column to translate (a header's name or a number from 1); SOURCE:TARGET "
            "writes the translation into TARGET (made where missing), leaving its filled cells alone."
        ),
    ] = None,
    max_file_chars: Annotated[
        int, typer.Option(help="Most characters of text the file may hold (a bound on files from strangers).")
    ] = 5_000_000,
    glossary: GlossaryOption = None,
    tm: TmOption = None,
    tm_name: TmNameOption = "default",
    then: ThenOption = None,
    pivot: PivotOption = None,
    case_sensitive_terms: CaseSensitiveTermsOption = False,
    engine: EngineOption = "pytorch",
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    cuda_graphs: CudaGraphsOption = False,
) -> None:
    """Translate a document, keeping its formatting: Word (.docx), PowerPoint (.pptx), Excel (.xlsx), OpenDocument
    (.odt, .odp), subtitles (.srt, .vtt), message catalogues (.po, .pot, .xliff), Markdown, HTML,
    EPUB, plain text, the string files of apps (JSON, YAML, Flutter .arb, Android strings.xml, iOS .strings and
    .stringsdict, Java .properties), a column of a CSV file (--column), and PDF (pip install 'mtkit\\[pdf]').
    The format is the file's extension (or --format); the output has the same.

    Paragraphs are translated sentence by sentence, and each run of formatting (bold, a link, a
    styled span) is put back around the target words aligned to its own; fields, code, footnote
    references, placeholders, timings and whatever else is not text are kept as they are. PO entries
    come out marked fuzzy, XLIFF targets as machine translation; messages already translated are left
    alone unless --retranslate. The document's language is set to the target's. With --tm, each
    sentence the memory holds is its stored translation, in a file without formatting inside its
    segments (a file with it is translated by the model alone, saying so).
    Formats with formatting need one model and --engine pytorch. Needs pip install 'mtkit\\[documents]'.

    Example: [bold]mtkit translate-file report.docx -o report.de.docx -m model.pt[/bold]
    """
    from mtkit.core.textio import atomic_path, check_output_file
    from mtkit.documents.inline import FileLimits
    from mtkit.interop.engines import Decoding, build_translator
    from mtkit.translation.markup import translate_document

    formats = require_documents()
    if max_file_chars < 1:
        raise MtkitError(f"--max-file-chars {max_file_chars}: must be at least 1")
    name = str(input)
    if name == "-" and not file_format:
        raise MtkitError("-: give --format for a file read from stdin")
    fmt = formats.document_format(name, file_format)
    if column is not None and fmt != "csv":
        raise MtkitError(f"--column {column}: only a CSV file has columns ({name} is .{fmt})")
    if str(output) != "-":
        check_output_file(output)
        wanted = formats.document_format(str(output), None, "--output")
        if wanted != fmt:
            raise MtkitError(f"--output {output}: a .{fmt} file translates into a .{fmt} file, not .{wanted}")
    limits = FileLimits(max_chars=max_file_chars)
    document = formats.read_document(read_input(input), name, fmt, retranslate, limits, column)  # before the model
    for note in document.notes():
        console.warn(note)
    cfg = search_config(beam=model_beam(beam, engine, model, checkpoint), lenpen=lenpen, max_len_a=max_len_a,
                        max_len_b=max_len_b, min_len=min_len, no_repeat_ngram=no_repeat_ngram, loop_ngram=loop_ngram,
                        loop_repeats=loop_repeats)  # fmt: skip
    if then and glossary:
        raise MtkitError("--then: --glossary is of one model, not a chain (its source terms are not the next's)")

    decoding = Decoding(search=cfg, engine=engine, checkpoint=checkpoint, device=device, precision=precision,
                        batch_size=batch_size, max_tokens=max_tokens, cuda_graphs=cuda_graphs, split_sentences=False,
                        max_source_len=max_source_len, keep_spans=keep_spans, recase=recase)  # fmt: skip
    first = build_translator(decoding, model, src_lang, pivot if then else tgt_lang)
    load_glossary(first, glossary, src_lang, tgt_lang, case_sensitive_terms)
    translator = chained(first, then, pivot, tgt_lang, model, lambda m, s, t: build_translator(decoding, [m], s, t))
    target = tgt_lang or translator.model_meta.get("tgt_lang")
    remembering = tm and not _formatted(document)
    if tm and not remembering:
        console.warn(f"--tm: {name} has formatting inside its segments, which a stored translation has no alignment "
                     "to place: it is translated by the model alone")  # fmt: skip
    elif remembering:
        from mtkit.cli.translation import with_memory

        translator = with_memory(translator, tm, tm_name, src_lang, target)
    with console.progress(f"translating {input.name}") as bar:
        progress = lambda done, total: bar.set(done, f"of {total:,}")  # noqa: E731
        data = translate_document(translator, document, target, split_sentences, progress, name)
    if str(output) == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        with atomic_path(output) as tmp:
            tmp.write_bytes(data)
        console.info(f"wrote {output} ({len(data):,} bytes)")
    report_pieces(translator)
    if remembering:
        from mtkit.cli.translation import report_memory

        report_memory(translator, tm)


def _formatted(document) -> bool:
    from mtkit.documents.inline import without_codes

    return not without_codes(document.markup, document.segments())
