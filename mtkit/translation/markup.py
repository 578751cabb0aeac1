"""Markup through a translator: lines of HTML or XML (translate --format html|xml, serve's "format"),
and whole documents (translate-file, serve's /translate_file: mtkit.documents), whose segments carry
their formatting as inline codes. Each segment is translated with its word alignment, and the markup
is put back around the aligned words (mtkit.text.markup)."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from mtkit.core.errors import MtkitError
from mtkit.decoding.ensemble import Ensemble
from mtkit.decoding.search_rules import Hypothesis
from mtkit.text.markup import plain_text
from mtkit.text.markup_placement import Aligned, by_sentences, parse_alignment, translate_markup
from mtkit.translation.sentences import SentenceSplitter, default_splitter
from mtkit.translation.translate import NbestList, TextTranslator, Translator

if TYPE_CHECKING:  # the documents stage needs lxml, which a translation of lines does not
    from mtkit.documents.inline import Document


def require_alignment(translator: TextTranslator, fmt: str) -> None:
    """Markup is placed by the model's word alignment: one model, mtkit's own engine, no target tags."""
    if not isinstance(translator, Translator) or isinstance(translator.model, Ensemble):
        raise MtkitError(
            f"--format {fmt} needs one model and --engine pytorch (its elements follow the word alignment)"
        )
    if translator.source_tag is not None:
        raise MtkitError(f"--format {fmt} is not available for a model with target tags or language tokens")


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
            return by_sentences(texts, self.splitter.split, self._aligned_whole)
        return self._aligned_whole(texts)

    def _aligned_whole(self, texts: list[str]) -> Aligned:
        best = [nbest[0] for nbest in self.inner.translate_hypotheses(texts)]
        alignments = self.inner.alignments(texts, [hypothesis for hypothesis, _ in best])
        return [(translation, parse_alignment(a)) for (_, translation), a in zip(best, alignments)]


def without_markup(lines: Sequence[str], fmt: str) -> list[str]:
    """The lines' translatable text alone, as evaluate scores it."""
    return [plain_text(line, fmt) if fmt != "text" else line for line in lines]


CHUNK_CHARS = 20_000  # a document's segments are translated in chunks of about this much text


def translate_document(
    translator: TextTranslator,
    document: Document,
    target_lang: str | None,
    split_sentences: bool = True,
    on_progress: Callable[[int], None] | None = None,
) -> bytes:
    """The translated file's bytes. Segments with inline codes go through the markup engine (one
    model, mtkit's engine); a document whose segments have none is plain text to any engine.
    on_progress(characters) follows the chunks as they are done."""
    texts = document.segments()
    if document.markup == "xml" and not any("<" in text for text in texts):
        translate = _plain_chunks(translator, split_sentences)
    else:
        splitter = default_splitter(translator.model_meta.get("src_lang")) if split_sentences else None
        markup = MarkupTranslator(translator, document.markup, split_sentences, splitter)  # type: ignore[arg-type]
        translate = lambda chunk, first: translate_markup(  # noqa: E731
            chunk, document.markup, markup.aligned, lambda i: f"segment {first + i + 1}"
        )
    translated: list[str] = []
    for first, chunk in _chunks(texts):
        translated += translate(chunk, first)
        if on_progress:
            on_progress(sum(map(len, chunk)))
    return document.write(translated, target_lang)


def _plain_chunks(translator: TextTranslator, split_sentences: bool):
    """Segments without codes as plain lines (their text escaped as XML), sentence by sentence where asked."""
    translator.set_segmenter(split_sentences and _has_splitter())

    def translate(chunk: list[str], first: int) -> list[str]:
        lines = [html.unescape(text) for text in chunk]
        return [html.escape(t, quote=False) if line.strip() else text
                for t, line, text in zip(translator.translate(lines), lines, chunk)]  # fmt: skip

    return translate


def _has_splitter() -> bool:
    try:
        import pysbd  # noqa: F401
    except ImportError:
        return False
    return True


def _chunks(texts: list[str]):
    """(index of the first, texts) of about CHUNK_CHARS characters each."""
    start, size = 0, 0
    for index, text in enumerate(texts):
        size += len(text)
        if size >= CHUNK_CHARS:
            yield start, texts[start : index + 1]
            start, size = index + 1, 0
    if start < len(texts):
        yield start, texts[start:]
