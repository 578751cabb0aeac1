"""Terminology: the target phrases a translation must contain (mtkit.decoding.lexical makes the search
produce them), from a glossary or given per line.

A glossary is a text file of `source term<TAB>target term` lines; blank lines and lines starting with
"#" are skipped. A file of three or more columns holds one language a column, and its first line
names them (`en<TAB>de<TAB>fr`, as Google's glossaries of equivalent terms do); the columns of the
source and target languages are used, and an empty cell is no term. A source term is found in a
sentence on word boundaries (a letter or digit on neither side, but in scripts written without spaces,
Chinese, Japanese, Thai and the like, where it is found anywhere), after the model's normalization,
case-insensitively unless asked (case_sensitive), the longest first where terms overlap; its target
term is then a constraint of that sentence, as it is written: a constraint is literal, and never
takes another case ending. Per-line constraints (`translate --constraints FILE`, fairseq's format)
are a line's target phrases separated by tabs, blank for none.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mtkit.core.errors import MtkitError
from mtkit.core.textio import iter_lines
from mtkit.text.tokenizer import UNK_ID, Tokenizer


@dataclass(frozen=True)
class Term:
    """A target phrase a translation must contain; `source`: the source term that called for it
    (None for a phrase given for the whole line); `origin`: where it was written, for messages."""

    target: str
    source: str | None = None
    origin: str = ""
    case_sensitive: bool = False


UNSPACED_SCRIPTS = ("CJK", "HIRAGANA", "KATAKANA", "THAI", "LAO", "KHMER", "MYANMAR")


def _unspaced(char: str) -> bool:
    """Whether the character's script writes words without spaces between them: no word boundary there."""
    return unicodedata.name(char, "").startswith(UNSPACED_SCRIPTS)


def _bounded(source: str) -> str:
    """The source term as a pattern that matches it as a word: no letter or digit right before or after,
    except at an edge in a script written without spaces."""
    before = "" if _unspaced(source[0]) else r"(?<!\w)"
    after = "" if _unspaced(source[-1]) else r"(?!\w)"
    return before + re.escape(source) + after


def _pattern(sources: Iterable[str], case_sensitive: bool) -> re.Pattern | None:
    alternatives = sorted({source for source in sources if source}, key=len, reverse=True)  # the longest first
    if not alternatives:
        return None
    return re.compile("|".join(map(_bounded, alternatives)), 0 if case_sensitive else re.IGNORECASE)


def _key(text: str, case_sensitive: bool) -> str:
    return text if case_sensitive else text.lower()


class Glossary:
    """Source terms and their target terms; terms(text) finds those a sentence calls for.

    The terms are found with a trie of their sources, walked from each place of the text: linear in
    the text whatever the number of terms (a regular expression of 27,000 alternatives took 12 s for
    a text of 20,000 characters), built once a glossary. Its nodes are numbers and its edges one dict
    of numbers: a dict a node made a large glossary hundreds of thousands of objects that every full
    pass of the garbage collector walked, holding the interpreter (and a server's event loop) for
    tens of milliseconds each time."""

    def __init__(self, entries: Sequence[Term], normalize: Callable[[str], str] = str, case_sensitive: bool = False):
        self.normalize, self.case_sensitive = normalize, case_sensitive
        self.entries: dict[str, Term] = {}
        for term in entries:
            source = normalize(term.source.strip())
            term = Term(term.target.strip(), source, term.origin, case_sensitive)
            if source:
                self.entries.setdefault(_key(source, case_sensitive), term)  # the first entry of a term wins
        self._edges: dict[int, int] = {}  # _edge(node, char) -> the node it leads to; the root is 0
        self._ends: dict[int, str] = {}  # node -> the key of the term that ends there
        for key in self.entries:
            node = 0
            for char in key:
                node = self._edges.setdefault(_edge(node, char), len(self._edges) + 1)
            self._ends[node] = key

    def __len__(self) -> int:
        return len(self.entries)

    def terms(self, text: str) -> list[Term]:
        """The terms the text calls for, in the order they first occur, each once: from the left, at
        each place the longest term that starts and ends on a word boundary there (none inside a word,
        but in scripts written without spaces), then on after it."""
        text = _key(self.normalize(text), self.case_sensitive)
        found: dict[str, Term] = {}
        at = 0
        while at < len(text):
            end, key = self._longest(text, at)
            if key is None:
                at += 1
                continue
            term = self.entries[key]
            found.setdefault(term.target, term)
            at = end
        return list(found.values())

    def _longest(self, text: str, start: int) -> tuple[int, str | None]:
        node, best = 0, (start, None)
        for end in range(start + 1, len(text) + 1):
            node = self._edges.get(_edge(node, text[end - 1]))
            if node is None:
                break
            key = self._ends.get(node)
            if key is not None and _on_boundaries(text, start, end):
                best = (end, key)
        return best


