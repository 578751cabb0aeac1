"""Markup through translation: an HTML or XML text parsed into a tree, cut into segments of plain
text (mtkit.text.segments), and each inline element put back around the target words aligned to the
source words it held.

Parsing is the standard library's html.parser, for both formats: it never refuses what a browser
renders, keeps each tag's exact text (attributes untouched), and needs no dependency; the tree is
then repaired as HTML5 parsers do where it matters here (an unclosed `<p>` or `<li>` closes at the
next one or at its parent's end, a stray end tag is dropped). XML is first checked by expat, so that
a text that is not well-formed gets its line and column. A text of words and inline codes alone
(`<g id="1">`, `<x id="2"/>`: a document's segment) is read by one regular expression into the
events html.parser would give, at a fraction of its cost.

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

import html
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
CODE = re.compile(r'<([xg]) id="(\d+)"(/?)>|</g>')
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
        if self.xml and (coded := _code_events(self.source)) is not None:
            self.events = coded
        else:
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


def _code_events(text: str) -> list | None:
    """The events html.parser gives for a text of words and inline codes alone (`<g id="1">`, `</g>`,
    `<x id="2"/>`), as _TreeBuilder records them; None for any other markup."""
    if "<" in CODE.sub("", text):
        return None
    events, position = [], 0
    for match in CODE.finditer(text):
        if position < match.start():
            events.append((position, "text", None, [], html.unescape(text[position : match.start()])))
        tag, number, empty = match.groups()
        kind = "end" if tag is None else "empty" if empty else "start"
        events.append((match.start(), kind, tag or "g", [("id", number)] if tag else [], ""))
        position = match.end()
    if position < len(text):
        events.append((position, "text", None, [], html.unescape(text[position:])))
    return events


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


def is_element(node: Node) -> bool:
    """An element whose words are translated (not text, not kept whole, not empty)."""
    return node.tag is not None and not node.kept and not node.empty


def is_text(node: Node) -> bool:
    return node.tag is None and not node.kept
