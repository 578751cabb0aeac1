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
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import sacrebleu
import yaml
from common import DEFAULT_MULTI30K, REPO, conditions, metrics_records, mtkit_command, print_table

sys.path.insert(0, str(REPO))
from mtkit.tokenizer import Tokenizer  # noqa: E402

PEERS = {
    "joeynmt": ["joeynmt==2.3.0", "importlib_metadata", "sentencepiece==0.2.0"],
    "eole": ["eole==0.6.4", "aiohttp"],  # its CLI imports aiohttp without declaring it
}
SHAPE = dict(layers=3, d_model=256, heads=4, ffn=1024, dropout=0.1)
SPLITS = ("train", "val", "test2016")


class ToolFailed(Exception):
    """One tool's run failed; the others still run, and earlier results are kept."""


def run(
    command: list,
    log: Path | None = None,
    timeout: float | None = None,
    stdin: Path | None = None,
    stdout: Path | None = None,
    env: dict | None = None,
) -> float:
    """Run a command (stopped with SIGINT then SIGKILL after `timeout` s); returns wall seconds."""
    started = time.perf_counter()
    with (
        open(log or os.devnull, "ab") as err,
        open(stdin or os.devnull, "rb") as inp,
        open(stdout or os.devnull, "wb") as out,
    ):
        proc = subprocess.Popen(
            [str(c) for c in command],
            stdin=inp,
            stdout=out,
            stderr=err,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return time.perf_counter() - started
    if code != 0:
        tail = log.read_text(errors="replace")[-3000:] if log else ""
        raise ToolFailed(f"failed ({code}): {' '.join(map(str, command))}\n{tail}")
    return time.perf_counter() - started


def setup_venv(work: Path, name: str, torch_requirement: str) -> Path:
    venv = work / "venvs" / name
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"installing {name} into {venv}", file=sys.stderr)
        run([sys.executable, "-m", "venv", venv])
        run([python, "-m", "pip", "install", "-q", torch_requirement], log=work / f"install-{name}.log")
        run([python, "-m", "pip", "install", "-q", *PEERS[name]], log=work / f"install-{name}.log")
    return python


# --- the shared data -----------------------------------------------------------------------------


