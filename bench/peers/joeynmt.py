"""JoeyNMT 2.3 in bench/vs_peers.py: its configuration for the shared shape, and a timed run."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import yaml
from common import REPO

sys.path.insert(0, str(REPO))
from peers.shared import SHAPE, ToolFailed, median_after_first_minute, run  # noqa: E402


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
