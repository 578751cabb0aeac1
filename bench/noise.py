"""preprocess's noise filters on Multi30k English-German with injected noise: how many clean pairs
they keep and how much of each kind of noise they remove, and the language identifier's speed.

    python bench/noise.py [--data ../shared/data/multi30k] [--clean 10000] [--per-kind 500]

The clean pairs are the first --clean of train.en/train.de; each kind of noise takes --per-kind
pairs from later lines (so no noisy pair is a clean one): French or Czech (train.fr, train.cs: the
same captions) in place of German, the sides swapped, the source copied as the target, a URL as the
target, and a target of six captions (a length outlier). The corpus is shuffled, run through `mtkit
preprocess` with the defaults and then with every filter, and the kept pairs are matched to their
origin by text.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from common import DEFAULT_MULTI30K, conditions, mtkit_command, print_table, run_measured

FILTERS = ["--langid", "--min-script-share", "0.5", "--drop-copies", "--check-numbers"]


def noisy_corpus(data: Path, clean: int, per_kind: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """(source, target, kind) triples: kind "clean" or the noise's name."""
    side = {
        lang: (data / f"train.{lang}").read_text(encoding="utf-8").splitlines() for lang in ("en", "de", "fr", "cs")
    }
    rng = random.Random(seed)
    pairs = [(side["en"][i], side["de"][i], "clean") for i in range(clean)]
    later = iter(range(clean, len(side["en"])))

    def take(make, kind):
        for _ in range(per_kind):
            i = next(later)
            pairs.append((*make(i), kind))

    take(lambda i: (side["en"][i], side["fr"][i]), "French as German")
    take(lambda i: (side["en"][i], side["cs"][i]), "Czech as German")
    take(lambda i: (side["de"][i], side["en"][i]), "sides swapped")
    take(lambda i: (side["en"][i], side["en"][i]), "source copied")
    take(lambda i: (side["en"][i], f"https://www.example.com/{rng.randrange(10**6)}/{i}.html"), "URL as target")
    take(lambda i: (side["en"][i], " ".join(side["de"][i : i + 6])), "length outlier")
    rng.shuffle(pairs)
    return pairs


KINDS = ["clean", "French as German", "Czech as German", "sides swapped", "source copied", "URL as target",
         "length outlier"]  # fmt: skip


def kept_pairs(dataset: Path) -> list[tuple[str, str]]:
    from mtkit.data.dataset import ParallelDataset
    from mtkit.text.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(dataset / "tokenizer.json")
    data = ParallelDataset(dataset, "train")
    rows = [data[i] for i in range(len(data))]
    sources = tokenizer.decode_batch([src.tolist() for src, _ in rows])
    targets = tokenizer.decode_batch([tgt.tolist() for _, tgt in rows])
    return list(zip(sources, targets))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--clean", type=int, default=10_000)
    parser.add_argument("--per-kind", type=int, default=500)
    args = parser.parse_args()
    print(f"conditions: {conditions()}")
    from mtkit.text.langid import identify
    from mtkit.text.tokenizer import Tokenizer

    pairs = noisy_corpus(args.data, args.clean, args.per_kind)
    kinds = KINDS
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for index, lang in enumerate(("en", "de")):
            (work / f"noisy.{lang}").write_text("".join(p[index] + "\n" for p in pairs), encoding="utf-8")
        tokenizer_command = mtkit_command(
            "train-tokenizer", "-i", args.data / "train.en", "-i", args.data / "train.de", "-o", work / "tok.json",
            "--vocab-size", 8000, "--split-punctuation",
        )  # fmt: skip
        run_measured(tokenizer_command)
        tokenizer = Tokenizer.load(work / "tok.json")

        def key(src: str, tgt: str) -> tuple[str, str]:
            return tokenizer.normalize(src).strip(), tokenizer.normalize(tgt).strip()

        origin: dict[tuple[str, str], str] = {key(s, t): kind for s, t, kind in pairs}
        columns = {}
        for name, flags in (("defaults", []), ("every filter", FILTERS)):
            out = work / name.replace(" ", "-")
            command = mtkit_command(
                "preprocess", "-s", "en", "-t", "de", "--train", work / "noisy", "--tokenizer", work / "tok.json",
                "-o", out, *flags,
            )  # fmt: skip
            seconds, _ = run_measured(command)
            dropped = json.loads((out / "manifest.json").read_text())["splits"]["train"]["dropped"]
            kept = [origin[key(s, t)] for s, t in kept_pairs(out)]
            columns[name] = (seconds, dropped, {kind: kept.count(kind) for kind in kinds})
    totals = {kind: sum(k == kind for _, _, k in pairs) for kind in kinds}
    rows = []
    for kind in kinds:
        shares = []
        for _, _, kept in columns.values():
            share = kept[kind] / totals[kind] if kind == "clean" else 1 - kept[kind] / totals[kind]
            shares.append(f"{100 * share:.1f}%")
        rows.append([f"{kind} ({'kept' if kind == 'clean' else 'removed'})", f"{totals[kind]:,}", *shares])
    noise_total = sum(n for kind, n in totals.items() if kind != "clean")
    for_all = []
    for _, _, kept in columns.values():
        removed = noise_total - sum(n for kind, n in kept.items() if kind != "clean")
        for_all.append(f"{100 * removed / noise_total:.1f}%")
    rows.append(["all noise (removed)", f"{noise_total:,}", *for_all])
    print(f"\n{len(pairs):,} pairs, preprocess with the defaults and with {' '.join(FILTERS)}:")
    print_table(["pairs", "count", *columns], rows)
    for name, (seconds, dropped, _) in columns.items():
        counts = ", ".join(f"{reason} {n:,}" for reason, n in dropped.items() if n)
        print(f"{name}: {seconds:.1f}s; dropped: {counts}")

    lines = [src for src, _, _ in pairs] + [tgt for _, tgt, _ in pairs]
    identify(lines[0])  # the model loads once
    started = time.perf_counter()
    for line in lines:
        identify(line)
    per_line = (time.perf_counter() - started) / len(lines) * 1000
    print(f"\nlanguage identifier (py3langid): {per_line:.3f} ms per line over {len(lines):,} lines, one process")


if __name__ == "__main__":
    main()
