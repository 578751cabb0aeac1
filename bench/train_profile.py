"""Where a training update spends its time: torch.profiler's top operators, and how full the batches are.

    python bench/train_profile.py -d DATA_BIN [-c recipes/multi30k_en_de/config.yaml] [--updates 20]

Trains the config's model on a preprocessed dataset (mtkit preprocess) in this process: 10 updates
untimed, --updates timed (target tokens/s), then --updates under the profiler. The table lists the
operators by their own (self) CPU time. Before that, the share of real tokens in the padded batches
of one epoch, for the source and the target.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from common import REPO, conditions
from torch.profiler import ProfilerActivity, profile

from mtkit.batching import make_batches
from mtkit.config import load_config
from mtkit.train import Trainer


def padding_report(trainer: Trainer, max_tokens: int) -> str:
    lengths = trainer.train_data.src_lengths, trainer.train_data.tgt_lengths
    batches, _ = make_batches(*lengths, max_tokens, seed=1, epoch=0)
    src, tgt = (n.astype(np.int64) + 1 for n in lengths)  # with </s> (and <s> on the target side)
    padded_src = sum(len(b) * int(src[b].max()) for b in batches)
    padded_tgt = sum(len(b) * int(tgt[b].max()) for b in batches)
    return (
        f"one epoch: {len(batches):,} batches of at most {max_tokens:,} tokens; real tokens: "
        f"{100 * src.sum() / padded_src:.1f}% of the padded source, {100 * tgt.sum() / padded_tgt:.1f}% of the padded target"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-d", "--data", type=Path, required=True, help="a data-bin from mtkit preprocess")
    parser.add_argument("-c", "--config", type=Path, default=REPO / "recipes" / "multi30k_en_de" / "config.yaml")
    parser.add_argument("--set", action="append", default=[], help="config override, as for mtkit train")
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--rows", type=int, default=15, help="operators to list")
    args = parser.parse_args()
    config = load_config(args.config, ["train.precision=fp32", *args.set])
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(config, args.data, Path(tmp) / "run")
        trainer.model.train()
        position = (0, 0)

        def train(updates: int) -> float:
            nonlocal position
            tokens = 0.0
            for _ in range(updates):
                micro, position = trainer.stream.upcoming(position)
                tokens += trainer._update(micro, trainer.stream.prepare(micro).result())["tgt_tokens"]
            return tokens

        print(f"conditions: {conditions()}")
        print(f"config: {args.config} {' '.join(args.set)}, {config.train.precision}; data: {args.data}")
        print(padding_report(trainer, config.train.max_tokens))
        train(10)
        start = time.perf_counter()
        tokens = train(args.updates)
        print(f"target tokens/s: {tokens / (time.perf_counter() - start):,.0f} over {args.updates} updates\n")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            train(args.updates)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
        trainer.stream.close()


if __name__ == "__main__":
    main()
