"""What a line's text says about its language: identification with py3langid (its model ships in
its pip package: `pip install 'mtkit[langid]'`), the share of its letters in a language's script,
and its numbers. Used by preprocess's noise filters and serve's /detect.

py3langid scores 142 languages by byte n-grams (langid.py's method, Lui & Baldwin 2012), about
0.06 ms a caption on one core (docs/results/real-text.md). On Multi30k's val captions the declared language
gets a normalized probability of at least 0.41 on 99.9% of English and German lines and 0.10 on
Czech ones (Slovak takes the rest), and at most 0.016 on 99.9% of lines of another of en, de, fr
and cs: a bound of 0.05 keeps the one and drops the other. Close languages share the probability
(Chinese with Cantonese), so a bound, not the first place, decides.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter

from mtkit.core.errors import MtkitError

# The scripts a language's letters are written in, by the first word of the letters' Unicode names
# ("LATIN SMALL LETTER A", "CJK UNIFIED IDEOGRAPH-4E00"); a language not named here writes in Latin.
LANGUAGE_SCRIPTS = {
    "ar": {"ARABIC"}, "fa": {"ARABIC"}, "ur": {"ARABIC"}, "ps": {"ARABIC"}, "ug": {"ARABIC"},
    "he": {"HEBREW"}, "yi": {"HEBREW"}, "el": {"GREEK"},
    "ru": {"CYRILLIC"}, "uk": {"CYRILLIC"}, "be": {"CYRILLIC"}, "bg": {"CYRILLIC"}, "mk": {"CYRILLIC"},
    "sr": {"CYRILLIC", "LATIN"}, "kk": {"CYRILLIC"}, "ky": {"CYRILLIC"}, "mn": {"CYRILLIC"},
    "hi": {"DEVANAGARI"}, "mr": {"DEVANAGARI"}, "ne": {"DEVANAGARI"}, "bn": {"BENGALI"}, "as": {"BENGALI"},
    "pa": {"GURMUKHI"}, "gu": {"GUJARATI"}, "or": {"ORIYA"}, "ta": {"TAMIL"}, "te": {"TELUGU"},
    "kn": {"KANNADA"}, "ml": {"MALAYALAM"}, "si": {"SINHALA"},
    "zh": {"CJK"}, "ja": {"CJK", "HIRAGANA", "KATAKANA"}, "ko": {"HANGUL", "CJK"},
    "th": {"THAI"}, "lo": {"LAO"}, "km": {"KHMER"}, "my": {"MYANMAR"}, "ka": {"GEORGIAN"}, "hy": {"ARMENIAN"},
    "am": {"ETHIOPIC"}, "bo": {"TIBETAN"},
}  # fmt: skip
_NUMBER = re.compile(r"\d+")


def require_langid(option: str) -> None:
    try:
        import py3langid  # noqa: F401
    except ImportError:
        raise MtkitError(f"{option} needs py3langid, the language identifier: pip install 'mtkit[langid]'") from None


@functools.cache
def _identifier(among: tuple[str, ...] | None = None):
    """py3langid's identifier, over every language it knows or only those `among` (one each, loaded once)."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    if among is not None:
        identifier.set_languages(list(among))
    return identifier


def known_languages() -> list[str]:
    return sorted(_identifier().nb_classes)


def check_known(lang: str, option: str) -> None:
    """One line naming the option where the identifier has no such language."""
    if lang not in known_languages():
        raise MtkitError(
            f"{option}: the language identifier does not know '{lang}' (it knows {', '.join(known_languages())})"
        )


def identify(text: str, among: tuple[str, ...] | None = None) -> tuple[str, float]:
    """The likeliest language of a text (of all, or of those `among`), and its probability."""
    lang, probability = _identifier(among).classify(text)
    return lang, float(probability)


def probability(text: str, lang: str) -> float:
    """How likely the text is in `lang`, by the identifier (its probabilities sum to 1 per text)."""
    return float(dict(_identifier().rank(text)).get(lang, 0.0))


def script_of(char: str) -> str:
    """The script of a letter, by the first word of its name (after FULLWIDTH or HALFWIDTH; the
    prolonged sound mark's KATAKANA-HIRAGANA is KATAKANA, and IDEOGRAPHIC marks such as 々 are CJK)."""
    words = unicodedata.name(char, "").split()
    if words and words[0] in ("FULLWIDTH", "HALFWIDTH"):
        words = words[1:]
    first = words[0].split("-")[0] if words else ""
    return "CJK" if first == "IDEOGRAPHIC" else first


def script_share(text: str, lang: str) -> float:
    """The share of the text's letters written in the language's scripts (1.0 for a text without letters)."""
    letters = [c for c in text if unicodedata.category(c).startswith("L")]
    if not letters:
        return 1.0
    scripts = LANGUAGE_SCRIPTS.get(lang, {"LATIN"})
    return sum(script_of(c) in scripts for c in letters) / len(letters)


def numbers(text: str) -> Counter:
    """The numbers written in a text, by value, counted (any script's decimal digits)."""
    return Counter(int(run) for run in _NUMBER.findall(text))
