"""A confidence in [0, 1] for each translation, to tell which sentences a person should check: a signal of
the model's own uncertainty (unsupervised, as in Fomicheva et al., 2020), mapped by a calibration fitted
on a validation set (`mtkit calibrate`) to the sentence chrF / 100 that translations of that signal
reached there (isotonic regression: the higher the signal, never the lower the confidence).

The signals, each higher where the model is surer:
  logprob    the translation's mean log-probability per token, </s> included (the search's own; free)
  entropy    minus the mean entropy of the model's next-token distributions along it (one forced pass)
  agreement  its mean sentence chrF against 8 epsilon samples of the model (epsilon 0.02)
  dropout    its mean log-probability per token with the model's dropout on, over 5 seeded passes
and sums of them, A+B: each standardised by its mean and deviation on the validation set.
Without a calibration the confidence is exp(logprob), the geometric mean of its tokens' probabilities.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from sacrebleu.metrics import CHRF

from mtkit.core.errors import MtkitError
from mtkit.core.textio import write_text_atomic
from mtkit.decoding.search import translate_ids
from mtkit.decoding.search_rules import MAX_SOURCE_TOKENS
from mtkit.translation.forced_decoding import token_statistics
from mtkit.translation.mbr import pairwise_utilities
from mtkit.translation.translate import NbestList, Translator

SIGNALS = ("logprob", "entropy", "agreement", "dropout")
DEFAULT_SIGNALS = "logprob,entropy,agreement,dropout,logprob+agreement,logprob+entropy,logprob+dropout"
DROPOUT_PASSES = 5
AGREEMENT_SAMPLES = 8
CALIBRATION_FORMAT = "mtkit-confidence-1"


def parse_signal(signal: str) -> list[str]:
    """'logprob+agreement' -> its signals, each one of SIGNALS."""
    parts = signal.split("+")
    if not all(part in SIGNALS for part in parts) or len(set(parts)) < len(parts):
        raise MtkitError(f"signal {signal!r}: one of {', '.join(SIGNALS)}, or a sum of them (logprob+agreement)")
    return parts


def signal_values(
    translator: Translator,
    sources: Sequence[str],
    nbest_lists: Sequence[NbestList],
    signal: str,
    encoded: Sequence[Sequence[int]] | None = None,
) -> np.ndarray:
    """Each translation's signal (NaN for a blank line); the translation is each n-best list's first.
    `encoded`: the sources' ids as the search took them (a server's: tagged), where the caller has them."""
    wanted = [i for i, nbest in enumerate(nbest_lists) if nbest]
    values = np.full(len(nbest_lists), np.nan)
    best = [nbest_lists[i][0][0] for i in wanted]
    if signal == "logprob":
        values[wanted] = [h.log_prob / (len(h.tokens) + h.ended) for h in best]
        return values
    if encoded is None:
        ids = translator.tagged(translator.src_tokenizer.encode_batch([sources[i].strip() for i in wanted]))
    else:
        ids = [list(encoded[i]) for i in wanted]
    if signal == "agreement":
        samples = drawn_samples(translator, [row[:MAX_SOURCE_TOKENS] for row in ids])
        translations = [[nbest_lists[i][0][1]] for i in wanted]
        values[wanted] = [float(u.mean()) for u in pairwise_utilities(translations, samples, "chrf")]
        return values
    pairs = [(row, h.tokens) for row, h in zip(ids, best)]
    passes = [None] if signal == "entropy" else range(DROPOUT_PASSES)
    found = [token_statistics(translator.model, pairs, translator.device, translator.precision,
                              translator.max_tokens, translator.target_start, seed) for seed in passes]  # fmt: skip
    if signal == "entropy":
        values[wanted] = [-s.entropy / s.length for s in found[0]]
    else:
        values[wanted] = np.mean([[s.log_prob / s.length for s in run] for run in found], axis=0)
    return values


def drawn_samples(translator: Translator, ids: Sequence[Sequence[int]]) -> list[list[str]]:
    """AGREEMENT_SAMPLES epsilon samples of each source's translation (whole, from the translator's seed)."""
    cfg = dataclasses.replace(translator.cfg, beam=1, nbest=1, sample=True, samples=AGREEMENT_SAMPLES, epsilon=0.02)
    starts = [translator.target_start] * len(ids) if translator.target_start else None
    found = translate_ids(translator.searcher, ids, cfg, translator.device, translator.precision,
                          translator.batch_size, translator.max_tokens, starts)  # fmt: skip
    given = len(translator.target_start)
    return [translator.tgt_tokenizer.decode_batch([h.tokens[given:] for h in hyps]) for hyps in found]


@dataclass
class Calibration:
    """A signal, the means and deviations of the signals a sum standardises, and the monotone map
    (points of a piecewise-linear function) from it to a confidence; no points: exp(logprob)."""

    signal: str = "logprob"
    points: list[tuple[float, float]] = field(default_factory=list)
    scales: dict[str, tuple[float, float]] = field(default_factory=dict)
    fitted_on: dict = field(default_factory=dict)  # the validation set, its size and each signal's Spearman

    def values(
        self,
        translator: Translator,
        sources: Sequence[str],
        nbest_lists: Sequence[NbestList],
        encoded: Sequence[Sequence[int]] | None = None,
    ) -> np.ndarray:
        """The signal of each translation (NaN for a blank line); `encoded` as signal_values takes it."""
        parts = parse_signal(self.signal)
        values = {p: signal_values(translator, sources, nbest_lists, p, encoded) for p in parts}
        return combined(values, parts, self.scales)

    def __call__(self, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        if not self.points:
            confidence = np.exp(np.minimum(values, 0.0))
        else:
            xs, ys = zip(*self.points)
            confidence = np.interp(values, xs, ys)
        return np.where(np.isnan(values), 1.0, np.clip(confidence, 0.0, 1.0))  # a blank line: nothing to check

    def save(self, path: Path) -> None:
        write_text_atomic(path, json.dumps({"format": CALIBRATION_FORMAT, **asdict(self)}, indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> Calibration:
        try:
            record = json.loads(Path(path).read_text(encoding="utf-8"))
            if record.pop("format") != CALIBRATION_FORMAT:
                raise ValueError
            parse_signal(record["signal"])
            scales = {name: tuple(scale) for name, scale in record["scales"].items()}
            return cls(record["signal"], [tuple(p) for p in record["points"]], scales, record.get("fitted_on", {}))
        except FileNotFoundError:
            raise MtkitError(f"{path}: no such calibration file (mtkit calibrate writes one)") from None
        except (ValueError, KeyError, TypeError, AttributeError, MtkitError):
            raise MtkitError(f"{path}: not a calibration file of mtkit calibrate") from None


def calibration_path(model: Path) -> Path:
    """Where `mtkit calibrate` puts a model's calibration by default, and translate looks for it."""
    return Path(f"{model}.confidence.json")


