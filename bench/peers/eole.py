"""eole 0.6.4 in bench/vs_peers.py: its configuration for the shared shape, and a timed run."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml
from common import REPO

sys.path.insert(0, str(REPO))
from peers.shared import SHAPE, ToolFailed, median_after_first_minute, run  # noqa: E402


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
    decode_s = run([eole, "predict", "-model_path", checkpoint, "-src", work / "data" / "test.src.tok", "-output", hyp,
                    "-beam_size", 5, "-batch_size", 4096, "-batch_type", "tokens", "-length_penalty", "wu",
                    "-alpha", 0.6, "-max_length", 100], log=out / "predict.log", env=env)  # fmt: skip
    return {"steps": steps, "tok_s": median_after_first_minute(speeds), "hyp_tok": hyp, "decode_s": decode_s}


def _fix_eole_config(path: Path) -> None:
    """eole 0.6.4 with add_qkvbias saves a config that re-adds an encoder attention output bias the
    checkpoint does not have, which turns its predictions into garbage; turn it back off."""
    saved = json.loads(path.read_text())
    saved.setdefault("model", {}).setdefault("encoder", {})["add_final_linear_bias"] = False
    path.write_text(json.dumps(saved, indent=1))
