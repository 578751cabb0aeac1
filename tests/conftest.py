"""Shared fixtures: slices of the real Multi30k corpus, tiny tokenizers, datasets and models."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mtkit.config import build_config
from mtkit.model import Transformer

torch.set_num_threads(1)  # tiny models gain nothing from more threads, and CI has two cores

REPO = Path(__file__).resolve().parents[1]
MULTI30K = Path(os.environ.get("MTKIT_MULTI30K", REPO.parent / "shared" / "data" / "multi30k"))

TINY_TRAIN = [
    "--set",
    "model.preset=transformer-tiny",
    "--set",
    "train.max_tokens=600",
    "--set",
    "train.warmup=5",
    "--set",
    "train.lr=5e-3",
    "--set",
    "train.log_every=1",
    "--set",
    "train.valid_every=1000",
    "--set",
    "train.save_every=1000",
    "--set",
    "train.valid_metric=loss",
    "--set",
    "train.threads=1",
]


@pytest.fixture(scope="session")
def multi30k() -> Path:
    if not (MULTI30K / "train.en").is_file():
        pytest.fail(f"the Multi30k corpus is missing at {MULTI30K} (set MTKIT_MULTI30K)")
    return MULTI30K


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def corpus(multi30k: Path, tmp_path_factory) -> Path:
    """A 400-pair training slice and 20-pair valid/test slices of Multi30k, as PREFIX.en/PREFIX.de."""
    root = tmp_path_factory.mktemp("corpus")
    for split, source, count in (("train", "train", 400), ("valid", "val", 20), ("test", "test2016", 20)):
        for lang in ("en", "de"):
            lines = (multi30k / f"{source}.{lang}").read_text(encoding="utf-8").splitlines()[:count]
            write_lines(root / f"{split}.{lang}", lines)
    return root


@pytest.fixture(scope="session")
def tokenizer_path(corpus: Path, tmp_path_factory) -> Path:
    from mtkit.tokenizer import train_tokenizer

    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    train_tokenizer([corpus / "train.en", corpus / "train.de"], path, vocab_size=500)
    return path


@pytest.fixture(scope="session")
def data_dir(corpus: Path, tokenizer_path: Path, tmp_path_factory) -> Path:
    from mtkit.preprocess import preprocess

    out = tmp_path_factory.mktemp("data") / "bin"
    splits = {"train": corpus / "train", "valid": corpus / "valid", "test": corpus / "test"}
    preprocess("en", "de", splits, tokenizer_path, out)
    return out


def run_mtkit(
    *args: str, stdin: bytes | None = None, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess (no terminal: quiet, line-oriented output)."""
    return subprocess.run(
        [sys.executable, "-m", "mtkit", *map(str, args)],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


@pytest.fixture(scope="session")
def trained_run(data_dir: Path, tmp_path_factory) -> Path:
    """A tiny model trained for 40 updates, with checkpoints at steps 20 and 40."""
    run_dir = tmp_path_factory.mktemp("run") / "run"
    result = run_mtkit(
        "train",
        "-d",
        data_dir,
        "-o",
        run_dir,
        *TINY_TRAIN,
        "--set",
        "train.max_steps=40",
        "--set",
        "train.save_every=20",
    )
    assert result.returncode == 0, result.stderr.decode()
    return run_dir


def tiny_model(vocab: int = 12, seed: int = 0, **overrides) -> Transformer:
    """A randomly initialised tiny model over a vocabulary of `vocab` ids, in eval mode."""
    torch.manual_seed(seed)
    values = {
        "preset": "transformer-tiny",
        "src_vocab_size": vocab,
        "tgt_vocab_size": vocab,
        "joint_vocab": True,
        **overrides,
    }
    return Transformer(build_config({"model": values}).model).eval()
