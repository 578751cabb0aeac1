"""Training pairs as people write them: a share of the training split added again in ALL CAPS, in
Title Case, with typos in the source, with a number, time, price, link, address or placeholder
that the target copies, or as one of its words alone with its translation, as OpusTrainer's
modifiers and Marian's --all-caps-every and --english-title-case-every teach a model (`preprocess
--augment upper=0.05,title=0.05,...`).

A model that learned only from captions never saw a shouted headline, a typo, a digit or a word
typed alone (it makes up a caption for "yes"); copies that show it them, beside the pairs as they
were, are what it needs to translate them as it translates a caption. Which pairs get which copy is
drawn from the pair's position and a seed, so that the same corpus gives the same dataset.

A word's translation, for "short", is read off the corpus itself: for each source word, the target
word that occurs in the same pairs most often relative to how often both occur (the Dice
coefficient, as the classic co-occurrence aligners and a first pass of fast_align's kind use it).
Enough to tell that "dog" is "Hund" and "red" is "rot", and what bench/real_inputs.py checks a
model's translation of a word alone against.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from mtkit.core.errors import MtkitError

KINDS = ("upper", "title", "typos", "spans", "short")
MIN_DICE = 0.4  # a word's translation (word_translations) is only taught alone where it is this clear
MIN_PAIRS = 5  # a word seen in fewer pairs has no translation: too few to tell
_WORD = re.compile(r"[^\W\d_]+")
_LEXICON_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
_END = re.compile(r"\s*[.!?…]*\s*$")


@dataclass
class Augmentation:
    """The share of training pairs added again in each form (0: none; their sum at most 1)."""

    upper: float = 0.0  # both sides in capitals
    title: float = 0.0  # both sides with every word capitalised
    typos: float = 0.0  # the source with a typo in one word of three or so; the target as it was
    spans: float = 0.0  # the same span added to both sides, at the start or before the final mark
    short: float = 0.0  # one word of the source alone, with its translation in the target (word_translations)
    seed: int = 1

    @classmethod
    def parse(cls, text: str) -> Augmentation:
        """From `upper=0.05,title=0.05,typos=0.02,spans=0.05` (any of them; none: no augmentation)."""
        shares = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            name, _, value = item.partition("=")
            if name.strip() not in KINDS:
                raise MtkitError(f"--augment {item}: the kinds are {', '.join(KINDS)}")
            try:
                shares[name.strip()] = float(value)
            except ValueError:
                raise MtkitError(f"--augment {item}: give a share, e.g. {name.strip()}=0.05") from None
        augmentation = cls(**shares)
        augmentation.validate()
        return augmentation

    def validate(self) -> None:
        shares = [getattr(self, kind) for kind in KINDS]
        if any(not 0 <= share <= 1 for share in shares) or sum(shares) > 1:
            raise MtkitError(f"--augment {self.spelled()}: each share in [0, 1], and at most 1 in all")

    def spelled(self) -> str:
        return ",".join(f"{kind}={getattr(self, kind):g}" for kind in KINDS if getattr(self, kind))

    @property
    def active(self) -> bool:
        return any(getattr(self, kind) for kind in KINDS)

    def as_dict(self) -> dict:
        return asdict(self)

    def copies(
        self, pairs: Sequence[tuple[str, str]], first: int, lexicon: dict[str, str] | None = None
    ) -> list[tuple[int, str, str, str]]:
        """The augmented copies of these pairs (the first being the split's pair number `first`):
        (index in `pairs`, kind, source, target), at most one copy a pair; `lexicon`: word translations
        (word_translations), which "short" needs (a pair without a word it knows gets no copy)."""
        out = []
        for i, (src, tgt) in enumerate(pairs):
            rng = random.Random(self.seed * 1_000_003 + first + i)
            draw, bound = rng.random(), 0.0
            for kind in KINDS:
                bound += getattr(self, kind)
                if draw < bound:
                    copy = short(src, tgt, rng, lexicon or {}) if kind == "short" else MODIFIERS[kind](src, tgt, rng)
                    if copy:
                        out.append((i, kind, *copy))
                    break
        return out


def upper(src: str, tgt: str, rng: random.Random) -> tuple[str, str]:
    return src.upper(), tgt.upper()


def title(src: str, tgt: str, rng: random.Random) -> tuple[str, str]:
    capitalised = lambda text: _WORD.sub(lambda m: m.group()[0].upper() + m.group()[1:], text)  # noqa: E731
    return capitalised(src), capitalised(tgt)


def typos(src: str, tgt: str, rng: random.Random) -> tuple[str, str]:
    """One typo (a letter swapped with the next, dropped, doubled or replaced by a neighbour in the
    word) in about one word of three of four letters or more, and in one such word at least."""
    words = [m for m in _WORD.finditer(src) if len(m.group()) >= 4]
    if not words:
        return src, tgt
    chosen = [m for m in words if rng.random() < 0.3] or [rng.choice(words)]
    out, at = [], 0
    for match in chosen:
        out += [src[at : match.start()], _typo(match.group(), rng)]
        at = match.end()
    return "".join(out) + src[at:], tgt


def _typo(word: str, rng: random.Random) -> str:
    i = rng.randrange(1, len(word) - 1)  # the first letter stays: people rarely mistype it
    kind = rng.randrange(4)
    if kind == 0:
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if kind == 1:
        return word[:i] + word[i + 1 :]
    if kind == 2:
        return word[:i] + word[i] + word[i:]
    return word[:i] + rng.choice(word) + word[i + 1 :]


def spans(src: str, tgt: str, rng: random.Random) -> tuple[str, str]:
    """The same span on both sides: at their start, or before their final mark."""
    span = _span(rng)
    if rng.random() < 0.5:
        return f"{span} {src}", f"{span} {tgt}"
    return _before_end(src, span), _before_end(tgt, span)


def _before_end(text: str, span: str) -> str:
    end = _END.search(text)
    return f"{text[: end.start()]} {span}{text[end.start() :]}"


def _span(rng: random.Random) -> str:
    """A digit (mtkit.text.spans' stand-ins are digits), a number, time, price, year, link, address or placeholder."""
    kind = rng.randrange(8)
    number = str(rng.randint(1, 9)) if rng.random() < 0.5 else f"{rng.randint(10, 999)}"
    return [
        str(rng.randint(1, 9)),
        f"{number},{rng.randint(0, 999):03d}" if rng.random() < 0.5 else number,
        f"{rng.randint(1, 12)}:{rng.randint(0, 59):02d}",
        rng.choice("$€£") + f"{rng.randint(1, 999)}.{rng.randint(0, 99):02d}",
        str(rng.randint(1950, 2030)),
        f"https://{rng.choice(['example', 'shop', 'news'])}.{rng.choice(['org', 'com', 'de'])}/{rng.randint(1, 999)}",
        f"{rng.choice(['anna', 'info', 'max.b'])}{rng.randint(1, 99)}@example.com",
        rng.choice(["%s", "{name}", "{{count}}", "%(n)d", "%1$d"]),
    ][kind]


def short(src: str, tgt: str, rng: random.Random, lexicon: dict[str, str]) -> tuple[str, str] | None:
    """One word of the source alone and its translation as the target writes it, for a word whose
    translation the lexicon knows and the target holds; None where there is none."""
    found = [(s, t) for s in _WORD.findall(src) for t in _WORD.findall(tgt) if lexicon.get(s.lower()) == t.lower()]
    return rng.choice(found) if found else None


MODIFIERS = {"upper": upper, "title": title, "typos": typos, "spans": spans}


# Word translations read off a parallel corpus.


def words(text: str) -> list[str]:
    """A text's words, lower-cased, as word_translations counts them."""
    return _LEXICON_WORD.findall(text.lower())


def word_translations(
    pairs: Iterable[tuple[str, str]], min_pairs: int = MIN_PAIRS, min_dice: float = 0.0
) -> dict[str, str]:
    """Each source word (lower-cased) seen in at least min_pairs pairs, and its target word of the
    highest Dice coefficient 2 c(s, t) / (c(s) + c(t)), c counting pairs, where that is at least
    min_dice; ties to the more frequent target word."""
    source, target, both = Counter(), Counter(), Counter()
    for src, tgt in pairs:
        src_words, tgt_words = set(words(src)), set(words(tgt))
        source.update(src_words)
        target.update(tgt_words)
        both.update((s, t) for s in src_words for t in tgt_words)
    best: dict[str, tuple[float, int, str]] = {}
    for (s, t), count in both.items():
        if source[s] < min_pairs or count < min_pairs:
            continue
        score = (2 * count / (source[s] + target[t]), target[t], t)
        if s not in best or score > best[s]:
            best[s] = score
    return {s: t for s, (dice, _, t) in best.items() if dice >= min_dice}
