"""Decoding speed of a trained model on Multi30k test2016: greedy and beam 5, with BLEU.

    python bench/decode_speed.py -m runs/multi30k_en_de/model.pt [--data ../shared/data/multi30k] [--ct2 float32,int8]

mtkit's PyTorch decoder runs in fp32 and bf16; with --ct2 the model is also exported to
CTranslate2 (pip install 'mtkit[ct2]') with each quantization given and decoded by that engine.
Each setting runs `mtkit evaluate` in its own process (model loading included in peak memory,
not in the timing, which covers translation only).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
from common import DEFAULT_MULTI30K, conditions, mtkit_command, print_table, run_measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--beams", default="1,5")
    parser.add_argument("--precisions", default="fp32,bf16", help="mtkit PyTorch precisions; empty for none")
    parser.add_argument("--ct2", default="", help="CTranslate2 quantizations to add, e.g. float32,int8")
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    from mtkit.checkpoint import load_model_file

    tokenizer = load_model_file(args.model).tgt_tokenizer
    print(f"conditions: {conditions()}")
    print(
        f"model: {args.model}; test2016 {args.src}->{args.tgt}, 1,000 sentences, batch size {args.batch_size}, lenpen 0.6\n"
    )
    rows = []
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        settings = [
            ("pytorch", args.model, precision, precision) for precision in filter(None, args.precisions.split(","))
        ]
        for quantization in filter(None, args.ct2.split(",")):
            exported = Path(tmp) / f"ct2-{quantization}"
            run_measured(
                mtkit_command(
                    "export",
                    "-m",
                    args.model,
                    "--format",
                    "ctranslate2",
                    "--quantization",
                    quantization,
                    "-o",
                    exported,
                )
            )
            settings.append(("ctranslate2", exported, "auto", quantization))  # auto: the exported quantization
        for beam in map(int, args.beams.split(",")):
            for engine, model, precision, label in settings:
                hyp, scores = Path(tmp) / f"hyp{beam}{engine}{label}", Path(tmp) / "scores.json"
                with open(scores, "w") as out:
                    _, rss = run_measured(
                        mtkit_command(
                            "evaluate",
                            "-m",
                            model,
                            "--engine",
                            engine,
                            "--src",
                            args.data / f"test2016.{args.src}",
                            "--ref",
                            args.data / f"test2016.{args.tgt}",
                            "--beam",
                            beam,
                            "--precision",
                            precision,
                            "--device",
                            device,
                            "--batch-size",
                            args.batch_size,
                            "--json",
                            "--metrics",
                            "bleu",
                            "-o",
                            hyp,
                        ),
                        stdout=out,
                    )
                result = json.loads(scores.read_text())
                tokens = sum(
                    len(ids) + 1 for ids in tokenizer.encode_batch(hyp.read_text(encoding="utf-8").splitlines())
                )
                rows.append(
                    [
                        f"{'greedy' if beam == 1 else f'beam {beam}'}",
                        engine,
                        label,
                        device,
                        result["sentences_per_s"],
                        tokens / result["seconds"],
                        result["bleu"]["score"],
                        rss,
                    ]
                )
    print_table(
        ["search", "engine", "precision", "device", "sentences/s", "target tok/s", "BLEU", "peak RSS MiB"], rows
    )


if __name__ == "__main__":
    main()
