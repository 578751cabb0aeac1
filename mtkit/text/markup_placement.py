"""Where a segment's markup goes in its translation (mtkit.text.markup cuts the text into segments).

An element spans the target words aligned to its source words, from the first to the last: the
smallest contiguous span, widened to hold its children. Where the spans of two siblings overlap, a
span that holds the other's whole ends where the other begins (the narrower claim is kept), and
otherwise the later one starts where the earlier ends (and is empty if nothing is left), so that
the output always nests properly, whatever the word order did. A node without words of its own
(`<br/>`, an element kept whole, a comment) goes after the target word aligned to the source word
before it, spaced as it was. Words are encoded as markup text again (`&` is `&amp;`).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mtkit.core.errors import MtkitError
from mtkit.text.markup import Node, is_element, is_text, parse
from mtkit.text.segments import Segment, plain, segments
from mtkit.text.sentence_splitter import breaks_by_word, has_line_break, lined, split_lines


@dataclass
class _Placed:
    """An element, or a node kept whole, of a segment in the target: its span of target words
    [begin, end), empty for a node without words."""

    node: Node
    begin: int
    end: int
    children: list[_Placed]


def word_spans(root: Node) -> dict[int, tuple[int, int]]:
    """For each node under the segment's root (by id), the source words it touches [first, last + 1);
    a word that a tag cuts counts for both sides. A node without words: (w, w), w the number of
    words that begin before it."""
    spans: dict[int, tuple[int, int]] = {}
    words, in_word = 0, False

    def visit(node: Node) -> None:
        nonlocal words, in_word
        before, continues = words, in_word and plain(node)[:1].strip() != ""
        if is_text(node):
            for char in node.text:
                if char.isspace():
                    in_word = False
                elif not in_word:
                    words, in_word = words + 1, True
        elif is_element(node):
            for child in node.children:
                visit(child)
        first = before - 1 if continues else before
        spans[id(node)] = (first, words) if words > first else (before, before)

    for child in root.children:
        visit(child)
    return spans


def place(segment: Segment, target_words: int, alignment: Sequence[tuple[int, int]]) -> list[_Placed]:
    """The segment's elements and nodes kept whole, each with its span of target words, properly nested."""
    spans = word_spans(segment.root)
    targets: dict[int, list[int]] = {}
    for i, j in alignment:
        if 0 <= j < target_words:
            targets.setdefault(i, []).append(j)
    anchors = _anchors(len(segment.words), targets, target_words)

    def hull(node: Node) -> _Placed:
        first, last = spans[id(node)]
        aligned = [j for i in range(first, last) for j in targets.get(i, [])] if is_element(node) else []
        children = [hull(child) for child in node.children if not is_text(child)] if is_element(node) else []
        begin, end = (min(aligned), max(aligned) + 1) if aligned else (anchors[first], anchors[first])
        for child in children:
            if child.end > child.begin:
                begin, end = (min(begin, child.begin), max(end, child.end)) if end > begin else (child.begin, child.end)
        return _Placed(node, begin, end, children)

    top = [hull(child) for child in segment.root.children if not is_text(child)]
    _nest(top, 0, target_words)
    return top


def _anchors(source_words: int, targets: dict[int, list[int]], target_words: int) -> list[int]:
    """For a node without words after w source words: the target position after the last target
    word aligned to one of those w words (0 where none is)."""
    anchors, best = [0], 0
    for i in range(source_words):
        best = max([best] + [j + 1 for j in targets.get(i, [])])
        anchors.append(min(best, target_words))
    return anchors


def _in_order(nodes: list[_Placed]) -> list[_Placed]:
    """By where they begin; at the same place, the ones without words first (they belong to the word
    before), then source order."""
    return sorted(nodes, key=lambda n: (n.begin, n.end > n.begin))


def _nest(nodes: list[_Placed], begin: int, end: int) -> None:
    """Clip the nodes to [begin, end), then make siblings follow one another without overlap: a node
    whose span holds a later sibling's words ends where they begin (the sibling's span is the narrower
    claim), and a node that begins inside an earlier one begins where it ends."""
    ordered = _in_order(nodes)
    for node, following in zip(ordered, ordered[1:]):
        if node.begin < following.begin < following.end <= node.end:
            node.end = following.begin
    cursor = begin
    for node in ordered:
        node.begin = min(max(node.begin, cursor), end)
        node.end = min(max(node.end, node.begin), end)
        cursor = node.end
        _nest(node.children, node.begin, node.end)


