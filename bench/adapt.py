"""Adaptation from corrections: a model fine-tuned by `mtkit adapt` on N pairs of tatoeba-de-en's training
set (the corrections a translator made), within a budget, scored on tatoeba-de-en's test set (the new
domain) and on Multi30k's test2016 (the model's own), against the model before.

    python bench/adapt.py -m runs/demo/model.pt [--corrections 2000,20000] [--minutes 10]
                          [--replay-share 0.25] [--beam 5] [--test-lines 2000] [--keep DIR] [--set KEY=VALUE ...]

Each N takes the first N pairs of train.en/train.de as two aligned files (`adapt --src --ref`); the
replay share comes from the model's data-bin. Each row: N, the minutes adapt took (all of it: data and
training), its updates, and BLEU/chrF on both test sets (sacrebleu, beam --beam).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path

from common import DEFAULT_MULTI30K, REPO, conditions, mtkit_command, print_table, run_measured

DEFAULT_TATOEBA = REPO.parent / "shared" / "data" / "tatoeba-de-en"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--tatoeba", type=Path, default=DEFAULT_TATOEBA)
    parser.add_argument("--multi30k", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--corrections", default="2000,20000", help="comma-separated numbers of corrections")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--replay-share", type=float, default=0.25)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--test-lines", type=int, default=2000, help="tatoeba test sentences scored")
    parser.add_argument("--keep", type=Path, default=None, help="keep the adapted models in this folder")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="passed to mtkit adapt")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tests = {
            "tatoeba": _head(args.tatoeba / "test", args.test_lines, work),
            "test2016": (args.multi30k / "test2016.en", args.multi30k / "test2016.de"),
        }
        rows = [["0 (the model)", "", "", *_scores(args.model, tests, args.beam)]]
        for count in [int(n) for n in args.corrections.split(",")]:
            src, ref = _head(args.tatoeba / "train", count, work)
            out = (args.keep or work) / f"adapted-{count}.pt"
            out.parent.mkdir(parents=True, exist_ok=True)
            log = work / f"adapt-{count}.log"
            command = mtkit_command("adapt", "-m", args.model, "--src", src, "--ref", ref, "-o", out,
                                    "--minutes", args.minutes, "--replay-share", args.replay_share,
                                    *[a for o in args.overrides for a in ("--set", o)])  # fmt: skip
            seconds, _ = run_measured(command, stderr_to=log)
            steps = re.search(r"stopped at step (\d+)", log.read_text())
            rows.append([f"{count:,}", seconds / 60, steps.group(1) if steps else "?", *_scores(out, tests, args.beam)])
    print(f"conditions: {conditions()}")
    print(f"model {args.model}; corrections: the first N pairs of {args.tatoeba}/train; replay share "
          f"{args.replay_share:g} from the model's data-bin; budget {args.minutes:g} minutes; beam {args.beam}; "
          f"tatoeba test: its first {args.test_lines:,} pairs\n")  # fmt: skip
    headers = ["corrections", "minutes", "updates", "tatoeba BLEU", "chrF", "test2016 BLEU", "chrF"]
    print_table(headers, rows)


def _head(prefix: Path, count: int, work: Path) -> tuple[Path, Path]:
    """The first `count` pairs of PREFIX.en/PREFIX.de, as two files."""
    paths = []
    for lang in ("en", "de"):
        lines = Path(f"{prefix}.{lang}").read_text(encoding="utf-8").splitlines()[:count]
        path = work / f"{prefix.name}-{count}.{lang}"
        path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1]


def _scores(model: Path, tests: dict, beam: int) -> list[float]:
    scores = []
    for src, ref in tests.values():
        command = mtkit_command("evaluate", "-m", model, "--src", src, "--ref", ref, "--beam", beam, "--json")
        result = subprocess.run(command, capture_output=True, text=True, check=True)
        found = json.loads(result.stdout)
        scores += [found["bleu"]["score"], found["chrf"]["score"]]
    return scores


if __name__ == "__main__":
    main()
