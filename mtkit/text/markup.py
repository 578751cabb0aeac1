"""Markup through translation: an HTML or XML text cut into segments of plain text, and each inline
element put back around the target words aligned to the source words it held.

Parsing is the standard library's html.parser, for both formats: it never refuses what a browser
renders, keeps each tag's exact text (attributes untouched), and needs no dependency; the tree is
then repaired as HTML5 parsers do where it matters here (an unclosed `<p>` or `<li>` closes at the
next one or at its parent's end, a stray end tag is dropped). XML is first checked by expat, so that
a text that is not well-formed gets its line and column.

HTML: block elements (`p`, `li`, `td`, `h1`-`h6`, `div`, `br`, ...) and any element that holds one
cut the text into segments, translated separately; inline elements (`b`, `a`, `span`, ...) are taken
out of the segment's text and put back (render). XML: every element is inline. Never translated,
and kept byte for byte: attributes, comments, `<script>`, `<style>`, `<code>`, and elements marked
`translate="no"` or of class `notranslate`; inside a segment they, and empty elements such as
`<br/>` or `<x id="1"/>`, keep their place after the target word aligned to the source word before
them. Text is decoded for the model (`&amp;` is `&`) and encoded again.

Where the translation puts them: mtkit.text.markup_placement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from xml.parsers import expat

from mtkit.core.errors import MtkitError

FORMATS = ("text", "html", "xml")
BLOCKS = {
    "address", "article", "aside", "blockquote", "body", "br", "caption", "dd", "details", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "head", "header",
    "hr", "html", "li", "main", "nav", "ol", "option", "p", "pre", "section", "summary", "table", "tbody", "td",
    "tfoot", "th", "thead", "title", "tr", "ul",
}  # fmt: skip
VOIDS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
KEPT = {"script", "style", "code", "textarea"}  # their text is never translated
P_CLOSERS = {
    "address", "article", "aside", "blockquote", "details", "div", "dl", "fieldset", "figcaption", "figure",
    "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "main", "nav", "ol", "p", "pre",
    "section", "table", "ul",
}  # fmt: skip
CLOSED_BY = {  # an open element that a start tag of these closes, as HTML5 does
    "p": P_CLOSERS,
    "li": {"li"}, "dt": {"dt", "dd"}, "dd": {"dt", "dd"}, "option": {"option"}, "td": {"td", "th", "tr"},
    "th": {"td", "th", "tr"}, "tr": {"tr"},
}  # fmt: skip
WORD = re.compile(r"\S+")
MAX_DEPTH = 100  # elements open inside each other: deeper markup is refused (its tree is walked recursively)


@dataclass
class Node:
    """An element (tag set) or a run of text (tag None): its exact source text where it is kept
    whole, and for an element its start and end tags (end "" for an empty element, or one the
    source never closed and the repair did)."""

    tag: str | None
    start: str = ""  # the start tag as written; for text, the text as written
    end: str = ""
    text: str = ""  # decoded text (text nodes)
    children: list[Node] = field(default_factory=list)
    kept: bool = False  # never translated: kept as written
    empty: bool = False  # a void or self-closed element: no end tag, no content
    spaced: tuple[bool, bool] = (False, False)  # in a segment, a node without words: space before, after
    glued: tuple[str, str] = ("", "")  # and the characters of its word against it, before and after

    def source(self) -> str:
        if self.tag is None:
            return self.start
        return self.start + "".join(child.source() for child in self.children) + self.end

    def is_block(self, xml: bool) -> bool:
        return not xml and (self.tag in BLOCKS or any(c.tag is not None and c.is_block(xml) for c in self.children))


class _TreeBuilder(HTMLParser):
    """html.parser's events, each with its exact source text, into a repaired tree."""

    def __init__(self, text: str, xml: bool, kept: frozenset[str] = frozenset()):
        super().__init__(convert_charrefs=True)
        self.source, self.xml, self.kept = text, xml, kept
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.root = Node("#root")
        self.stack = [self.root]
        self.kept_depth = 0  # same-named elements open inside the kept element on top
        self.events: list[tuple[int, str, str | None, list, str]] = []  # offset, kind, tag, attrs, text

    def position(self) -> int:
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def handle_starttag(self, tag, attrs):
        self.events.append((self.position(), "start", tag, attrs, ""))

    def handle_startendtag(self, tag, attrs):
        self.events.append((self.position(), "empty", tag, attrs, ""))

    def handle_endtag(self, tag):
        self.events.append((self.position(), "end", tag, [], ""))

    def handle_data(self, data):
        self.events.append((self.position(), "text", None, [], data))

    def handle_comment(self, data):
        self.events.append((self.position(), "raw", None, [], ""))

    handle_decl = handle_pi = unknown_decl = handle_comment

    def tree(self) -> Node:
        self.feed(self.source)
        self.close()
        ends = [offset for offset, *_ in self.events[1:]] + [len(self.source)]
        for (offset, kind, tag, attrs, data), end in zip(self.events, ends):
            raw, self.offset = self.source[offset:end], offset
            if not self.add_to_kept(kind, tag, raw):
                self.add(kind, tag, attrs, data, raw)
        _supply_ends(self.root)
        return self.root

    def add_to_kept(self, kind: str, tag: str | None, raw: str) -> bool:
        """Inside a kept element everything is its text, up to its own end tag."""
        top = self.stack[-1]
        if not top.kept:
            return False
        if kind == "end" and tag == top.tag and not self.kept_depth:
            self.stack.pop().end = raw
            return True
        if tag == top.tag and kind in ("start", "end"):
            self.kept_depth += 1 if kind == "start" else -1
        top.start += raw
        return True

    def add(self, kind: str, tag: str | None, attrs: list, text: str, raw: str) -> None:
        if kind == "text":
            self.stack[-1].children.append(Node(None, raw, text=text))
        elif kind == "raw":
            self.stack[-1].children.append(Node(None, raw, kept=True))
        elif kind == "empty" or kind == "start" and not self.xml and tag in VOIDS:
            self.close_implied(tag)
            self.stack[-1].children.append(Node(tag, raw, empty=True, kept=_kept(tag, attrs, self.kept)))
        elif kind == "start":
            self.close_implied(tag)
            node = Node(tag, raw, kept=_kept(tag, attrs, self.kept))
            self.stack[-1].children.append(node)
            self.stack.append(node)
            if len(self.stack) > MAX_DEPTH + 1:
                line = self.source.count("\n", 0, self.offset) + 1
                raise too_deep(f"line {line}" if "\n" in self.source else None)
        elif any(node.tag == tag for node in self.stack[1:]):  # an end tag that closes an open element
            while self.stack[-1].tag != tag:
                self.stack.pop()  # left open: _supply_ends writes its end tag
            self.stack.pop().end = raw
        # else: a stray end tag, dropped as HTML5 parsers drop it

    def close_implied(self, tag: str) -> None:
        """HTML5's implied ends: a `<p>` closes an open p, a `<li>` an open li, ..., not past a block."""
        if self.xml:
            return
        for depth in range(len(self.stack) - 1, 0, -1):
            open_tag = self.stack[depth].tag
            if tag in CLOSED_BY.get(open_tag, ()):
                del self.stack[depth:]
                return
            if open_tag in BLOCKS:
                return


