"""How near a stored sentence is to a new one, as CAT tools score it, and what is a 100% match.

The score is word-level: 100 x (1 - edits / words of the longer), where words are runs of letters and
digits and each other mark is a word of its own, and edits are the insertions, deletions and
substitutions (Levenshtein) that turn one into the other. Before they are compared, both sentences'
spans (numbers, links, placeholders, ...: mtkit.text.spans) become one placeable each, so a unit that
differs from the query only in them is a 100% match, and its translation gets the query's spans."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rapidfuzz.distance import Levenshtein

from mtkit.text.spans import find_spans

PLACEABLE = "\ue000"  # a span, in a key: a mark of its own, not a word any text holds
_WORDS = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class Keyed:
    """A sentence as a memory compares it: its text with each span a placeable, and the spans."""

    key: str
    spans: tuple[str, ...]


def keyed(text: str) -> Keyed:
    text = " ".join(text.split())
    spans = find_spans(text)
    pieces, at = [], 0
    for span in spans:
        pieces += [text[at : span.start], PLACEABLE]
        at = span.end
    pieces.append(text[at:])
    return Keyed("".join(pieces), tuple(span.text for span in spans))


def words(key: str) -> list[str]:
    return _WORDS.findall(key)


def score(query: list[str], candidate: list[str]) -> int:
    """The match in percent, rounded down (a match of 99.6% is not 100%)."""
    longest = max(len(query), len(candidate))
    if not longest:
        return 100
    return int(100 * (longest - Levenshtein.distance(query, candidate)) // longest)


def with_spans(target: str, stored: tuple[str, ...], wanted: tuple[str, ...]) -> str:
    """A stored translation with each span it took from its source (stored) written as the span at the
    same place among the new source's spans (wanted): the first occurrence of each, as a whole word,
    not inside another's; what only the translation holds stays."""
    if stored == wanted or len(stored) != len(wanted):
        return target
    taken: list[tuple[int, int, str]] = []
    for old, new in zip(stored, wanted):
        for match in re.finditer(rf"(?<!\w){re.escape(old)}(?!\w)", target):
            if not any(start < match.end() and match.start() < end for start, end, _ in taken):
                taken.append((match.start(), match.end(), new))
                break
    for start, end, new in sorted(taken, reverse=True):
        target = target[:start] + new + target[end:]
    return target
