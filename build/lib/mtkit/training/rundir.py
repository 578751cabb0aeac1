"""The run directory: preparing it, the metrics log inside it, and the signal that stops a run.

RUN_DIR holds config.yaml (the resolved configuration), metrics.jsonl (one JSON object per
logged step, for tools), state.pt (mtkit.training.checkpoints), checkpoints/ (mtkit.model.files),
and tensorboard/ when tensorboard is installed.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
from pathlib import Path
from typing import Any

from mtkit.core.errors import MtkitError
from mtkit.core.textio import read_records, write_text_atomic
from mtkit.model.files import CHECKPOINT_DIR

# The run directory's layout; checkpoints/ holds model files and their index (mtkit.model.files).
METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.yaml"
STATE_FILE = "state.pt"
EMA_FILE = "ema.pt"  # the moving average of the weights (train.ema_decay), a model file
RUN_FILES = (CONFIG_FILE, METRICS_FILE, STATE_FILE, CHECKPOINT_DIR, EMA_FILE, "run.json", "tensorboard")


def prepare_run_dir(run_dir: Path, force: bool) -> None:
    """Create RUN_DIR, refusing one that holds a run unless `force` (which clears it)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise MtkitError(f"{run_dir}: exists and is not a directory (a run directory is needed)")
    blocking = next((p for p in run_dir.parents if p.exists() and not p.is_dir()), None)
    if blocking:
        raise MtkitError(f"{run_dir}: {blocking} is not a directory")
    run_dir.mkdir(parents=True, exist_ok=True)
    existing = [name for name in RUN_FILES if (run_dir / name).exists()]
    if existing and not force:
        raise MtkitError(
            f"{run_dir}: already holds a run ({', '.join(existing)}); use --resume to continue it or --force to replace it"
        )
    for name in existing:
        target = run_dir / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()


class MetricsLog:
    """RUN_DIR/metrics.jsonl, one JSON object per line; tools read it, people read the console."""

    def __init__(self, path: Path, resume_step: int | None):
        self.path = path
        if resume_step is not None and path.exists():  # drop what was logged after the resumed checkpoint
            kept = [line for line in read_records(path) if line["step"] <= resume_step]
            write_text_atomic(path, "".join(json.dumps(record) + "\n" for record in kept))  # a kill cannot empty it
        self._file = open(path, "a", encoding="utf-8")
        self._tensorboard = _tensorboard_writer(path.parent / "tensorboard")

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tensorboard:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    self._tensorboard.add_scalar(key, value, record["step"])

    def close(self) -> None:
        self._file.close()
        if self._tensorboard:
            self._tensorboard.close()


class LogWindow:
    """Sums over the updates since the last log line; they become one metrics.jsonl record."""

    def __init__(self) -> None:
        self.tgt = self.src = self.seconds = self.loss = self.nll = 0.0
        self.updates = 0

    def add(self, stats: dict[str, float], seconds: float) -> None:
        self.tgt += stats["tgt_tokens"]
        self.src += stats["src_tokens"]
        self.seconds += seconds
        self.loss += stats["loss"]
        self.nll += stats["nll"]
        self.updates += 1

    def tokens_per_s(self) -> float:
        return self.tgt / max(self.seconds, 1e-9)

    def record(self, stats: dict[str, float], progress: dict[str, Any]) -> dict[str, Any]:
        """The log line: window means and rates, the last update's lr and gradient norm, the run's counters."""
        seconds, updates = max(self.seconds, 1e-9), max(self.updates, 1)
        nll = self.nll / updates
        return {
            "step": progress["step"],
            "epoch": progress["epoch"],
            "loss": self.loss / updates,
            "nll": nll,
            "ppl": math.exp(min(nll, 50.0)),
            "lr": stats["lr"],
            "grad_norm": stats["grad_norm"],
            "tokens_per_s": self.tgt / seconds,
            "src_tokens_per_s": self.src / seconds,
            "elapsed": round(progress["elapsed"], 3),
            "target_tokens": progress["target_tokens"],
            "skipped_updates": progress["nonfinite_updates"],
            "oom_updates": progress["oom_updates"],
        }


def _tensorboard_writer(path: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is an optional extra
        return None
    return SummaryWriter(str(path))


class StopSignal:
    """SIGINT/SIGTERM ask training to stop after the current update, save, and exit cleanly."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. some test runners): no handler
                pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C stops at once
        self.requested = True

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
