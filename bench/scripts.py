"""Tokenizers on text in many scripts: pre-token lengths, tokens per line, round trips, and the time and
peak memory of `mtkit train-tokenizer` on a mixed-script corpus, with and without --split-scripts.

    python bench/scripts.py [--lines 1000000] [--vocab-size 32000] [--compare-lines 200000]

The text is generated with Faker (MIT licence, `pip install faker`), whose locales ship real words,
names and addresses in their scripts: zh_CN, ja_JP and th_TH sentences (no spaces), ar_AA, he_IL and
fa_IR sentences (right to left; Persian with its zero-width non-joiners), hi_IN names and addresses
(Devanagari with combining marks), en_US sentences, and emoji (skin tones and ZWJ sequences among them).
Each script gets 1,000 held-out lines for the per-script table; --compare-lines trains the tokenizer
without --split-scripts (today's files' pre-tokenizer) on that many lines, for comparison.
"""

from __future__ import annotations

import argparse
import itertools
import random
import tempfile
from pathlib import Path

from common import conditions, mtkit_command, print_table, run_measured

SCRIPTS = ["zh", "ja", "th", "ar", "he", "fa", "hi", "en", "emoji"]
LOCALES = {"zh": "zh_CN", "ja": "ja_JP", "th": "th_TH", "ar": "ar_AA", "he": "he_IL", "fa": "fa_IR", "hi": "hi_IN"}
EMOJI = ["👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "🇩🇪", "🇯🇵", "❤️", "1️⃣", "🧑🏿\u200d💻", "😀"]


def line_maker(script: str, seed: int):
    """A function that returns one new line of `script`."""
    from faker import Faker

    rng = random.Random(seed)
    if script in ("en", "emoji"):
        fake = Faker("en_US")
    else:
        fake = Faker(LOCALES[script])
    fake.seed_instance(seed)
    if script == "hi":  # hi_IN's lorem words are Latin; its names and addresses are Devanagari
        return lambda: f"{fake.name()} {fake.address()} {fake.name()}".replace("\n", " ")
    if script == "fa":  # Persian writes some words' parts with a zero-width non-joiner
        return lambda: fake.sentence(nb_words=rng.randint(6, 20)).replace("ها", "\u200cها").replace("می ", "می\u200c")
    if script == "emoji":
        return lambda: " ".join(rng.choice([*EMOJI, fake.word()]) for _ in range(rng.randint(4, 14)))
    return lambda: fake.sentence(nb_words=rng.randint(6, 20))


def write_corpus(path: Path, lines: int, seed: int) -> None:
    makers = itertools.cycle([line_maker(script, seed + i) for i, script in enumerate(SCRIPTS)])
    with open(path, "w", encoding="utf-8") as out:
        for _ in range(lines):
            out.write(next(makers)().replace("\n", " ").strip() + "\n")


def train(corpus: Path, output: Path, vocab_size: int, split_scripts: bool) -> tuple[float, float]:
    flag = "--split-scripts" if split_scripts else "--no-split-scripts"
    command = mtkit_command("train-tokenizer", "-i", corpus, "-o", output, "--vocab-size", vocab_size, flag)
    return run_measured(command + ["--max-lines", "0"])


def per_script_rows(tokenizer_path: Path, held_out: dict[str, list[str]]) -> list[list[object]]:
    from mtkit.text.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(tokenizer_path)
    rows = []
    for script, lines in held_out.items():
        pieces = [len(piece) for line in lines for piece in tokenizer.pre_tokens(line)]
        ids = tokenizer.encode_batch(lines)
        decoded = tokenizer.decode_batch(ids)
        exact = sum(d == tokenizer.normalize(line).replace("▁", " ").strip() for d, line in zip(decoded, lines))
        rows.append(
            [script, max(pieces), round(sum(pieces) / len(pieces), 1), round(sum(map(len, ids)) / len(ids), 1),
             f"{exact}/{len(lines)}"]
        )  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--compare-lines", type=int, default=200_000)
    args = parser.parse_args()
    print(f"conditions: {conditions()}")
    makers = {script: line_maker(script, 1000 + i) for i, script in enumerate(SCRIPTS)}
    held_out = {script: [make().strip() for _ in range(1000)] for script, make in makers.items()}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_corpus(work / "mixed.txt", args.lines, seed=0)
        rows = []
        for lines, split in [(args.lines, True), (args.compare_lines, True), (args.compare_lines, False)]:
            if not lines:
                continue
            corpus = work / "mixed.txt"
            if lines != args.lines:
                corpus = work / f"first{lines}.txt"
                with open(work / "mixed.txt", encoding="utf-8") as full, open(corpus, "w", encoding="utf-8") as out:
                    out.writelines(itertools.islice(full, lines))
            output = work / f"tok-{lines}-{split}.json"
            seconds, rss = train(corpus, output, args.vocab_size, split)
            rows.append([f"{lines:,}", "on" if split else "off", round(seconds, 1), round(rss / 1024, 2)])
            if lines == args.lines:
                script_rows = per_script_rows(output, held_out)
            if not split:
                off_rows = per_script_rows(output, held_out)
        print(f"\ntrain-tokenizer, BPE, --vocab-size {args.vocab_size:,}, every line (--max-lines 0):")
        print_table(["lines", "--split-scripts", "seconds", "peak GiB"], rows)
        headers = ["script", "longest pre-token", "mean pre-token", "subwords per line", "round trips"]
        print(f"\nheld-out lines, the tokenizer of {args.lines:,} lines with --split-scripts:")
        print_table(headers, script_rows)
        if args.compare_lines:
            print(f"\nheld-out lines, the tokenizer of {args.compare_lines:,} lines without --split-scripts:")
            print_table(headers, off_rows)


if __name__ == "__main__":
    main()
