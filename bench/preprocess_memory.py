"""Tokenizer training time, and preprocessing throughput and peak memory for 1x and 10x Multi30k train.

    python bench/preprocess_memory.py [--data ../shared/data/multi30k] [--scales 1,10]

Peak memory should not grow with the corpus: preprocessing streams in chunks.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from common import DEFAULT_MULTI30K, conditions, mtkit_command, print_table, run_measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--scales", default="1,10")
    parser.add_argument("--vocab-size", type=int, default=8000)
    args = parser.parse_args()
    print(f"conditions: {conditions()}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tokenizer = work / "tokenizer.json"
        seconds, rss = run_measured(
            mtkit_command(
                "train-tokenizer",
                "-i",
                args.data / "train.en",
                "-i",
                args.data / "train.de",
                "-o",
                tokenizer,
                "--vocab-size",
                args.vocab_size,
            )
        )
        print(
            f"\ntokenizer: {args.vocab_size} joint BPE on Multi30k train (58,000 lines): {seconds:.1f} s, peak {rss:.0f} MiB\n"
        )
        rows = []
        for scale in map(int, args.scales.split(",")):
            prefix = work / f"train{scale}x"
            for lang in ("en", "de"):
                text = (args.data / f"train.{lang}").read_text(encoding="utf-8")
                Path(f"{prefix}.{lang}").write_text(text * scale, encoding="utf-8")
            pairs = 29000 * scale
            seconds, rss = run_measured(
                mtkit_command(
                    "preprocess",
                    "-s",
                    "en",
                    "-t",
                    "de",
                    "--train",
                    prefix,
                    "--tokenizer",
                    tokenizer,
                    "-o",
                    work / f"bin{scale}",
                )
            )
            rows.append([f"{scale}x", f"{pairs:,}", seconds, pairs / seconds, rss])
        print_table(["corpus", "pairs", "seconds", "pairs/s", "peak RSS MiB"], rows)


if __name__ == "__main__":
    main()
