"""Runaway translations with and without the loop guard, on Multi30k val and test2016.

    python bench/loops.py -m runs/demo/model.pt [-m MODEL2 ...] [--data ../shared/data/multi30k] [--lenpen 1.8] [--beam 5]

For each set and each guard setting (off: --loop-ngram 0; on: the defaults, no 4-gram of subwords
more than twice), the model translates the set with mtkit's search and the table gives BLEU and
the number of outputs in which a 4-gram occurs more than twice: of subwords (what the model
produced) and of whitespace-separated words, and the translation time (fp32, the threads torch
chooses). The outputs that change are printed below the table.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import sacrebleu
from common import DEFAULT_MULTI30K, conditions, print_table

from mtkit.decoding.search import SearchConfig
from mtkit.model.files import load_model_file
from mtkit.translation.translate import Translator


def loops(tokens: list, n: int = 4, most: int = 2) -> bool:
    """Whether some n-gram of `tokens` occurs more than `most` times."""
    counts = Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
    return bool(counts) and max(counts.values()) > most


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, action="append", required=True, help="repeat for an ensemble")
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--lenpen", type=float, default=1.8)
    args = parser.parse_args()
    print(f"conditions: {conditions()}")
    names = " + ".join(map(str, args.model))
    print(f"model: {names}; beam {args.beam}, lenpen {args.lenpen}; a loop: a 4-gram more than twice\n")
    model_files = [load_model_file(path) for path in args.model]
    rows, changed = [], []
    for split in ("val", "test2016"):
        sources = (args.data / f"{split}.{args.src}").read_text(encoding="utf-8").splitlines()
        references = (args.data / f"{split}.{args.tgt}").read_text(encoding="utf-8").splitlines()
        outputs = {}
        for guard, loop_ngram in (("off", 0), ("on", SearchConfig.loop_ngram)):  # on: the defaults
            cfg = SearchConfig(beam=args.beam, lenpen=args.lenpen, loop_ngram=loop_ngram)
            translator = Translator(model_files, cfg, device="cpu", precision="fp32")
            started = time.perf_counter()
            nbest = translator.translate_hypotheses(sources)
            seconds = time.perf_counter() - started
            texts = [n[0][1] for n in nbest]
            outputs[guard] = texts
            rows.append(
                [
                    split,
                    guard,
                    f"{sacrebleu.corpus_bleu(texts, [references]).score:.2f}",
                    sum(loops(n[0][0].tokens) for n in nbest),
                    sum(loops(text.split()) for text in texts),
                    round(seconds, 1),
                ]
            )
        changed += [
            (split, i + 1, off, on) for i, (off, on) in enumerate(zip(outputs["off"], outputs["on"])) if off != on
        ]
    print_table(["set", "guard", "BLEU", "outputs with a subword loop", "with a word loop", "seconds"], rows)
    print(f"\n{len(changed)} outputs differ between the two settings:")
    for split, line, off, on in changed:
        print(f"{split}:{line}\n  off: {off}\n  on:  {on}")


if __name__ == "__main__":
    main()
