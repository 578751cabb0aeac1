"""Where beam search spends its time: torch.profiler's top operators over a translation of test2016.

    python bench/decode_profile.py -m runs/multi30k_en_de/model.pt [--lines 256] [--batch-size 128] [--beam 5]
        [--precision auto]

The model translates the first --lines sentences of test2016 once untimed (warm-up), once timed
(sentences/s), once timing every decoding step, and once under the profiler, in batches of
--batch-size sentences, on the CPU in --precision (auto: as `mtkit translate`), lenpen 0.6. The
step times are fitted as a + b x rows (least squares; rows = beams still searching): a is what a
step costs whatever its size. The table lists the operators by their own (self) CPU time.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from common import DEFAULT_MULTI30K, conditions
from torch.profiler import ProfilerActivity, profile

from mtkit.checkpoint import load_model_file
from mtkit.search import SearchConfig
from mtkit.translate import Translator


def step_costs(translator: Translator, translate_all) -> str:
    """Time each decoding step (model and search, up to the next step) against the rows it fed."""
    decode_step, steps = translator.model.decode_step, []
    previous: list = []

    def timed_step(tokens, state):
        now = time.perf_counter()
        if previous and previous[0][2] is state:  # the last step of a batch has no successor: left out
            steps.append((previous[0][1], now - previous[0][0]))
        previous[:] = [(now, tokens.numel(), state)]
        return decode_step(tokens, state)

    translator.model.decode_step = timed_step
    try:
        translate_all()
    finally:
        translator.model.decode_step = decode_step
    rows, seconds = np.array(steps, dtype=float).T
    (a, b), *_ = np.linalg.lstsq(np.stack([np.ones_like(rows), rows], axis=1), seconds, rcond=None)
    return (
        f"step time = {1e3 * a:.2f} ms + {1e6 * b:.1f} us x rows over {len(steps):,} steps "
        f"(mean {rows.mean():.0f} rows); the fixed part is {100 * a * len(steps) / seconds.sum():.0f}% of the step time"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--src", default="en")
    parser.add_argument("--lines", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--rows", type=int, default=15, help="operators to list")
    parser.add_argument("--precision", default="auto", help="auto, fp32 or bf16")
    args = parser.parse_args()
    lines = (args.data / f"test2016.{args.src}").read_text(encoding="utf-8").splitlines()[: args.lines]
    translator = Translator(
        load_model_file(args.model), SearchConfig(beam=args.beam, lenpen=0.6), device="cpu", precision=args.precision
    )

    def translate_all() -> float:
        start = time.perf_counter()
        for i in range(0, len(lines), args.batch_size):
            translator.translate(lines[i : i + args.batch_size])
        return len(lines) / (time.perf_counter() - start)

    print(f"conditions: {conditions()}")
    print(
        f"model: {args.model}; first {len(lines)} lines of test2016, beam {args.beam}, batch size {args.batch_size}, "
        f"{translator.precision}"
    )
    translate_all()
    print(f"sentences/s: {translate_all():.1f} (without the profiler)")
    print(step_costs(translator, translate_all) + "\n")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        translate_all()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
