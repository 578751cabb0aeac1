"""`mtkit evaluate`: corpus BLEU, chrF and TER with sacrebleu, each with its signature."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU, CHRF, TER

from mtkit.errors import MtkitError
from mtkit.textio import iter_lines

METRICS = ("bleu", "chrf", "ter")


def read_lines_checked(path: Path) -> list[str]:
    return list(iter_lines(path))


def check_line_counts(named: dict[Path, list[str]]) -> None:
    counts = {path: len(lines) for path, lines in named.items()}
    if len(set(counts.values())) > 1:
        described = ", ".join(f"{path} has {n} lines" for path, n in counts.items())
        raise MtkitError(f"line counts differ: {described}")


def parse_metrics(text: str) -> list[str]:
    metrics = [m.strip().lower() for m in text.split(",") if m.strip()]
    for metric in metrics:
        if metric not in METRICS:
            raise MtkitError(f"--metrics: unknown metric {metric!r} (choose from {', '.join(METRICS)})")
    if not metrics:
        raise MtkitError("--metrics: name at least one of bleu, chrf, ter")
    return metrics


def score(
    hypotheses: list[str],
    references: list[list[str]],
    metrics: list[str],
    lowercase: bool = False,
    tokenize: str | None = None,
) -> dict[str, Any]:
    """{"bleu": {"score", "signature"}, ...} for the metrics asked for, against one or more reference sets."""
    scorers = {
        "bleu": lambda: BLEU(lowercase=lowercase, tokenize=tokenize),
        "chrf": lambda: CHRF(lowercase=lowercase),
        "ter": lambda: TER(case_sensitive=not lowercase),
    }
    result: dict[str, Any] = {}
    for name in metrics:
        try:
            metric = scorers[name]()
        except Exception as err:  # sacrebleu rejects unknown tokenizers with assorted errors
            raise MtkitError(f"{name}: {err}") from None
        corpus = metric.corpus_score(hypotheses, references)
        result[name] = {"score": round(corpus.score, 4), "signature": str(metric.get_signature())}
    return result
