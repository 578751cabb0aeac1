"""Spans of a text that a translation keeps character for character: numbers (with their separators),
dates, times, prices, phone numbers, URLs, e-mail addresses, file paths, code in backticks,
placeholders of software strings and of the tools that translate them (`%s`, `%1$d`, Qt's `%1`,
`{name}`, `{0}`, ICU's `{count, number}`, `{{name}}`, `%(n)d`, `%{name}`, `${name}`, Weblate's
`[X7X]`, numbered tags as OmegaT, Okapi and memoQ write them: `<1>`, `</g2>`, `<x3/>`), character
entities (`&amp;`, `&lt;b&gt;`), identifiers that mix letters and digits (flight LH1234, gate B12,
model A320, part XJ-9000) and emoji.

A model learns from sentences where such spans are rare, and garbles them ("7:45" as "8855555").
So before translation each span is replaced by a stand-in (a single digit, one the text does not
hold otherwise: what a model trained with digits split copies, and short enough not to derail one
that has not learned to), and after it each stand-in is replaced by its span again; a stand-in the
translation lost is put back at the same share of the words as in the source. The kept spans are
thus exact whatever the model does with them. (On a Multi30k model, digits as stand-ins left the
rest of a sentence closer to its reference than capital letters or names did, and forcing the
stand-ins into the search as glossary constraints made it repeat them: "in 2 2 2 2 2 10".)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Emoji: pictographs and symbols, with their variation selector, skin tones, ZWJ sequences and flags.
_PICTOGRAPH = "[\u2600-\u27bf\u2b00-\u2bff\U0001f000-\U0001faff]"
_EMOJI = rf"(?:[\U0001f1e6-\U0001f1ff]{{2}}|{_PICTOGRAPH}[\ufe0f\U0001f3fb-\U0001f3ff]*(?:\u200d{_PICTOGRAPH}[\ufe0f\U0001f3fb-\U0001f3ff]*)*)"
_NUMBER = r"\d+(?:[.,\u202f\u00a0']\d+)*"  # 1,250 / 1.250,50 / 10'000 / 2019
# Each kind, in the order in which they claim the text: an earlier kind's span wins an overlap.
KINDS: dict[str, str] = {
    "code": r"`[^`\n]+`",
    "url": r"\b(?:https?|ftp)://[^\s<>\"'`]+|\bwww\.[^\s<>\"'`]+",
    "email": r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+",
    "path": r"(?<![\w/])(?:(?:~|\.{1,2})/[\w.-]+(?:/[\w.-]+)*/?|/[\w.-]+(?:/[\w.-]+)+/?)"
    r"|\b[A-Za-z]:\\(?:[\w.-]+\\)*[\w.-]+",
    "placeholder": r"%\(\w+\)[-+ #0]*\d*(?:\.\d+)?[sdifgexXcr]|%\d+\$[-+ #0]*\d*[sdif@]|%[sdif@]|%\{\w+\}|\$\{\w+\}"
    r"|\{\{\s*[\w.]+\s*\}\}|\{[\w.]*\}|\{\w+,\s*\w+(?:,\s*\w+)?\}|\[X\d+X\]|</?[A-Za-z]{0,3}\d+\s?/?>"
    r"|(?<![\w%])%\d{1,2}(?![\d$])",
    "entity": r"&lt;/?\w{1,20}(?:\s[^&<>\n]{0,80})?/?&gt;|&(?:[A-Za-z]{2,10}|#\d{1,7}|#[xX][0-9A-Fa-f]{1,6});",
    "emoji": _EMOJI,
    "date": r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}[./]\d{1,2}[./]\d{2,4}\b",
    "time": r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[ap]\.?m\.?(?!\w))?",
    "phone": r"(?<![\w+])(?:\+\d{1,3}[ -]?)?(?:\(\d{1,5}\)[ -]?)?\d{2,5}(?:[ -]\d{2,8}){1,4}(?![\w,.]\d)",
    "price": rf"[$€£¥₹]\s?{_NUMBER}(?:\s?(?:[kKmM]|bn)\b)?|\b{_NUMBER}\s?[€£¥₹]",
    "number": rf"(?<![\w]){_NUMBER}(?:\s?%)?(?![^\W_])",  # not the start of a longer number or word ("21st")
    "identifier": r"(?<![\w-])(?:[A-Za-z]+-?\d|\d+-?[A-Za-z])[A-Za-z0-9]*(?:-[A-Za-z0-9]+)*(?![\w-])",
}
# Ordinals and the like ("2nd", "21st", "3e") are words to translate, not identifiers.
_ORDINAL = re.compile(r"\d+(?:st|nd|rd|th|e|er|re|ème|º|ª)", re.IGNORECASE)
_IDENTIFIER_MAX = 40
_PATTERN = re.compile("|".join(f"(?P<{kind}>{pattern})" for kind, pattern in KINDS.items()))
# A character that every span holds one of: a text without any has none (most sentences; cheap to rule out).
_MAYBE = re.compile(rf"[\d`@/\\%{{$€£¥₹&]|www\.|{_PICTOGRAPH}|[\U0001f1e6-\U0001f1ff]")
_TRAILING = ".,;:!?)]}'\""  # closes a sentence or a bracket, not a URL or a path
# Characters that only spans hold: a translation of a text whose spans are stand-ins never needs one.
SPAN_MARKS = "{}@`%$€£¥₹"
# Stand-ins, in the order they are taken: digits, then capital letters where a sentence has more than nine spans.
STAND_INS = "123456789XYZQWKJV"
_MARKS = 0xF0000  # the stand-ins' marks while they become spans (a private use plane, that a model does not write)
_MARKED = re.compile(f"[{chr(_MARKS)}-{chr(_MARKS + len(STAND_INS) - 1)}]")


@dataclass(frozen=True)
class Span:
    kind: str
    start: int
    end: int
    text: str


def find_spans(text: str) -> list[Span]:
    """The spans of `text` to keep, in order, none overlapping."""
    if not _MAYBE.search(text):
        return []
    out = []
    for match in _PATTERN.finditer(text):
        kind, value, start = match.lastgroup, match.group(), match.start()
        if kind in ("url", "path"):
            value = _trimmed(value)
        if kind == "phone" and sum(c.isdigit() for c in value) < 7:  # "10 20" is two numbers
            out.extend(find_spans_of_kind("number", value, start))
            continue
        if kind == "identifier" and (_ORDINAL.fullmatch(value) or len(value) > _IDENTIFIER_MAX):
            continue
        if value:
            out.append(Span(kind, start, start + len(value), value))
    return out


def find_spans_of_kind(kind: str, text: str, offset: int = 0) -> list[Span]:
    return [Span(kind, offset + m.start(), offset + m.end(), m.group()) for m in re.finditer(KINDS[kind], text)]


def _trimmed(value: str) -> str:
    """A URL or path without the punctuation that ends the sentence around it (a bracket it opened stays)."""
    while value and value[-1] in _TRAILING:
        if value[-1] == ")" and value.count("(") >= value.count(")"):
            break
        value = value[:-1]
    return value


@dataclass
class Masked:
    """A text with its spans replaced by stand-ins, and the spans to put back."""

    text: str
    stand_ins: list[tuple[str, str]]  # (stand-in, span), in the order of the source
    glued: frozenset[tuple[str, str]] = frozenset()  # (stand-in, "before" or "after"): its span touched a word there

    def restore(self, translation: str) -> str:
        """The translation with each stand-in replaced by its span. Numbers the model made of stand-ins
        are dropped, a stand-in the translation lost is put back first, at its share of the words in the source (its neighbours' place, where the model
        did not say), one the model wrote again is dropped, and then all are replaced at once: a span is
        never cut, nor read as a stand-in."""
        translation = self._without_invented(_MARKED.sub("", translation))  # a mark the text brought is none of ours
        source_words = self.text.split()
        for stand_in, _ in self.stand_ins:
            if not _word_match(stand_in).search(translation):
                position = next((i for i, word in enumerate(source_words) if _word_match(stand_in).search(word)), 0)
                translation = _insert_at_share(translation, stand_in, position / max(1, len(source_words) - 1))
        for stand_in, _ in self.stand_ins:  # a stand-in the model wrote twice ("2,2") is one span: the first
            first = _word_match(stand_in).search(translation)
            if first:
                rest = re.sub(rf"[\s,;]*{_word_match(stand_in).pattern}", "", translation[first.end() :])
                translation = translation[: first.end()] + rest
        found = [
            (match.span(), k) for k, (stand_in, _) in enumerate(self.stand_ins)
            if (match := _word_match(stand_in).search(translation))
        ]  # fmt: skip
        for (start, end), k in sorted(found, reverse=True):  # first each to a mark, glued where its span was
            translation = translation[:start] + chr(_MARKS + k) + translation[end:]
        for k, (stand_in, _) in enumerate(self.stand_ins):
            if (stand_in, "before") in self.glued:
                translation = re.sub(rf"(?<=[^\W_]) +(?={chr(_MARKS + k)})", "", translation)
            if (stand_in, "after") in self.glued:
                translation = re.sub(rf"(?<={chr(_MARKS + k)}) +(?=[^\W_])", "", translation)
        return _MARKED.sub(lambda mark: self.stand_ins[ord(mark[0]) - _MARKS][1], translation)

    def _without_invented(self, translation: str) -> str:
        """The translation without the numbers the model made of the stand-ins' digits ("10" beside the
        stand-in "1"): every number of the source is a span, so such a number is none of its own."""
        digits = {stand_in for stand_in, _ in self.stand_ins if stand_in.isdigit()}

        def kept(match: re.Match) -> str:
            number = match.group().strip()
            return match.group() if number in digits or not digits & set(number) else ""

        found = _NUMBER_WORD.sub(kept, translation)
        return translation if found == translation else " ".join(found.split())

    def within(self, part: str) -> Masked:
        """The stand-ins of one part of the masked text (a sentence of it), with that part."""
        stand_ins = [(stand_in, span) for stand_in, span in self.stand_ins if _word_match(stand_in).search(part)]
        return Masked(part, stand_ins, self.glued)


_NUMBER_WORD = re.compile(r"\s*(?<![^\W_])\d+(?![^\W_])")  # a run of digits, with the space before it


def _word_match(stand_in: str) -> re.Pattern:
    """A stand-in as a whole token: not a digit of another number, nor a letter of a word."""
    return re.compile(rf"(?<![^\W_]){re.escape(stand_in)}(?![^\W_])")


def _insert_at_share(text: str, span: str, share: float) -> str:
    words = text.split()
    if not words:
        return span
    at = min(len(words), round(share * len(words)))
    if at == len(words) and words[-1][-1:] in ".!?":  # before the sentence's last mark
        last = words[-1]
        return " ".join([*words[:-1], last[:-1].rstrip() + (" " if last[:-1] else "") + span + last[-1]]).strip()
    return " ".join([*words[:at], span, *words[at:]])


def mask(text: str, spans: list[Span] | None = None) -> Masked:
    """`text` with each span (default: find_spans) replaced by a stand-in the text does not hold; where
    the stand-ins run out (more than 17 spans in one text), the rest stay as they are. A span written
    against a letter or digit ("[X2X]black") gets its stand-in a space apart, so that the model sees
    a word of its own, and is glued back to its neighbour in the translation."""
    spans = find_spans(text) if spans is None else spans
    if not spans:
        return Masked(text, [])
    free = [stand_in for stand_in in STAND_INS if not _word_match(stand_in).search(text)]
    pieces, stand_ins, glued, at = [], [], set(), 0
    for span in spans:
        if stand_ins and span.start == at:  # spans that touch are one: two stand-ins would run together
            stand_ins[-1] = (stand_ins[-1][0], stand_ins[-1][1] + span.text)
            at = span.end
            continue
        if not free:
            continue
        stand_in = free.pop(0)
        before = " " if _is_word_char(text[span.start - 1 : span.start]) else ""
        after = " " if _is_word_char(text[span.end : span.end + 1]) else ""
        pieces += [text[at : span.start], before, stand_in, after]
        glued |= {(stand_in, "before")} if before else set()
        glued |= {(stand_in, "after")} if after else set()
        stand_ins.append((stand_in, span.text))
        at = span.end
    pieces.append(text[at:])
    return Masked("".join(pieces), stand_ins, frozenset(glued))


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def invented_spans(translation: str, source: str) -> list[Span]:
    """The spans of a translation that its source does not hold (each looked for as a whole token)."""
    return [span for span in find_spans(translation) if not _token_match(span.text).search(source)]


def without_invented(translation: str, source: str) -> str:
    """The translation without the spans its source does not hold: a number, link, address, price,
    placeholder, code or identifier that no one wrote is worse than a missing word. The words around
    a span taken out close up, without a space before the punctuation that followed it; and again,
    until what closed up makes no new span ("{{}}" without its "{}" is "{}"): each round is shorter."""
    while invented := invented_spans(translation, source):
        for span in reversed(invented):
            before, after = translation[: span.start].rstrip(" \t"), translation[span.end :].lstrip(" \t")
            glue = "" if not before or not after or after[0] in _TRAILING else " "
            translation = before + glue + after
    return translation


def _token_match(text: str) -> re.Pattern:
    """A span as a whole token: where it begins or ends with a letter or digit, not a part of a longer
    number or word there."""
    before = r"(?<![^\W_])" if _is_word_char(text[:1]) else ""
    after = r"(?![^\W_])" if _is_word_char(text[-1:]) else ""
    return re.compile(before + re.escape(text) + after)
