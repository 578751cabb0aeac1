"""Helpers shared by the bench scripts: run a command and measure its time and peak memory."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MULTI30K = REPO.parent / "shared" / "data" / "multi30k"


def mtkit_command(*args: object) -> list[str]:
    return [sys.executable, "-m", "mtkit", *map(str, args)]


def run_measured(command: list[str], env: dict | None = None, stdout=subprocess.DEVNULL) -> tuple[float, float]:
    """Run a command; return (wall seconds, peak resident memory in MiB) of that process alone."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=stdout, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    stderr = proc.stderr.read().decode() if proc.stderr else ""
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
