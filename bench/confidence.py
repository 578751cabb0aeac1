"""How well each confidence signal tells good translations from bad ones, on test sets the calibration
never saw: Spearman's correlation with sentence chrF, and the mean sentence chrF of the lowest 10% by
the signal against the rest.

    python bench/confidence.py -m MODEL --calibration MODEL.confidence.json [--data ../shared/data/multi30k]
        [--sets test2016,test2016x2] [--lenpen 2.2] [--beam 5]

Each set is translated as `mtkit translate` would (beam, lenpen), and every signal of
mtkit.translation.confidence is computed for each translation, with the calibration's own signal (a sum
standardised by the validation set's means and deviations) and the calibrated confidence last.
A set NAMExK joins every K consecutive lines of NAME into one (longer inputs than the model saw, K
captions a line). The baseline is logprob: `mtkit score --normalize` of the model's own output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import DEFAULT_MULTI30K, conditions, print_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def read_set(data: Path, name: str, src: str, tgt: str) -> tuple[list[str], list[str]]:
    base, _, joined = name.partition("x")
    sides = [(data / f"{base}.{lang}").read_text(encoding="utf-8").splitlines() for lang in (src, tgt)]
    k = int(joined or 1)
    return tuple([" ".join(lines[i : i + k]) for i in range(0, len(lines) - k + 1, k)] for lines in sides)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, action="append", required=True)
    parser.add_argument("--calibration", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--sets", default="test2016,test2016x2")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--lenpen", type=float, default=0.6)
    parser.add_argument("--precision", default="auto")
    args = parser.parse_args()

    from mtkit.decoding.search_rules import SearchConfig
    from mtkit.interop.engines import Decoding, build_translator
    from mtkit.translation.confidence import SIGNALS, Calibration, sentence_chrf, signal_report, signal_values

    calibration = Calibration.load(args.calibration)
    cfg = SearchConfig(beam=args.beam, lenpen=args.lenpen)
    translator = build_translator(Decoding(search=cfg, device="cpu", precision=args.precision), args.model)
    rows = []
    for name in args.sets.split(","):
        sources, references = read_set(args.data, name, args.src, args.tgt)
        nbest_lists = translator.translate_hypotheses(sources)
        chrf = sentence_chrf([nbest[0][1] if nbest else "" for nbest in nbest_lists], references)
        values = {signal: signal_values(translator, sources, nbest_lists, signal) for signal in SIGNALS}
        values[f"{calibration.signal} (calibrated)"] = calibration.values(translator, sources, nbest_lists)
        values["confidence"] = calibration(values[f"{calibration.signal} (calibrated)"])
        for signal, found in values.items():
            report = signal_report(signal, found, chrf)
            rows.append([name, len(sources), signal, f"{report.spearman:.3f}", f"{report.lowest_chrf:.2f}",
                         f"{report.rest_chrf:.2f}"])  # fmt: skip
            print(" ".join(map(str, rows[-1])), file=sys.stderr, flush=True)
    print(f"models {', '.join(map(str, args.model))}, beam {args.beam}, lenpen {args.lenpen:g}, precision "
          f"{translator.precision}; calibration {args.calibration} ({calibration.signal}); {conditions()}\n")  # fmt: skip
    print_table(["set", "lines", "signal", "Spearman", "chrF, lowest 10%", "chrF, the rest"], rows)


if __name__ == "__main__":
    main()
