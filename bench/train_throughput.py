"""Training throughput of mtkit's transformer-small on Multi30k: target tokens/s after warm-up.

    python bench/train_throughput.py [--data ../shared/data/multi30k] [--steps 80] [--precisions fp32,bf16]
                                     [--pack-lengths 0,64]

Each setting trains in its own process for --steps updates of --max-tokens (padded source +
target) tokens; the first --warmup-steps are not timed. --pack-lengths: train.pack_length values
(0: padded batches; L: pairs packed into rows of L tokens a side). On a GPU the table adds model FLOPs
utilisation from the model's FLOPs per token (6 x parameters touched per token).
"""

from __future__ import annotations

import argparse
import tempfile
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

PEAK_TFLOPS = {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}  # H100 SXM dense, for MFU on CUDA


def build_dataset(data: Path, work: Path) -> Path:
    run_measured(
        mtkit_command(
            "train-tokenizer",
            "-i",
            data / "train.en",
            "-i",
            data / "train.de",
            "-o",
            work / "tok.json",
            "--vocab-size",
            8000,
        )
    )
    run_measured(
        mtkit_command(
            "preprocess",
            "-s",
            "en",
            "-t",
            "de",
            "--train",
            data / "train",
            "--tokenizer",
            work / "tok.json",
            "-o",
            work / "bin",
        )
    )
    return work / "bin"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--devices", default="cpu,cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--pack-lengths", default="0", help="comma-separated train.pack_length values")
    args = parser.parse_args()
    print(f"conditions: {conditions()}")
    print(
        f"model: transformer-small (3+3 layers, d_model 256, 4 heads, FFN 1024, dropout 0.3), 8k joint BPE, "
        f"max_tokens {args.max_tokens}, {args.steps} updates, first {args.warmup_steps} not timed\n"
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data_dir = build_dataset(args.data, work)
        settings = [(d, p, int(n)) for d in args.devices.split(",") for p in args.precisions.split(",")
                    for n in args.pack_lengths.split(",")]  # fmt: skip
        for device, precision, pack_length in settings:
            run_dir = work / f"run-{device}-{precision}-{pack_length}"
            _, rss = run_measured(
                mtkit_command(
                    "train",
                    "--force",  # a setting listed twice (interleaved repeats) trains again
                    "-d",
                    data_dir,
                    "-o",
                    run_dir,
                    "--set",
                    "model.preset=transformer-small",
                    "--set",
                    f"train.max_tokens={args.max_tokens}",
                    "--set",
                    f"train.max_steps={args.steps}",
                    "--set",
                    "train.log_every=1",
                    "--set",
                    "train.valid_every=100000",
                    "--set",
                    "train.save_every=100000",
                    "--set",
                    f"train.precision={precision}",
                    "--set",
                    f"train.device={device}",
                    "--set",
                    f"train.pack_length={pack_length}",
                )
            )
            target_per_s, src_per_tgt = throughput_after(metrics_records(run_dir), args.warmup_steps)
            row = [device, precision, pack_length, target_per_s, target_per_s * (1 + src_per_tgt), rss]
            if device == "cuda":
                achieved = flops_per_target_token("transformer-small", 8000, src_per_tgt) * target_per_s / 1e12
                row.append(f"{100 * achieved / PEAK_TFLOPS[precision]:.1f}%")
            rows.append(row)
    headers = ["device", "precision", "pack_length", "target tok/s", "src+tgt tok/s", "peak RSS MiB"]
    print_table(headers + (["MFU"] if any(len(r) > len(headers) for r in rows) else []), rows)


if __name__ == "__main__":
    main()
