"""Segments: the units of translation in a parsed markup tree (mtkit.text.markup), each the plain
text between block boundaries with the inline elements in it, and the text kept as written between
them."""

from __future__ import annotations

from dataclasses import dataclass, field

from mtkit.text.markup import Node, is_element, is_text, parse


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
