"""The interface every document format shares: a file read into segments, each a paragraph's text
with its formatting as inline codes, and the file written again from the segments' translations.

A segment is an XML fragment in the way of XLIFF's inline codes: `<g id="3">words</g>` wraps the
words a formatting run (bold, a hyperlink, a styled span) holds, and `<x id="4"/>` stands for what
is kept whole (a field, a footnote reference, a tab, a placeholder such as `%s`). The markup engine
(mtkit.text.markup) puts them back around the target words aligned to their own, so a format needs
to know only how to turn its runs into codes (InlineBuilder) and codes back into runs (pieces).

Every reader keeps FileLimits: files come from strangers (serve's /translate_file), and a few
kilobytes can inflate to gigabytes, nest a million levels deep or hold a million empty paragraphs.
Each bound is checked as early as the file allows (a zip's directory before any part is inflated,
and again while inflating), and an error names the bound. The defaults let any real document
through: a 2,000-page book is about 5 million characters. Nesting is bounded where trees are built
(mtkit.text.markup.MAX_DEPTH).
"""

from __future__ import annotations

import copy
import html
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lxml import etree

from mtkit.core.errors import MtkitError
from mtkit.text.markup import MAX_DEPTH, Node, is_element, parse, too_deep


class Document(ABC):
    """A file read into segments; write() makes the translated file's bytes."""

    markup = "xml"  # the segments' markup: "xml" (inline codes) or "html" (whole HTML texts)

    @abstractmethod
    def segments(self) -> list[str]:
        """The texts to translate, in order (markup of their kind)."""

    @abstractmethod
    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        """The file with each segment replaced by its translation (same order), marked as in target_lang."""

    def notes(self) -> list[str]:
        """What the reader left as it was and a user should hear of (one line each)."""
        return []

    def check_target(self, target_lang: str | None) -> None:  # noqa: B027 - most formats take any target
        """An MtkitError, before anything is translated, where the file cannot be written in target_lang."""


class BuiltDocument(Document):
    """A document whose segments are built one each, in order, into self.built (an InlineBuilder, or
    anything else with markup(): a string file's messages)."""

    built: list

    def segments(self) -> list[str]:
        return [built.markup() for built in self.built]


NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


class InlineBuilder:
    """One segment's markup, built run by run; codes[i] is what `id="i"` stands for."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.codes: list[Any] = []
        self.separators: set[int] = set()  # codes that part words as a space does (tabs, line breaks)
        self.depth = 0
        self.words = False  # whether any text is more than whitespace

    def text(self, text: str) -> None:
        """Words (characters XML cannot hold, such as NUL, are left out: a segment is XML)."""
        text = NOT_XML.sub("", text)
        self.parts.append(html.escape(text, quote=False))
        self.words = self.words or not text.isspace() and text != ""

    def open(self, code: Any) -> None:
        """Begin a run of formatting (close it with close()); runs in runs deeper than MAX_DEPTH are an MtkitError."""
        if self.depth >= MAX_DEPTH:
            raise too_deep()
        self.parts.append(f'<g id="{len(self.codes)}">')
        self.codes.append(code)
        self.depth += 1

    def close(self) -> None:
        self.parts.append("</g>")
        self.depth -= 1

    def kept(self, code: Any, separates: bool = False) -> None:
        """Something kept whole at this place (no words of its own); separates: it parts the words on
        its sides as a space would (a tab, a line break), so the model sees a space there and the
        spaces next to it are left out again (pieces)."""
        if separates:
            self.separators.add(len(self.codes))
        self.parts.append(f' <x id="{len(self.codes)}"/> ' if separates else f'<x id="{len(self.codes)}"/>')
        self.codes.append(code)

    def markup(self) -> str:
        return "".join(self.parts) + "</g>" * self.depth

    def has_words(self) -> bool:
        return self.words


@dataclass(frozen=True)
class Piece:
    """A stretch of a translated segment: text, or a kept code (kept is its id), inside the runs
    `within` (ids, outermost first)."""

    text: str = ""
    kept: int | None = None
    within: tuple[int, ...] = ()


def pieces(markup: str, separators: set[int] | frozenset[int] = frozenset()) -> list[Piece]:
    """A translated segment's text and kept codes in order, each with the runs around it; adjacent
    text in the same runs is one piece; the spaces next to a separator are left out."""
    out: list[Piece] = []

    def walk(node: Node, within: tuple[int, ...]) -> None:
        for child in node.children:
            if child.tag is None and not child.kept:
                if out and out[-1].kept is None and out[-1].within == within:
                    out[-1] = Piece(out[-1].text + child.text, None, within)
                elif child.text:
                    out.append(Piece(child.text, None, within))
            elif child.tag == "x":
                out.append(Piece("", _code_id(child), within))
            elif is_element(child):
                walk(child, within + (_code_id(child),))

    walk(parse(markup, "xml"), ())
    if separators:
        out = _trim_separators(out, separators)
    return out


def render_pieces(
    found: list[Piece], codes: list, text: Callable[[str], str] = str, kept: Callable[[Any], str] = str
) -> str:
    """Translated pieces as text again, for formats whose runs are markup around their words: a
    run's code is its (opening, closing) markup, text(piece) writes a piece's words, kept(code) a kept code."""
    out: list[str] = []
    open_runs: list[int] = []
    for piece in found:
        while open_runs and open_runs != list(piece.within[: len(open_runs)]):
            out.append(codes[open_runs.pop()][1])
        for i in piece.within[len(open_runs) :]:
            out.append(codes[i][0])
            open_runs.append(i)
        out.append(text(piece.text) if piece.kept is None else kept(codes[piece.kept]))
    out.extend(codes[i][1] for i in reversed(open_runs))
    return "".join(out)


def _trim_separators(found: list[Piece], separators: set[int] | frozenset[int]) -> list[Piece]:
    out = list(found)
    for index, piece in enumerate(out):
        if piece.kept in separators:
            if index and out[index - 1].kept is None:
                out[index - 1] = Piece(out[index - 1].text.rstrip(" "), None, out[index - 1].within)
            if index + 1 < len(out) and out[index + 1].kept is None:
                out[index + 1] = Piece(out[index + 1].text.lstrip(" "), None, out[index + 1].within)
    return [piece for piece in out if piece.kept is not None or piece.text]


def _code_id(node: Node) -> int:
    start = node.start
    return int(start[start.index('id="') + 4 : start.index('"', start.index('id="') + 4)])


def plain(markup: str) -> str:
    """A segment's text without its codes."""
    return "".join(piece.text for piece in pieces(markup))


