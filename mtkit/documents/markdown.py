"""Markdown (.md), parsed by markdown-it-py (CommonMark with tables): the text of paragraphs,
headings, list items, block quotes and table cells is translated; emphasis and links are inline
codes (a link's target kept as written), inline code, images, autolinks and inline HTML are kept
whole, and code blocks, HTML blocks, front matter and everything around the text (list markers,
quote marks, heading marks, table rules) are kept as written. A paragraph's lines become one line."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token

from mtkit.documents.inline import Document, InlineBuilder, decode_text, pieces, render_pieces
from mtkit.documents.limits import FileLimits

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
