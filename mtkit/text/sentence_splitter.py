"""Sentences of a line: pysbd's rules for the source language (shipped in its pip package, a
dependency of mtkit), or the sentence ends every language shares. Light to import (no model, no
torch): the server's document workers split with it too."""

from __future__ import annotations

import re

from mtkit.core.console import warn
from mtkit.core.errors import MtkitError

# The sentence end that any language shares: . ! ? … (and their closing quotes or brackets) before a
# space, or a CJK full stop, question or exclamation mark anywhere.
SENTENCE_END = re.compile(r"(?:(?<=[.!?…])|(?<=[.!?…][\"'”’»)\]]))\s+|(?<=[。！？])")


def require_splitter(option: str = "--split-sentences") -> None:
    try:
        import pysbd  # noqa: F401
    except ImportError:
        raise MtkitError(f"{option} needs pysbd, the sentence splitter: pip install pysbd") from None


class SentenceSplitter:
    """Sentences of a text, by pysbd's rules for `lang` (English's where pysbd has none), or by the
    shared sentence ends of SENTENCE_END with rules=False."""

    def __init__(self, lang: str | None, rules: bool = True):
        self._segmenter = None
        if rules:
            require_splitter()
            import pysbd
            from pysbd.languages import LANGUAGE_CODES

            if lang not in LANGUAGE_CODES:
                named = f"has no rules for '{lang}'" if lang else "is not told the model's source language"
                warn(f"the sentence splitter {named}: splitting by its English rules")
            self._segmenter = pysbd.Segmenter(language=lang if lang in LANGUAGE_CODES else "en", clean=False)

    def split(self, text: str) -> list[str]:
        if not SENTENCE_END.search(text.strip()):  # no end mark inside it: one sentence (pysbd costs ~0.5 ms a line)
            return [text.strip()] if text.strip() else [text]
        pieces = self._segmenter.segment(text) if self._segmenter else SENTENCE_END.split(text)
        return [piece.strip() for piece in pieces if piece.strip()] or [text]


def default_splitter(lang: str | None) -> SentenceSplitter:
    """pysbd's rules where the extra is installed (it is never required for cutting long lines)."""
    try:
        import pysbd  # noqa: F401
    except ImportError:
        return SentenceSplitter(lang, rules=False)
    return SentenceSplitter(lang)
