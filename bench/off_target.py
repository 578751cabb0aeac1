"""Off-target translations of a multilingual model: for each direction of a test set, the share of
outputs that the language identifier (py3langid, offline) puts in the requested language, beside
BLEU and chrF.

    python bench/off_target.py -m runs/multi30k_multilingual/model.pt --test ../shared/data/multi30k/test2016 \
        --lang-pairs en-de,en-fr,en-cs [--lenpen 1.0] [--beam 5]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from common import conditions, print_table

from mtkit.checkpoint import load_model_file
from mtkit.evaluate import corpus_scores
from mtkit.langid import identify
from mtkit.search import SearchConfig
from mtkit.translate import Translator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--test", type=Path, required=True, help="PREFIX of PREFIX.SRC and PREFIX.TGT")
    parser.add_argument("--lang-pairs", required=True)
    parser.add_argument("--lenpen", type=float, default=1.0)
    parser.add_argument("--beam", type=int, default=5)
    args = parser.parse_args()
    print(f"conditions: {conditions()}")
    translator = Translator(load_model_file(args.model), SearchConfig(beam=args.beam, lenpen=args.lenpen), "cpu")
    rows = []
    for pair in args.lang_pairs.split(","):
        source, target = pair.split("-")
        sources = Path(f"{args.test}.{source}").read_text(encoding="utf-8").splitlines()
        references = Path(f"{args.test}.{target}").read_text(encoding="utf-8").splitlines()
        translator.set_target(target)
        started = time.perf_counter()
        outputs = translator.translate(sources)
        seconds = time.perf_counter() - started
        scores = corpus_scores(outputs, [references], ["bleu", "chrf"])
        on_target = sum(identify(text)[0] == target for text in outputs)
        rows.append(
            [pair, round(scores["bleu"]["score"], 2), round(scores["chrf"]["score"], 2),
             f"{100 * on_target / len(outputs):.1f}%", round(seconds, 1)]
        )  # fmt: skip
    print(f"\n{args.model}, {args.test}, beam {args.beam}, lenpen {args.lenpen}:")
    print_table(["direction", "BLEU", "chrF", "in the requested language", "seconds"], rows)


if __name__ == "__main__":
    main()