def too_deep(where: str | None = None) -> MtkitError:
    """The error for markup nested past MAX_DEPTH (where: the line, or the like)."""
    at = f" ({where})" if where else ""
    return MtkitError(f"elements nested more than {MAX_DEPTH} levels deep{at}: the limit")


def _kept(tag: str, attrs: list[tuple[str, str | None]], also: frozenset[str] = frozenset()) -> bool:
    values = dict(attrs)
    return (
        tag in KEPT
        or tag in also
        or values.get("translate") == "no"
        or "notranslate" in (values.get("class") or "").split()
    )


def _supply_ends(node: Node) -> None:
    """Write the end tags the source left out, where the repair closed the elements."""
    for child in node.children:
        if child.tag is not None and not child.empty:
            child.end = child.end or f"</{child.tag}>"
            _supply_ends(child)


def check_format(fmt: str, option: str = "--format") -> str:
    if fmt not in FORMATS:
        raise MtkitError(f"{option} {fmt}: must be one of {', '.join(FORMATS)}")
    return fmt


def parse(text: str, fmt: str, kept: frozenset[str] = frozenset()) -> Node:
    """The markup of `text` as a tree (fmt html or xml; kept: more elements never translated, as
    `<code>` is); XML that is not well-formed is an MtkitError naming the line and column."""
    if fmt == "xml":
        check_xml(text)
    return _TreeBuilder(text, fmt == "xml", kept).tree()


