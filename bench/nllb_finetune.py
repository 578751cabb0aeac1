"""Fine-tuning NLLB-200-distilled-600M's shape on a CPU: memory and seconds per update of the full model,
with frozen embeddings, and with the vocabulary trimmed to Multi30k's four languages; and what the
trimming does to decoding speed.

    python bench/nllb_finetune.py [--data ../shared/data/multi30k] [--steps 4] [--work runs/bench-nllb]

The model is bench/nllb.py's (built and imported there, or here): random weights of the published
shape. `mtkit trim-vocab` keeps the subwords of Multi30k's training text in English, German, French
and Czech. Each setting runs `mtkit train --init-from` on Multi30k en-de (preprocessed with the
model's tokenizer) for --steps updates of train.max_tokens=1024, precision auto, in a process of
its own: its peak RSS is the table's, and seconds per update are the median after the first update.
Decoding: bench/nllb.py's mtkit run (200 lines of test2016, beam 4, 24 output tokens, fp32) on
the full and the trimmed model.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

from common import DEFAULT_MULTI30K, REPO, conditions, metrics_records, mtkit_command, print_table, run_measured
from nllb import build

LANGUAGES = ("en", "de", "fr", "cs")


def prepared(model: Path, data: Path, out: Path) -> Path:
    """Multi30k en-de encoded with the model's tokenizer (every time: a model trimmed again has another)."""
    tokenizer = model.with_suffix(".src-tokenizer.json")
    run_measured(mtkit_command("preprocess", "-s", "en", "-t", "de", "--train", data / "train", "--valid",
                               data / "val", "--tokenizer", tokenizer, "--tgt-tokenizer", tokenizer, "-o", out,
                               "--force"))  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "bench-nllb")
    args = parser.parse_args()
    work = args.work
    model = work / "nllb-600m.pt"
    if not model.is_file():
        run_measured(mtkit_command("import", build("nllb-600m", args.data, work), "-o", model))
    trimmed = work / "nllb-600m-multi30k.pt"
    texts = [arg for lang in LANGUAGES for arg in ("-i", args.data / f"train.{lang}")]
    seconds, peak = run_measured(mtkit_command("trim-vocab", "-m", model, *texts, "-o", trimmed, "--force"))
    kept, total = vocab_size(trimmed), vocab_size(model)
    rows = [["trim-vocab (4 languages)", f"{kept:,} of {total:,} subwords kept ({kept / total:.1%})", f"{seconds:.0f} s",
             f"{peak:,.0f} MiB"]]  # fmt: skip
    settings = [("full model", model, []), ("frozen embeddings", model, ["--set", "train.freeze_embeddings=true"]),
                ("trimmed vocabulary", trimmed, [])]  # fmt: skip
    for name, start, extra in settings:
        data = prepared(start, args.data, work / f"ft-data-{start.stem}")
        run = work / f"ft-{name.replace(' ', '-')}"
        _, peak = run_measured(mtkit_command(
            "train", "-d", data, "-o", run, "--force", "--init-from", start, "--set", "train.max_tokens=1024",
            "--set", f"train.max_steps={args.steps}", "--set", "train.log_every=1", "--set", "train.valid_every=100000",
            "--set", "train.save_every=100000", "--set", "train.lr=1e-5", "--set", "train.warmup=1", *extra))  # fmt: skip
        records = [r for r in metrics_records(run) if "step" in r and "elapsed" in r and "valid_loss" not in r]
        per_update = statistics.median(b["elapsed"] - a["elapsed"] for a, b in zip(records[1:], records[2:]))
        shutil.rmtree(run)  # its checkpoint and optimizer state: about 10 GB
        rows.append(
            [f"fine-tune: {name}", f"{per_update:.1f} s per update", f"{args.steps} updates", f"{peak:,.0f} MiB"]
        )
    for name, path in (("full", model), ("trimmed", trimmed)):
        result = work / f"decode-{name}.json"
        with open(result, "wb") as out:
            run_measured([sys.executable, str(Path(__file__).with_name("nllb.py")), "--data", str(args.data),
                          "--engine-run", "mtkit", "nllb-600m", str(path)], stdout=out)  # fmt: skip
        found = json.loads(result.read_text(encoding="utf-8"))
        rows.append(
            [f"decode, {name} vocabulary", f"{200 / found['seconds']:.2f} sentences/s", f"{found['seconds']:.1f} s", ""]
        )
    print(f"conditions: {conditions()}")
    print_table(["step", "result", "time", "peak memory"], rows)


def vocab_size(model: Path) -> int:
    """The subwords of a model, read from its tokenizer beside it."""
    tokenizer = json.loads(model.with_suffix(".src-tokenizer.json").read_text(encoding="utf-8"))
    return len(tokenizer["model"]["vocab"])


if __name__ == "__main__":
    main()
