"""`mtkit evaluate`: corpus BLEU, chrF and TER with sacrebleu, each with its signature; per direction
and their macro average for the test sets of a multilingual model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from sacrebleu.metrics import BLEU, CHRF, TER

from mtkit.core.errors import MtkitError
from mtkit.core.textio import iter_lines

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


def corpus_scores(
    hypotheses: list[str],
    references: list[list[str]],
    metrics: list[str],
    lowercase: bool = False,
    tokenize: str | None = None,
) -> dict[str, Any]:
    """{"bleu": {"score", "signature"}, ...} for the metrics asked for, against one or more reference sets.

    This is the one place that computes BLEU, chrF and TER: `mtkit evaluate` and validation during
    training both score through it."""
    scorers = {
        "bleu": lambda: BLEU(lowercase=lowercase, tokenize=tokenize),
        "chrf": lambda: CHRF(lowercase=lowercase),
        "ter": lambda: TER(case_sensitive=not lowercase),
    }
    result: dict[str, Any] = {}
    for name in metrics:
        try:
            metric = scorers[name]()
        except Exception:  # sacrebleu rejects unknown tokenizers with assorted errors
            raise MtkitError(
                f"--tokenize {tokenize}: not a sacrebleu BLEU tokenizer (e.g. 13a, intl, char, none)"
            ) from None
        corpus = metric.corpus_score(hypotheses, references)
        result[name] = {"score": corpus.score, "signature": str(metric.get_signature())}
    return result


def report_json(scores: dict[str, Any], sentences: int, seconds: float, translated: bool) -> str:
    """One JSON object: each metric's score (4 decimals) and signature, the count, and the translation speed."""
    rounded = {name: {**value, "score": round(value["score"], 4)} for name, value in scores.items()}
    speed = round(sentences / seconds, 2) if translated and seconds > 0 else None
    return json.dumps({**rounded, "sentences": sentences, "seconds": round(seconds, 3), "sentences_per_s": speed})


def report_table(scores: dict[str, Any], title: str) -> Table:
    """A table of metric, score (2 decimals) and signature, in the order the metrics were asked for."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("score", justify="right")
    table.add_column("signature", overflow="fold")
    for name, value in scores.items():
        table.add_row(name.upper() if name != "chrf" else "chrF", f"{round(value['score'], 4):.2f}", value["signature"])
    return table


def direction_scores(translator, prefixes: list[Path], pairs, names, lowercase: bool, tokenize: str | None) -> dict:
    """{direction: (sentences, scores)} for each prefix and SRC-TGT pair: PREFIX.SRC translated into TGT
    against PREFIX.TGT (named by the pair, and by the prefix where there are several)."""
    results = {}
    for prefix in prefixes:
        for source, target in pairs:
            paths = Path(f"{prefix}.{source}"), Path(f"{prefix}.{target}")
            sources, references = (read_lines_checked(path) for path in paths)
            check_line_counts(dict(zip(paths, (sources, references))))
            translator.set_target(target, source)
            key = f"{source}-{target}" if len(prefixes) == 1 else f"{Path(prefix).name}:{source}-{target}"
            results[key] = (
                len(sources),
                corpus_scores(translator.translate(sources), [references], names, lowercase, tokenize),
            )
    return results


def print_direction_scores(results: dict, as_json: bool) -> None:
    """A table per direction and one of the macro averages, or one JSON object {"directions", "macro"}."""
    names = list(next(iter(results.values()))[1])
    macro = {
        name: {"score": sum(scores[name]["score"] for _, scores in results.values()) / len(results),
               "signature": f"macro average of {len(results)} directions"}
        for name in names
    }  # fmt: skip
    if as_json:  # scores to 4 decimals, as report_json gives them

        def rounded(scores: dict) -> dict:
            return {name: {**value, "score": round(value["score"], 4)} for name, value in scores.items()}

        directions = {key: {"sentences": n, **rounded(scores)} for key, (n, scores) in results.items()}
        print(json.dumps({"directions": directions, "macro": rounded(macro)}))
        return
    out = Console(soft_wrap=False)
    for key, (n, scores) in results.items():
        out.print(report_table(scores, f"{key} ({n} sentences)"))
    out.print(report_table(macro, "macro average"))
