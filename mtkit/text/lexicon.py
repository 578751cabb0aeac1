"""Word translations read off a parallel corpus: for each source word, the target word that occurs
in the same pairs most often relative to how often both occur (the Dice coefficient, as the
classic co-occurrence aligners and a first pass of fast_align's kind use it). Enough to tell that
"dog" is "Hund" and "red" is "rot": what `preprocess --augment short=...` teaches a model to give for
a word typed alone (mtkit.text.augment), and what bench/real_inputs.py checks it against.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
MIN_PAIRS = 5  # a word seen in fewer pairs has no translation here: too few to tell


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


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
