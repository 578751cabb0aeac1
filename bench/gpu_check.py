"""One command that proves the GPU paths: precisions, resume, torchrun/nccl, translation, FP8, CUDA graphs.

    python bench/gpu_check.py --all --data DIR [--budget-s 540] [--work DIR]
    python bench/gpu_check.py [--data ../shared/data/multi30k] [--steps 200] [--work DIR] [--only SECTIONS]

--all is the one command for whoever holds a GPU for a few minutes: in this order, it runs
  1. the GPU-only tests (pytest -m gpu);
  2. the --gpu recipe (recipes/multi30k_en_de/run.sh --gpu: its sweep of settings trained at once,
     mtkit choose on val, test2016 decoded once, cased and lowercased);
  3. the training throughput and MFU of transformer-big and transformer-base at the RESULTS settings;
  4. beam 5 on test2016 with and without CUDA graphs (the recipe's first chosen model);
  5. the server at 32 and 256 clients against offline decoding (needs mtkit[serve] and httpx);
and prints one table with the device, the date and every figure (9 minutes on one H100 or H200).
A step that cannot run (a missing extra, no time left in --budget-s) says so in its row and the
others go on; a step that fails is a row too, and the exit code is 1. With --device cpu it runs the
same steps end to end with tiny budgets, as the test suite does, so the GPU run never meets a
renamed option. mtkit runs from this tree (nothing needs installing but torch and the core packages).

Without --all, the sections below (--only picks some):

On a CUDA machine it checks, and prints a PASS/FAIL line for each:
  1. transformer-small trains --steps updates in fp32, bf16 and fp16: the mean loss of the last 10
     updates is below 0.9 x that of the first 10, and fp16's GradScaler skips at most 10 updates;
  2. on one fixed batch the bf16 and fp16 gradient norms of the loss per target token (fp16 unscaled
     before the norm) are within 5% of fp32's;
  3. a run stopped half way and resumed logs the losses of the uninterrupted run (rel. 1e-4: GPU
     kernels are not bitwise deterministic); packed rows compiled, replayed as CUDA graphs and with
     FlexAttention log the eager packed losses (rel. 1e-3);
  4. torchrun with 1 process trains (no process group: world size 1), and with 2 GPUs, 2 processes
     (nccl) reach the weights of 1 process with update_freq 2 (atol 1e-4);
  5. greedy translations of a test slice on the GPU (fp32) equal the CPU's, and translations with
     --cuda-graphs those without: every line in fp32, 99% in bf16, greedy and beam 5;
  6. on a GPU with FP8 tensor cores (compute capability 8.9 on, torchao installed), transformer-big
     trains 300 updates of 32,768 tokens (packed, graphed) in fp8 with the loss curve of bf16 within
     1% (means of 10 updates), and the two runs' throughput after 100 updates (--fp8-runs
     bf16,bf16:2 measures the gap between two bf16 runs of different seeds instead);
Speeds, and the profile of a training update, are bench/train_throughput.py's and
bench/decode_speed.py's.
`--device cpu` runs the same code on a CPU with small sizes, to check the script itself.
`--only precisions,norms,...` runs some of the sections (all of SECTIONS by default); with `--work DIR`
the tokenizer, the dataset and the fp32 model are kept there and reused by a later call, so the whole
check can be split over several calls on a machine that limits each one. `--model FILE` translates
with a trained model (a recipe's model1.pt) instead of the few-hundred-update fp32 run.

This file reads the options; the sections are bench/gpu_checks/sections.py's, the steps of --all
bench/gpu_checks/steps.py's (a method each).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from common import DEFAULT_MULTI30K
from gpu_checks.sections import SECTIONS, run_sections
from gpu_checks.steps import run_all


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--work", type=Path, default=None, help="keep runs here (default: a temporary folder)")
    parser.add_argument("--model", type=Path, default=None, help="translate and decode with this model file")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections to run (default: all)")
    parser.add_argument(
        "--fp8-runs", default="bf16,fp8", help="the fp8 section's runs, PRECISION[:SEED], the first the reference"
    )
    parser.add_argument("--all", action="store_true", help="the GPU check in one command: tests, recipe, throughput, decoding, serving")  # fmt: skip
    parser.add_argument("--budget-s", type=float, default=540.0, help="--all: start no step after this many seconds")
    args = parser.parse_args()
    if args.all:
        run_all(args)
    only = set(args.only.split(","))
    if not only <= set(SECTIONS):
        parser.error(f"--only: unknown section(s) {', '.join(sorted(only - set(SECTIONS)))}; choose from {', '.join(SECTIONS)}")  # fmt: skip
    run_sections(args, only)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", str(min(8, os.cpu_count() or 1)))
    main()
