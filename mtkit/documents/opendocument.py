"""OpenDocument text (.odt) and presentations (.odp): every paragraph and heading of the body,
tables, frames, headers, footers, footnotes and speaker notes is a segment; spans and links are
inline codes, and spaces, tabs, line breaks, fields, notes, frames and bookmarks are kept whole in
their place (a note's own paragraphs are segments too). The XML of content.xml and styles.xml is
changed in place with lxml; the styles' language is set to the target."""

from __future__ import annotations

from collections.abc import Sequence

from lxml import etree

from mtkit.documents.inline import BuiltDocument, Document, FileLimits, language_tag, read_mixed, write_mixed
from mtkit.documents.package import Package

TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
STYLE = "{urn:oasis:names:tc:opendocument:xmlns:style:1.0}"
FO = "{urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0}"
DC = "{http://purl.org/dc/elements/1.1/}"
MIMETYPES = {
    ".odt": "application/vnd.oasis.opendocument.text",
    ".odp": "application/vnd.oasis.opendocument.presentation",
}
WRAPPERS = {TEXT + "span", TEXT + "a"}
SEPARATORS = {TEXT + "tab", TEXT + "line-break", TEXT + "s"}
PAGE_TEXT = {
    STYLE + name for name in ("header", "footer", "header-left", "footer-left", "header-first", "footer-first")
}


class OpenDocument(BuiltDocument):
    def __init__(self, data: bytes, name: str, kind: str, limits: FileLimits):
        self.package = Package(data, name, f"an {kind} file", "content.xml", MIMETYPES[kind], limits)
        self.trees = {"content.xml": self.package.xml("content.xml")}
        if "styles.xml" in self.package.parts:
            self.trees["styles.xml"] = self.package.xml("styles.xml")
        self.paragraphs = [p for part, tree in self.trees.items() for p in _paragraphs(tree, part == "styles.xml")]
        limits.check_segments(len(self.paragraphs))
        self.built = [
            read_mixed(p, lambda e: e.tag in WRAPPERS, lambda e: e.tag in SEPARATORS) for p in self.paragraphs
        ]
        self.meta = self.package.xml("meta.xml") if "meta.xml" in self.package.parts else None

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        for p, builder, translation in reversed(list(zip(self.paragraphs, self.built, translations))):
            if builder.has_words():
                write_mixed(p, builder, translation)
        lang = language_tag(target_lang)
        for part, tree in self.trees.items():
            if lang:
                _set_language(tree, lang)
            self.package.replace(part, tree)
        if lang and self.meta is not None:
            for element in self.meta.iter(DC + "language"):
                element.text = lang
            self.package.replace("meta.xml", self.meta)
        return self.package.write()


def _paragraphs(tree: etree._Element, page_text_only: bool) -> list[etree._Element]:
    """Paragraphs and headings in document order (in styles.xml, those of headers and footers)."""
    found = list(tree.iter(TEXT + "p", TEXT + "h"))
    if page_text_only:
        found = [p for p in found if any(a.tag in PAGE_TEXT for a in p.iterancestors())]
    return found


def _set_language(tree: etree._Element, lang: str) -> None:
    language, _, country = lang.partition("-")
    for element in tree.iter(STYLE + "text-properties"):
        if element.get(FO + "language") is not None:
            element.set(FO + "language", language)
            if country and len(country) == 2:
                element.set(FO + "country", country.upper())
            else:
                element.attrib.pop(FO + "country", None)


def read_odt(data: bytes, name: str, limits: FileLimits) -> Document:
    return OpenDocument(data, name, ".odt", limits)


def read_odp(data: bytes, name: str, limits: FileLimits) -> Document:
    return OpenDocument(data, name, ".odp", limits)
