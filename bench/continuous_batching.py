"""The server's batching without HTTP: N clients that each send their next sentence as soon as the
last one is answered, through mtkit serve's own queue and worker (mtkit.dynamic_batching.Batcher) in one
process, with the PyTorch engine's running search (continuous batching, as `mtkit serve` runs it,
and joining at every step, as with --max-wait-ms 0) and batch after batch (each batch waits for its
longest sentence).

    python bench/continuous_batching.py -m runs/multi30k/model.pt [--src en] [--clients 8,32] [--seconds 15]
        [--precision auto]

The sentences are test2016's, in order, cycled; beam 5, lenpen 0.6, on the CPU in --precision (auto,
as `mtkit serve` runs: bf16 where the CPU has it, else fp32). Against
bench/serve_load.py, the difference is what HTTP and the event loop cost.
"""

from __future__ import annotations

import argparse
import itertools
import threading
import time
from pathlib import Path

from common import DEFAULT_MULTI30K, conditions, print_table

from mtkit.checkpoint import load_model_file
from mtkit.dynamic_batching import Batcher, BatchStats, Job
from mtkit.search import MAX_SOURCE_TOKENS, SearchConfig
from mtkit.translate import Translator

SETTINGS = {  # name: (max_wait_s, continuous)
    "continuous (serve's default)": (0.02, True),
    "continuous, joining every step": (0.0, True),
    "batch after batch": (0.0, False),
}


def load_translator(model: Path, precision: str) -> Translator:
    translator = Translator(load_model_file(model), SearchConfig(beam=5, lenpen=0.6), device="cpu", precision=precision)
    translator.translate(["Ein Hund läuft.", "A dog runs."] * 16)  # warm-up
    return translator


def serve_in_process(model: Path, precision: str, lines: list[str], clients: int, seconds: float, setting) -> list:
    """[sentences/s, ms per batch or step, sentences per batch or step] of `clients` closed-loop
    clients submitting single sentences to a Batcher. As in `mtkit serve`, the worker thread builds
    the model: torch's OpenMP threads belong to the thread that calls them (docs/RESULTS.md, "Measured design choices")."""
    max_wait_s, continuous = setting
    batches: list[BatchStats] = []  # until the deadline (not while the last sentences drain)
    done = threading.Event()
    built: list[Translator] = []
    setup_over = threading.Event()

    def setup() -> None:
        try:
            built.append(load_translator(model, precision))
        finally:
            setup_over.set()

    def translate(texts, options, deliver):
        built[0].translate_hypotheses(texts, on_line=lambda i, nbest_list: deliver(i, nbest_list))

    def open_stream(options, deliver):
        return built[0].open_stream(lambda key, line, nbest_list: deliver(key, nbest_list)) if continuous else None

    batcher = Batcher(
        translate, 4096, max_wait_s, 2048, on_batch=lambda stats: done.is_set() or batches.append(stats),
        setup=setup, open_stream=open_stream,
    )  # fmt: skip
    batcher.start()
    setup_over.wait()  # the worker builds the model first
    if not built:
        raise SystemExit(f"{model}: the model could not be loaded")
    lengths = [len(ids) for ids in built[0].src_tokenizer.encode_batch(lines)]
    jobs = itertools.cycle([(line, min(n, MAX_SOURCE_TOKENS) + 1) for line, n in zip(lines, lengths)])
    answered = itertools.count()

    def send(_=None) -> None:
        """A client's next sentence, sent as its last one is answered (from the worker's thread):
        the clients need no threads of their own and cost next to nothing."""
        if done.is_set():
            return
        text, tokens = next(jobs)
        batcher.submit([Job(text, tokens, "beam5")])[0].add_done_callback(send)
        next(answered)

    start = time.perf_counter()
    for _ in range(clients):
        send()
    time.sleep(seconds)
    done.set()
    elapsed = time.perf_counter() - start
    sent = next(answered)  # every sent sentence but the last `clients` ones has been answered
    batcher.stop()
    searching = sum(b.sentences for b in batches)
    return [(sent - clients) / elapsed, 1e3 * sum(b.seconds for b in batches) / len(batches), searching / len(batches)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--src", default="en")
    parser.add_argument("--clients", default="8,32")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--precision", default="auto", help="auto, fp32 or bf16")
    args = parser.parse_args()
    lines = (args.data / f"test2016.{args.src}").read_text(encoding="utf-8").splitlines()
    rows = []
    for clients in map(int, args.clients.split(",")):
        for name, setting in SETTINGS.items():
            rate, ms, per_batch = serve_in_process(args.model, args.precision, lines, clients, args.seconds, setting)
            rows.append([name, clients, f"{rate:.1f}", f"{ms:.1f}", f"{per_batch:.1f}"])
    translator = load_translator(args.model, args.precision)  # on this thread, now that the workers are gone
    start = time.perf_counter()
    translator.translate(lines)
    offline = len(lines) / (time.perf_counter() - start)
    precision = translator.precision
    print(f"the server's batching in one process: {args.model}, test2016.{args.src}, beam 5, lenpen 0.6, {precision}, ")
    print(f"{args.seconds:g} s per row; {conditions()}\n")
    print_table(["batching", "clients", "sentences/s", "ms per step (batch)", "sentences per step (batch)"], rows)
    print(f"\noffline translation of all {len(lines):,} sentences (batches of 128): {offline:.1f} sentences/s")


if __name__ == "__main__":
    main()
