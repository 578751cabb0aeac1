"""Off-target translations of a multilingual model: for each direction of a test set, the share of
outputs that the language identifier (py3langid, offline) puts in the requested language, beside
BLEU and chrF. Twice: among all the languages the identifier knows (142), and among the model's own languages
only (the question a user asks: did I get the language I asked for, or another of the model's?),
with the identifier's own rate on the references beside them (its error, not the model's).

    python bench/off_target.py -m runs/multi30k_multilingual/model.pt --test ../shared/data/multi30k/test2016 \
        --lang-pairs en-de,en-fr,en-cs [--lenpen 1.0] [--beam 5]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from common import conditions, print_table

from mtkit.decoding.search import SearchConfig
from mtkit.model.files import load_model_file
from mtkit.text.langid import identify
from mtkit.translation.evaluate import corpus_scores
from mtkit.translation.translate import Translator


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
    languages = tuple(sorted({lang for pair in args.lang_pairs.split(",") for lang in pair.split("-")}))

    def among_model_s(text: str) -> tuple[str, float]:
        return identify(text, among=languages)

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
        rows.append(
            [pair, round(scores["bleu"]["score"], 2), round(scores["chrf"]["score"], 2),
             share(outputs, target, identify), share(outputs, target, among_model_s),
             share(references, target, identify), share(references, target, among_model_s), round(seconds, 1)]
        )  # fmt: skip
    print(
        f"\n{args.model}, {args.test}, beam {args.beam}, lenpen {args.lenpen}; the model's languages: {', '.join(languages)}"
    )
    print_table(
        ["direction", "BLEU", "chrF", "outputs in the requested language (of 142)", "(of the model's)",
         "references (of 142)", "(of the model's)", "seconds"],
        rows,
    )  # fmt: skip


def share(texts: list[str], lang: str, identify_fn) -> str:
    return f"{100 * sum(identify_fn(text)[0] == lang for text in texts) / len(texts):.1f}%"


if __name__ == "__main__":
    main()
