"""The data path at scale: a generated parallel corpus with a Zipfian vocabulary of millions of distinct
words (not a small corpus repeated, so the tokenizer's counts are exercised too), then each step with
its wall time and peak memory, for each corpus size:

  train-tokenizer   a 32k joint BPE, learned from a sample of --max-lines lines (mtkit's default)
  preprocess        with --dedup
  batch plan        one epoch's batches (mtkit.data.batching.make_batches) over the dataset's lengths,
                    and the anonymous memory (not file-backed pages) the dataset and the plan take
  train             from start to the first update, transformer-tiny (so the model costs little),
                    and `train --resume` from there to the next update

    python bench/scale.py [--pairs 450000,4500000] [--work DIR]

Needs about 200 bytes of disk per pair (text and dataset); --work keeps the files (default: a
temporary folder, removed afterwards).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from common import REPO, conditions, mtkit_command, print_table, run_measured

SYLLABLES = [c + v for c in "bdfghklmnprstvwz" for v in "aeiou"]  # 80: four syllables name 40M words
WORDS = 3_000_000  # distinct words on each side
ZIPF_EXPONENT = 1.05


def word(index: int, offset: int) -> str:
    index += offset
    parts = []
    while True:
        index, rest = divmod(index, len(SYLLABLES))
        parts.append(SYLLABLES[rest])
        if index == 0:
            return "".join(parts)
        index -= 1


def write_corpus(prefix: Path, pairs: int, seed: int = 0) -> None:
    """PREFIX.en and PREFIX.de: sentences of 3-60 words (mean ~22) drawn from a Zipfian vocabulary;
    the German side renames each English word and drops or repeats a word now and then."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, WORDS + 1, dtype=np.float64)
    cdf = np.cumsum(ranks**-ZIPF_EXPONENT)
    cdf /= cdf[-1]
    english = [word(i, 0) for i in range(WORDS)]
    german = [word(i, 7_000_000).capitalize() if i % 5 == 0 else word(i, 7_000_000) for i in range(WORDS)]
    chunk = 100_000
    with open(f"{prefix}.en", "w") as en, open(f"{prefix}.de", "w") as de:
        for start in range(0, pairs, chunk):
            count = min(chunk, pairs - start)
            lengths = np.clip(rng.gamma(4.0, 5.5, count).astype(np.int64), 3, 60)
            ids = np.searchsorted(cdf, rng.random(int(lengths.sum())))
            ends = np.cumsum(lengths)
            for sentence in np.split(ids, ends[:-1]):
                words = sentence.tolist()
                en.write(" ".join(english[i] for i in words) + " .\n")
                if len(words) > 4 and rng.random() < 0.3:
                    words = words[:-1] if rng.random() < 0.5 else words + words[-1:]
                de.write(" ".join(german[i] for i in words) + " .\n")


BATCH_PLAN = """
import sys, time
sys.path.insert(0, sys.argv[1])
from mtkit.data.batching import make_batches
from mtkit.data.dataset import TrainingSamples

def anonymous_mib():
    # Anonymous: memory that is this process's own. Private_Clean also counts the pages of the
    # memory-mapped dataset files that only this process has read, which the kernel can drop at will.
    fields = dict(line.split(":", 1) for line in open("/proc/self/smaps_rollup").read().splitlines()[1:])
    return int(fields["Anonymous"].split()[0]) / 1024

before = anonymous_mib()
data = TrainingSamples(sys.argv[2])
opened = anonymous_mib()
started = time.perf_counter()
batches, _ = make_batches(data.samples[0].src_lengths, data.samples[0].tgt_lengths, 4096, seed=1, epoch=0)
seconds = time.perf_counter() - started
print(seconds, opened - before, anonymous_mib() - before, len(batches))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default="450000,4500000", help="comma-separated corpus sizes")
    parser.add_argument("--work", type=Path, help="keep the corpora and datasets here")
    parser.add_argument("--generate", type=Path, help=argparse.SUPPRESS)  # write one corpus, PREFIX.en/.de
    args = parser.parse_args()
    if args.generate:
        return write_corpus(args.generate, int(args.pairs))
    print(f"conditions: {conditions()}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for pairs in (int(p) for p in args.pairs.split(",")):
            rows += measure(work / f"p{pairs}", pairs)
            print_table(["pairs", "step", "seconds", "peak RSS MiB", "detail"], rows)


def measure(root: Path, pairs: int) -> list[list[object]]:
    root.mkdir(exist_ok=True)
    corpus = root / "train"
    if not Path(f"{corpus}.de").exists():  # in a process of its own: this one's memory stays small, and a
        # child's peak RSS, counted from its fork, measures the command alone
        subprocess.run([sys.executable, __file__, "--generate", str(corpus), "--pairs", str(pairs)], check=True)
    tokenizer, data, run = root / "tokenizer.json", root / "data-bin", root / "run"
    rows = []
    seconds, rss = run_measured(mtkit_command("train-tokenizer", "-i", f"{corpus}.en", "-i", f"{corpus}.de",
                                              "-o", tokenizer, "--vocab-size", "32000"))  # fmt: skip
    rows.append([f"{pairs:,}", "train-tokenizer (32k BPE)", seconds, rss, ""])
    seconds, rss = run_measured(mtkit_command("preprocess", "-s", "en", "-t", "de", "--train", corpus,
                                              "--tokenizer", tokenizer, "-o", data, "--dedup", "--force"))  # fmt: skip
    on_disk = sum(f.stat().st_size for f in data.iterdir()) / 2**20
    rows.append([f"{pairs:,}", "preprocess --dedup", seconds, rss, f"{on_disk:,.0f} MiB on disk"])
    plan = subprocess.run([sys.executable, "-c", BATCH_PLAN, str(REPO), str(data)], capture_output=True, check=True)
    seconds, opened, planned, batches = plan.stdout.split()
    rows.append([f"{pairs:,}", "batch plan, one epoch (4,096 tokens)", float(seconds), "",
                 f"{int(batches):,} batches; anonymous MiB: dataset {float(opened):,.0f}, "
                 f"with the plan {float(planned):,.0f}"])  # fmt: skip
    seconds, rss = run_measured(mtkit_command("train", "-d", data, "-o", run, "--force", "--set",
                                              "model.preset=transformer-tiny", "--set", "train.max_steps=1",
                                              "--set", "train.max_tokens=4096"))  # fmt: skip
    rows.append([f"{pairs:,}", "train: start to first update (tiny model)", seconds, rss, ""])
    seconds, rss = run_measured(mtkit_command("train", "--resume", run, "--set", "train.max_steps=2"))
    rows.append([f"{pairs:,}", "train --resume: to the next update", seconds, rss, ""])
    return rows


if __name__ == "__main__":
    main()
