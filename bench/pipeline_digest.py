"""A digest of everything the pipeline makes, to show that a change of structure changed no behaviour.

    python bench/pipeline_digest.py --mtkit DIR [--data ../shared/data/multi30k] [--work DIR]

Runs the mtkit found in DIR (a checkout: another commit's worktree, or this one) through the whole
pipeline on the first 2,000 Multi30k pairs: train-tokenizer, preprocess, a tiny model trained for 30
updates with BLEU validation, resumed to 40, averaged, n-best translation with alignments, evaluate
--json, the attention view as JSON, and one request to `mtkit serve`. Prints one line per output:
its name and the sha256 of its content (timings and other wall-clock fields left out). Two
checkouts that print the same lines behave the same on this pipeline.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from common import DEFAULT_MULTI30K

TRAIN = ["--set", "model.preset=transformer-tiny", "--set", "model.d_model=32", "--set", "model.ffn_dim=64",
         "--set", "model.dropout=0.1", "--set", "train.max_tokens=1024", "--set", "train.warmup=10", "--set",
         "train.lr=3e-3", "--set", "train.log_every=1", "--set", "train.valid_every=10", "--set",
         "train.save_every=10", "--set", "train.valid_max_sentences=50", "--set", "train.threads=1",
         "--set", "train.precision=fp32", "--set", "train.device=cpu"]  # fmt: skip


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def weights_digest(path: Path) -> str:
    """The model file's tensors (names, dtypes, values) and tokenizers, not its version string."""
    import torch

    payload = torch.load(path, map_location="cpu", weights_only=True)
    out = io.BytesIO()
    for name in sorted(payload["model"]):
        tensor = payload["model"][name].contiguous()
        out.write(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
        out.write(tensor.numpy().tobytes())
    out.write(payload["src_tokenizer"].encode() + payload["tgt_tokenizer"].encode())
    out.write(json.dumps(payload["config"], sort_keys=True).encode())
    return digest(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mtkit", type=Path, required=True, help="the checkout whose mtkit runs")
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(args.mtkit.resolve()), "OMP_NUM_THREADS": "1"}

    def mtkit(*command, stdin: bytes | None = None) -> bytes:
        result = subprocess.run([sys.executable, "-m", "mtkit", *map(str, command)], input=stdin,
                                capture_output=True, env=env, cwd=work)  # fmt: skip
        if result.returncode != 0:
            sys.exit(f"failed: mtkit {' '.join(map(str, command))}\n{result.stderr.decode()[-2000:]}")
        return result.stdout

    lines: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for split, count in (("train", 2000), ("val", 100), ("test2016", 50)):
            for lang in ("en", "de"):
                kept = (args.data / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()[:count]
                (work / f"{split}.{lang}").write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        mtkit("train-tokenizer", "-i", "train.en", "-i", "train.de", "-o", "tok.json", "--vocab-size", 1000,
              "--split-punctuation")  # fmt: skip
        lines.append(("tokenizer", digest((work / "tok.json").read_bytes())))
        mtkit("preprocess", "-s", "en", "-t", "de", "--train", "train", "--valid", "val", "--test", "test2016",
              "--tokenizer", "tok.json", "-o", "bin")  # fmt: skip
        for path in sorted((work / "bin").iterdir()):
            if path.name != "manifest.json":  # it records the seconds preprocessing took
                lines.append((f"dataset {path.name}", digest(path.read_bytes())))
        mtkit("train", "-d", "bin", "-o", "run", *TRAIN, "--set", "train.max_steps=30")
        mtkit("train", "--resume", "run", "--set", "train.max_steps=40")
        records = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
        kept = ("step", "loss", "nll", "lr", "grad_norm", "valid_loss", "valid_bleu", "valid_chrf", "target_tokens")
        lines.append(
            ("metrics.jsonl", digest(json.dumps([{k: r[k] for k in kept if k in r} for r in records]).encode()))
        )
        for checkpoint in sorted((work / "run" / "checkpoints").glob("step_*.pt")):
            lines.append((f"checkpoint {checkpoint.name}", weights_digest(checkpoint)))
        mtkit("average", "run", "--last", 2, "-o", "avg.pt")
        lines.append(("average", weights_digest(work / "avg.pt")))
        lines.append(("translate --nbest 2 --alignment", digest(mtkit("translate", "-m", "avg.pt", "-i", "test2016.en",
                                                                     "--nbest", 2, "--alignment"))))  # fmt: skip
        scores = json.loads(mtkit("evaluate", "-m", "avg.pt", "--src", "test2016.en", "--ref", "test2016.de", "--json"))
        lines.append(
            (
                "evaluate --json",
                digest(
                    json.dumps({k: v for k, v in scores.items() if k not in ("seconds", "sentences_per_s")}).encode()
                ),
            )
        )
        lines.append(("attention json", digest(mtkit("attention", "-m", "avg.pt", "--src", "A man runs.",
                                                     "--format", "json"))))  # fmt: skip
        lines.append(("serve", digest(served(env, work))))
    for name, value in lines:
        print(f"{value}  {name}")


def served(env: dict, work: Path) -> bytes:
    """One /v1/translate request (n-best with alignments) to `mtkit serve` with the averaged model."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "mtkit", "serve", "-m", "avg.pt", "--port", str(port)],
                              env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready") as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        body = json.dumps({"text": ["A man runs.", "Two dogs play in the snow."], "nbest": 2, "alignment": True})
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/translate", body.encode(),
                                         {"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request) as answer:
            return answer.read()
    finally:
        server.terminate()
        server.wait(60)


if __name__ == "__main__":
    main()
