"""Helpers shared by the bench scripts: run a command and measure its time and peak memory."""

from __future__ import annotations

import os
import platform
import re
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
    from mtkit.core.textio import read_records

    return read_records(Path(run_dir) / "metrics.jsonl")


def throughput_after(records: list[dict], skip: int) -> tuple[float, float]:
    """From a run logged at every update (log_every=1): target tokens/s over the updates after the
    first `skip`, and the source tokens per target token in them."""
    first, last = records[skip - 1], records[-1]
    target_per_s = (last["target_tokens"] - first["target_tokens"]) / (last["elapsed"] - first["elapsed"])
    timed = records[skip:]
    return target_per_s, sum(r["src_tokens_per_s"] for r in timed) / sum(r["tokens_per_s"] for r in timed)


def flops_per_target_token(preset: str, vocab: int, src_per_tgt: float) -> float:
    """6 x (encoder parameters x source tokens per target token + decoder and output parameters)."""
    from mtkit.core.config import build_config
    from mtkit.model.transformer import Transformer

    cfg = build_config({"model": {"preset": preset}}).model
    cfg.src_vocab_size = cfg.tgt_vocab_size = vocab
    cfg.joint_vocab = True
    model = Transformer(cfg)
    encoder = sum(p.numel() for p in model.encoder_layers.parameters())
    decoder = sum(p.numel() for p in model.decoder_layers.parameters())
    return 6.0 * (encoder * src_per_tgt + decoder + model.tgt_embed.tokens.weight.numel())


def prepare(data: Path, work: Path, lines: int) -> tuple[Path, Path]:
    """A joint 8k BPE (or smaller for a CPU check) and the dataset, from the first `lines` training pairs."""
    text = work / "text"
    if (work / "bin" / "manifest.json").exists():  # made by an earlier call with the same --work
        return work / "bin", text
    text.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", lines), ("val", 200), ("test2016", 1000)):
        for lang in ("en", "de"):
            kept = (data / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()[:count]
            (text / f"{split}.{lang}").write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    vocab = 8000 if lines > 5000 else 1000
    run_measured(mtkit_command("train-tokenizer", "-i", text / "train.en", "-i", text / "train.de",
                               "-o", work / "tok.json", "--vocab-size", vocab))  # fmt: skip
    run_measured(mtkit_command("preprocess", "-s", "en", "-t", "de", "--train", text / "train", "--valid", text / "val",
                               "--tokenizer", work / "tok.json", "-o", work / "bin"))  # fmt: skip
    return work / "bin", text


# Dense bf16 peak TFLOPS by device name (NVIDIA data sheets); --peak-tflops for others.
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100 SXM": 989.0, "H100 80GB HBM3": 989.0, "H100 PCIe": 756.0, "A100": 312.0,
                    "L40S": 362.0, "L4": 121.0, "A10": 125.0}  # fmt: skip


def gpu_peak_tflops(given: float = 0.0) -> float:
    """The GPU's dense bf16 peak: `given`, or by the device's name (989, an H100's, for one not listed)."""
    import torch

    name = torch.cuda.get_device_name(0)
    return given or next((peak for key, peak in PEAK_BF16_TFLOPS.items() if key in name), 989.0)


def start_server(model: str, log: Path, *options: str, layout: tuple[str, ...] = ("--in-process",)) -> tuple[subprocess.Popen, str]:  # fmt: skip
    """`mtkit serve -m MODEL --port 0 --in-process OPTIONS`, ready (its stderr in log): the process and its URL.
    layout: where the engine runs (`()`: where serve puts it by default on this machine)."""
    import httpx

    process = subprocess.Popen(mtkit_command("serve", "-m", model, "--port", "0", *layout, *options),
                               stderr=open(log, "wb"), stdout=subprocess.DEVNULL)  # fmt: skip
    while not (found := re.search(r"on http://127\.0\.0\.1:(\d+)$", log.read_text(), re.M)):
        if process.poll() is not None:
            sys.exit(log.read_text())
        time.sleep(0.2)
    url = f"http://127.0.0.1:{found.group(1)}"
    while httpx.get(f"{url}/ready").status_code != 200:
        time.sleep(0.2)
    return process, url


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and its children, MB (from /proc)."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, StopIteration):
            continue
    return total / 1024
