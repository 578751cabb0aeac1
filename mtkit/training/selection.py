"""Choosing on a validation set what to translate with (`mtkit choose`): how each run's checkpoints are
averaged, how many of the runs, best first, make the ensemble, and the length penalty.

Every choice is the BLEU of real decoding on the validation set (beam search, as the test set will be
decoded), so that a test set is decoded once, at the end. The stages run in that order, each at the
choices of the stages before it: each run's averagings at the ranking length penalty; ensembles of the
best 1, 2, ... runs at it too; then the length penalties with the chosen ensemble. Where two candidates
score the same, the first given wins (the smaller ensemble, the averaging and length penalty named first).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from mtkit.core import console
from mtkit.core.errors import MtkitError
from mtkit.decoding.ensemble import check_compatible
from mtkit.decoding.search_rules import SearchConfig
from mtkit.model.files import CHECKPOINT_DIR, ModelFile, best_entries, last_entries, read_index
from mtkit.training.average import average_checkpoints
from mtkit.translation.evaluate import check_line_counts, corpus_scores, read_lines_checked
from mtkit.translation.translate import Translator

AVERAGING_WAYS = ("last", "best")


@dataclass(frozen=True)
class Averaging:
    """The last or best `count` checkpoints of a run (best: by the run's validation metric)."""

    by: str
    count: int

    def __str__(self) -> str:
        return f"{self.by}:{self.count}"


@dataclass(frozen=True)
class Trial:
    """One decoding of the validation set: the stage, what was tried, at which length penalty, its BLEU."""

    stage: str  # "average", "ensemble" or "lenpen"
    tried: str
    lenpen: float
    bleu: float


@dataclass
class Member:
    """A run of the ensemble, averaged the way that scored best on its own."""

    run: Path
    averaging: Averaging
    model: ModelFile
    bleu: float


@dataclass
class Choice:
    members: list[Member]  # the ensemble, best run first
    lenpen: float
    bleu: float
    trials: list[Trial]


def parse_averagings(text: str) -> list[Averaging]:
    """'last:5,best:15' -> [last 5, best 15]."""
    averagings = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        by, _, count = item.partition(":")
        if by not in AVERAGING_WAYS or not count.isdigit() or int(count) < 1:
            raise MtkitError(f"--average {text}: each item is last:N or best:N with N >= 1, not {item!r}")
        averagings.append(Averaging(by, int(count)))
    if not averagings:
        raise MtkitError("--average: name at least one way, e.g. last:5,best:15")
    return averagings


def parse_numbers(text: str, option: str, whole: bool = False) -> list[float]:
    """'0.6,1.0' -> [0.6, 1.0]; with whole, positive whole numbers only."""
    try:
        values = [(int if whole else float)(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise MtkitError(f"{option} {text}: give comma-separated {'whole ' if whole else ''}numbers") from None
    if not values or (whole and min(values) < 1):
        raise MtkitError(f"{option} {text}: give at least one{' whole number from 1' if whole else ' number'}")
    return values


def averaging_candidates(run: Path, averagings: list[Averaging]) -> list[tuple[Averaging, list[Path]]]:
    """Each averaging's checkpoints in the run. A run that keeps fewer than asked averages what it keeps
    (the count says how many); an averaging of the same checkpoints as one before it is left out."""
    entries = read_index(run)
    if not entries:
        raise MtkitError(f"{run}: no checkpoints (a run directory of mtkit train)")
    candidates, seen = [], set()
    for averaging in averagings:
        chosen = (last_entries if averaging.by == "last" else best_entries)(entries, averaging.count)
        files = tuple(sorted(entry["file"] for entry in chosen))
        if chosen and files not in seen:
            seen.add(files)
            paths = [Path(run) / CHECKPOINT_DIR / entry["file"] for entry in chosen]
            candidates.append((Averaging(averaging.by, len(chosen)), paths))
    if not candidates:
        raise MtkitError(f"{run}: no validated checkpoints to average the best of (train.valid_every)")
    return candidates


class ValidationSet:
    """Sources and references, and the search that decodes them: BLEU of one model or an ensemble."""

    def __init__(self, src: Path, ref: Path, search: SearchConfig, device: str, precision: str, batch_size: int,
                 max_tokens: int):  # fmt: skip
        self.sources, self.references = read_lines_checked(src), read_lines_checked(ref)
        check_line_counts({src: self.sources, ref: self.references})
        if not self.sources:
            raise MtkitError(f"{src}: no lines to choose by (the file is empty)")
        self.search, self.device, self.precision = search, device, precision
        self.batch_size, self.max_tokens = batch_size, max_tokens

    def bleu(self, models: list[ModelFile], lenpen: float) -> float:
        cfg = dataclasses.replace(self.search, lenpen=lenpen)
        translator = Translator(models, cfg, self.device, self.precision, self.batch_size, self.max_tokens)
        translator.set_target(None)
        hypotheses = translator.translate(self.sources)
        return corpus_scores(hypotheses, [self.references], ["bleu"])["bleu"]["score"]


def choose(
    runs: list[Path],
    averagings: list[Averaging],
    ensemble_sizes: list[int],
    lenpens: list[float],
    rank_lenpen: float,
    val: ValidationSet,
) -> Choice:
    """Average each run the way that scores best alone, rank the runs by it, ensemble the best N (N of
    ensemble_sizes; those larger than the runs are left out) and choose the length penalty."""
    candidates = {run: averaging_candidates(run, averagings) for run in runs}
    sizes = sorted({size for size in ensemble_sizes if size <= len(runs)}) or [len(runs)]
    trials: list[Trial] = []
    total = sum(len(c) for c in candidates.values()) + len(sizes) + len(lenpens)
    with console.progress("choosing on val", total=total, unit="decodings") as bar:

        def tried(stage: str, what: str, lenpen: float, bleu: float) -> float:
            trials.append(Trial(stage, what, lenpen, bleu))
            bar.advance(1, f"{stage} {what}: {bleu:.2f}")
            return bleu

        members = []
        for run, ways in candidates.items():
            scored = []
            for averaging, paths in ways:
                model = average_checkpoints(paths)
                scored.append((tried("average", f"{run} {averaging}", rank_lenpen, val.bleu([model], rank_lenpen)), averaging, model))  # fmt: skip
            bleu, averaging, model = max(scored, key=lambda item: item[0])  # max keeps the first of equals
            members.append(Member(run, averaging, model, bleu))
        members.sort(key=lambda member: -member.bleu)  # stable: runs that score the same keep their order
        if max(sizes) > 1:
            check_compatible([m.model for m in members], [str(m.run) for m in members])
        by_size = {}
        for size in sizes:
            top = members[:size]
            bleu = top[0].bleu if size == 1 else val.bleu([m.model for m in top], rank_lenpen)
            by_size[size] = tried("ensemble", f"best {size}", rank_lenpen, bleu)
        chosen = members[: max(sizes, key=lambda size: (by_size[size], -size))]
        models = [member.model for member in chosen]
        by_lenpen = {}
        for lenpen in lenpens:
            bleu = by_size[len(chosen)] if lenpen == rank_lenpen else val.bleu(models, lenpen)
            by_lenpen[lenpen] = tried("lenpen", f"{lenpen:g}", lenpen, bleu)
    lenpen = max(lenpens, key=lambda value: by_lenpen[value])
    return Choice(chosen, lenpen, by_lenpen[lenpen], trials)


def choice_record(choice: Choice) -> dict:
    """choice.json: the model files (in the output directory, best run first), what each averages, the
    length penalty, its val BLEU, and every trial."""
    return {
        "models": [f"model{i}.pt" for i in range(1, len(choice.members) + 1)],
        "runs": [str(member.run) for member in choice.members],
        "averaging": [str(member.averaging) for member in choice.members],
        "lenpen": choice.lenpen,
        "val_bleu": round(choice.bleu, 4),
        "trials": [dataclasses.asdict(trial) | {"bleu": round(trial.bleu, 4)} for trial in choice.trials],
    }


def choice_table(choice: Choice, title: str) -> Table:
    """Every trial, the chosen ones marked."""
    chosen = {("ensemble", f"best {len(choice.members)}"), ("lenpen", f"{choice.lenpen:g}")}
    chosen |= {("average", f"{member.run} {member.averaging}") for member in choice.members}
    table = Table(title=title)
    for column in ("stage", "tried", "lenpen", "val BLEU", "chosen"):
        table.add_column(column, justify="right" if column in ("lenpen", "val BLEU") else "left")
    for trial in choice.trials:
        mark = "*" if (trial.stage, trial.tried) in chosen else ""
        table.add_row(trial.stage, trial.tried, f"{trial.lenpen:g}", f"{trial.bleu:.2f}", mark)
    return table
