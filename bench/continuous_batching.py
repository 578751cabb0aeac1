"""Continuous batching without HTTP: N clients that each send their next sentence as soon as the last
one is answered, served in one process by a running search (what `mtkit serve` does with the
PyTorch engine) and, for comparison, batch after batch (each batch waits for its longest sentence).

    python bench/continuous_batching.py -m runs/multi30k/model.pt [--src en] [--clients 8,32] [--seconds 15]

The sentences are test2016's, in order, cycled; beam 5, lenpen 0.6, fp32 on the CPU. Against
bench/serve_load.py, the difference is what HTTP, the event loop and the load generator cost.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from common import DEFAULT_MULTI30K, conditions, print_table

from mtkit.checkpoint import load_model_file
from mtkit.search import SearchConfig
from mtkit.translate import Translator


def continuous(translator: Translator, sentences, clients: int, seconds: float) -> tuple[float, float, float]:
    """(sentences/s, ms per step, mean sentences per step) of one running search that each finished
    sentence's client rejoins at the next step."""
    answered: list[int] = []
    stream = translator.open_stream(lambda key, line, nbest: answered.append(key))
    keys = itertools.count()
    stream.add([next(keys) for _ in range(clients)], [next(sentences) for _ in range(clients)])
    steps = searching = 0
    start, done_before = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        if answered:
            done_before += len(answered)
            stream.add([next(keys) for _ in answered], [next(sentences) for _ in answered])
            answered.clear()
        searching += len(stream.search.ids)
        stream.step()
        steps += 1
    elapsed = time.perf_counter() - start
    return (done_before + len(answered)) / elapsed, 1e3 * elapsed / steps, searching / steps


def batch_after_batch(translator: Translator, sentences, clients: int, seconds: float) -> float:
    """Sentences/s when each batch of `clients` sentences is translated whole before the next."""
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        translator.translate([next(sentences) for _ in range(clients)])
        done += clients
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--src", default="en")
    parser.add_argument("--clients", default="8,32")
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    lines = (args.data / f"test2016.{args.src}").read_text(encoding="utf-8").splitlines()
    translator = Translator(
        load_model_file(args.model), SearchConfig(beam=5, lenpen=0.6), device="cpu", precision="fp32"
    )
    translator.translate(lines[:64])  # warm-up
    rows = []
    for clients in map(int, args.clients.split(",")):
        rate, step_ms, per_step = continuous(translator, itertools.cycle(lines), clients, args.seconds)
        batched = batch_after_batch(translator, itertools.cycle(lines), clients, args.seconds)
        rows.append([clients, f"{rate:.1f}", f"{step_ms:.1f}", f"{per_step:.1f}", f"{batched:.1f}"])
    start = time.perf_counter()
    translator.translate(lines)
    offline = len(lines) / (time.perf_counter() - start)
    print(f"continuous batching in one process: {args.model}, test2016.{args.src}, beam 5, lenpen 0.6, fp32, ")
    print(f"{args.seconds:g} s per row; {conditions()}\n")
    print_table(["clients", "continuous sent/s", "ms per step", "sentences per step", "batch after batch sent/s"], rows)
    print(f"\noffline translation of all {len(lines):,} sentences (batches of 128): {offline:.1f} sentences/s")


if __name__ == "__main__":
    main()
