"""A document's way through a translator, the same offline (mtkit translate-file) and on a server (its
document worker): a document without inline codes goes as plain lines, any engine's; one with codes
goes as the sentences of its segments, translated with word alignments, and the codes are put back
around the aligned words (mtkit.text.markup_placement). Either way the file is written from the
translations, its blank segments as they were."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mtkit.documents.inline import Document, without_codes
from mtkit.text.markup_placement import Aligned, assemble, markup_segments, pending_texts, rejoined, sentences_of
from mtkit.text.segments import Segment


def is_plain(document: Document) -> bool:
    """Whether no segment holds an inline code: the document's lines need no word alignment."""
    return without_codes(document.markup, document.segments())


def plain_lines(document: Document) -> list[str]:
    """A plain document's segments as the lines a translator takes (their text, unescaped)."""
    return [html.unescape(text) for text in document.segments()]


def written_plain(document: Document, translations: Sequence[str | None], target: str | None) -> bytes:
    """The file, each segment its line's translation (None: kept as it was; a blank one too)."""
    texts = document.segments()
    out = [
        html.escape(translation, quote=False) if translation is not None and line.strip() else text
        for translation, line, text in zip(translations, plain_lines(document), texts)
    ]
    return document.write(out, target)


@dataclass(frozen=True)
class Sentences:
    """A document's segments with codes (parsed), and each of their texts cut into sentences."""

    documents: list
    cut: list[list[str]]

    @property
    def texts(self) -> list[str]:
        """The sentences to translate, in order."""
        return [sentence for parts in self.cut for sentence in parts]

    @property
    def coded(self) -> list[bool]:
        """For each sentence: whether its segment holds codes that its alignment must place (one
        without needs no alignment)."""
        segments = [part for parts in self.documents for part in parts if isinstance(part, Segment)]
        return [has_codes(segment) for segment, parts in zip(segments, self.cut) for _ in parts]


def sentences(document: Document, split: Callable[[str], list[str]] | None, name: str) -> Sentences:
    """The document's segments cut into sentences by split (None: each segment whole); name: the
    file, in errors."""
    documents = markup_segments(document.segments(), document.markup, lambda i: f"{name}: segment {i + 1}")
    return Sentences(documents, sentences_of(pending_texts(documents), split or (lambda text: [text])))


def written(document: Document, parts: Sentences, aligned: Aligned, target: str | None) -> bytes:
    """The file, written from each sentence's translation and word alignment."""
    return document.write(assemble(parts.documents, rejoined(parts.cut, aligned)), target)


def has_codes(segment: Segment) -> bool:
    """Whether a segment holds markup that its translation's alignment must place."""
    return any(child.tag is not None or child.kept for child in segment.root.children)
