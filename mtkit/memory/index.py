"""Which units hold each word: the candidates of a fuzzy match, found in memory before exact rescoring.

A unit that scores t% or more against a query of n words needs at most n(100 - t)/t edits (a quarter
of the longer for 75%, itself at most n plus those edits), and every distinct word of the query it
lacks costs at least one: so it holds all but that many of the query's distinct words. The index
keeps, per word, the units that hold it (numpy arrays of their ids), counts for every unit how many
of the query's words it holds and how rare they are, drops the units below that bound, and proposes
the ones with the rarest words shared first."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from mtkit.memory.matching import words


def terms_of(key: str) -> set[str]:
    """A sentence's distinct words as the index holds them: lower-cased runs of letters and digits."""
    return {word.lower() for word in words(key) if word.isalnum()}


class WordIndex:
    def __init__(self, rows: Iterable[tuple[int, str]]):
        """rows: (id, key) of every unit (variant) the index covers."""
        postings: dict[str, list[int]] = defaultdict(list)
        ids, lengths = [], []
        for row_id, key in rows:
            for term in terms_of(key):
                postings[term].append(len(ids))  # units by their place in `ids`: a dense range to count over
            ids.append(row_id)
            lengths.append(len(words(key)))
        self.ids, self.lengths = np.array(ids, dtype=np.int64), np.array(lengths, dtype=np.float64)
        self.postings = {term: np.array(places, dtype=np.int32) for term, places in postings.items()}

    def candidates(self, key: str, threshold: int, most: int) -> list[int]:
        """The ids of at most `most` units that may score `threshold` percent or more against key."""
        terms = terms_of(key)
        known = [term for term in terms if term in self.postings]
        allowed = len(words(key)) * (100 - threshold) // threshold  # edits a match may need, at most
        needed = max(1, len(terms) - allowed)
        if len(known) < needed:
            return []
        # One count per unit holds both: SHARED per word held, plus the word's rarity (always below it).
        places = np.concatenate([self.postings[term] for term in known])
        gains = np.concatenate([np.full(len(self.postings[term]), SHARED + np.log1p(len(self.ids) / len(self.postings[term])))
                                for term in known])  # fmt: skip
        totals = np.bincount(places, weights=gains, minlength=len(self.ids))
        eligible = np.flatnonzero(totals >= needed * SHARED)
        # Ranked by the words shared, the rarer the better, and then by the length nearest the query's
        # (each word of difference is an edit).
        rank = totals[eligible] - np.abs(self.lengths[eligible] - len(words(key)))
        if len(eligible) > most:
            chosen = np.argpartition(-rank, most)[:most]
            eligible, rank = eligible[chosen], rank[chosen]
        return self.ids[eligible[np.argsort(-rank, kind="stable")]].tolist()


SHARED = 1000.0  # far above any word's rarity, log(1 + units / units holding it)
