"""Minimum Bayes risk decoding: of several candidate translations of a sentence, the one that agrees most
with what the model would translate, samples of which stand in for the references (Kumar & Byrne,
2004; Freitag et al., 2022).

--mbr-source: `sample` chooses among N epsilon samples (Freitag et al., 2023) against themselves; `beam`
among beam search's N-best against themselves; `both` among the N-best against the N-best and N
samples (on Multi30k val, the best chrF of the three at the same time). The utility is sentence chrF
(fastchrf: sacrebleu's scores, for all pairs at once), sentence BLEU (each text's n-grams counted
once, scored with sacrebleu's own formula), or their mean. A candidate's expected utility is its mean
utility against every pseudo-reference, itself and repeated draws included (a sample drawn twice
counts twice). The chosen translation, and the n-best after it, are the distinct candidates by
expected utility, highest first, equal ones by the text: the same choice whatever the order.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sacrebleu.metrics.bleu import BLEU
from sacrebleu.metrics.helpers import extract_all_word_ngrams

from mtkit.core.errors import MtkitError
from mtkit.decoding.search import translate_ids
from mtkit.decoding.search_rules import Hypothesis, OnDone, SearchConfig
from mtkit.translation.translate import Translator

SOURCES = ("beam", "sample", "both")
UTILITIES = ("chrf", "bleu", "chrf+bleu")


@dataclass(frozen=True)
class MbrConfig:
    candidates: int  # N: of beam search's N-best, of N samples, or of each
    source: str = "both"
    epsilon: float = 0.02  # the samples' epsilon (SearchConfig.epsilon)
    utility: str = "chrf"

    def validate(self) -> None:
        if self.candidates < 1:
            raise MtkitError(f"--mbr {self.candidates}: the number of candidates must be at least 1")
        if self.source not in SOURCES:
            raise MtkitError(f"--mbr-source {self.source}: must be one of {', '.join(SOURCES)}")
        if self.utility not in UTILITIES:
            raise MtkitError(f"--mbr-utility {self.utility}: must be one of {', '.join(UTILITIES)}")
        if not 0 <= self.epsilon < 1:
            raise MtkitError(f"--epsilon {self.epsilon:g}: must be at least 0 and below 1")
        if "chrf" in self.utility:
            require_fastchrf()


def require_fastchrf():
    try:
        import fastchrf
    except ImportError:
        raise MtkitError("--mbr with chrF needs fastchrf: pip install 'mtkit[mbr]'") from None
    return fastchrf


def candidate_searches(cfg: SearchConfig, mbr: MbrConfig) -> list[SearchConfig]:
    """The searches whose translations are the candidates: beam search keeping its N best, and N samples."""
    n = mbr.candidates
    beam = dataclasses.replace(cfg, beam=n, nbest=n, sample=False, samples=1)
    sample = dataclasses.replace(cfg, beam=1, nbest=1, sample=True, samples=n, epsilon=mbr.epsilon)
    return {"beam": [beam], "sample": [sample], "both": [beam, sample]}[mbr.source]


def pairwise_utilities(
    hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]], utility: str
) -> list[np.ndarray]:
    """For each sentence, the (H, R) utilities of each hypothesis against each pseudo-reference."""
    if utility == "chrf+bleu":
        return [(c + b) / 2 for c, b in zip(*(pairwise_utilities(hypotheses, references, u) for u in UTILITIES[:2]))]
    if utility == "chrf":
        matrices = require_fastchrf().pairwise_chrf(hypotheses, references)
        return [
            np.asarray(m, dtype=np.float64).reshape(len(h), len(r)) for h, r, m in zip(hypotheses, references, matrices)
        ]
    return [pairwise_bleu(h, r) for h, r in zip(hypotheses, references)]


def pairwise_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """Sentence BLEU (sacrebleu's: 13a, exponential smoothing, effective order) of every pair, each text's
    n-grams counted once."""
    bleu = BLEU(effective_order=True)
    hyp_grams, ref_grams = (
        [extract_all_word_ngrams(bleu.tokenizer(text.rstrip()), 1, bleu.max_ngram_order) for text in texts]
        for texts in (hypotheses, references)
    )
    out = np.zeros((len(hypotheses), len(references)))
    for i, (hyp, hyp_len) in enumerate(hyp_grams):
        for j, (ref, ref_len) in enumerate(ref_grams):
            out[i, j] = bleu_of(hyp, hyp_len, ref, ref_len, bleu.max_ngram_order)
    return out


def bleu_of(hyp: Counter, hyp_len: int, ref: Counter, ref_len: int, orders: int) -> float:
    correct, total = [0] * orders, [0] * orders
    for ngram, count in hyp.items():
        total[len(ngram) - 1] += count
        if ngram in ref:
            correct[len(ngram) - 1] += min(count, ref[ngram])
    return BLEU.compute_bleu(correct, total, hyp_len, ref_len, smooth_method="exp", effective_order=True).score


def mbr_ranking(texts: Sequence[str], utilities: np.ndarray) -> list[tuple[int, float]]:
    """(index, expected utility) of each distinct hypothesis text, the best first, equal utilities ordered
    by the text; utilities: (hypotheses, pseudo-references)."""
    expected = utilities.mean(axis=1)
    first = {}
    for i, text in enumerate(texts):
        first.setdefault(text, i)
    return sorted(((i, float(expected[i])) for i in first.values()), key=lambda pair: (-pair[1], texts[pair[0]]))


class MbrTranslator(Translator):
    """A Translator whose search is minimum Bayes risk decoding over its candidate searches' translations:
    each sentence's n-best are its distinct candidates by expected utility (Hypothesis.utility)."""

    takes_constraints = False  # the samples would not hold the terms

    def __init__(self, model_files, cfg: SearchConfig, mbr: MbrConfig, *args, **kwargs):
        mbr.validate()
        super().__init__(model_files, cfg, *args, **kwargs)
        self.mbr = mbr

    def _search(
        self, sentences: list[list[int]], prefixes: list[list[int]] | None = None, on_done: OnDone | None = None
    ) -> list[list[Hypothesis]]:
        searches = [
            translate_ids(
                self.searcher, sentences, cfg, self.device, self.precision, self.batch_size, self.max_tokens, prefixes
            )  # fmt: skip
            for cfg in candidate_searches(self.cfg, self.mbr)
        ]
        decoded = [[self.tgt_tokenizer.decode_batch([h.tokens for h in hyps]) for hyps in found] for found in searches]
        hypotheses, texts = searches[0], decoded[0]  # the beam's N-best with `both`: the samples are references
        references = [[text for found in decoded for text in found[i]] for i in range(len(sentences))]
        ranked = []
        for hyps, group, utilities in zip(hypotheses, texts, pairwise_utilities(texts, references, self.mbr.utility)):
            best = mbr_ranking(group, utilities)[: self.cfg.nbest]
            best += best[-1:] * (self.cfg.nbest - len(best))  # n lines a sentence, where fewer texts differ
            ranked.append([dataclasses.replace(hyps[i], utility=utility) for i, utility in best])
        return ranked

    def open_stream(self, deliver):
        return None  # every candidate is needed before the choice: whole batches only
