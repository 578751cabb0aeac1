"""Training throughput: target tokens/s after warm-up for each model, batch shape, token budget,
precision and speed lever, with MFU on a GPU; each setting trains in its own process.

    python bench/train_throughput.py [--data ../shared/data/multi30k] [--work DIR] [--presets transformer-small]
        [--shapes multi30k,wmt] [--max-tokens 4096,32768] [--precisions fp32,bf16] [--levers eager,packed]
        [--pack-length 64] [--steps 80] [--warmup-steps 20] [--budget-s 0] [--profile]

Data: a joint 8k BPE over Multi30k's training set. Batch shapes: "multi30k" (captions, ~13 subwords
a side) and "wmt" (every two consecutive pairs joined into one, ~28 subwords a side, WMT14's shape).
Levers: eager, compile (train.compile: torch.compile of the model and the fused loss), packed
(train.pack_length=--pack-length: several pairs a row), packed+compile, packed+graphs (the compiled
objective replayed as CUDA graphs), packed+flex+graphs (FlexAttention over the rows' segments) and
packed+graphs+fp8. A setting listed twice runs twice (interleaved repeats). Each row: target and
source+target tokens/s over the updates after --warmup-steps, the peak RSS, the seconds to the first
timed update (compilation and graph capture), the slowest timed update against the median (a
recompilation shows there), and on a GPU TFLOPS and MFU: 6 x parameters FLOPs per target token (the
encoder's weighted by source tokens per target token) against the GPU's dense bf16 peak. A setting
that fails is a row that says why; with --budget-s no setting starts after that many seconds. With
--profile each setting is then profiled in this process over 20 updates: on a GPU the share of the
time it idles waiting for the host (the profiler's own host time inflates it), and on either the
top operators or kernels.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from common import (
    DEFAULT_MULTI30K,
    conditions,
    flops_per_target_token,
    gpu_peak_tflops,
    metrics_records,
    mtkit_command,
    prepare,
    print_table,
    run_measured,
    throughput_after,
)

PACKED = "train.pack_length={pack}"
LEVERS = {
    "eager": [],
    "compile": ["train.compile=true"],
    "packed": [PACKED],
    "packed+compile": [PACKED, "train.compile=true"],
    "packed+graphs": [PACKED, "train.compile=true", "train.cuda_graphs=true"],
    "packed+flex+graphs": [PACKED, "train.compile=true", "train.cuda_graphs=true", "train.flex_attention=true"],
    "packed+graphs+fp8": [PACKED, "train.compile=true", "train.cuda_graphs=true", "train.precision=fp8"],
}


def wmt_dataset(work: Path, text: Path) -> Path:
    """Every two consecutive training pairs joined by a space, preprocessed with the same tokenizer."""
    out = work / "wmt-bin"
    if not (out / "manifest.json").exists():
        for lang in ("en", "de"):
            lines = (text / f"train.{lang}").read_text(encoding="utf-8").splitlines()
            joined = [" ".join(lines[i : i + 2]) for i in range(0, len(lines) - 1, 2)]
            (text / f"wmt-train.{lang}").write_text("".join(line + "\n" for line in joined), encoding="utf-8")
        run_measured(mtkit_command("preprocess", "-s", "en", "-t", "de", "--train", text / "wmt-train",
                                   "--tokenizer", work / "tok.json", "-o", out))  # fmt: skip
    return out


def measure(data: Path, run: Path, settings: list[str], skip: int) -> list | str:
    """[target tok/s, source tokens per target token, peak RSS MiB, s to warm, slowest/median], or why it failed."""
    run.mkdir(parents=True, exist_ok=True)
    stderr = run.parent / f"{run.name}.stderr"
    command = mtkit_command(
        "train", "-d", data, "-o", run, "--force", *itertools.chain(*(("--set", s) for s in settings))
    )
    try:
        _, rss = run_measured(command, stderr_to=stderr)
    except SystemExit as failure:  # a lever that fails is a result too: say so, and go on
        return str(failure).strip().splitlines()[-1]
    log = metrics_records(run)
    tok_s, src_per_tgt = throughput_after(log, skip)
    step_seconds = [b["elapsed"] - a["elapsed"] for a, b in zip(log[skip - 1 :], log[skip:])]
    return [tok_s, src_per_tgt, rss, log[skip - 1]["elapsed"], max(step_seconds) / statistics.median(step_seconds)]


def profile_updates(data: Path, run: Path, settings: list[str], device: str) -> str:
    """Profile 20 updates after 10 of warm-up (30 where the settings compile), in this process: on a
    GPU the share of the wall time it idles, 1 - (union of kernel intervals) / wall time, and the
    kernels that fill its busy time; on a CPU the operators by their own CPU time."""
    from torch.profiler import ProfilerActivity, profile

    from mtkit.core.config import build_config, parse_overrides
    from mtkit.training.trainer import Trainer

    config = build_config(parse_overrides(settings))
    trainer, position = Trainer(config, data, run), (0, 0)

    def update() -> None:
        nonlocal position
        micro, position = trainer.stream.upcoming(position)
        trainer._update(micro, trainer.stream.prepare(micro).result())

    for _ in range(30 if config.train.compile else 10):
        update()
    on_gpu = device == "cuda"
    torch.cuda.synchronize() if on_gpu else None
    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * on_gpu) as prof:
        for _ in range(20):
            update()
        torch.cuda.synchronize() if on_gpu else None
    wall_us = (time.perf_counter() - started) * 1e6
    busy, end = 0.0, -1.0
    for start, stop in sorted(
        (e.time_range.start, e.time_range.end) for e in prof.events() if e.device_type.name == "CUDA"
    ):
        if stop > end:  # the union of kernel intervals
            busy += stop - max(start, end)
            end = stop
    table = prof.key_averages().table(sort_by=f"self_{'device' if on_gpu else 'cpu'}_time_total", row_limit=15,
                                      max_name_column_width=60)  # fmt: skip
    idle = f"the GPU idles {100 * (1 - busy / wall_us):.1f}% of " if on_gpu else ""
    return f"{idle}{wall_us / 20 / 1e3:.1f} ms per update\n{table}"


def main() -> None:
    on_gpu = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--work", type=Path, default=None, help="keep the data and runs here (default: a temporary folder)")  # fmt: skip
    parser.add_argument("--device", default="cuda" if on_gpu else "cpu")
    parser.add_argument("--presets", default="transformer-small")
    parser.add_argument("--shapes", default="multi30k")
    parser.add_argument("--max-tokens", default="32768" if on_gpu else "4096", help="comma-separated")
    parser.add_argument("--precisions", default="bf16" if on_gpu else "fp32,bf16")
    parser.add_argument("--levers", default="eager")
    parser.add_argument("--pack-length", type=int, default=128 if on_gpu else 64)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--budget-s", type=float, default=0.0, help="start no setting after this many seconds (0: no limit)")  # fmt: skip
    parser.add_argument("--profile", action="store_true", help="also profile each setting's updates in this process")
    parser.add_argument("--peak-tflops", type=float, default=0.0, help="the GPU's dense bf16 peak (default: by name)")
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"conditions: {conditions()}", flush=True)
    split = lambda text: text.split(",")  # noqa: E731
    settings = list(itertools.product(split(args.presets), split(args.shapes), map(int, split(args.max_tokens)),
                                      split(args.precisions), split(args.levers)))  # fmt: skip
    rows, skipped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        data, text = prepare(args.data, work, 29000)
        datasets = {"multi30k": data, **({"wmt": wmt_dataset(work, text)} if "wmt" in split(args.shapes) else {})}
        vocab = json.loads((data / "manifest.json").read_text())["src_tokenizer"]["vocab_size"]
        for n, (preset, shape, max_tokens, precision, lever) in enumerate(settings):
            what = [preset, shape, max_tokens, precision, lever]
            if args.budget_s and time.perf_counter() - started > args.budget_s:
                skipped.append(" ".join(map(str, what)))
                continue
            chosen = [f"model.preset={preset}", f"train.max_tokens={max_tokens}", f"train.max_steps={args.steps}",
                      f"train.precision={precision}", f"train.device={args.device}", "train.valid_every=1000000",
                      "train.save_every=1000000", "train.log_every=1",
                      *(s.format(pack=args.pack_length) for s in LEVERS[lever])]  # fmt: skip
            result = measure(datasets[shape], work / f"run-{n}", chosen, args.warmup_steps)
            if isinstance(result, str):
                rows.append([*what, "failed: " + result[:60], "", "", "", ""] + ["", ""] * on_gpu)
            else:
                tok_s, src_per_tgt, rss, warm_s, slowest = result
                row = [*what, tok_s, tok_s * (1 + src_per_tgt), rss, f"{warm_s:.0f}", f"{slowest:.2f}x"]
                if args.device == "cuda":
                    tflops = flops_per_target_token(preset, vocab, src_per_tgt) * tok_s / 1e12
                    row += [f"{tflops:.1f}", f"{100 * tflops / gpu_peak_tflops(args.peak_tflops):.1f}%"]
                rows.append(row)
            print(" ".join(map(str, rows[-1])), flush=True)
            if args.profile and not isinstance(result, str):
                print(
                    f"profile, {' '.join(map(str, what))}: {profile_updates(datasets[shape], work / f'profile-{n}', chosen, args.device)}"
                )
    headers = ["model", "batches", "max_tokens", "precision", "lever", "target tok/s", "src+tgt tok/s", "peak RSS MiB",
               "s to warm", "slowest/median"] + ["TFLOPS", "MFU"] * (args.device == "cuda")  # fmt: skip
    print(
        f"\n{args.steps} updates per setting, the first {args.warmup_steps} not timed; packed rows of {args.pack_length}"
    )
    print_table(headers, rows)
    if skipped:
        print(f"skipped (over --budget-s {args.budget_s:g}): {'; '.join(skipped)}")


if __name__ == "__main__":
    main()
