"""The Multi30k recipe on a GPU in each training precision: does fp8 reach bf16's BLEU?

    python bench/recipe_precisions.py [--data ../shared/data/multi30k] [--work DIR] [--precisions bf16,fp8]
        [--seconds 120]

Runs `recipes/multi30k_en_de/run.sh --gpu --models 1 --set train.max_time=SECONDS --set
train.precision=P` for each precision, one after the other on the one GPU, with the length
penalty chosen on val from 0.6, 1.0, 1.4 and 1.8, and prints a table: updates made, the best val
BLEU, test2016 BLEU cased and lowercased (sacrebleu, with signatures). fp8 needs a GPU of compute
capability 8.9 or more and pip install 'mtkit[fp8]'. Two runs of 120 s take about 7.5 minutes.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import sacrebleu
import torch
from common import DEFAULT_MULTI30K, conditions, print_table

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "multi30k_en_de" / "run.sh"
LENPENS = "0.6 1.0 1.4 1.8"
BLEUS = (sacrebleu.BLEU(), sacrebleu.BLEU(lowercase=True))  # cased, as `mtkit evaluate` scores; lowercased


def run_recipe(data: Path, out: Path, precision: str, seconds: int) -> list[object]:
    """One recipe run; its row of the table."""
    command = ["bash", RECIPE, "--gpu", "--models", "1", "--out", out, "--set", f"train.max_time={seconds}",
               "--set", f"train.precision={precision}"]  # fmt: skip
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # this Python's mtkit
    env = {**os.environ, "DATA": str(data), "LENPENS": LENPENS, "PATH": path}
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode:
        return [precision, f"failed: {result.stderr.strip().splitlines()[-1]}", "", "", "", ""]
    return recipe_row(data, out, precision, result.stderr)


def recipe_row(data: Path, out: Path, precision: str, log: str) -> list[object]:
    """A finished run's row: from its log (stderr), val_lenpen.tsv and translations of test2016."""
    updates = re.findall(r"stopped at step (\d+)", log)
    val = max(float(line.split("\t")[1]) for line in (out / "val_lenpen.tsv").read_text().splitlines())
    hyps = (out / "test2016.hyp.de").read_text(encoding="utf-8").splitlines()
    refs = [(data / "test2016.de").read_text(encoding="utf-8").splitlines()]
    scores = [f"{metric.corpus_score(hyps, refs).score:.2f}" for metric in BLEUS]
    return [precision, updates[-1] if updates else "?", f"{val:.2f}", *scores, str(out)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--work", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--precisions", default="bf16,fp8")
    parser.add_argument("--seconds", type=int, default=120, help="training time of each run")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("recipe_precisions: the recipe's --gpu mode needs a CUDA GPU, and torch sees none here")
    print(f"conditions: {conditions()}\n", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        rows = [
            run_recipe(args.data, work / precision, precision, args.seconds) for precision in args.precisions.split(",")
        ]
    print(
        f"recipes/multi30k_en_de/run.sh --gpu --models 1, {args.seconds} s of training, lenpen chosen on val from {LENPENS}"
    )
    print_table(["precision", "updates", "best val BLEU", "test2016 BLEU", "lowercased", "run"], rows)
    print(
        f"\nsignatures: {sacrebleu.BLEU().get_signature()}; lowercased {sacrebleu.BLEU(lowercase=True).get_signature()}"
    )


if __name__ == "__main__":
    main()
