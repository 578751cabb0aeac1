"""An mtkit model exported to Hugging Face transformers translates as mtkit does: BLEU and speed of both.

    python bench/hf_generate.py -m MODEL [--data ../shared/data/multi30k] [--beams 1,5] [--threads 2]

Exports MODEL (`mtkit export --format huggingface`: MarianMT, or Pegasus for a pre-norm model),
reloads it with transformers, and translates test2016 with `model.generate(**tokenizer(...))` and
with `mtkit evaluate`, greedy and beam search, in fp32 on the CPU. Both search without a length
penalty (mtkit's is GNMT's, transformers' is length^alpha: with alpha 0 both rank by the summed
log-probability) and without a forced </s> at the length limit. Prints BLEU, sentences/s (translation
time only) and how many lines the two give identically.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import sacrebleu
import torch
from common import DEFAULT_MULTI30K, conditions, mtkit_command, print_table, run_measured

BATCH = 64


def mtkit_translations(model: Path, src: Path, ref: Path, beam: int, out: Path) -> float:
    """Translations written to `out`; returns sentences/s as `mtkit evaluate` measures it."""
    result = subprocess.run(mtkit_command("evaluate", "-m", model, "--src", src, "--ref", ref, "--beam", beam,
                                          "--lenpen", 0, "--precision", "fp32", "--device", "cpu", "--metrics",
                                          "bleu", "--json", "-o", out), capture_output=True, check=True)  # fmt: skip
    return json.loads(result.stdout)["sentences_per_s"]


def hf_translations(directory: Path, sources: list[str], beam: int) -> tuple[list[str], float]:
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(directory).eval()
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))  # similar lengths together, as mtkit does
    out: list[str] = [""] * len(sources)
    started = time.perf_counter()
    with torch.no_grad():
        for first in range(0, len(order), BATCH):
            rows = order[first : first + BATCH]
            batch = tokenizer([sources[i] for i in rows], return_tensors="pt", padding=True)
            longest = int(batch["attention_mask"].sum(dim=1).max())
            generated = model.generate(**batch, num_beams=beam, do_sample=False, length_penalty=0.0,
                                       max_new_tokens=longest + 50, forced_eos_token_id=None)  # fmt: skip
            for i, text in zip(rows, tokenizer.batch_decode(generated, skip_special_tokens=True)):
                out[i] = text
    return out, len(sources) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--beams", default="1,5")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"conditions: {conditions()}")
    src, ref = args.data / "test2016.en", args.data / "test2016.de"
    sources = src.read_text(encoding="utf-8").splitlines()
    references = ref.read_text(encoding="utf-8").splitlines()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "hf"
        seconds, _ = run_measured(mtkit_command("export", "-m", args.model, "--format", "huggingface", "-o", directory))
        architecture = json.loads((directory / "config.json").read_text())["architectures"][0]
        print(f"exported as {architecture} in {seconds:.1f} s")
        for beam in map(int, args.beams.split(",")):
            speed = mtkit_translations(args.model, src, ref, beam, Path(tmp) / f"mtkit{beam}.txt")
            ours = (Path(tmp) / f"mtkit{beam}.txt").read_text(encoding="utf-8").splitlines()
            theirs, hf_speed = hf_translations(directory, sources, beam)
            same = sum(a == b for a, b in zip(ours, theirs))
            for engine, lines, per_s in (("mtkit", ours, speed), (f"transformers ({architecture})", theirs, hf_speed)):
                bleu = sacrebleu.corpus_bleu(lines, [references]).score
                rows.append([engine, beam, f"{bleu:.2f}", f"{per_s:.1f}", f"{same} of {len(sources)}"])
    print_table(["engine", "beam", "BLEU", "sentences/s", "lines identical"], rows)


if __name__ == "__main__":
    main()
