"""Where beam search spends its time: torch.profiler's top operators over a translation of test2016.

    python bench/decode_profile.py -m runs/multi30k_en_de/model.pt [--lines 256] [--batch-size 128] [--beam 5]

The model translates the first --lines sentences of test2016 once untimed (warm-up), once timed
(sentences/s) and once under the profiler, in batches of --batch-size sentences, fp32 on the CPU,
lenpen 0.6. The table lists the operators by their own (self) CPU time.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from common import DEFAULT_MULTI30K, conditions
from torch.profiler import ProfilerActivity, profile

from mtkit.checkpoint import load_model_file
from mtkit.search import SearchConfig
from mtkit.translate import Translator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--src", default="en")
    parser.add_argument("--lines", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--rows", type=int, default=15, help="operators to list")
    args = parser.parse_args()
    lines = (args.data / f"test2016.{args.src}").read_text(encoding="utf-8").splitlines()[: args.lines]
    translator = Translator(
        load_model_file(args.model), SearchConfig(beam=args.beam, lenpen=0.6), device="cpu", precision="fp32"
    )

    def translate_all() -> float:
        start = time.perf_counter()
        for i in range(0, len(lines), args.batch_size):
            translator.translate(lines[i : i + args.batch_size])
        return len(lines) / (time.perf_counter() - start)

    print(f"conditions: {conditions()}")
    print(f"model: {args.model}; first {len(lines)} lines of test2016, beam {args.beam}, batch size {args.batch_size}")
    translate_all()
    print(f"sentences/s: {translate_all():.1f} (without the profiler)\n")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        translate_all()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