def isotonic_points(x: np.ndarray, y: np.ndarray) -> list[tuple[float, float]]:
    """The least-squares non-decreasing fit of y on x (pool adjacent violators), as the points of a
    piecewise-linear function: each pooled block's first and last x at the block's mean y."""
    order = np.argsort(x, kind="stable")
    blocks: list[list[float]] = []  # [sum of y, count, first x, last x]
    for xi, yi in zip(x[order].tolist(), y[order].tolist()):
        blocks.append([yi, 1, xi, xi])
        while len(blocks) > 1 and (
            blocks[-2][0] / blocks[-2][1] >= blocks[-1][0] / blocks[-1][1] or blocks[-2][3] == blocks[-1][2]
        ):
            total, count, _, last = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
            blocks[-1][3] = last
    points = []
    for total, count, first, last in blocks:
        points += [(first, total / count)] + ([(last, total / count)] if last > first else [])
    return points


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (ties get their mean rank)."""
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranked = np.empty(len(values))
    ranked[order] = np.arange(len(values))
    _, groups = np.unique(values, return_inverse=True)
    return (np.bincount(groups, ranked) / np.bincount(groups))[groups]


def sentence_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    chrf = CHRF()
    return np.array([chrf.sentence_score(h, [r]).score for h, r in zip(hypotheses, references)])


@dataclass
class SignalReport:
    """How well a signal tells good translations from bad ones on a set: its Spearman correlation with
    sentence chrF, and the mean sentence chrF of the lowest-ranked 10% and of the rest."""

    signal: str
    spearman: float
    lowest_chrf: float
    rest_chrf: float


def signal_report(signal: str, values: np.ndarray, chrf: np.ndarray) -> SignalReport:
    kept = ~np.isnan(values)
    values, chrf = values[kept], chrf[kept]
    lowest = np.argsort(values, kind="stable")[: max(1, len(values) // 10)]
    rest = np.setdiff1d(np.arange(len(values)), lowest)
    return SignalReport(signal, spearman(values, chrf), float(chrf[lowest].mean()), float(chrf[rest].mean()))


def combined(values: dict[str, np.ndarray], parts: Sequence[str], scales: dict[str, tuple[float, float]]) -> np.ndarray:
    """One signal's values, or the sum of several, each standardised: (value - mean) / deviation."""
    if len(parts) == 1:
        return values[parts[0]]
    return sum((values[p] - scales[p][0]) / scales[p][1] for p in parts)


def fit_calibration(
    translator: Translator, sources: Sequence[str], references: Sequence[str], signals: Sequence[str]
) -> tuple[Calibration, list[SignalReport]]:
    """Translate a validation set, report each signal, and fit the calibration of the one whose Spearman
    correlation with sentence chrF is highest (the first of equals)."""
    nbest_lists = translator.translate_hypotheses(sources)
    chrf = sentence_chrf([nbest[0][1] if nbest else "" for nbest in nbest_lists], references)
    needed = dict.fromkeys(part for signal in signals for part in parse_signal(signal))
    base = {part: signal_values(translator, sources, nbest_lists, part) for part in needed}
    scales = {part: (float(np.nanmean(v)), float(np.nanstd(v)) or 1.0) for part, v in base.items()}
    values = {signal: combined(base, parse_signal(signal), scales) for signal in signals}
    reports = [signal_report(signal, values[signal], chrf) for signal in signals]
    best = max(reports, key=lambda report: report.spearman)
    kept = ~np.isnan(values[best.signal])
    points = isotonic_points(values[best.signal][kept], chrf[kept] / 100)
    parts = parse_signal(best.signal)
    fitted_on = {"sentences": int(kept.sum()), "spearman": {r.signal: round(r.spearman, 4) for r in reports}}
    return Calibration(best.signal, points, {p: scales[p] for p in parts} if len(parts) > 1 else {}, fitted_on), reports


def calibration_for(given: Path | None, model: Path) -> Calibration:
    """The calibration a file names, else the one beside the model file (calibration_path), else none:
    exp(logprob)."""
    if given is not None:
        return Calibration.load(given)
    beside = calibration_path(model)
    return Calibration.load(beside) if beside.is_file() else Calibration()


def confidences(
    calibration: Calibration,
    translator: Translator,
    lines: Sequence[str],
    nbest_lists: Sequence[NbestList],
    encoded: Sequence[Sequence[int]] | None = None,
) -> list[float]:
    """Each line's confidence in [0, 1] (1 for a blank line)."""
    return calibration(calibration.values(translator, lines, nbest_lists, encoded)).tolist()