def prepare_data(work: Path, data: Path) -> Tokenizer:
    """mtkit's tokenizer and dataset, and the same subwords as text for the peers."""
    data_dir = work / "data"
    tokenizer_path = data_dir / "tokenizer.json"
    if not (data_dir / "data-bin").exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        run(
            mtkit_command(
                "train-tokenizer",
                "-i",
                data / "train.en",
                "-i",
                data / "train.de",
                "-o",
                tokenizer_path,
                "--vocab-size",
                8000,
            )
        )
        run(
            mtkit_command(
                "preprocess",
                "-s",
                "en",
                "-t",
                "de",
                "--train",
                data / "train",
                "--valid",
                data / "val",
                "--test",
                data / "test2016",
                "--tokenizer",
                tokenizer_path,
                "-o",
                data_dir / "data-bin",
            )
        )
    tokenizer = Tokenizer.load(tokenizer_path)
    for split in SPLITS:
        for lang in ("en", "de"):
            target = data_dir / f"{split}.tok.{lang}"
            if not target.exists():
                lines = (data / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
                target.write_text("".join(" ".join(tokenizer.tokens(line)) + "\n" for line in lines), encoding="utf-8")
    # The vocabulary without mtkit's four special symbols; each peer adds its own.
    vocab = [tokenizer.id_to_token(i) for i in range(4, tokenizer.vocab_size)]
    (data_dir / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    (data_dir / "vocab.eole").write_text("".join(f"{t}\t1\n" for t in vocab), encoding="utf-8")
    return tokenizer


def detokenize(tokenizer: Tokenizer, path: Path) -> list[str]:
    """A peer's space-separated output subwords back to text (unknown subwords are dropped)."""
    ids = []
    for line in path.read_text(encoding="utf-8").splitlines():
        ids.append([i for i in (tokenizer.token_to_id(t) for t in line.split()) if i is not None and i > 3])
    return tokenizer.decode_batch(ids)


def median_after_first_minute(pairs: list[tuple[float, float]]) -> float:
    """Median of (elapsed seconds, tokens/s) reports once the first minute (warm-up) has passed."""
    later = [speed for elapsed, speed in pairs if elapsed >= 60] or [speed for _, speed in pairs]
    return statistics.median(later) if later else float("nan")


# --- mtkit -------------------------------------------------------------------------------------


def run_mtkit(work: Path, seconds: float, threads: int, precision: str, output_vocab: str) -> dict:
    out = work / "mtkit"
    settings = [
        "model.preset=transformer-small",
        f"model.output_vocab={output_vocab}",
        f"model.encoder_layers={SHAPE['layers']}",
        f"model.decoder_layers={SHAPE['layers']}",
        f"model.d_model={SHAPE['d_model']}",
        f"model.heads={SHAPE['heads']}",
        f"model.ffn_dim={SHAPE['ffn']}",
        f"model.dropout={SHAPE['dropout']}",
        "model.norm=pre",
        "train.max_tokens=4096",
        "train.lr=2e-3",
        "train.warmup=500",
        "train.lr_schedule=linear",
        f"train.max_time={seconds}",
        f"train.precision={precision}",
        f"train.threads={threads}",
        "train.log_every=50",
        "train.valid_every=100000",
        "train.save_every=100000",
    ]
    run(
        mtkit_command(
            "train",
            "-d",
            work / "data" / "data-bin",
            "-o",
            out / "run",
            "--force",
            *[a for s in settings for a in ("--set", s)],
        ),
        log=work / "mtkit.log",
    )
    records = metrics_records(out / "run")
    speeds = [(r["elapsed"], r["tokens_per_s"]) for r in records if "tokens_per_s" in r]
    source, hyp = work / "data" / "test.src.txt", out / "hyp.txt"
    seconds_decoding = run(
        mtkit_command(
            "translate",
            "-m",
            out / "run",
            "--checkpoint",
            "last",
            "--beam",
            "5",
            "--precision",
            precision,
            "-i",
            source,
            "-o",
            hyp,
        ),
        log=work / "mtkit.log",
        env={"OMP_NUM_THREADS": str(threads)},
    )
    return {
        "steps": records[-1]["step"],
        "tok_s": median_after_first_minute(speeds),
        "hyp": hyp.read_text(encoding="utf-8").splitlines(),
        "decode_s": seconds_decoding,
    }


# --- JoeyNMT -------------------------------------------------------------------------------------


def joey_config(work: Path, model_dir: Path) -> str:
    data = work / "data"
    side = lambda lang: {  # noqa: E731
        "lang": lang,
        "level": "word",
        "lowercase": False,
        "normalize": False,
        "max_length": 250,
        "voc_file": str(data / "vocab.txt"),
        "tokenizer_type": "none",
    }
    layer = lambda: {  # noqa: E731
        "type": "transformer",
        "num_layers": SHAPE["layers"],
        "num_heads": SHAPE["heads"],
        "embeddings": {"embedding_dim": SHAPE["d_model"], "scale": True},
        "hidden_size": SHAPE["d_model"],
        "ff_size": SHAPE["ffn"],
        "dropout": SHAPE["dropout"],
        "layer_norm": "pre",
    }
    config = {
        "name": "vs_peers",
        "joeynmt_version": "2.3.0",
        "model_dir": str(model_dir),
        "use_cuda": False,
        "fp16": False,
        "random_seed": 1,
        "data": {
            "train": str(data / "train.tok"),
            "dev": str(data / "val.tok"),
            "test": str(data / "test2016.tok"),
            "dataset_type": "plain",
            "sample_dev_subset": 100,
            "src": side("en"),
            "trg": side("de"),
        },
        "testing": {
            "n_best": 1,
            "beam_size": 5,
            "beam_alpha": 0.6,
            "batch_size": 4096,
            "batch_type": "token",
            "max_output_length": 100,
            "eval_metrics": ["bleu"],
        },
        "training": {
            "optimizer": "adam",
            "adam_betas": [0.9, 0.98],
            "learning_rate": 2e-3,
            "learning_rate_min": 1e-8,
            "scheduling": "warmupinversesquareroot",
            "learning_rate_warmup": 500,
            "label_smoothing": 0.1,
            "loss": "crossentropy",
            "batch_size": 4096,
            "batch_type": "token",
            "normalization": "tokens",
            "epochs": 1000,
            "validation_freq": 50,
            "logging_freq": 10,
            "eval_metrics": ["bleu"],
            "early_stopping_metric": "bleu",
            "keep_best_ckpts": 1,
            "overwrite": True,
            "shuffle": True,
            "print_valid_sents": [],
        },
        "model": {
            "initializer": "xavier_uniform",
            "embed_initializer": "xavier_uniform",
            "bias_initializer": "zeros",
            "tied_embeddings": True,
            "tied_softmax": True,
            "encoder": layer(),
            "decoder": layer(),
        },
    }
    return yaml.safe_dump(config, sort_keys=False)


def run_joeynmt(work: Path, python: Path, seconds: float, threads: int) -> dict:
    out = work / "joeynmt"
    out.mkdir(parents=True, exist_ok=True)
    config = out / "config.yaml"
    config.write_text(joey_config(work, out / "model"))
    env = {"OMP_NUM_THREADS": str(threads)}
    run([python, "-m", "joeynmt", "train", config], log=work / "joeynmt.log", timeout=seconds, env=env)
    log = (out / "model" / "train.log").read_text(errors="replace")
    first, speeds, steps = None, [], 0
    for match in re.finditer(r"^(\d+-\d+-\d+ \d+:\d+:\d+).*Step:\s+(\d+),.*Tokens per Sec:\s+(\d+)", log, flags=re.M):
        stamp = time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
        first = first or stamp
        steps = int(match.group(2))
        speeds.append((stamp - first, float(match.group(3))))  # elapsed from the log's timestamps, tokens/s
    latest = out / "model" / "latest.ckpt"  # saved at every validation (every 50 updates, 100 dev sentences)
    if not latest.exists():
        raise ToolFailed(f"JoeyNMT saved no checkpoint within the budget; see {out / 'model' / 'train.log'}")
    settings = yaml.safe_load(config.read_text())
    settings["testing"]["load_model"] = str(latest.resolve())
    config.write_text(yaml.safe_dump(settings, sort_keys=False))
    hyp = out / "hyp.tok"
    # Its `translate -o` crashes in 2.3: read the translations from stdout.
    decode_s = run(
        [python, "-m", "joeynmt", "translate", config],
        stdin=work / "data" / "test.src.tok",
        stdout=hyp,
        log=work / "joeynmt.log",
        env=env,
    )
    return {"steps": steps, "tok_s": median_after_first_minute(speeds), "hyp_tok": hyp, "decode_s": decode_s}


# --- eole ----------------------------------------------------------------------------------------


def noam_peak(peak: float, warmup: int) -> float:
    """eole's learning_rate for a "noam" schedule that peaks at `peak` after `warmup` updates
    (rate x d^-0.5 x min(step^-0.5, step x warmup^-1.5)). Its "rsqrt" schedule has no warm-up: it
    holds rate / sqrt(warmup) until then, which at 2e-3 left the model untrained after 15 minutes."""
    return peak * (SHAPE["d_model"] * warmup) ** 0.5


def eole_config(work: Path, model_dir: Path) -> str:
    data = work / "data"
    config = {
        "save_data": str(model_dir / "data"),
        "overwrite": True,
        "seed": 1,
        "report_every": 20,
        "src_vocab": str(data / "vocab.eole"),
        "tgt_vocab": str(data / "vocab.eole"),
        "share_vocab": True,
        "src_vocab_size": 8000,
        "tgt_vocab_size": 8000,
        "vocab_size_multiple": 1,
        "n_sample": 0,
        "data": {
            "corpus_1": {"path_src": str(data / "train.tok.en"), "path_tgt": str(data / "train.tok.de")},
            "valid": {"path_src": str(data / "val.tok.en"), "path_tgt": str(data / "val.tok.de")},
        },
        "training": {
            "model_path": str(model_dir / "model"),
            "save_checkpoint_steps": 50,
            "keep_checkpoint": 1,
            "train_steps": 1_000_000,
            "valid_steps": 1_000_000,
            "world_size": 1,
            "gpu_ranks": [],
            "batch_type": "tokens",
            "batch_size": 4096,
            "valid_batch_size": 2048,
            "batch_size_multiple": 1,
            "bucket_size": 32768,
            "num_workers": 0,
            "accum_count": [1],
            "accum_steps": [0],
            "dropout": [SHAPE["dropout"]],
            "attention_dropout": [0.0],
            "dropout_steps": [0],
            "compute_dtype": "fp32",
            "optim": "adam",
            "learning_rate": noam_peak(2e-3, 500),
            "warmup_steps": 500,
            "decay_method": "noam",
            "adam_beta2": 0.98,
            "max_grad_norm": 0.0,
            "label_smoothing": 0.1,
            "param_init_method": "xavier_uniform",
            "normalization": "tokens",
        },
        "model": {
            "architecture": "transformer",
            "hidden_size": SHAPE["d_model"],
            "layers": SHAPE["layers"],
            "heads": SHAPE["heads"],
            "transformer_ff": SHAPE["ffn"],
            "share_decoder_embeddings": True,
            "share_embeddings": True,
            "layer_norm": "standard",
            "add_qkvbias": True,
            "embeddings": {"word_vec_size": SHAPE["d_model"], "position_encoding_type": "SinusoidalInterleaved"},
        },
    }
    return yaml.safe_dump(config, sort_keys=False)


def run_eole(work: Path, python: Path, seconds: float, threads: int) -> dict:
    out = work / "eole"
    out.mkdir(parents=True, exist_ok=True)
    config = out / "config.yaml"
    config.write_text(eole_config(work, out))
    eole = python.parent / "eole"
    env = {"OMP_NUM_THREADS": str(threads)}
    run([eole, "train", "-c", config], log=out / "train.log", timeout=seconds, env=env)
    log = (out / "train.log").read_text(errors="replace")
    speeds, steps = [], 0
    for match in re.finditer(r"Step (\d+)/.*?(\d+)/\s*(\d+) tok/s;\s+(\d+) sec", log):
        steps = int(match.group(1))
        speeds.append((float(match.group(4)), float(match.group(3))))  # tgt tok/s, seconds since start
    checkpoints = sorted(out.glob("model/step_*"), key=lambda p: int(p.name.split("_")[1]))
    if not checkpoints:
        raise ToolFailed(f"eole saved no checkpoint within the budget; see {out / 'train.log'}")
    checkpoint = checkpoints[-1]
    _fix_eole_config(checkpoint / "config.json")
    hyp = out / "hyp.tok"
    decode_s = run(
        [
            eole,
            "predict",
            "-model_path",
            checkpoint,
            "-src",
            work / "data" / "test.src.tok",
            "-output",
            hyp,
            "-beam_size",
            5,
            "-batch_size",
            4096,
            "-batch_type",
            "tokens",
            "-length_penalty",
            "wu",
            "-alpha",
            0.6,
            "-max_length",
            100,
        ],
        log=out / "predict.log",
        env=env,
    )
    return {"steps": steps, "tok_s": median_after_first_minute(speeds), "hyp_tok": hyp, "decode_s": decode_s}


def _fix_eole_config(path: Path) -> None:
    """eole 0.6.4 with add_qkvbias saves a config that re-adds an encoder attention output bias the
    checkpoint does not have, which turns its predictions into garbage; turn it back off."""
    saved = json.loads(path.read_text())
    saved.setdefault("model", {}).setdefault("encoder", {})["add_final_linear_bias"] = False
    path.write_text(json.dumps(saved, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0, help="training budget of each tool (wall-clock)")
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "vs_peers")
    parser.add_argument("--tools", default="mtkit,joeynmt,eole")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--mtkit-precision", default="bf16")
    parser.add_argument(
        "--mtkit-output-vocab",
        choices=["all", "target"],
        default="target",
        help="mtkit's model.output_vocab: target scores only the German-side subwords (the peers score all 8k)",
    )
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

    rows = []
    for name, r in results.items():
        rows.append(
            [name, r["steps"], r["tok_s"], ratio(name, r, "tok_s"), r["bleu"], r["sent_s"], ratio(name, r, "sent_s")]
        )
    print_table(
        [
            "tool",
            "updates",
            "train tgt tok/s",
            "mtkit/this",
            f"BLEU after {args.minutes:g} min",
            "beam-5 sent/s",
            "mtkit/this",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
