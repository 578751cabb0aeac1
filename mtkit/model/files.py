"""Model files, and the index of a run directory's checkpoints that says which model file is its best.

A model file (`*.pt`) is self-contained: weights, the model config and both tokenizers, so
translate/evaluate/average need nothing else. It is saved atomically and loaded with
`torch.load(weights_only=True)`, which refuses arbitrary pickled objects. The resumable training
state, kept apart from model files as Sockeye does, is in mtkit.training.checkpoints.
"""

from __future__ import annotations

import json
import pickle
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from mtkit import __version__
from mtkit.core.config import ModelConfig, config_from_dict
from mtkit.core.errors import MtkitError
from mtkit.core.textio import atomic_path, write_text_atomic
from mtkit.model.output_layer import rename_old_keys
from mtkit.model.transformer import Transformer
from mtkit.text.tokenizer import Tokenizer

MODEL_FORMAT = "mtkit-model"
CHECKPOINT_DIR = "checkpoints"  # a run directory's model files, and their index
INDEX_FILE = "index.json"


def save_payload(payload: dict[str, Any], path: Path) -> None:
    """torch.save through a temporary file: a failed or interrupted write leaves `path` as it was."""
    try:
        with atomic_path(path) as tmp:
            torch.save(payload, tmp)
    except OSError as err:
        raise MtkitError(f"{path}: could not write ({err.strerror or err}); the previous file is intact") from None