def _edge(node: int, char: str) -> int:
    """The number of the edge from a node by a character (one number: no tuple for the collector to track)."""
    return node * 0x110000 + ord(char)


_WORD = re.compile(r"\w")


def _on_boundaries(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] is a word there (mtkit.text.glossary's _bounded, for a found term)."""
    before = start == 0 or _unspaced(text[start]) or not _WORD.match(text[start - 1])
    after = end == len(text) or _unspaced(text[end - 1]) or not _WORD.match(text[end])
    return before and after


def occurs(term: Term, text: str) -> bool:
    """Whether the term's source occurs in (normalized) text, as a glossary finds it."""
    pattern = _pattern([term.source or ""], term.case_sensitive)
    return pattern is not None and pattern.search(text) is not None


def parse_glossary(lines: Iterable[str], name: str, src_lang: str | None, tgt_lang: str | None) -> list[Term]:
    """A glossary's terms, each with its origin ("NAME line N"); bad lines raise an error naming them."""
    rows = [(n, line.rstrip("\r\n")) for n, line in enumerate(lines, 1)]
    rows = [(n, line) for n, line in rows if line.strip() and not line.lstrip().startswith("#")]
    if not rows:
        return []
    first_n, first = rows[0]
    width = len(first.split("\t"))
    if width < 2:
        raise MtkitError(f"{name} line {first_n}: a source term and a target term, separated by a tab, are needed")
    columns = (0, 1)
    if width >= 3:
        languages = [cell.strip() for cell in first.split("\t")]
        columns = tuple(
            _column(languages, lang, side, name, first_n) for lang, side in ((src_lang, "source"), (tgt_lang, "target"))
        )
        rows = rows[1:]
    terms = []
    for n, line in rows:
        cells = line.split("\t")
        if len(cells) != width:
            raise MtkitError(f"{name} line {n}: {len(cells)} tab-separated columns, where its first line has {width}")
        source, target = (cells[c].strip() for c in columns)
        if width == 2 and not (source and target):
            raise MtkitError(f"{name} line {n}: a source term and a target term, separated by a tab, are needed")
        if source and target:
            terms.append(Term(target, source, f"{name} line {n}"))
    return terms


def _column(languages: list[str], lang: str | None, side: str, name: str, line: int) -> int:
    if lang is None:
        raise MtkitError(
            f"{name}: a glossary of several languages ({', '.join(languages)}) needs --src-lang and --tgt-lang"
        )
    if lang not in languages:
        raise MtkitError(
            f"{name} line {line}: no column for the {side} language {lang} (it has {', '.join(languages)})"
        )
    return languages.index(lang)


def read_glossary(path: Path, src_lang: str | None = None, tgt_lang: str | None = None) -> list[Term]:
    return parse_glossary(iter_lines(path), str(path), src_lang, tgt_lang)


def encode_terms(tokenizer: Tokenizer, terms: Sequence[Term]) -> list[list[int]]:
    """Each term's target as the tokenizer's ids; an error names a term it cannot write (<unk>: an
    imported SentencePiece vocabulary without byte fallback lacks a character)."""
    encoded = tokenizer.encode_batch([term.target for term in terms])
    for term, ids in zip(terms, encoded):
        if not ids or UNK_ID in ids:
            raise MtkitError(f"{term.origin}: the model's target vocabulary cannot write {term.target!r}")
    return encoded


def constraint_terms(line: str, origin: str) -> list[Term]:
    """A line of a constraints file: its target phrases, separated by tabs (blank: none)."""
    return [Term(phrase.strip(), None, origin) for phrase in line.rstrip("\r\n").split("\t") if phrase.strip()]
