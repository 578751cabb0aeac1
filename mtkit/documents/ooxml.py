"""Word (.docx), PowerPoint (.pptx) and Excel (.xlsx) files: every paragraph of the body, tables,
text boxes, headers, footers, footnotes, endnotes, slides, speaker notes and diagrams, and every
text of a spreadsheet's cells, is a segment; its runs of formatting are inline codes (a hyperlink
wraps its runs), and what is not text (tabs, breaks, fields, footnote references, pictures,
bookmarks, comment anchors) is kept whole in its place. The parts' XML is changed in place with
lxml, so whatever mtkit does not know stays as it was (a spreadsheet's numbers and formulas too);
the language of the text is set to the target."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from lxml import etree

from mtkit.documents.inline import BuiltDocument, Document, FileLimits, InlineBuilder, language_tag, pieces
from mtkit.documents.package import Package

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
SEPARATORS = {"tab", "br", "cr", "ptab"}  # part the words on their sides (a:br in slides, w:tab, w:br in Word)
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"


@dataclass(frozen=True)
class Dialect:
    """Where a format keeps its text, and what its paragraphs and runs are called."""

    kind: str
    required: str
    parts: re.Pattern
    ns: str
    head: frozenset[str]  # a paragraph's properties, kept first
    tail: frozenset[str]  # kept last (a slide paragraph's end-of-paragraph run properties)
    wrappers: frozenset[str]  # hold runs: their words are translated, the element wraps them
    dropped: frozenset[str]  # hints for the editor that the new text would make wrong (spelling marks)
    preserve_space: bool  # text with spaces at its ends needs xml:space="preserve"
    paragraphs: tuple[str, ...] = ("p",)
    bare_text: bool = False  # text may stand outside runs (a spreadsheet's plain strings)


DOCX = Dialect(
    ".docx", "word/document.xml",
    re.compile(r"word/(document|header\d*|footer\d*|footnotes|endnotes)\.xml"),
    W, frozenset({"pPr"}), frozenset(), frozenset({"hyperlink", "smartTag"}),
    frozenset({"proofErr", "lastRenderedPageBreak"}), True,
)  # fmt: skip
PPTX = Dialect(
    ".pptx", "ppt/presentation.xml",
    re.compile(r"ppt/(slides/slide|notesSlides/notesSlide|diagrams/data)\d+\.xml"),
    A, frozenset({"pPr"}), frozenset({"endParaRPr"}), frozenset(), frozenset(), False,
)  # fmt: skip
XLSX = Dialect(  # shared strings, and strings written in the cells (inlineStr); rPh: a phonetic reading
    ".xlsx", "xl/workbook.xml", re.compile(r"xl/(sharedStrings|worksheets/sheet\d+)\.xml"),
    S, frozenset(), frozenset({"phoneticPr"}), frozenset(), frozenset({"rPh"}), True, ("si", "is"), True,
)  # fmt: skip


class OfficeDocument(BuiltDocument):
    def __init__(self, data: bytes, name: str, dialect: Dialect, limits: FileLimits):
        self.dialect, self.ns = dialect, dialect.ns
        self.package = Package(data, name, f"a {dialect.kind} file", dialect.required, limits=limits)
        self.trees = {part: self.package.xml(part) for part in self.package.names(dialect.parts.fullmatch)}
        # Pre-order: a text box's paragraphs come after the paragraph whose run holds them, and are
        # written first, so the run kept whole carries them translated.
        tags = [self.ns + tag for tag in dialect.paragraphs]
        self.paragraphs = [p for tree in self.trees.values() for p in tree.iter(*tags)]
        limits.check_segments(len(self.paragraphs))
        self.bases: list[etree._Element | None] = []
        self.built = [self._read(p) for p in self.paragraphs]
        styled = dialect is DOCX and "word/styles.xml" in self.package.parts  # read now: a broken one is named now
        self.styles = self.package.xml("word/styles.xml") if styled else None

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        for p, builder, base, translation in reversed(list(zip(self.paragraphs, self.built, self.bases, translations))):
            if builder.has_words():
                self._write(p, builder, base, translation)
        lang = language_tag(target_lang)
        for part, tree in self.trees.items():
            if lang:
                self._set_language(tree, lang)
            self.package.replace(part, tree)
        if lang and self.styles is not None:
            self._set_language(self.styles, lang)
            self.package.replace("word/styles.xml", self.styles)
        return self.package.write()

    def _set_language(self, tree: etree._Element, lang: str) -> None:
        if self.dialect is XLSX:
            return  # a spreadsheet's strings carry no language
        if self.dialect is DOCX:
            for element in tree.iter(W + "lang"):
                if element.get(W + "val") is not None:
                    element.set(W + "val", lang)
        else:
            for element in tree.iter(A + "rPr", A + "endParaRPr", A + "defRPr"):
                if element.get("lang") is not None:
                    element.set("lang", lang)

    # Reading: a paragraph's runs as inline codes.

    def _local(self, element: etree._Element) -> str:
        tag = element.tag
        return tag[len(self.ns) :] if isinstance(tag, str) and tag.startswith(self.ns) else ""

    def _read(self, p: etree._Element) -> InlineBuilder:
        builder = InlineBuilder()
        self.base = _dominant_properties(p, self.ns, self.dialect.bare_text)
        self.base_key = _key(self.base)
        self.bases.append(self.base)  # the properties of the words outside every run code, for _write
        self.open_key: bytes | None = None
        self.field: list[etree._Element] | None = None  # the runs of a field being read, kept whole
        self.field_depth = 0
        for child in p:
            local = self._local(child)
            if local in self.dialect.head or local in self.dialect.tail or local in self.dialect.dropped:
                continue
            if local == "r" and self.field is None and not self._begins_field(child):
                self._read_run(builder, child)
            elif local == "t" and self.dialect.bare_text:
                self._close_run(builder)
                builder.text(child.text or "")
            elif local in self.dialect.wrappers:
                self._close_run(builder)
                builder.open(("wrap", child))
                for run in child:
                    if self._local(run) == "r":
                        self._read_run(builder, run)
                    elif self._local(run) not in self.dialect.dropped:
                        builder.kept(("element", run))
                self._close_run(builder)
                builder.close()
            elif local == "r":
                self._read_field_run(builder, child)
            else:
                self._close_run(builder)
                builder.kept(("element", child), local in SEPARATORS)
        self._close_run(builder)
        return builder

    def _begins_field(self, run: etree._Element) -> bool:
        return any(c.get(W + "fldCharType") == "begin" for c in run.iter(W + "fldChar"))

    def _read_field_run(self, builder: InlineBuilder, run: etree._Element) -> None:
        """A complex field's runs, from its begin to its end, are kept whole (its result shows a page
        number, a date, a reference: Word computes it, nobody translates it)."""
        if self.field is None:
            self._close_run(builder)
            self.field = []
            builder.kept(("runs", self.field))
        self.field.append(run)
        for char in run.iter(W + "fldChar"):
            self.field_depth += {"begin": 1, "end": -1}.get(char.get(W + "fldCharType"), 0)
        if self.field_depth <= 0:
            self.field, self.field_depth = None, 0

    def _read_run(self, builder: InlineBuilder, run: etree._Element) -> None:
        properties = run.find(self.ns + "rPr")
        key = _key(properties)
        if key != self.open_key:
            self._close_run(builder)
            if key != self.base_key:
                builder.open(("run", properties))
                self.open_key = key
        for child in run:
            local = self._local(child)
            if local == "t":
                builder.text(child.text or "")
            elif local not in ("rPr", *self.dialect.dropped):
                builder.kept(("in run", properties, child), local in SEPARATORS)

    def _close_run(self, builder: InlineBuilder) -> None:
        if self.open_key is not None:
            builder.close()
            self.open_key = None

    # Writing: the translation's pieces as runs again.

    def _write(self, p: etree._Element, built: InlineBuilder, base: etree._Element | None, translation: str) -> None:
        head = [c for c in p if self._local(c) in self.dialect.head]
        tail = [c for c in p if self._local(c) in self.dialect.tail]
        for child in list(p):
            p.remove(child)
        p.extend(head)
        wraps: list[tuple[int, etree._Element]] = []  # open wrappers (hyperlinks), outermost first
        codes, found = built.codes, pieces(translation, built.separators)
        # a spreadsheet's string is plain text or runs, never both
        plain = (
            self.dialect.bare_text and base is None and all(piece.kept is None and not piece.within for piece in found)
        )
        for piece in found:
            wrap_ids = [i for i in piece.within if codes[i][0] == "wrap"]
            while wraps and [i for i, _ in wraps] != wrap_ids[: len(wraps)]:
                wraps.pop()
            for i in wrap_ids[len(wraps) :]:
                element = etree.Element(codes[i][1].tag, attrib=dict(codes[i][1].attrib), nsmap=codes[i][1].nsmap)
                (wraps[-1][1] if wraps else p).append(element)
                wraps.append((i, element))
            container = wraps[-1][1] if wraps else p
            runs = [codes[i][1] for i in piece.within if codes[i][0] == "run"]
            properties = runs[-1] if runs else base
            if plain:
                container.append(self._text(piece.text))
            elif piece.kept is None:
                container.append(self._run(properties, self._text(piece.text)))
            else:
                container.extend(self._kept(codes[piece.kept]))
        p.extend(tail)

    def _kept(self, code: tuple) -> list[etree._Element]:
        kind = code[0]
        if kind == "in run":
            return [self._run(code[1], code[2])]
        return list(code[1]) if kind == "runs" else [code[1]]

    def _run(self, properties: etree._Element | None, content: etree._Element) -> etree._Element:
        run = etree.Element(self.ns + "r")
        if properties is not None:
            run.append(_copy(properties))
        run.append(content)
        return run

    def _text(self, text: str) -> etree._Element:
        element = etree.Element(self.ns + "t")
        element.text = text
        if self.dialect.preserve_space and text != text.strip():
            element.set(XML_SPACE, "preserve")
        return element


def _copy(element: etree._Element) -> etree._Element:
    return etree.fromstring(etree.tostring(element))


def _key(properties: etree._Element | None) -> bytes:
    if properties is None:
        return b""
    try:
        return etree.tostring(properties, method="c14n")
    except etree.C14NError:  # a namespace canonical XML refuses (a relative URI): the properties as written
        return etree.tostring(properties)


def _dominant_properties(p: etree._Element, ns: str, bare_text: bool = False) -> etree._Element | None:
    """The run properties that hold most of a paragraph's characters: its words outside every code
    are written with them (None: text without properties, or outside runs where bare_text)."""
    weight: dict[bytes, int] = {}
    found: dict[bytes, etree._Element | None] = {}
    if bare_text:
        weight[b""], found[b""] = sum(len(t.text or "") for t in p.iterchildren(ns + "t")), None
    for run in p.iterchildren(ns + "r"):
        properties = run.find(ns + "rPr")
        key = _key(properties)
        found.setdefault(key, properties)
        weight[key] = weight.get(key, 0) + sum(len(t.text or "") for t in run.iterchildren(ns + "t"))
    return found[max(weight, key=weight.__getitem__)] if weight else None


def read_docx(data: bytes, name: str, limits: FileLimits) -> Document:
    return OfficeDocument(data, name, DOCX, limits)


def read_pptx(data: bytes, name: str, limits: FileLimits) -> Document:
    return OfficeDocument(data, name, PPTX, limits)


def read_xlsx(data: bytes, name: str, limits: FileLimits) -> Document:
    return OfficeDocument(data, name, XLSX, limits)
