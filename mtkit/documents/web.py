"""Whole HTML files and EPUB e-books (each XHTML chapter through the HTML path of the markup engine:
blocks are segments, inline elements are put back around their words, scripts, styles, code and
translate="no" kept), and plain text files (each line a segment, blank lines kept). The `lang` of
each page and the book's dc:language are set to the target.

Markdown (.md), parsed by markdown-it-py (CommonMark with tables): the text of paragraphs,
headings, list items, block quotes and table cells is translated; emphasis and links are inline
codes (a link's target kept as written), inline code, images, autolinks and inline HTML are kept
whole, and code blocks, HTML blocks, front matter and everything around the text (list markers,
quote marks, heading marks, table rules) are kept as written. A paragraph's lines become one line."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token

from mtkit.core.errors import MtkitError
from mtkit.documents.inline import (
    Document,
    FileLimits,
    InlineBuilder,
    decode_text,
    language_tag,
    pieces,
    plain,
    render_pieces,
)
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


PAIRED = {"strong_open": "strong_close", "em_open": "em_close", "s_open": "s_close"}
FRONT_MATTER = re.compile(r"\A(---|\+\+\+)\n.*?\n\1\n", re.DOTALL)
LINK_END = re.compile(r"\]\(\s*(<[^>\n]*>|[^\s)]*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
SPECIAL = re.compile(r"([\\`*_\[\]<|])")


@dataclass
class Block:
    """Where an inline text sits: its source lines, and its content as markdown-it read it."""

    lines: list[int]  # the source lines holding the content, in order
    columns: list[int]  # where the content's part begins on each of them
    content: list[str]  # the content's part on each of them
    builder: InlineBuilder


class MarkdownDocument(Document):
    def __init__(self, data: bytes, name: str, limits: FileLimits):
        self.source = decode_text(data, name).split("\n")
        text = "\n".join(self.source)
        front = FRONT_MATTER.match(text)
        skipped = front.group().count("\n") if front else 0  # front matter: blank lines to the parser
        parser = MarkdownIt("commonmark").enable("table")
        tokens = parser.parse("\n" * skipped + "\n".join(self.source[skipped:]))
        self.normalize = parser.normalizeLink
        self.cursor: dict[int, int] = {}  # per line, where the next content is looked for (table rows)
        inline = [token for token in tokens if token.type == "inline" and token.map]
        limits.check_segments(len(inline))
        self.blocks = [self._block(token) for token in inline]
        self.blocks = [block for block in self.blocks if block is not None]

    def segments(self) -> list[str]:
        return [block.builder.markup() for block in self.blocks]

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        lines: list[str | None] = list(self.source)
        for block, translation in reversed(list(zip(self.blocks, translations))):
            if not block.builder.has_words():
                continue
            first, start = block.lines[0], block.columns[0]
            line, text = lines[first], _render(translation, block.builder)
            lines[first] = line[:start] + text + line[start + len(block.content[0]) :]
            for index in block.lines[1:]:
                lines[index] = None
        return "\n".join(line for line in lines if line is not None).encode("utf-8")

    def _block(self, token: Token) -> Block | None:
        """Find each of the content's lines in the source lines, in order (a table row holds several)."""
        content = token.content.split("\n")
        lines, columns, line = [], [], token.map[0]
        for part in content:
            while line < token.map[1] and self.source[line].find(part, self.cursor.get(line, 0)) < 0:
                line += 1
            if line >= token.map[1]:
                return None
            columns.append(self.source[line].find(part, self.cursor.get(line, 0)))
            lines.append(line)
            self.cursor[line] = columns[-1] + len(part)
            line += 1
        builder = InlineBuilder()
        self._read(builder, token.children or [], token.content)
        return Block(lines, columns, content, builder)

    def _read(self, builder: InlineBuilder, children: list[Token], content: str) -> None:
        position = 0  # in content, where the next link's target is looked for
        link_ends = LinkEnds(content)
        skip_to = None
        for token in children:
            if skip_to is not None:
                skip_to = None if token.type == skip_to else skip_to
                continue
            if token.type == "text":
                builder.text(token.content)
            elif token.type == "softbreak":
                builder.text(" ")
            elif token.type in PAIRED:
                builder.open((token.markup, token.markup))
            elif token.type in PAIRED.values() or token.type == "link_close":
                builder.close()
            elif token.type == "link_open" and token.markup != "autolink":
                match = link_ends.first_from(position)
                dest = match.group(1).strip("<>") if match else ""
                if match and self.normalize(dest) == token.attrs.get("href"):
                    end, position = match.group(), match.end()
                else:
                    end = f"]({token.attrs.get('href', '')})"
                builder.open(("[", end))
            elif token.type == "link_open":
                builder.kept(f"<{token.attrs.get('href', '')}>")
                skip_to = "link_close"
            elif token.type == "code_inline":
                fence = token.markup
                pad = " " if token.content.startswith("`") or token.content.endswith("`") else ""
                builder.kept(f"{fence}{pad}{token.content}{pad}{fence}")
            elif token.type == "hardbreak":
                builder.kept("<br>", separates=True)
            elif token.type == "image":
                builder.kept(f"![{token.content}]({token.attrs.get('src', '')})")
            else:  # html_inline, and whatever else is not text
                builder.kept(token.content)


class LinkEnds:
    """The first inline link's end (`](target "title")`) at or after a position of a text. A reference
    link (`[words][ref]`) has none, and does not move the position on: the last search is reused
    while it still answers, so that a paragraph of many links is read in linear time."""

    def __init__(self, content: str):
        self.content = content
        self.searched_from, self.found = len(content) + 1, None

    def first_from(self, position: int) -> re.Match | None:
        reusable = self.searched_from <= position and (self.found is None or self.found.start() >= position)
        if not reusable:
            self.searched_from, self.found = position, LINK_END.search(self.content, position)
        return self.found


def _render(translation: str, built: InlineBuilder) -> str:
    found = pieces(translation, built.separators)
    return render_pieces(found, built.codes, lambda text: SPECIAL.sub(r"\\\1", text))


def read_markdown(data: bytes, name: str, limits: FileLimits) -> Document:
    return MarkdownDocument(data, name, limits)
