"""Pivoting through English against a direct model: Multi30k is four-way parallel, so German->French
can be translated directly (a de->fr model) or through English (`mtkit translate -m de-en.pt --then
en-fr.pt`), with models trained on the same budget.

    python bench/pivot.py [--dir runs/pivot] [--data ../shared/data/multi30k] [--train] [--beam 5] [--lenpen 1.0]

--train trains what is missing of DIR/de-en, DIR/en-fr and DIR/de-fr with the Multi30k recipe's
quick mode (`recipes/multi30k_en_de/run.sh --quick --src S --tgt T`: 8 minutes of training each,
one at a time). Then test2016 (1,000 sentences) is translated with beam --beam and length penalty
--lenpen for every model alike: each leg alone (de->en, en->fr), de->fr directly and de->fr
through English; BLEU and chrF by sacrebleu, and the seconds of each `mtkit translate` (model
loading included).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import sacrebleu
from common import DEFAULT_MULTI30K, conditions, mtkit_command, print_table

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [("de", "en"), ("en", "fr"), ("de", "fr")]


def train(out: Path, src: str, tgt: str, data: Path) -> None:
    recipe = ROOT / "recipes" / "multi30k_en_de" / "run.sh"
    env = {**os.environ, "DATA": str(data), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    print(f"training {src}->{tgt} into {out} (quick mode)", flush=True)
    subprocess.run([str(recipe), "--quick", "--src", src, "--tgt", tgt, "--out", str(out)], env=env, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip


def models_of(directory: Path, pairs, data: Path, train_missing: bool) -> dict[tuple[str, str], Path]:
    """DIRECTORY/S-T/model.pt of each pair; one that is missing trained first (train_missing), else an exit."""
    models = {pair: directory / f"{pair[0]}-{pair[1]}" / "model.pt" for pair in pairs}
    for (src, tgt), path in models.items():
        if not path.exists():
            if not train_missing:
                sys.exit(f"{path}: no such model (give --train to train it)")
            train(path.parent, src, tgt, data)
    return models


def translated(models: list[str], source: Path, out: Path, beam: int, lenpen: float) -> float:
    """Seconds `mtkit translate` took over the source file (model loading included), written to out."""
    started = time.perf_counter()
    with open(source, "rb") as given, open(out, "wb") as written:
        command = mtkit_command("translate", *models, "--beam", beam, "--lenpen", lenpen)
        subprocess.run(command, stdin=given, stdout=written, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path("runs/pivot"))
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--train", action="store_true", help="train the models that are missing first")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--lenpen", type=float, default=1.0)
    args = parser.parse_args()
    model = models_of(args.dir, PAIRS, args.data, args.train)
    print(f"conditions: {conditions()}")
    print(f"test2016, beam {args.beam}, lenpen {args.lenpen}; models: {args.dir}/{{de-en,en-fr,de-fr}}/model.pt\n")
    runs = {
        "de->en": (["-m", model["de", "en"]], "de", "en"),
        "en->fr": (["-m", model["en", "fr"]], "en", "fr"),
        "de->fr directly": (["-m", model["de", "fr"]], "de", "fr"),
        "de->fr through en": (["-m", model["de", "en"], "--then", model["en", "fr"]], "de", "fr"),
    }
    rows = []
    for name, (models, src, tgt) in runs.items():
        out = args.dir / f"test2016.{name.replace(' ', '_').replace('>', '')}.{tgt}"
        seconds = translated([str(m) for m in models], args.data / f"test2016.{src}", out, args.beam, args.lenpen)
        hyps = out.read_text(encoding="utf-8").splitlines()
        refs = (args.data / f"test2016.{tgt}").read_text(encoding="utf-8").splitlines()
        bleu, chrf = sacrebleu.corpus_bleu(hyps, [refs]).score, sacrebleu.corpus_chrf(hyps, [refs]).score
        rows.append([name, f"{bleu:.2f}", f"{chrf:.2f}", f"{seconds:.1f}"])
    print_table(["translation", "BLEU", "chrF", "seconds"], rows)
    direct, pivot = float(rows[2][1]), float(rows[3][1])
    print(
        f"\npivot - direct: {pivot - direct:+.2f} BLEU (target: within 2.0); time {float(rows[3][3]) / float(rows[2][3]):.2f}x"
    )


if __name__ == "__main__":
    main()
