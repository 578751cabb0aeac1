"""Markup through a translator: lines of HTML or XML (translate --format html|xml, serve's "format"),
and whole documents (translate-file, serve's /translate_file: mtkit.documents), whose segments carry
their formatting as inline codes. Each segment is translated with its word alignment, and the markup
is put back around the aligned words (mtkit.text.markup)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from mtkit.core.errors import MtkitError
from mtkit.decoding.ensemble import Ensemble
from mtkit.decoding.search_rules import Hypothesis
from mtkit.text.markup_placement import (
    Aligned,
    by_sentences,
    parse_alignment,
    translate_markup,
)
from mtkit.text.segments import plain_text
from mtkit.text.sentence_splitter import SentenceSplitter
from mtkit.translation.translate import NbestList, TextTranslator, Translator

if TYPE_CHECKING:  # the documents stage needs lxml, which a translation of lines does not
    from mtkit.documents.inline import Document


def require_alignment(translator: TextTranslator, fmt: str, what: str | None = None) -> None:
    """Markup is placed by the model's word alignment: one model, mtkit's own engine, no target tags.
    what: what needs it, in the error (default: --format FMT)."""
    what = what or f"--format {fmt}"
    for leg in getattr(translator, "legs", []):  # a chain through a pivot (mtkit.interop.engines.Chain): each
        require_alignment(leg, fmt, what)
    if hasattr(translator, "legs"):
        return
    if not isinstance(translator, Translator) or isinstance(translator.model, Ensemble):
        raise MtkitError(f"{what} needs one model and --engine pytorch (its elements follow the word alignment)")
    if translator.source_tag is not None:
        raise MtkitError(f"{what} is not available for a model with target tags or language tokens")


class MarkupTranslator(TextTranslator):
    """A Translator for lines of markup: each line's translation keeps its elements; its n-best list
    holds that one translation (its score 0: a line is several searches)."""

    def __init__(self, inner: Translator, fmt: str, split_sentences: bool = False, splitter=None):
        """split_sentences: translate each segment sentence by sentence (inner keeps lines whole), cut by
        splitter (default: pysbd's rules for the source language)."""
        require_alignment(inner, fmt)
        inner.keep_attention()
        self.inner, self.fmt = inner, fmt
        lang = inner.model_meta.get("src_lang")
        self.splitter = (splitter or SentenceSplitter(lang)) if split_sentences else None
        self.src_tokenizer, self.tgt_tokenizer = inner.src_tokenizer, inner.tgt_tokenizer
        self.model_meta = inner.model_meta

    @property
    def lines_in_pieces(self) -> int:
        return self.inner.lines_in_pieces

    @property
    def segmenter(self):
        return self.inner.segmenter

    def translate_hypotheses(
        self,
        lines: Sequence[str],
        first_line: int = 1,
        prefixes: Sequence[str] | None = None,
        on_line: Callable[[int, NbestList], None] | None = None,
        encoded=None,
    ) -> list[NbestList]:
        if prefixes and any(prefixes):
            raise MtkitError(f"--format {self.fmt} takes no target prefixes")
        texts = translate_markup(lines, self.fmt, self.aligned, lambda i: f"line {first_line + i}")
        results: list[NbestList] = []
        for index, (line, text) in enumerate(zip(lines, texts)):
            results.append([(Hypothesis([], 0.0, 0.0), text)] if line.strip() else [])
            if on_line:
                on_line(index, results[-1])
        return results

    def aligned(self, texts: list[str]) -> Aligned:
        """Each segment's translation and its word alignment (sentence by sentence, where asked)."""
        if self.splitter is not None:
            return by_sentences(texts, self.splitter.split, self.aligned_whole)
        return self.aligned_whole(texts)

    def aligned_whole(
        self,
        texts: list[str],
        on_line: Callable[[int, NbestList], None] | None = None,
        wanted: Sequence[bool] | None = None,
    ) -> Aligned:
        """Each text's translation, as one piece, and its word alignment; on_line as translate_hypotheses
        calls it; wanted: which texts need their alignment (default: all; the others get none)."""
        best = [nbest[0] for nbest in self.inner.translate_hypotheses(texts, on_line=on_line)]
        chosen = [i for i in range(len(texts)) if wanted is None or wanted[i]]
        found = self.inner.alignments([texts[i] for i in chosen], [best[i][0] for i in chosen])
        alignments = dict(zip(chosen, found))
        return [(translation, parse_alignment(alignments.get(i, ""))) for i, (_, translation) in enumerate(best)]


def without_markup(lines: Sequence[str], fmt: str) -> list[str]:
    """The lines' translatable text alone, as evaluate scores it."""
    return [plain_text(line, fmt) if fmt != "text" else line for line in lines]


Progress = Callable[[int, int], None]  # (done, in all): sentences, or lines of a document without codes


def translate_document(
    translator: TextTranslator,
    document: Document,
    target_lang: str | None,
    split_sentences: bool = True,
    on_progress: Progress | None = None,
    name: str = "the document",
) -> bytes:
    """The translated file's bytes (mtkit.documents.translating: the way a server's worker takes too).
    Segments with inline codes go through the markup engine (one model, mtkit's engine); a document
    whose segments have none is plain text to any engine. Every sentence of the document is translated
    in one call (batched as translate batches a file), and on_progress follows them as they are done;
    name: the file, in errors."""
    from mtkit.documents.translating import is_plain, plain_lines, sentences, written, written_plain

    document.check_target(target_lang)
    if is_plain(document):
        lines = plain_lines(document)
        current = translator.segmenter
        translator.set_segmenter(split_sentences, current.max_len, current.keep_spans, current.recase)
        found = translator.translate_hypotheses(lines, on_line=_counter(len(lines), on_progress))
        return written_plain(document, [nbest[0][1] if nbest else None for nbest in found], target_lang)
    require_alignment(translator, document.markup, f"{name}, a file with formatting,")
    splitter = SentenceSplitter(translator.model_meta.get("src_lang")) if split_sentences else None
    markup = MarkupTranslator(translator, document.markup, split_sentences, splitter)  # type: ignore[arg-type]
    parts = sentences(document, splitter.split if splitter else None, name)
    texts = parts.texts  # a segment without codes (a paragraph in one formatting) needs no alignment:
    aligned = markup.aligned_whole(texts, _counter(len(texts), on_progress), parts.coded)  # no second pass for it
    return written(document, parts, aligned, target_lang)


def _counter(total: int, on_progress: Progress | None):
    """An on_line callback that counts the lines done for on_progress."""
    done = [0]

    def on_line(index: int, nbest) -> None:
        done[0] += 1
        if on_progress:
            on_progress(done[0], total)

    return on_line