def read_mixed(
    element: etree._Element,
    is_wrapper: Callable[[etree._Element], bool],
    separates: Callable[[etree._Element], bool] = lambda element: False,
    builder: InlineBuilder | None = None,
) -> InlineBuilder:
    """An XML element of mixed content (text between child elements) as a segment: the children
    is_wrapper accepts are runs whose words are translated, every other child is kept whole (and
    parts the words around it where separates says so); builder: one whose text() keeps more whole."""
    builder = builder or InlineBuilder()

    def walk(parent: etree._Element) -> None:
        builder.text(parent.text or "")
        for child in parent:
            if isinstance(child.tag, str) and is_wrapper(child):
                builder.open(child)
                walk(child)
                builder.close()
            else:  # elements kept whole, and comments or processing instructions
                builder.kept(child, separates(child))
            builder.text(child.tail or "")

    walk(element)
    return builder


def write_mixed(element: etree._Element, built: InlineBuilder, translation: str) -> None:
    """Fill an element of mixed content (its children and text removed) with a translated segment
    that read_mixed made: a run becomes a copy of its element without content, a kept child a copy
    (a kept string, such as a placeholder, its text)."""
    for child in list(element):
        element.remove(child)
    element.text = None
    open_wraps: list[tuple[int, etree._Element]] = []
    codes = built.codes
    for piece in pieces(translation, built.separators):
        while open_wraps and [i for i, _ in open_wraps] != list(piece.within[: len(open_wraps)]):
            open_wraps.pop()
        for i in piece.within[len(open_wraps) :]:
            parent = open_wraps[-1][1] if open_wraps else element
            wrap = etree.SubElement(parent, codes[i].tag, attrib=dict(codes[i].attrib))
            open_wraps.append((i, wrap))
        container = open_wraps[-1][1] if open_wraps else element
        code = None if piece.kept is None else codes[piece.kept]
        if piece.kept is None or isinstance(code, str):
            text = piece.text if piece.kept is None else code
            if len(container):
                container[-1].tail = (container[-1].tail or "") + text
            else:
                container.text = (container.text or "") + text
        else:
            kept = copy.deepcopy(codes[piece.kept])
            kept.tail = None
            container.append(kept)


