"""A text's lines: what is translated line by line, and the line breaks put back exactly as they were.

A request's text may hold several lines (a multi-line string in an app, a subtitle, a paragraph
with a soft break). Each line is translated on its own, never merged with the next; the whitespace
that separates two lines (`\n`, `\r\n`, blank lines, the next line's indentation) is kept as
written, and so is whitespace before the first line or after the last where it holds a line break
("Hello\n" is "Hallo\n"). A line break is any character that str.splitlines splits at.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from mtkit.text.tokenizer import LINE_BREAKS

_WHITESPACE = re.compile(r"\s+")
_BREAK = re.compile(f"[{LINE_BREAKS}]")


def has_line_break(text: str) -> bool:
    return _BREAK.search(text) is not None


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
