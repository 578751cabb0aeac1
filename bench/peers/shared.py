"""What the peer comparison (bench/vs_peers.py) shares: the model shape, the data every tool
reads, running a tool under a deadline, and each peer's own virtual environment."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import REPO, mtkit_command

sys.path.insert(0, str(REPO))
from mtkit.text.tokenizer import Tokenizer  # noqa: E402

PEERS = {
    "joeynmt": ["joeynmt==2.3.0", "importlib_metadata", "sentencepiece==0.2.0"],
    "eole": ["eole==0.6.4", "aiohttp"],  # its CLI imports aiohttp without declaring it
}
SHAPE = dict(layers=3, d_model=256, heads=4, ffn=1024, dropout=0.1)
SPLITS = ("train", "val", "test2016")


class ToolFailed(Exception):
    """One tool's run failed; the others still run, and earlier results are kept."""


def run(command: list, log: Path | None = None, timeout: float | None = None, stdin: Path | None = None,
        stdout: Path | None = None, env: dict | None = None) -> float:  # fmt: skip
    """Run a command (stopped with SIGINT then SIGKILL after `timeout` s); returns wall seconds."""
    started = time.perf_counter()
    with (
        open(log or os.devnull, "ab") as err,
        open(stdin or os.devnull, "rb") as inp,
        open(stdout or os.devnull, "wb") as out,
    ):
        proc = subprocess.Popen([str(c) for c in command], stdin=inp, stdout=out, stderr=err,
                                env={**os.environ, **(env or {})}, start_new_session=True)  # fmt: skip
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return time.perf_counter() - started
    if code != 0:
        tail = log.read_text(errors="replace")[-3000:] if log else ""
        raise ToolFailed(f"failed ({code}): {' '.join(map(str, command))}\n{tail}")
    return time.perf_counter() - started


def setup_venv(work: Path, name: str, torch_requirement: str) -> Path:
    venv = work / "venvs" / name
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"installing {name} into {venv}", file=sys.stderr)
        run([sys.executable, "-m", "venv", venv])
        run([python, "-m", "pip", "install", "-q", torch_requirement], log=work / f"install-{name}.log")
        run([python, "-m", "pip", "install", "-q", *PEERS[name]], log=work / f"install-{name}.log")
    return python


# --- the shared data -----------------------------------------------------------------------------


def prepare_data(work: Path, data: Path) -> Tokenizer:
    """mtkit's tokenizer and dataset, and the same subwords as text for the peers."""
    data_dir = work / "data"
    tokenizer_path = data_dir / "tokenizer.json"
    if not (data_dir / "data-bin").exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        run(mtkit_command("train-tokenizer", "-i", data / "train.en", "-i", data / "train.de", "-o", tokenizer_path,
                          "--vocab-size", 8000))  # fmt: skip
        run(mtkit_command("preprocess", "-s", "en", "-t", "de", "--train", data / "train", "--valid", data / "val",
                          "--test", data / "test2016", "--tokenizer", tokenizer_path, "-o", data_dir / "data-bin"))  # fmt: skip
    tokenizer = Tokenizer.load(tokenizer_path)
    for split in SPLITS:
        for lang in ("en", "de"):
            target = data_dir / f"{split}.tok.{lang}"
            if not target.exists():
                lines = (data / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
                target.write_text("".join(" ".join(tokenizer.tokens(line)) + "\n" for line in lines), encoding="utf-8")
    # The vocabulary without mtkit's four special symbols; each peer adds its own.
    vocab = [tokenizer.id_to_token(i) for i in range(4, tokenizer.vocab_size)]
    (data_dir / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    (data_dir / "vocab.eole").write_text("".join(f"{t}\t1\n" for t in vocab), encoding="utf-8")
    return tokenizer


def detokenize(tokenizer: Tokenizer, path: Path) -> list[str]:
    """A peer's space-separated output subwords back to text (unknown subwords are dropped)."""
    ids = []
    for line in path.read_text(encoding="utf-8").splitlines():
        ids.append([i for i in (tokenizer.token_to_id(t) for t in line.split()) if i is not None and i > 3])
    return tokenizer.decode_batch(ids)


def median_after_first_minute(pairs: list[tuple[float, float]]) -> float:
    """Median of (elapsed seconds, tokens/s) reports once the first minute (warm-up) has passed."""
    later = [speed for elapsed, speed in pairs if elapsed >= 60] or [speed for _, speed in pairs]
    return statistics.median(later) if later else float("nan")
