"""What `preprocess` drops from a training split, and why: empty sides, lengths and their ratio
(in subwords), and the noise filters for crawled corpora (mtkit.text.langid): a side in another language
or script, a target that copies its source, numbers that differ.

Duplicates: exact deduplication of parallel pairs at scale (`preprocess --dedup`): a 64-bit digest of
each pair, computed for a chunk of pairs at once, and the set of the digests kept so far, 8 bytes
each. Two distinct pairs share a digest with probability about 2^-64 (at 45M pairs, about 1 in
20,000 that any two of them do; a shared digest drops the later pair as a duplicate)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from mtkit.core.errors import MtkitError
from mtkit.text.langid import check_known, numbers, probability, require_langid, script_share

DROP_REASONS = ("empty", "too_long", "ratio", "duplicate", "copy", "numbers", "script", "language")


@dataclass
class CleaningRules:
    """What `preprocess` drops from the training split (valid and test keep every line)."""

    strip: bool = True
    drop_empty: bool = True
    max_len: int = 250  # subword tokens on either side; 0 = no limit
    max_ratio: float = 3.0  # longer side / shorter side in subword tokens; 0 = no limit
    dedup: bool = False
    # Noise filters (mtkit.text.langid), each off by default:
    langid: bool = False  # drop a pair where a side's language has probability below langid_min_prob
    langid_min_prob: float = 0.05
    min_script_share: float = 0.0  # drop a pair where a side has fewer of its letters in its language's scripts
    drop_copies: bool = False  # drop a pair whose target is its source (case and spaces aside)
    check_numbers: bool = False  # drop a pair whose sides both write numbers, and different ones

    def validate(self, src_lang: str, tgt_lang: str) -> None:
        if self.max_len < 0:
            raise MtkitError(f"--max-len {self.max_len}: must not be negative (0: no limit)")
        if self.max_ratio < 0:
            raise MtkitError(f"--max-ratio {self.max_ratio:g}: must not be negative (0: off)")
        if not 0 <= self.min_script_share <= 1:
            raise MtkitError(f"--min-script-share {self.min_script_share:g}: must be in [0, 1] (0: off)")
        if not 0 < self.langid_min_prob < 1:
            raise MtkitError(f"--langid-min-prob {self.langid_min_prob:g}: must be in (0, 1)")
        if self.langid:
            require_langid("--langid")
            for lang in (src_lang, tgt_lang):
                check_known(lang, f"--langid with language {lang}")


def drop_reason(src: list[int], tgt: list[int], rules: CleaningRules) -> str | None:
    if not src or not tgt:
        return "empty" if rules.drop_empty else None
    if rules.max_len and max(len(src), len(tgt)) > rules.max_len:
        return "too_long"
    if rules.max_ratio and max(len(src), len(tgt)) / min(len(src), len(tgt)) > rules.max_ratio:
        return "ratio"
    return None


def _numbers_differ(src: str, tgt: str) -> bool:
    """Both sides write numbers (in digits), and not the same ones: "3 dogs" against "Drei Hunde" is
    a translation, "3 dogs" against "4 Hunde" is not."""
    src_numbers, tgt_numbers = numbers(src), numbers(tgt)
    return bool(src_numbers and tgt_numbers and src_numbers != tgt_numbers)


def noise_reason(texts: tuple[str, str], langs: tuple[str, str], rules: CleaningRules) -> str | None:
    """Why the noise filters drop a pair of texts in languages `langs`, or None (cheapest test first)."""
    if rules.drop_copies and "".join(texts[0].split()).casefold() == "".join(texts[1].split()).casefold():
        return "copy"
    if rules.check_numbers and _numbers_differ(*texts):
        return "numbers"
    if rules.min_script_share and min(map(script_share, texts, langs)) < rules.min_script_share:
        return "script"
    if rules.langid and min(map(probability, texts, langs)) < rules.langid_min_prob:
        return "language"
    return None


# Duplicates

POSITION_BITS = 21  # a token's position in its sentence, below its id in the mixed value
TARGET = np.uint64(1 << 63)  # marks the target side's tokens


def pair_digests(sources: list[list[int]], targets: list[list[int]]) -> np.ndarray:
    """(pairs,) uint64: the wrapping sum of splitmix64(side, id, position) over every token of a
    pair, so that a pair's digest depends on every token, its place and its side."""
    total = np.zeros(len(sources), dtype=np.uint64)
    for side, sentences in ((np.uint64(0), sources), (TARGET, targets)):
        lengths = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
        ends = np.cumsum(lengths)
        ids = np.fromiter(
            itertools.chain.from_iterable(sentences), dtype=np.uint64, count=int(ends[-1]) if len(ends) else 0
        )
        positions = np.arange(len(ids), dtype=np.int64) - np.repeat(ends - lengths, lengths)
        mixed = _splitmix64(side | (ids << np.uint64(POSITION_BITS)) | positions.astype(np.uint64))
        sums = np.concatenate([[np.uint64(0)], np.cumsum(mixed, dtype=np.uint64)])
        total += sums[ends] - sums[ends - lengths]  # wraps around: a sum modulo 2^64
    return total


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of 64-bit values that looks random (Steele et al., 2014)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class DigestSet:
    """The 64-bit digests of the pairs kept so far, 8 bytes each, in sorted runs that merge like a
    binary counter (a run is merged into the one before it once that is at most twice its size),
    up to MAX_RUN digests a run, so a lookup searches few runs and a merge never copies more than
    MAX_RUN. A Python set of the same digests takes ten times the memory: gigabytes at tens of
    millions of pairs. Measured at 45M pairs in docs/RESULTS.md ("The data path at scale")."""

    MAX_RUN = 1 << 24  # 128 MiB of digests

    def __init__(self, max_run: int = MAX_RUN) -> None:
        self.runs: list[np.ndarray] = []
        self.max_run = max_run

    def add_new(self, digests: np.ndarray | list[int]) -> np.ndarray:
        """Which of `digests` (in order) were seen neither before nor earlier in the list; those are added."""
        values = np.asarray(digests, dtype=np.uint64)
        order = np.argsort(values, kind="stable")  # sorted lookups walk each run in order
        ordered = values[order]
        fresh = np.ones(len(values), dtype=bool)
        fresh[1:] = ordered[1:] != ordered[:-1]  # the first of equal digests (a stable sort keeps their order)
        for run in self.runs:
            at = np.minimum(np.searchsorted(run, ordered), len(run) - 1)
            fresh &= run[at] != ordered
        if fresh.any():
            self.runs.append(ordered[fresh])
        while len(self.runs) > 1 and self._mergeable(*self.runs[-2:]):
            merged = np.concatenate(self.runs[-2:])
            merged.sort(kind="stable")  # timsort: two sorted runs merge in linear time
            self.runs[-2:] = [merged]
        new = np.empty(len(values), dtype=bool)
        new[order] = fresh
        return new

    def _mergeable(self, before: np.ndarray, last: np.ndarray) -> bool:
        return len(before) <= 2 * len(last) and len(before) + len(last) <= self.max_run
