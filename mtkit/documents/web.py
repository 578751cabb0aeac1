"""Whole HTML files and EPUB e-books (each XHTML chapter through the HTML path of the markup engine:
blocks are segments, inline elements are put back around their words, scripts, styles, code and
translate="no" kept), and plain text files (each line a segment, blank lines kept). The `lang` of
each page and the book's dc:language are set to the target."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

from mtkit.core.errors import MtkitError
from mtkit.documents.inline import Document, InlineBuilder, decode_text, language_tag, plain
from mtkit.documents.limits import FileLimits
from mtkit.documents.package import Package

HTML_TAG = re.compile(r"<html\b[^>]*>", re.IGNORECASE)
LANG_ATTRIBUTE = re.compile(r"""(\s(?:xml:)?lang\s*=\s*)(["'])[^"']*\2""", re.IGNORECASE)
OPF = "{http://www.idpf.org/2007/opf}"
DC = "{http://purl.org/dc/elements/1.1/}"
CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"


def set_page_language(page: str, lang: str | None) -> str:
    """An HTML page with its <html> element's lang (and xml:lang) set to lang."""
    match = HTML_TAG.search(page)
    if not lang or not match:
        return page
    tag = match.group()
    if LANG_ATTRIBUTE.search(tag):
        new = LANG_ATTRIBUTE.sub(lambda m: f"{m.group(1)}{m.group(2)}{lang}{m.group(2)}", tag)
    else:
        new = tag[:5] + f' lang="{lang}"' + tag[5:]
    return page[: match.start()] + new + page[match.end() :]


TAG_START = re.compile(r"<[A-Za-z/!?]")  # where a tag, comment or declaration may begin


def check_tags(texts: list[str], limits: FileLimits) -> None:
    """Pages' tags against the bound on segments, counted before any is parsed."""
    limits.check_segments(sum(len(TAG_START.findall(text)) for text in texts), "tags")


class HtmlPage(Document):
    markup = "html"

    def __init__(self, data: bytes, name: str, limits: FileLimits):
        self.text = decode_text(data, name)
        check_tags([self.text], limits)

    def segments(self) -> list[str]:
        return [self.text]

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        return set_page_language(translations[0], language_tag(target_lang)).encode("utf-8")


class Epub(Document):
    markup = "html"

    def __init__(self, data: bytes, name: str, limits: FileLimits):
        self.package = Package(data, name, "an .epub file", "META-INF/container.xml", "application/epub+zip", limits)
        rootfile = self.package.xml("META-INF/container.xml").find(f".//{CONTAINER}rootfile")
        self.opf_name = rootfile.get("full-path") if rootfile is not None else None
        if self.opf_name not in self.package.parts:
            raise MtkitError(f"{name}: not an .epub file (its container names no package document)")
        self.opf = self.package.xml(self.opf_name)
        folder = posixpath.dirname(self.opf_name)
        items = self.opf.iter(OPF + "item")
        self.pages = [posixpath.normpath(posixpath.join(folder, item.get("href", ""))) for item in items
                      if item.get("media-type") == "application/xhtml+xml"]  # fmt: skip
        self.pages = [page for page in self.pages if page in self.package.parts]
        self.texts = [decode_text(self.package.parts[page], f"{name}: {page}") for page in self.pages]
        check_tags(self.texts, limits)

    def segments(self) -> list[str]:
        return self.texts

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        lang = language_tag(target_lang)
        for page, translation in zip(self.pages, translations):
            self.package.replace_bytes(page, set_page_language(translation, lang).encode("utf-8"))
        if lang:
            for element in self.opf.iter(DC + "language"):
                element.text = lang
            self.package.replace(self.opf_name, self.opf)
        return self.package.write()


class PlainText(Document):
    def __init__(self, data: bytes, name: str, limits: FileLimits):
        self.lines = decode_text(data, name).split("\n")
        limits.check_segments(len(self.lines), "lines")

    def segments(self) -> list[str]:
        out = []
        for line in self.lines:
            builder = InlineBuilder()
            builder.text(line)
            out.append(builder.markup())
        return out

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        return "\n".join(plain(translation) for translation in translations).encode("utf-8")


def read_html(data: bytes, name: str, limits: FileLimits) -> Document:
    return HtmlPage(data, name, limits)


def read_epub(data: bytes, name: str, limits: FileLimits) -> Document:
    return Epub(data, name, limits)


def read_txt(data: bytes, name: str, limits: FileLimits) -> Document:
    return PlainText(data, name, limits)
