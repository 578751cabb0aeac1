"""Sentences of a line: pysbd's rules for the source language (shipped in its pip package, a
dependency of mtkit). Light to import (no model, no torch): the server's document workers split
with it too.

Lines of a text: a request's text may hold several lines (a multi-line string in an app, a
subtitle, a paragraph with a soft break). Each line is translated on its own, never merged with the
next; the whitespace that separates two lines (`\n`, `\r\n`, blank lines, the next line's
indentation) is kept as written, and so is whitespace before the first line or after the last where
it holds a line break ("Hello\n" is "Hallo\n"). A line break is any character str.splitlines splits at."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from mtkit.core.console import warn

# The sentence end that any language shares: . ! ? … (and their closing quotes or brackets) before a
# space, or a CJK full stop, question or exclamation mark anywhere: a line without one is one sentence.
SENTENCE_END = re.compile(r"(?:(?<=[.!?…])|(?<=[.!?…][\"'”’»)\]]))\s+|(?<=[。！？])")

# pysbd reads a text this many characters at a time: its time grows with the square of the text's
# length (20,000 characters of short sentences: 0.79 s; a window at a time: 0.23 s), and each of its
# regular expressions holds Python's lock for as long as the text is long, stalling every other thread.
WINDOW = 2_000
# A window that holds one sentence grows to this before the sentence is cut at a space (the model
# cuts a sentence this long into pieces anyway: mtkit.translation.sentences).
LONGEST_WINDOW = 16_000


class SentenceSplitter:
    """Sentences of a text, by pysbd's rules for `lang` (English's where pysbd has none)."""

    def __init__(self, lang: str | None):
        import pysbd
        from pysbd.languages import LANGUAGE_CODES

        if lang not in LANGUAGE_CODES:
            named = f"has no rules for '{lang}'" if lang else "is not told the model's source language"
            warn(f"the sentence splitter {named}: splitting by its English rules")
        self._segmenter = pysbd.Segmenter(language=lang if lang in LANGUAGE_CODES else "en", clean=False)

    def split(self, text: str) -> list[str]:
        if not SENTENCE_END.search(text.strip()):  # no end mark inside it: one sentence (pysbd costs ~0.5 ms a line)
            return [text.strip()] if text.strip() else [text]
        pieces = [piece.strip() for piece in self._pieces(text)]
        return [piece for piece in pieces if piece] or [text]

    def _pieces(self, text: str) -> list[str]:
        """pysbd's sentences of the text, a window at a time: each window's sentences but its last two
        (the last may go on past the window, and a bracket or quote open across the window's end
        changes where the one before it ends), which begin the next window; of two, the first."""
        pieces, start, size = [], 0, WINDOW
        while len(text) - start > size:
            window = text[start : start + size]
            found = self._segmenter.segment(window)
            kept_back = 2 if len(found) > 2 else 1
            at = _start_of(window, found, len(found) - kept_back) if len(found) > kept_back else 0
            if at is None:  # pysbd did not give the window's text back: the rest at once, as it reads it
                break
            if at > 0:
                pieces += found[:-kept_back]
                start, size = start + at, WINDOW
            elif size < LONGEST_WINDOW:
                size *= 2
            else:
                cut = window.rstrip().rfind(" ") + 1 or size
                pieces.append(window[:cut])
                start, size = start + cut, WINDOW
        return pieces + self._segmenter.segment(text[start:])


def _start_of(window: str, found: list[str], k: int) -> int | None:
    """Where the window's k-th sentence of `found` begins (None: pysbd changed a sentence's text)."""
    position = 0
    for n, sentence in enumerate(found[: k + 1]):
        at = window.find(sentence.strip(), position)
        if at < 0:
            return None
        if n == k:
            return at
        position = at + len(sentence.strip())
    return None


_WHITESPACE = re.compile(r"\s+")


def has_line_break(text: str) -> bool:
    """Whether the text holds a character that str.splitlines splits at."""
    return bool(text) and text.splitlines() != [text]


@dataclass
class Lines:
    """A text as its non-blank lines (stripped) and the whitespace around them."""

    lines: list[str]
    breaks: list[str] = field(default_factory=list)  # between line k and k + 1: a run holding a line break
    lead: str = ""  # the whitespace before the first line, where it holds a line break
    trail: str = ""  # the same after the last

    @property
    def single(self) -> bool:
        """Whether the text is one line with no line break around it."""
        return len(self.lines) <= 1 and not self.lead and not self.trail

    def join(self, translations: Sequence[str]) -> str:
        """The lines' translations (one each, in order) with the text's line breaks between and around them."""
        out = [self.lead]
        for k, translation in enumerate(translations):
            out += [self.breaks[k - 1] if k else "", translation]
        return "".join(out + [self.trail])


def split_lines(text: str) -> Lines:
    """The text's lines, in linear time (each whitespace run is found once, then looked at for a break)."""
    body = text.strip()
    lead = text[: len(text) - len(text.lstrip())]
    trail = text[len(text.rstrip()) :] if body else ""
    lines, breaks, start = [], [], 0
    for run in _WHITESPACE.finditer(body):
        if has_line_break(run.group()):
            lines.append(body[start : run.start()])
            breaks.append(run.group())
            start = run.end()
    if body:
        lines.append(body[start:])
    return Lines(lines, breaks, lead if has_line_break(lead) else "", trail if has_line_break(trail) else "")


def lined(text: str) -> str:
    """The text's words one space apart, but for the whitespace that breaks a line, kept as written."""
    return _WHITESPACE.sub(lambda run: run[0] if has_line_break(run[0]) else " ", text.strip())


def breaks_by_word(text: str) -> dict[int, str]:
    """Before word k (0: before the first; the number of words: after the last), the whitespace there,
    where it breaks the line."""
    breaks, k = {}, 0
    for run in _WHITESPACE.finditer(text):
        k += run.start() > 0
        if has_line_break(run.group()):
            breaks[k] = run.group()
    return breaks
