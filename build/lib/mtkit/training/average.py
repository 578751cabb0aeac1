"""`mtkit average`: the mean of several checkpoints' weights, as one self-contained model file."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from mtkit.core.errors import MtkitError
from mtkit.model.files import CHECKPOINT_DIR, ModelFile, best_entries, last_entries, load_model_file, read_index


def select_checkpoints(run_dir: Path, last: int | None, best: int | None) -> list[Path]:
    """The last N or best N checkpoints of a run directory."""
    entries = read_index(run_dir)
    if not entries:
        raise MtkitError(f"{run_dir}: no checkpoints to average")
    if (last is None) == (best is None):
        raise MtkitError("with a run directory, give exactly one of --last N or --best N")
    n = last if last is not None else best
    assert n is not None
    if n < 1:
        raise MtkitError("--last/--best must be at least 1")
    chosen = last_entries(entries, n) if last is not None else best_entries(entries, n)
    if len(chosen) < n:
        what = "validated checkpoints" if best is not None else "checkpoints"
        raise MtkitError(f"{run_dir}: asked for {n} {what} but it keeps {len(chosen)} (see train.keep_last/keep_best)")
    return [Path(run_dir) / CHECKPOINT_DIR / e["file"] for e in chosen]


def _check_compatible(first: ModelFile, other: ModelFile, path: Path) -> None:
    if asdict(first.config) != asdict(other.config):
        raise MtkitError(f"{path}: a different model architecture than the first checkpoint")
    if (first.src_tokenizer.sha256, first.tgt_tokenizer.sha256) != (
        other.src_tokenizer.sha256,
        other.tgt_tokenizer.sha256,
    ):
        raise MtkitError(f"{path}: a different vocabulary/tokenizer than the first checkpoint")
    for name, tensor in first.weights.items():
        if name not in other.weights or other.weights[name].shape != tensor.shape:
            raise MtkitError(f"{path}: parameter {name} is missing or has another shape")
    if set(other.weights) != set(first.weights):
        raise MtkitError(f"{path}: holds parameters the first checkpoint does not")


def average_checkpoints(paths: list[Path]) -> ModelFile:
    """Average floating-point tensors in float32 (one checkpoint in memory at a time); other tensors are kept."""
    if not paths:
        raise MtkitError("no checkpoints to average")
    first = load_model_file(paths[0])
    sums = {name: t.float().clone() for name, t in first.weights.items() if t.is_floating_point()}
    for path in paths[1:]:
        other = load_model_file(path)
        _check_compatible(first, other, path)
        for name in sums:
            sums[name] += other.weights[name].float()
    weights: dict[str, torch.Tensor] = {}
    shared: dict[int, torch.Tensor] = {}  # tied parameters (one tensor under several names) stay one tensor
    for name, tensor in first.weights.items():
        if name not in sums:
            weights[name] = tensor
            continue
        key = tensor.untyped_storage().data_ptr()
        if key not in shared:
            shared[key] = (sums[name] / len(paths)).to(tensor.dtype)
        weights[name] = shared[key]
    meta = {**first.meta, "averaged": [str(p) for p in paths]}
    return ModelFile(first.config, weights, first.src_tokenizer, first.tgt_tokenizer, meta)