def load_payload(path: Path, expected_format: str) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise MtkitError(f"{path}: no such file")
    what = f"not an mtkit {expected_format.removeprefix('mtkit-')} file"
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive
        raise MtkitError(f"{path}: {what}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        reason = next(
            (line.strip() for line in str(err).splitlines() if "Unsupported global" in line), "code or unknown objects"
        )
        raise MtkitError(
            f"{path}: refused to load: it holds objects other than tensors and plain data ({reason})"
        ) from None
    except Exception as err:  # a truncated or foreign file raises many different errors
        raise MtkitError(f"{path}: {what} ({type(err).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != expected_format:
        raise MtkitError(f"{path}: {what}")
    return payload


@dataclass
class ModelFile:
    """Everything a model file holds."""

    config: ModelConfig
    weights: dict[str, torch.Tensor]
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    meta: dict[str, Any]

    def build_model(self, device: torch.device | str = "cpu") -> Transformer:
        """The model, for inference. Its parameters are this file's fp32 tensors themselves, not copies
        (a model of NLLB's size then needs one copy of its weights, not two, and no random init)."""
        if any(w.is_floating_point() and w.dtype != torch.float32 for w in self.weights.values()):
            model = Transformer(self.config)
            model.load_state_dict(self.weights)
        else:
            with torch.device("meta"), NoNormalInit():
                model = Transformer(self.config)
            model.load_state_dict(self.weights, assign=True)
            model.make_tables()
        return model.to(device).eval()


class NoNormalInit(TorchFunctionMode):
    """Tensors' normal_ initialization skipped: on the meta device its kernel is Python that imports
    torch._dynamo (2 seconds of every command that loads a model), and the file's weights replace it."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.Tensor.normal_, torch.nn.init.normal_):
            return args[0] if args else kwargs["tensor"]  # init.normal_ passes its tensor by keyword
        return func(*args, **kwargs)


def weights_on_cpu(
    state: dict[str, torch.Tensor], move: Callable[[torch.Tensor], torch.Tensor] = lambda t: t.detach().cpu()
) -> dict[str, torch.Tensor]:
    """The weights on the CPU, with names that share one tensor (tied embeddings) still sharing one copy.

    `.cpu()` per name would copy a GPU tensor once per name, and torch.save would store it that often.
    """
    copies: dict[tuple, torch.Tensor] = {}
    out = {}
    for name, tensor in state.items():
        key = (
            tensor.device,
            tensor.untyped_storage().data_ptr(),
            tensor.storage_offset(),
            tensor.shape,
            tensor.stride(),
        )
        if key not in copies:
            copies[key] = move(tensor)
        out[name] = copies[key]
    return out


def model_payload(model_state: dict, config: ModelConfig, src_tok: Tokenizer, tgt_tok: Tokenizer, meta: dict) -> dict:
    return {
        "format": MODEL_FORMAT,
        "mtkit_version": __version__,
        "config": asdict(config),
        "model": weights_on_cpu(model_state),
        "src_tokenizer": src_tok.json_text,
        "tgt_tokenizer": tgt_tok.json_text,
        "meta": meta,
    }


def save_model_file(path: Path, model_file: ModelFile) -> None:
    payload = model_payload(
        model_file.weights, model_file.config, model_file.src_tokenizer, model_file.tgt_tokenizer, model_file.meta
    )
    save_payload(payload, path)


def model_file_from_payload(payload: dict, source: str) -> ModelFile:
    try:
        src_tok = Tokenizer(payload["src_tokenizer"])
        tgt_tok = (
            src_tok if payload["tgt_tokenizer"] == payload["src_tokenizer"] else Tokenizer(payload["tgt_tokenizer"])
        )
        rename_old_keys(payload["model"])
        return ModelFile(
            config_from_dict({"model": payload["config"]}).model,
            payload["model"],
            src_tok,
            tgt_tok,
            payload.get("meta", {}),
        )
    except (KeyError, TypeError) as err:
        raise MtkitError(f"{source}: damaged model file (missing {err})") from None
    except MtkitError as err:
        raise MtkitError(f"{source}: {err}") from None


def model_preset(path: Path) -> str:
    """The preset a model file was made with, read without loading its weights (they stay mapped)."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        return str(payload["config"].get("preset", ""))
    except Exception:  # the file's own load says what is wrong with it
        return ""


def resolve_model_path(path: Path, checkpoint: str = "best") -> Path:
    """A model file as given, or a run directory's best (or last) checkpoint."""
    path = Path(path)
    if path.is_dir():
        entries = read_index(path)
        if not entries:
            raise MtkitError(f"{path}: a directory without mtkit checkpoints (expected {CHECKPOINT_DIR}/{INDEX_FILE})")
        if checkpoint == "last":
            chosen = entries[-1]
        elif checkpoint == "best":
            chosen = best_entries(entries, 1)[0] if any(e.get("metric") is not None for e in entries) else entries[-1]
        else:
            raise MtkitError(f"--checkpoint {checkpoint}: must be best or last")
        return path / CHECKPOINT_DIR / chosen["file"]
    if not path.exists():
        raise MtkitError(f"{path}: no such model file or run directory")
    return path


def file_stamp(path: str | Path | None) -> tuple | None:
    """What changes when a model file is written again (a new file renamed over it, or rewritten); for a
    run directory, its checkpoint index's."""
    if not path:
        return None
    target = Path(path) / CHECKPOINT_DIR / INDEX_FILE if Path(path).is_dir() else Path(path)
    try:
        found = target.stat()
    except OSError:
        return None
    return found.st_ino, found.st_size, found.st_mtime_ns


def load_model_file(path: Path, checkpoint: str = "best") -> ModelFile:
    resolved = resolve_model_path(path, checkpoint)
    return model_file_from_payload(load_payload(resolved, MODEL_FORMAT), str(resolved))


# --- the run directory's checkpoint index ---------------------------------------------------


def read_index(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / CHECKPOINT_DIR / INDEX_FILE
    if not path.is_file():
        return []
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["checkpoints"]
        if not all(isinstance(e["step"], int) and isinstance(e["file"], str) for e in entries):
            raise TypeError("an entry without step or file")
    except (ValueError, KeyError, TypeError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise MtkitError(
            f"{path}: damaged ({type(err).__name__}); the checkpoint files beside it are intact: give one of them instead"
        ) from None
    return entries


def write_index(run_dir: Path, entries: list[dict]) -> None:
    """Entries: {"step", "file", "metric_name", "metric"}; metric is None for checkpoints not validated."""
    path = Path(run_dir) / CHECKPOINT_DIR / INDEX_FILE
    write_text_atomic(path, json.dumps({"checkpoints": entries}, indent=1) + "\n")


def metric_is_better(new: float, old: float, metric: str) -> bool:
    return new < old if metric == "loss" else new > old


def best_entries(entries: list[dict], n: int) -> list[dict]:
    """The n checkpoints with the best validation metric (only validated ones count)."""
    metric = entries[0]["metric_name"] if entries else "bleu"
    scored = [e for e in entries if e.get("metric") is not None]
    sign = 1.0 if metric == "loss" else -1.0
    return sorted(scored, key=lambda e: (sign * e["metric"], -e["step"]))[:n]


def last_entries(entries: list[dict], n: int) -> list[dict]:
    return sorted(entries, key=lambda e: e["step"])[-n:]
