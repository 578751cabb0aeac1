"""Host time to collate training batches: the array gather (mtkit.data.batching.collate) against padding
one sentence at a time, on a preprocessed dataset.

    python bench/collate_speed.py -d DATA_BIN [--max-tokens 8192,32768] [--batches 50]

Prints milliseconds per batch (the median over --batches of an epoch's batches) for each budget.
On a GPU the trainer collates ahead on a thread, but that thread shares the host with the one
launching kernels, so this time matters there too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from common import REPO, conditions, print_table

sys.path.insert(0, str(REPO))
from mtkit.data.batching import collate, make_batches, pad_batch  # noqa: E402
from mtkit.data.dataset import TrainingSamples  # noqa: E402
from mtkit.text.tokenizer import BOS_ID, EOS_ID  # noqa: E402


def sentence_by_sentence(dataset, indices: np.ndarray) -> None:
    pairs = [dataset[int(i)] for i in indices]
    src, tgt = [s for s, _ in pairs], [t for _, t in pairs]
    pad_batch(src, suffix=EOS_ID), pad_batch(tgt, prefix=BOS_ID), pad_batch(tgt, suffix=EOS_ID)


def median_ms(function, dataset, batches: list[np.ndarray]) -> float:
    times = []
    for indices in batches:
        started = time.perf_counter()
        function(dataset, indices)
        times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-d", "--data", type=Path, required=True)
    parser.add_argument("--max-tokens", default="8192,32768")
    parser.add_argument("--batches", type=int, default=50)
    args = parser.parse_args()
    dataset = TrainingSamples(args.data)
    print(f"conditions: {conditions()}; {len(dataset):,} training pairs in {args.data}")
    rows = []
    for max_tokens in map(int, args.max_tokens.split(",")):
        batches, _ = make_batches(dataset.src_lengths, dataset.tgt_lengths, max_tokens, seed=1, epoch=0)
        batches = batches[: args.batches]
        sentences = statistics.median(len(b) for b in batches)
        old = median_ms(sentence_by_sentence, dataset, batches)
        new = median_ms(collate, dataset, batches)
        rows.append([max_tokens, sentences, f"{old:.2f}", f"{new:.2f}", f"{old / new:.1f}x"])
    print_table(["max_tokens", "sentences per batch", "sentence by sentence ms", "array gather ms", "faster"], rows)


if __name__ == "__main__":
    main()
