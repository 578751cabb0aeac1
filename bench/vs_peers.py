"""mtkit side by side with JoeyNMT 2.3 and eole 0.6.4: training speed, BLEU after the same
wall-clock budget, and beam-5 decoding speed, on Multi30k English->German.

    python bench/vs_peers.py --minutes 20 [--data ../shared/data/multi30k] [--work runs/vs_peers]

Neither peer is a dependency of mtkit: each is installed from PyPI into its own virtual
environment under WORK/venvs (torch==2.13.0 first, as for mtkit; JoeyNMT also needs
importlib_metadata and sentencepiece==0.2.0, eole also aiohttp). All three train the same shape (3+3 layers,
d_model 256, 4 heads, FFN 1024, pre-norm, tied embeddings) on the same subwords with ~4096-token
batches for the same wall-clock budget, on the same threads, one after the other. The subwords are
mtkit's 8k joint BPE: the peers read the corpus as space-separated subwords at word level, and
their output subwords are decoded back to text by the same tokenizer, so every BLEU is sacrebleu's
cased 13a BLEU on detokenized text against the raw references. Each tool is scored with its last
checkpoint (no averaging) and beam 5: mtkit's is saved at the deadline (train.max_time); the peers
are interrupted at the deadline and their last checkpoint is the one from their last 50 updates
(JoeyNMT's interrupt handler did not reliably save one, eole's saves none).

Each tool runs at its best setting on a CPU: mtkit in bf16 autocast when the CPU has AVX-512 bf16
(--mtkit-precision) and with its output layer scoring only the subwords on the German side
(--mtkit-output-vocab target, model.output_vocab; 5.3k of the 8k), the peers in fp32 (neither trains
in reduced precision on a CPU) and scoring all 8k, as this script configures them. Training
speed is each tool's own count of non-padding target tokens per second after the first minute;
decoding speed is wall-clock of the translation command, model loading included for all three.
Each tool's figures go to WORK/results.json as soon as it finishes; a tool that fails is reported
and skipped, and `--tools eole` (say) later adds to the results of the same budget.
The peers' own code is in bench/peers/.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import sacrebleu
from common import DEFAULT_MULTI30K, REPO, conditions, metrics_records, mtkit_command, print_table

sys.path.insert(0, str(REPO))
from peers.eole import run_eole  # noqa: E402
from peers.joeynmt import run_joeynmt  # noqa: E402
from peers.shared import PEERS, SHAPE, ToolFailed, detokenize, median_after_first_minute, prepare_data, run, setup_venv  # noqa: E402


def run_mtkit(work: Path, seconds: float, threads: int, precision: str, output_vocab: str) -> dict:
    out = work / "mtkit"
    settings = [
        "model.preset=transformer-small", f"model.output_vocab={output_vocab}", "model.norm=pre",
        f"model.encoder_layers={SHAPE['layers']}", f"model.decoder_layers={SHAPE['layers']}",
        f"model.d_model={SHAPE['d_model']}", f"model.heads={SHAPE['heads']}", f"model.ffn_dim={SHAPE['ffn']}",
        f"model.dropout={SHAPE['dropout']}", "train.max_tokens=4096", "train.lr=2e-3", "train.warmup=500",
        "train.lr_schedule=linear", f"train.max_time={seconds}", f"train.precision={precision}",
        f"train.threads={threads}", "train.log_every=50", "train.valid_every=100000", "train.save_every=100000",
    ]  # fmt: skip
    run(mtkit_command("train", "-d", work / "data" / "data-bin", "-o", out / "run", "--force",
                      *[a for s in settings for a in ("--set", s)]), log=work / "mtkit.log")  # fmt: skip
    records = metrics_records(out / "run")
    speeds = [(r["elapsed"], r["tokens_per_s"]) for r in records if "tokens_per_s" in r]
    source, hyp = work / "data" / "test.src.txt", out / "hyp.txt"
    seconds_decoding = run(mtkit_command("translate", "-m", out / "run", "--checkpoint", "last", "--beam", "5",
                                         "--precision", precision, "-i", source, "-o", hyp),
                           log=work / "mtkit.log", env={"OMP_NUM_THREADS": str(threads)})  # fmt: skip
    return {"steps": records[-1]["step"], "tok_s": median_after_first_minute(speeds),
            "hyp": hyp.read_text(encoding="utf-8").splitlines(), "decode_s": seconds_decoding}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0, help="training budget of each tool (wall-clock)")
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "vs_peers")
    parser.add_argument("--tools", default="mtkit,joeynmt,eole")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--mtkit-precision", default="bf16")
    parser.add_argument("--mtkit-output-vocab", choices=["all", "target"], default="target",
                        help="mtkit's model.output_vocab: target scores only the German-side subwords (the peers score all 8k)")  # fmt: skip
    parser.add_argument("--sentences", type=int, default=1000, help="test2016 sentences to decode")
    parser.add_argument("--torch", default="torch==2.13.0", help="torch requirement for the peers' environments")
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    tools = args.tools.split(",")
    pythons = {name: setup_venv(work, name, args.torch) for name in tools if name in PEERS}
    tokenizer = prepare_data(work, args.data)
    for name, source in (
        ("test.src.tok", work / "data" / "test2016.tok.en"),
        ("test.src.txt", args.data / "test2016.en"),
        ("test.ref", args.data / "test2016.de"),
    ):
        lines = source.read_text(encoding="utf-8").splitlines()[: args.sentences]
        (work / "data" / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    references = (work / "data" / "test.ref").read_text(encoding="utf-8").splitlines()
    seconds = args.minutes * 60

    # Each tool's figures are saved as soon as it finishes, so a failure (or a later `--tools eole`)
    # keeps the others; only results of the same budget and test size are shown together.
    saved = work / "results.json"
    setting = {"minutes": args.minutes, "sentences": len(references), "threads": args.threads}
    previous = json.loads(saved.read_text()) if saved.exists() else {}
    results = previous.get("tools", {}) if previous.get("setting") == setting else {}
    for name in tools:
        print(f"{name}: training for {args.minutes:g} minutes", file=sys.stderr)
        try:
            if name == "mtkit":
                result = run_mtkit(work, seconds, args.threads, args.mtkit_precision, args.mtkit_output_vocab)
            elif name == "joeynmt":
                result = run_joeynmt(work, pythons[name], seconds, args.threads)
            else:
                result = run_eole(work, pythons[name], seconds, args.threads)
        except ToolFailed as error:
            print(f"{name}: {error}", file=sys.stderr)
            continue
        hyp = result.pop("hyp") if "hyp" in result else detokenize(tokenizer, result.pop("hyp_tok"))
        result["bleu"] = sacrebleu.corpus_bleu(hyp, [references]).score
        result["sent_s"] = len(references) / result["decode_s"]
        results[name] = result
        saved.write_text(json.dumps({"setting": setting, "tools": results}, indent=1) + "\n")

    print(f"conditions: {conditions()}; {args.threads} threads for every tool")
    print(
        f"Multi30k en->de, 8k joint BPE, 3+3 layers, d_model 256, 4 heads, FFN 1024, pre-norm, ~4096-token batches; "
        f"{args.minutes:g} minutes of training each; test2016 first {len(references)} sentences, beam 5, last checkpoint; "
        f"mtkit's output layer scores {'the German side' if args.mtkit_output_vocab == 'target' else 'all 8k'}\n"
    )
    ours = results.get("mtkit")

    def ratio(name: str, r: dict, key: str) -> str:
        return f"{ours[key] / r[key]:.2f}x" if ours and name != "mtkit" and r[key] else "-"

    rows = [[name, r["steps"], r["tok_s"], ratio(name, r, "tok_s"), r["bleu"], r["sent_s"], ratio(name, r, "sent_s")]
            for name, r in results.items()]  # fmt: skip
    print_table(["tool", "updates", "train tgt tok/s", "mtkit/this", f"BLEU after {args.minutes:g} min",
                 "beam-5 sent/s", "mtkit/this"], rows)  # fmt: skip


if __name__ == "__main__":
    main()