def render(segment: Segment, translation: str, alignment: Sequence[tuple[int, int]]) -> str:
    """The segment's translation with its markup put back, as markup text; a line break between two
    of its words stays where it is."""
    words = translation.split()
    breaks = breaks_by_word(translation)
    tokens: list[tuple[str, Any]] = []  # (kind, text): word, break, open, close; or kept, a node kept whole

    def add_words(begin: int, end: int) -> None:
        for k in range(begin, end):
            tokens.extend([("break", breaks[k]), ("word", words[k])] if k in breaks else [("word", words[k])])

    def emit(nodes: list[_Placed], begin: int, end: int) -> None:
        cursor = begin
        for placed in _in_order(nodes):
            add_words(cursor, placed.begin)
            if is_element(placed.node):
                tokens.append(("open", placed.node.start))
                emit(placed.children, placed.begin, placed.end)
                tokens.append(("close", placed.node.end))
            else:
                tokens.append(("kept", placed.node))
            cursor = max(cursor, placed.end)
        add_words(cursor, end)

    emit(place(segment, len(words), alignment), 0, len(words))
    return segment.lead + _join(_split_glued(tokens)) + breaks.get(len(words), "") + segment.trail


def _split_glued(tokens: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """A node kept whole inside a word (`"%@"`, `(%d)`) goes inside the target word before it where
    that word ends as the source's did after the node (its end becomes a "glued" token)."""
    out: list[tuple[str, Any]] = []
    for kind, item in tokens:
        before, after = item.glued if kind == "kept" else ("", "")
        previous = out[-1][1] if out and out[-1][0] == "word" else ""
        if before and after and len(previous) > len(after) and previous.lower().endswith(after.lower()):
            out[-1] = ("word", previous[: -len(after)])
            out += [(kind, item), ("glued", after)]
        else:
            out.append((kind, item))
    return out


def _join(tokens: list[tuple[str, Any]]) -> str:
    """Tokens with a space between words, an open tag against the word after it, a close tag against
    the word before it, and a node kept whole spaced as it was in the source, except that one glued
    to punctuation (`"%@"`, `{name}!`) is spaced from a target word that does not have it there."""
    out: list[str] = []
    previous, space_after = "", False
    for k, (kind, item) in enumerate(tokens):
        if kind == "kept":
            last = out[-1] if previous == "word" else ""
            space = previous in ("word", "close", "kept") and (
                item.spaced[0] or previous == "word" and not _alike(last, item.glued[0], at_end=True)
            )
        else:
            space = kind in ("word", "open") and (
                previous in ("word", "close", "glued") or previous == "kept" and space_after
            )
        if kind == "break":
            out.append(item)
            previous, space_after = kind, False
            continue
        out.append(" " if space else "")
        out.append(
            html.escape(item, quote=False) if kind in ("word", "glued") else item.source() if kind == "kept" else item
        )
        following = tokens[k + 1][1] if k + 1 < len(tokens) and tokens[k + 1][0] in ("word", "glued") else None
        glued_on = following is None or kind != "kept" or _alike(following, item.glued[1], at_end=False)
        previous, space_after = kind, kind == "kept" and (item.spaced[1] or not glued_on)
    return "".join(out)


def _alike(word: str, part: str, at_end: bool) -> bool:
    """Whether a target word may stay glued to a node that the source glued to part: part is a word's
    letters (they are translated), or punctuation that the target word has at that end."""
    if any(char.isalnum() for char in part):
        return True
    return word.lower().endswith(part.lower()) if at_end else word.lower().startswith(part.lower())


# A whole text.

Translate = Callable[[list[str]], list[tuple[str, list[tuple[int, int]]]]]


def markup_segments(
    texts: Sequence[str],
    fmt: str,
    where: Callable[[int], str] = lambda i: f"line {i + 1}",
    kept: frozenset[str] = frozenset(),
) -> list[list[str | Segment]]:
    """Each text as kept source text and segments to translate (mtkit.text.segments); kept:
    more elements whose text is never translated. A text that does not parse (XML that is not
    well-formed) is an MtkitError that starts with where(its index), of the error's own kind (a bound
    met while parsing, or a document's time budget, stays one)."""
    documents = []
    for index, text in enumerate(texts):
        try:
            documents.append(segments(parse(text, fmt, kept), fmt == "xml"))
        except MtkitError as err:
            raise type(err)(f"{where(index)}, {err}") from None
    return documents


def assemble(
    documents: list[list[str | Segment]], translated: Sequence[tuple[str, Sequence[tuple[int, int]]]]
) -> list[str]:
    """The texts again, each segment replaced by its translation (with its word alignment as
    (source i, target j) pairs, in the documents' order) with its markup put back."""
    results = iter(translated)
    return ["".join(render(part, *next(results)) if isinstance(part, Segment) else part for part in parts)
            for parts in documents]  # fmt: skip


def translate_markup(
    texts: Sequence[str], fmt: str, translate: Translate, where: Callable[[int], str] = lambda i: f"line {i + 1}"
) -> list[str]:
    """Each text translated with its markup kept: translate(plain segments) gives each segment's
    translation and its word alignment."""
    documents = markup_segments(texts, fmt, where)
    return assemble(documents, translate(pending_texts(documents)))


Aligned = list[tuple[str, list[tuple[int, int]]]]  # translations, each with its (source i, target j) pairs


class Sentences(list):
    """A text's sentences, with the whitespace before each: "" before the first, a line break run
    where a line ends before it, a space within a line."""

    def __init__(self, sentences: list[str], joints: list[str]):
        super().__init__(sentences)
        self.joints = joints


def sentences_of(texts: Sequence[str], split: Callable[[str], list[str]]) -> list[Sentences]:
    """Each text's sentences, line by line (split_lines: no sentence spans two lines), each line by
    split; a line whose sentences do not hold exactly its words stays whole."""
    cut = []
    for text in texts:
        layout = split_lines(text)
        if not layout.lines:
            cut.append(Sentences([text], [""]))
            continue
        sentences, joints = [], []
        for k, line in enumerate(layout.lines):
            parts = split(line)
            parts = parts if " ".join(parts).split() == line.split() else [line]
            sentences += parts
            joints += [layout.breaks[k - 1] if k else ""] + [" "] * (len(parts) - 1)
        cut.append(Sentences(sentences, joints))
    return cut


def rejoined(cut: list[Sentences], translated: Sequence[tuple[str, Sequence[tuple[int, int]]]]) -> Aligned:
    """Each text's sentences' translations (in order, as sentences_of cut them) put together again:
    one space apart within a line, the lines with their line breaks, their alignments counted across
    the sentences."""
    results = iter(translated)
    out = []
    for sentences in cut:
        text, pairs, source_words, target_words = "", [], 0, 0
        for sentence, joint in zip(sentences, sentences.joints):
            translation, alignment = next(results)
            pairs += [(i + source_words, j + target_words) for i, j in alignment]
            source_words, target_words = source_words + len(sentence.split()), target_words + len(translation.split())
            if has_line_break(joint):
                text += joint
            elif text and not text[-1].isspace() and translation.strip():
                text += " "
            text += translation if translation.strip() else ""
        out.append((text, pairs))
    return out


def by_sentences(texts: Sequence[str], split: Callable[[str], list[str]], translate: Translate) -> Aligned:
    """translate's results for the texts, translated sentence by sentence."""
    cut = sentences_of(texts, split)
    return rejoined(cut, translate([sentence for sentences in cut for sentence in sentences]))


def pending_texts(documents: list[list[str | Segment]], lines: bool = False) -> list[str]:
    """The plain text of every segment to translate, in order; with lines, its line breaks kept (a
    request's text, where each line is translated on its own; a document's segment is one paragraph
    however its source wraps it)."""
    segments = [part for parts in documents for part in parts if isinstance(part, Segment)]
    return [lined(plain(segment.root)) if lines else segment.text for segment in segments]


def parse_alignment(text: str) -> list[tuple[int, int]]:
    """Pharaoh pairs "i-j ..." as (i, j)."""
    return [(int(i), int(j)) for i, j in (pair.split("-") for pair in text.split())]
