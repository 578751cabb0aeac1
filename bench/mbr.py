"""Minimum Bayes risk decoding against beam search: BLEU, chrF and time of each setting on a Multi30k split.

    python bench/mbr.py -m MODEL [-m MODEL2 ...] [--data ../shared/data/multi30k] [--split val]
        [--settings beam5,mbr:16:sample:chrf,mbr:16:beam:chrf,mbr:8:both:chrf] [--epsilon 0.02] [--lenpen 1.0]
        [--lines N]

Each setting translates SPLIT.en in this process, the model loaded once per setting (not timed): `beamK`
is beam search of K, `mbr:N:SOURCE:UTILITY` is `translate --mbr N --mbr-source SOURCE --mbr-utility
UTILITY` (SOURCE beam, sample or both; the samples' --epsilon). Times are of the translation alone,
the utilities included; "x beam" is against the first beam setting. Scores are sacrebleu's corpus
BLEU and chrF against SPLIT.de. Choose settings on val; decode test2016 once with the chosen one.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import sacrebleu
from common import DEFAULT_MULTI30K, conditions, print_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def translator_for(setting: str, models: list[Path], args: argparse.Namespace):
    from mtkit.decoding.search_rules import SearchConfig
    from mtkit.interop.engines import Decoding, build_translator
    from mtkit.translation.mbr import MbrConfig

    if setting.startswith("beam"):
        cfg, mbr = SearchConfig(beam=int(setting[4:]), lenpen=args.lenpen), None
    else:
        _, n, source, utility = setting.split(":")
        cfg, mbr = SearchConfig(beam=1, lenpen=args.lenpen), MbrConfig(int(n), source, args.epsilon, utility)
    return build_translator(Decoding(search=cfg, device="cpu", precision=args.precision, mbr=mbr), models)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, action="append", required=True, help="repeat for an ensemble")
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--split", default="val")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--settings", default="beam5,mbr:16:sample:chrf,mbr:16:beam:chrf,mbr:8:both:chrf")
    parser.add_argument("--epsilon", type=float, default=0.02)
    parser.add_argument("--lenpen", type=float, default=1.0)
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--lines", type=int, default=0, help="the first N lines only (0: all)")
    args = parser.parse_args()
    sources = (args.data / f"{args.split}.{args.src}").read_text(encoding="utf-8").splitlines()
    references = (args.data / f"{args.split}.{args.tgt}").read_text(encoding="utf-8").splitlines()
    if args.lines:
        sources, references = sources[: args.lines], references[: args.lines]
    rows, baseline = [], None
    for setting in args.settings.split(","):
        translator = translator_for(setting, args.model, args)
        started = time.perf_counter()
        hypotheses = translator.translate(sources)
        seconds = time.perf_counter() - started
        baseline = baseline or (seconds if setting.startswith("beam") else None)
        bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
        chrf = sacrebleu.corpus_chrf(hypotheses, [references]).score
        rows.append(
            [setting, f"{bleu:.2f}", f"{chrf:.2f}", f"{seconds:.1f}", f"{seconds / baseline:.2f}x" if baseline else ""]
        )
        print(" ".join(map(str, rows[-1])), file=sys.stderr, flush=True)
    print(f"{args.split} ({len(sources):,} sentences), models {', '.join(map(str, args.model))}, lenpen {args.lenpen:g}, "
          f"epsilon {args.epsilon:g}, precision {translator.precision}; {conditions()}\n")  # fmt: skip
    print_table(["setting", "BLEU", "chrF", "seconds", "x beam"], rows)


if __name__ == "__main__":
    main()
