"""The resumable training state, and which checkpoints a run keeps.

The training state (`RUN_DIR/state.pt`) is kept apart from model files (mtkit.model.files), as
Sockeye does, and adds what exact resumption needs: optimizer, scaler, step, data position and RNG
states. It is saved atomically and loaded with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mtkit import __version__
from mtkit.core.config import TrainConfig
from mtkit.model.files import (
    CHECKPOINT_DIR,
    best_entries,
    last_entries,
    load_payload,
    metric_is_better,
    read_index,
    save_payload,
    write_index,
)
from mtkit.training.rundir import STATE_FILE

STATE_FORMAT = "mtkit-train-state"


@dataclass
class Progress:
    """Where training stands; saved in the training state."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of this epoch already taken, by all ranks together
    elapsed: float = 0.0  # seconds of training wall-clock (validation and saving included), across resumptions
    best_metric: float | None = None
    bad_validations: int = 0
    nonfinite_updates: int = 0
    oom_updates: int = 0
    target_tokens: int = 0

    def stop_reason(self, cfg: TrainConfig) -> str | None:
        if self.step >= cfg.max_steps:
            return f"reached train.max_steps={cfg.max_steps}"
        if cfg.max_epochs and self.epoch >= cfg.max_epochs:
            return f"reached train.max_epochs={cfg.max_epochs}"
        if cfg.max_time and self.elapsed >= cfg.max_time:
            return f"reached train.max_time={cfg.max_time:g}s"
        if cfg.patience and self.bad_validations >= cfg.patience:
            return f"no improvement of valid {cfg.valid_metric} in {cfg.patience} validations (train.patience)"
        return None

    def record_validation(self, metric: float, name: str) -> None:
        if self.best_metric is None or metric_is_better(metric, self.best_metric, name):
            self.best_metric, self.bad_validations = metric, 0
        else:
            self.bad_validations += 1


def rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    """The random states training draws from: torch's CPU generator and, on a GPU, this rank's device's."""
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        cuda = state["cuda"]
        if isinstance(cuda, list):  # older state files held every visible GPU's state
            cuda = cuda[device.index or 0] if (device.index or 0) < len(cuda) else cuda[0]
        torch.cuda.set_rng_state(cuda, device)


def save_checkpoint(
    run_dir: Path,
    step: int,
    model_file: dict[str, Any],
    state: dict[str, Any],
    metric: tuple[str, float | None],
    keep: tuple[int, int],
) -> None:
    """Save a step's model file and the training state, then keep only the (last N, best M) checkpoints.

    state: config, model, optimizer, scaler, progress, rng (one entry per rank), data_dir and the
    tokenizers' digests; metric: (its name, the value, or None when this step was not validated).
    """
    run_dir = Path(run_dir)
    name = f"step_{step:08d}.pt"
    save_payload(model_file, run_dir / CHECKPOINT_DIR / name)
    save_payload({"format": STATE_FORMAT, "mtkit_version": __version__, **state}, run_dir / STATE_FILE)
    entry = {"step": step, "file": name, "metric_name": metric[0], "metric": metric[1]}
    retain_checkpoints(run_dir, entry, *keep)


def load_training_state(run_dir: Path) -> dict[str, Any]:
    return load_payload(Path(run_dir) / STATE_FILE, STATE_FORMAT)


def retain_checkpoints(run_dir: Path, entry: dict, keep_last: int, keep_best: int) -> None:
    """Add a saved checkpoint to the index, then delete all but the last `keep_last` and best `keep_best`."""
    entries = [e for e in read_index(run_dir) if e["step"] != entry["step"]]
    entries.append(entry)
    entries.sort(key=lambda e: e["step"])
    keep = {e["file"] for e in last_entries(entries, keep_last) + best_entries(entries, keep_best)}
    write_index(run_dir, [e for e in entries if e["file"] in keep])
    for old in entries:
        if old["file"] not in keep:
            (Path(run_dir) / CHECKPOINT_DIR / old["file"]).unlink(missing_ok=True)
