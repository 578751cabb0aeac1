"""Training throughput and MFU on a GPU with each speed lever off and on, in one command.

    python bench/gpu_levers.py [--data ../shared/data/multi30k] [--work DIR] [--budget-s 420]

Prints one table: preset x batch shape x max_tokens x lever -> target tokens/s after warm-up, MFU
(6 x parameters FLOPs per token, against the GPU's dense bf16 peak), the seconds to the first
measured update (start-up and compilation), and the slowest measured update against the median (a
recompilation shows there). Batch shapes: "multi30k" (captions, ~13 subwords a side) and "wmt"
(every two consecutive Multi30k pairs joined into one, ~28 subwords a side, WMT14's shape).
Levers: "eager" (train.compile=false), "compile" (train.compile=true: torch.compile of the model
and the fused loss), "packed" (train.pack_length: pairs packed into rows of --pack-length tokens, one
batch shape), "packed+compile", "packed+graphs" (train.cuda_graphs: the compiled model replayed
as CUDA graphs) and "packed+flex+graphs" (train.flex_attention: FlexAttention over the rows' segments). Runs are started in order until --budget-s has passed; the rest are listed as
skipped. `--device cpu` checks the script itself on tiny sizes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import (
    DEFAULT_MULTI30K,
    conditions,
    flops_per_target_token,
    metrics_records,
    mtkit_command,
    print_table,
    run_measured,
    throughput_after,
)
from gpu_check import PEAK_BF16_TFLOPS, prepare

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


def join_pairs(text: Path) -> Path:
    """wmt-train.{en,de}: every two consecutive training pairs joined by a space."""
    for lang in ("en", "de"):
        lines = (text / f"train.{lang}").read_text(encoding="utf-8").splitlines()
        joined = [" ".join(lines[i : i + 2]) for i in range(0, len(lines) - 1, 2)]
        (text / f"wmt-train.{lang}").write_text("".join(line + "\n" for line in joined), encoding="utf-8")
    return text / "wmt-train"


def wmt_dataset(work: Path, text: Path) -> Path:
    out = work / "wmt-bin"
    if not (out / "manifest.json").exists():
        run_measured(mtkit_command("preprocess", "-s", "en", "-t", "de", "--train", join_pairs(text),
                                   "--tokenizer", work / "tok.json", "-o", out))  # fmt: skip
    return out


def measure(data: Path, run: Path, device: str, preset: str, max_tokens: int, lever: str, steps: int, skip: int,
            pack: int):  # fmt: skip
    settings = [f"model.preset={preset}", f"train.max_tokens={max_tokens}", f"train.max_steps={steps}",
                "train.precision=bf16", f"train.device={device}", "train.valid_every=1000000",
                "train.save_every=1000000", "train.log_every=1", *(s.format(pack=pack) for s in LEVERS[lever])]  # fmt: skip
    args = ["train", "-d", data, "-o", run, "--force"]
    for setting in settings:
        args += ["--set", setting]
    run.mkdir(parents=True, exist_ok=True)
    try:
        run_measured(mtkit_command(*args), stderr_to=run.parent / f"{run.name}.stderr")
    except SystemExit as failure:  # a lever that fails is a result too: say so, and go on
        return str(failure).strip().splitlines()[-1]
    for line in (run.parent / f"{run.name}.stderr").read_text(errors="replace").splitlines():
        if "graph" in line.lower() or "recompil" in line.lower() or "skipped" in line:
            print(f"  {line[:200]}", flush=True)  # what the compiler said: graphs skipped, recompilations
    log = metrics_records(run)
    tok_s, src_per_tgt = throughput_after(log, skip)
    step_seconds = [b["elapsed"] - a["elapsed"] for a, b in zip(log[skip - 1 :], log[skip:])]
    return tok_s, src_per_tgt, log[skip - 1]["elapsed"], max(step_seconds) / statistics.median(step_seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--work", type=Path, default=None, help="keep the data and runs here (default: a temporary folder)")  # fmt: skip
    parser.add_argument("--presets", default="transformer-big,transformer-base")
    parser.add_argument("--shapes", default="multi30k,wmt")
    parser.add_argument("--levers", default="eager,compile")
    parser.add_argument("--max-tokens", default="32768", help="comma-separated")
    parser.add_argument("--pack-length", type=int, default=128, help="row length of the packed levers")
    parser.add_argument("--steps", type=int, default=0, help="updates per run (default: 50 eager, 80 compiled on a GPU)")  # fmt: skip
    parser.add_argument("--budget-s", type=float, default=420.0, help="start no run after this many seconds")
    parser.add_argument("--peak-tflops", type=float, default=0.0, help="the GPU's dense bf16 peak (default: by name)")
    args = parser.parse_args()
    on_gpu = args.device == "cuda"
    started = time.perf_counter()
    print(f"conditions: {conditions()}", flush=True)
    name = torch.cuda.get_device_name(0) if on_gpu else "cpu"
    peak = args.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), 989.0)
    presets = args.presets.split(",") if on_gpu else ["transformer-tiny"]
    budgets = [int(b) for b in args.max_tokens.split(",")] if on_gpu else [1024]
    rows, skipped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        data, text = prepare(args.data, work, 29000 if on_gpu else 2000)
        datasets = {"multi30k": data}
        if "wmt" in args.shapes.split(","):
            datasets["wmt"] = wmt_dataset(work, text)
        vocab = json.loads((data / "manifest.json").read_text())["src_tokenizer"]["vocab_size"]
        print(f"data ready after {time.perf_counter() - started:.0f} s\n", flush=True)
        for preset in presets:
            for shape in args.shapes.split(","):
                for max_tokens in budgets:
                    for lever in args.levers.split(","):
                        what = [preset, shape, max_tokens, lever]
                        if time.perf_counter() - started > args.budget_s:
                            skipped.append(" ".join(map(str, what)))
                            continue
                        compiled = "compile" in lever or "graphs" in lever
                        steps = args.steps or ((80 if compiled else 50) if on_gpu else 12)
                        skip = min(steps // 2, 30 if compiled else 10)
                        run = work / f"run-{preset}-{shape}-{max_tokens}-{lever}"
                        result = measure(datasets[shape], run, args.device, preset, max_tokens, lever, steps, skip,
                                         args.pack_length if on_gpu else 64)  # fmt: skip
                        if isinstance(result, str):
                            rows.append([*what, "failed", result[:60], "", "", ""])
                            print(" ".join(what[:1] + [result]), flush=True)
                            continue
                        tok_s, src_per_tgt, warm_s, slowest = result
                        tflops = flops_per_target_token(preset, vocab, src_per_tgt) * tok_s / 1e12
                        rows.append([*what, f"{tok_s:,.0f}", f"{tflops:.1f}", f"{100 * tflops / peak:.1f}%",
                                     f"{warm_s:.0f}", f"{slowest:.2f}x"])  # fmt: skip
                        print(" ".join(map(str, rows[-1])), flush=True)
    print(f"\ntraining throughput, bf16, on {name} (MFU against {peak:g} TFLOPS):")
    print_table(["model", "batches", "max_tokens", "lever", "target tok/s", "TFLOPS", "MFU", "s to warm",
                 "slowest/median"], rows)  # fmt: skip
    if skipped:
        print(f"skipped (over --budget-s {args.budget_s:g}): {'; '.join(skipped)}")
    print(f"total {time.perf_counter() - started:.0f} s")
    sys.exit(0 if rows else 1)


if __name__ == "__main__":
    main()
