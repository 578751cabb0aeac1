"""Paragraphs and long lines on a trained model: Multi30k test2016 with 5 consecutive sentences joined
into one line, translated with and without --split-sentences, against translating the sentences one
by one; and a 3,000-word line of test2016's sentences in a file of 1,000 lines.

    python bench/paragraphs.py -m MODEL [-m MODEL2 ...] [--lenpen 0.6] [--data ../shared/data/multi30k]

BLEU is sacrebleu's against the joined references (200 paragraphs); "length" is its hypothesis
length over the references' length. Many captions end without a full stop, and joined they run on
into the next one, where no splitter can cut: the last two rows add a full stop to those first.
pysbd, the splitter, is a dependency of mtkit.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import time
from pathlib import Path

import sacrebleu
from common import DEFAULT_MULTI30K, conditions, mtkit_command, print_table

GROUP = 5


def translate(models: list[Path], lines: list[str], lenpen: float, *options: str) -> tuple[list[str], float, str]:
    """mtkit translate's output lines, its seconds, and its stderr."""
    command = mtkit_command("translate", *[a for m in models for a in ("-m", m)], "--lenpen", lenpen, *options)
    started = time.perf_counter()
    result = subprocess.run(command, input="".join(line + "\n" for line in lines).encode(), capture_output=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"failed: {' '.join(map(str, command))}\n{result.stderr.decode()[-2000:]}")
    return result.stdout.decode().splitlines(), seconds, result.stderr.decode()


def joined(lines: list[str]) -> list[str]:
    return [" ".join(lines[i : i + GROUP]) for i in range(0, len(lines), GROUP)]


def sentence_ends(text: str) -> int:
    return len(re.findall(r"[.!?](?=\s|$)", text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, action="append", required=True)
    parser.add_argument("--lenpen", type=float, default=0.6)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    args = parser.parse_args()
    print(f"conditions: {conditions()}")
    sources = (args.data / "test2016.en").read_text(encoding="utf-8").splitlines()
    references = joined((args.data / "test2016.de").read_text(encoding="utf-8").splitlines())
    paragraphs = joined(sources)
    one_by_one, seconds, _ = translate(args.model, sources, args.lenpen)
    rows = []

    def row(name: str, hypotheses: list[str], seconds: float) -> None:
        bleu = sacrebleu.corpus_bleu(hypotheses, [references])
        rows.append([name, f"{bleu.score:.2f}", f"{bleu.sys_len / bleu.ref_len:.3f}", round(seconds, 1)])

    row(f"the {len(sources):,} sentences one by one, joined in fives", joined(one_by_one), seconds)
    plain, seconds, _ = translate(args.model, paragraphs, args.lenpen)
    row(f"{len(paragraphs)} paragraphs of {GROUP} sentences", plain, seconds)
    split, seconds, _ = translate(args.model, paragraphs, args.lenpen, "--split-sentences")
    row(f"{len(paragraphs)} paragraphs of {GROUP} sentences, --split-sentences", split, seconds)
    # Captions often end without a full stop: joined, "in the water Three people" is one run-on, which
    # no splitter can cut. The same with a full stop added to every caption that has no final mark:
    ended = [line if line.rstrip()[-1:] in ".!?" else line.rstrip() + "." for line in sources]
    ended_one_by_one, seconds, _ = translate(args.model, ended, args.lenpen)
    row("the same, a full stop added to each caption without one: one by one", joined(ended_one_by_one), seconds)
    ended_split, seconds, _ = translate(args.model, joined(ended), args.lenpen, "--split-sentences")
    row("the same: 200 paragraphs, --split-sentences", ended_split, seconds)
    missing = sum(line != end for line, end in zip(sources, ended))
    print(f"\ntest2016 in paragraphs, lenpen {args.lenpen}, beam 5 ({missing} of its captions have no final mark):")
    print_table(["input", "BLEU", "length", "seconds"], rows)

    single, _, _ = translate(args.model, sources, args.lenpen, "--split-sentences")
    same = sum(a == b for a, b in zip(single, one_by_one))
    print(f"\ntest2016's {len(sources):,} lines with --split-sentences: {same:,} translations identical to without it")

    words = " ".join(sources * 3).split()[:3000]
    long_line = " ".join(words)
    lines = sources[:500] + [long_line] + sources[500:999]
    out, seconds, stderr = translate(args.model, lines, args.lenpen)
    notice = [line for line in stderr.splitlines() if "translated in" in line]
    print(
        f"\n1,000 lines with a {len(words):,}-word line in the middle: {len(out):,} lines out in {seconds:.1f}s; "
        f"the long line has {sentence_ends(long_line)} sentence ends, its translation {sentence_ends(out[500])} "
        f"({len(out[500].split()):,} words)"
    )
    for line in notice:
        print(f"  stderr: {line}")


if __name__ == "__main__":
    main()
