"""The casing of a sentence: a line in ALL CAPS or in Title Case is translated in the casing a model
knows best (sentence case: its first letter capital, the rest small) and its translation cased as
the source was. A model learns from sentences in sentence case; given a shouted headline it spells
letter by letter ("MEEEGGGGAAAA"), given Title Case it drops words. Marian's --all-caps-every and
--english-title-case-every teach a model both; this works for any model, trained before or not.

Words of one letter ("I", "A", a stand-in of mtkit.text.spans) do not count towards the words a
casing needs, but follow it ("a" in "TWO MEN a PARK" leaves the line as it is, so that its
translation is not re-cased where the source was not), and a stand-in keeps its own.
"""

from __future__ import annotations

import re

UPPER, TITLE = "upper", "title"
# Languages that capitalise every noun: there a line of capitalised words may be a sentence as written
# ("Guten Morgen Berlin"), and small letters would change its words ("morgen" is "tomorrow").
NOUNS_CAPITALISED = {"de", "lb"}
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")  # letters, with an apostrophe inside ("don't")


def casing_of(text: str, lang: str | None = None) -> str | None:
    """UPPER where every cased letter is capital (at least two words of two letters or more), TITLE where
    every word of letters begins with a capital and goes on small (at least three such words; not in a
    language of NOUNS_CAPITALISED), else None: a sentence as a model knows it, or a mix left as it is."""
    cased = [w for w in _WORD.findall(text) if any(c.isupper() or c.islower() for c in w)]
    longer = sum(len(w) > 1 for w in cased)  # words of one letter ("I", "A", a stand-in) do not make the count
    if longer >= 2 and all(not any(c.islower() for c in w) for w in cased):
        return UPPER
    if lang in NOUNS_CAPITALISED:
        return None
    if longer >= 3 and all(w[0].isupper() and not any(c.isupper() for c in w[1:]) for w in cased):
        return TITLE
    return None


def sentence_case(text: str, casing: str | None, lang: str | None = None, keep: frozenset[str] = frozenset()) -> str:
    """The text as a model knows it: small letters but the first word's first (and English "I"); the words
    in `keep` (stand-ins) as they are."""
    if casing is None:
        return text
    out = _WORD.sub(lambda m: m.group() if m.group() in keep else m.group().lower(), text)
    if lang in (None, "en"):
        out = re.sub(r"\bi\b", "I", out)
    first = _WORD.search(out)
    if first:
        out = out[: first.start()] + first.group()[0].upper() + out[first.start() + 1 :]
    return out


def recase(translation: str, casing: str | None) -> str:
    """A translation cased as its source was: ALL CAPS, or Title Case (each word's first letter)."""
    if casing == UPPER:
        return _WORD.sub(lambda m: m.group().upper(), translation)
    if casing == TITLE:
        return _WORD.sub(lambda m: m.group()[0].upper() + m.group()[1:], translation)
    return translation