def check_xml(text: str) -> None:
    """An MtkitError where the text (a fragment: any number of elements and text) is not
    well-formed XML, naming the column (and the line, where the text has several)."""
    parser = expat.ParserCreate()
    try:
        parser.Parse(f"<x>{text}</x>", True)
    except expat.ExpatError as err:
        column = (err.offset - 3 if err.lineno == 1 else err.offset) + 1
        where = f"line {err.lineno}, column {column}" if "\n" in text else f"column {column}"
        raise MtkitError(f"{where}: not well-formed XML ({expat.ErrorString(err.code)})") from None


# Segments: the units of translation, and their inline markup.


@dataclass
class Segment:
    """Plain text between block boundaries, with the inline elements in it (a tree under a root)."""

    root: Node
    words: list[str] = field(default_factory=list)
    lead: str = ""  # whitespace before the first word, and after the last
    trail: str = ""

    @property
    def text(self) -> str:
        """What the model translates: the words, one space apart."""
        return " ".join(self.words)


def segments(root: Node, xml: bool) -> list[str | Segment]:
    """The text as kept source text (str) and segments to translate, in order."""
    parts: list[str | Segment] = []
    current = Node("#segment")

    def flush() -> Node:
        nonlocal current
        if current.children:
            parts.append(_segment(current))
            current = Node("#segment")
        return current

    def walk(node: Node, into: Node) -> None:
        for child in node.children:
            if child.tag is not None and child.is_block(xml):
                flush()
                if child.kept or child.empty:
                    parts.append(child.source())
                else:
                    parts.append(child.start)
                    walk(child, flush())
                    flush()
                    parts.append(child.end)
                into = current
            elif is_element(child):
                copy = Node(child.tag, child.start, child.end)
                into.children.append(copy)
                walk(child, copy)
            else:
                into.children.append(child)

    walk(root, current)
    flush()
    return parts


def is_element(node: Node) -> bool:
    """An element whose words are translated (not text, not kept whole, not empty)."""
    return node.tag is not None and not node.kept and not node.empty


def is_text(node: Node) -> bool:
    return node.tag is None and not node.kept


def _segment(root: Node) -> Segment | str:
    """A segment with its words; one without words is kept as written."""
    flat = _flatten(root)
    words = "".join(item for item in flat if isinstance(item, str)).split()
    if not words:
        return "".join(child.source() for child in root.children)
    before, after = _neighbours(flat), _neighbours(flat[::-1])[::-1]
    for k, (item, previous, following) in enumerate(zip(flat, before, after)):
        if isinstance(item, Node):  # spaced as in the source (the segment's edges count as spaces)
            item.spaced = (previous.isspace(), following.isspace())
            item.glued = (_word_part(flat[k - 1 :: -1] if k else [])[::-1], _word_part(flat[k + 1 :]))
    lead = len(flat) - len(_strip_spaces(flat))
    trail = len(flat) - len(_strip_spaces(flat[::-1]))
    return Segment(root, words, "".join(flat[:lead]), "".join(flat[len(flat) - trail :]))


def _word_part(flat: list[Node | str]) -> str:
    """The characters flat starts with, up to a space or a node."""
    out = []
    for item in flat:
        if not isinstance(item, str) or item.isspace():
            break
        out.append(item)
    return "".join(out)


def _neighbours(flat: list[Node | str]) -> list[str]:
    """For each item, the last character before it (a space at the start)."""
    out, last = [], " "
    for item in flat:
        out.append(last)
        if isinstance(item, str):
            last = item
    return out


def _flatten(node: Node) -> list[Node | str]:
    """The segment's characters (decoded) and its nodes without words, in order."""
    flat: list[Node | str] = []
    for child in node.children:
        if is_text(child):
            flat.extend(child.text)
        elif is_element(child):
            flat.extend(_flatten(child))
        else:
            flat.append(child)
    return flat


def _strip_spaces(flat: list[Node | str]) -> list[Node | str]:
    """flat without the whitespace it starts with."""
    index = 0
    while index < len(flat) and isinstance(flat[index], str) and flat[index].isspace():
        index += 1
    return flat[index:]


def plain(node: Node) -> str:
    """The node's text as the model sees it: decoded, tags and what is kept whole left out."""
    if is_text(node):
        return node.text
    return "".join(plain(child) for child in node.children) if is_element(node) or node.tag == "#segment" else ""


def plain_text(text: str, fmt: str) -> str:
    """The text's translatable words alone, one space apart (segments one space apart too)."""
    return " ".join(part.text for part in segments(parse(text, fmt), fmt == "xml") if isinstance(part, Segment))