def decode_text(data: bytes, name: str) -> str:
    """A text file's UTF-8 (a byte-order mark left out), or an MtkitError naming the file and byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise MtkitError(f"{name}: not UTF-8 text (byte {err.start + 1})") from None


def read_xml(data: bytes, where: str) -> etree._Element:
    """An XML document's tree (nothing fetched, entities expanded once: inline_entities), or an
    MtkitError that starts with where."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as err:
        raise MtkitError(f"{where}: not well-formed XML ({' '.join(str(err).split())})") from None
    inline_entities(root, max(len(data), 1 << 20), where)
    return root


def inline_entities(root: etree._Element, most: int, where: str) -> None:
    """Each entity reference replaced by the text its internal declaration gives (an external one, or
    one whose text holds markup, by nothing): the text after a reference is read on, and the file
    written again needs no DTD. A declaration's own references are not expanded (no billion laughs),
    and all expansions together may not add more characters than `most`."""
    references = list(root.iter(etree.Entity))
    if not references:
        return
    dtd = root.getroottree().docinfo.internalDTD
    declared = dtd.iterentities() if dtd is not None else ()
    texts = {e.name: html.unescape(e.content) for e in declared if e.content is not None and "<" not in e.content}
    added = 0
    for reference in references:
        text = texts.get(reference.name, "")
        added += len(text)
        if added > most:
            raise MtkitError(f"{where}: its entity references expand to more than {most:,} characters")
        text += reference.tail or ""
        parent, previous = reference.getparent(), reference.getprevious()
        if previous is not None:
            previous.tail = (previous.tail or "") + text
        else:
            parent.text = (parent.text or "") + text
        parent.remove(reference)


def without_codes(markup: str, texts: Sequence[str]) -> bool:
    """Whether a document's segments are plain text (no inline code in any): any engine translates them."""
    return markup == "xml" and not any("<" in text for text in texts)


def language_tag(lang: str | None) -> str | None:
    """A target language as documents mark it (BCP 47): "de", "pt-BR", "deu-Latn" for NLLB's deu_Latn."""
    return lang.replace("_", "-") if lang else None


class FileTooLarge(MtkitError):
    """A document over one of its bounds (the server answers 413)."""


@dataclass(frozen=True)
class FileLimits:
    max_chars: int = 5_000_000  # characters of text to translate (translate-file/serve --max-file-chars)
    max_segments: int = 500_000  # paragraphs, cells, cues, messages
    max_members: int = 10_000  # parts of a zip package (.docx, .odt, .epub, ...)
    max_member_bytes: int = 128 << 20  # one part, inflated
    max_package_bytes: int = 512 << 20  # all parts, inflated
    max_ratio: int = 500  # inflated / compressed size of a part larger than RATIO_FLOOR
    max_plural_forms: int = 6  # gettext's nplurals (Arabic has 6, the most of any language)
    max_pages: int = 10_000  # a PDF's pages

    def check_members(self, count: int) -> None:
        if count > self.max_members:
            raise FileTooLarge(f"{count:,} parts in the package: the limit is {self.max_members:,}")

    def check_member(self, part: str, size: int, compressed: int) -> None:
        """A part's inflated size against the bounds (from the zip's directory, or as inflated so far)."""
        if size > self.max_member_bytes:
            raise FileTooLarge(f"{part} inflates to more than {self.max_member_bytes >> 20:,} MiB (the limit)")
        if size > RATIO_FLOOR and size > self.max_ratio * max(compressed, 1):
            raise FileTooLarge(
                f"{part} inflates more than {self.max_ratio}-fold ({compressed:,} bytes to {size:,}): a zip bomb?"
            )

    def check_package(self, size: int) -> None:
        if size > self.max_package_bytes:
            raise FileTooLarge(f"its parts inflate to more than {self.max_package_bytes >> 20:,} MiB (the limit)")

    def check_segments(self, count: int, what: str = "paragraphs") -> None:
        if count > self.max_segments:
            raise FileTooLarge(f"{count:,} {what}: the limit is {self.max_segments:,}")

    def check_pages(self, count: int) -> None:
        if count > self.max_pages:
            raise FileTooLarge(f"{count:,} pages: the limit is {self.max_pages:,}")

    def check_chars(self, count: int) -> None:
        if count > self.max_chars:
            raise FileTooLarge(f"{count:,} characters to translate: the limit is {self.max_chars:,} (--max-file-chars)")


RATIO_FLOOR = 1 << 20  # parts smaller than this may inflate as much as they like (a few hundred KiB of XML)
DEFAULT_LIMITS = FileLimits()
