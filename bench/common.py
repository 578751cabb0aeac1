"""Helpers shared by the bench scripts: run a command and measure its time and peak memory."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MULTI30K = REPO.parent / "shared" / "data" / "multi30k"


def mtkit_command(*args: object) -> list[str]:
    return [sys.executable, "-m", "mtkit", *map(str, args)]


def run_measured(
    command: list[str], env: dict | None = None, stdout=subprocess.DEVNULL, stderr_to: Path | None = None
) -> tuple[float, float]:
    """Run a command; return (wall seconds, peak resident memory in MiB) of that process alone.
    Its stderr goes to a file (a pipe read only at the end would fill up and stall it): `stderr_to`,
    or a temporary one."""
    started = time.perf_counter()
    with open(stderr_to, "w+b") if stderr_to else tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=stdout, stderr=errors)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        errors.seek(0)
        stderr = errors.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(command)}\n{stderr[-3000:]}")
    return seconds, usage.ru_maxrss / 1024


def conditions() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (
        f"date {date.today()}, {os.cpu_count()} CPU cores ({cpu}), torch {torch.__version__} "
        f"with {torch.get_num_threads()} threads, GPU: {gpu}"
    )


def print_table(headers: list[str], rows: list[list[object]]) -> None:
    cells = [headers] + [[f"{c:,.1f}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths)) + " |")
        if n == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def metrics_records(run_dir: Path) -> list[dict]:
    """A training run's metrics.jsonl: one record per logged update or validation."""
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def throughput_after(records: list[dict], skip: int) -> tuple[float, float]:
    """From a run logged at every update (log_every=1): target tokens/s over the updates after the
    first `skip`, and the source tokens per target token in them."""
    first, last = records[skip - 1], records[-1]
    target_per_s = (last["target_tokens"] - first["target_tokens"]) / (last["elapsed"] - first["elapsed"])
    timed = records[skip:]
    return target_per_s, sum(r["src_tokens_per_s"] for r in timed) / sum(r["tokens_per_s"] for r in timed)


def flops_per_target_token(preset: str, vocab: int, src_per_tgt: float) -> float:
    """6 x (encoder parameters x source tokens per target token + decoder and output parameters)."""
    from mtkit.config import build_config
    from mtkit.model import Transformer

    cfg = build_config({"model": {"preset": preset}}).model
    cfg.src_vocab_size = cfg.tgt_vocab_size = vocab
    cfg.joint_vocab = True
    model = Transformer(cfg)
    encoder = sum(p.numel() for p in model.encoder_layers.parameters())
    decoder = sum(p.numel() for p in model.decoder_layers.parameters())
    return 6.0 * (encoder * src_per_tgt + decoder + model.tgt_embed.tokens.weight.numel())
