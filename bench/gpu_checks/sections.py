"""The sections of bench/gpu_check.py without --all: each a check of a GPU path, printing PASS or
FAIL (bench/gpu_check.py's docstring says what each checks)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from common import (
    conditions,
    metrics_records,
    mtkit_command,
    prepare,
    run_measured,
    throughput_after,
)

RESULTS: list[tuple[str, bool, str]] = []
SECTIONS = ("precisions", "norms", "resume", "levers", "torchrun", "translation", "fp8", "graphs")


def check(name: str, passed: bool, detail: str) -> None:
    RESULTS.append((name, passed, detail))
    print(f"{'PASS' if passed else 'FAIL'}  {name}: {detail}", flush=True)


def losses(run_dir: Path) -> list[float]:
    return [r["loss"] for r in metrics_records(run_dir) if "loss" in r]


def train(data: Path, run: Path, device: str, *settings: str, launcher: list[str] | None = None) -> None:
    args = ["train", "-d", data, "-o", run, "--force", "--set", f"train.device={device}", "--set", "train.valid_every=1000000",
            "--set", "train.save_every=1000000", "--set", "train.log_every=1"]  # fmt: skip
    for setting in settings:
        args += ["--set", setting]
    command = (launcher or [sys.executable]) + ["-m", "mtkit", *map(str, args)]
    run_measured(command)


def train_precision(data: Path, work: Path, device: str, steps: int, small: list[str], precision: str) -> Path:
    run = work / f"precision-{precision}"
    schedule = [f"train.max_steps={steps}", f"train.warmup={steps // 4}", "train.lr=1e-3"]
    train(data, run, device, *small, *schedule, f"train.precision={precision}")
    return run


def fp32_model(data: Path, work: Path, device: str, steps: int, small: list[str]) -> Path:
    """The fp32 run of check_precisions, trained here when this call skipped that section."""
    run = work / "precision-fp32"
    return run if (run / "state.pt").exists() else train_precision(data, work, device, steps, small, "fp32")


def check_precisions(data: Path, work: Path, device: str, steps: int, small: list[str]) -> None:
    for precision in ("fp32", "bf16", "fp16"):
        if device == "cpu" and precision == "fp16":
            continue  # no GradScaler path worth checking on a CPU
        run = train_precision(data, work, device, steps, small, precision)
        values = losses(run)
        skipped = metrics_records(run)[-1]["skipped_updates"]
        first, last = sum(values[:10]) / 10, sum(values[-10:]) / 10
        ok = last < 0.9 * first and (precision != "fp16" or skipped <= 10)
        check(
            f"train {precision}", ok, f"loss {first:.3f} -> {last:.3f} over {steps} updates; {skipped} updates skipped"
        )


def check_gradient_norms(data: Path, device: str) -> None:
    from mtkit.core.config import build_config
    from mtkit.core.device import autocast
    from mtkit.data.batching import collate, make_batches
    from mtkit.data.dataset import ParallelDataset, read_manifest
    from mtkit.model.transformer import Transformer
    from mtkit.training.loss import TrainingObjective

    manifest = read_manifest(data)
    cfg = build_config({"model": {"preset": "transformer-small", "dropout": 0.0}}).model
    cfg.src_vocab_size = cfg.tgt_vocab_size = manifest["src_tokenizer"]["vocab_size"]
    cfg.joint_vocab = True
    torch.manual_seed(0)
    model = Transformer(cfg).to(device)
    dataset = ParallelDataset(data, "train")
    batches, _ = make_batches(dataset.src_lengths, dataset.tgt_lengths, 4096, 0, 0, shuffle=False)
    batch = collate(dataset, batches[len(batches) // 2]).to(torch.device(device))
    objective = TrainingObjective(model, 0.1)
    norms = {}
    for precision in ("fp32", "bf16") + (("fp16",) if device == "cuda" else ()):
        model.zero_grad(set_to_none=True)
        scaler = torch.amp.GradScaler(device) if precision == "fp16" else None
        with autocast(torch.device(device), precision):
            loss, _ = objective(batch.src, batch.tgt_in, batch.tgt_out)
        # Per target token, as the trainer weights it: the summed loss of a 4k-token batch times the
        # GradScaler's first scale (65,536) overflows fp16's gradients.
        loss = loss / batch.tgt_tokens
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
            scaler.unscale_(optimizer)
        norms[precision] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")))
    for precision, norm in norms.items():
        if precision != "fp32":
            relative = abs(norm - norms["fp32"]) / norms["fp32"]
            check(f"gradient norm {precision}", relative <= 0.05, f"{norm:.4f} vs fp32 {norms['fp32']:.4f} ({100 * relative:.2f}% apart, tolerance 5%)")  # fmt: skip


def check_resume(data: Path, work: Path, device: str, steps: int, small: list[str]) -> None:
    settings = [*small, "model.dropout=0.1", "train.precision=fp32"]
    train(data, work / "whole", device, *settings, f"train.max_steps={steps}")
    train(data, work / "halves", device, *settings, f"train.max_steps={steps // 2}")
    run_measured(mtkit_command("train", "--resume", work / "halves", "--set", f"train.max_steps={steps}"))
    whole, halves = losses(work / "whole"), losses(work / "halves")
    worst = max(abs(a - b) / abs(a) for a, b in zip(whole, halves))
    check("resume", len(whole) == len(halves) == steps and worst <= 1e-4, f"largest relative loss difference {worst:.2e} over {steps} updates")  # fmt: skip


def check_levers(data: Path, work: Path, device: str, small: list[str]) -> None:
    """Packed rows, compiled and (on a GPU) replayed as CUDA graphs, with FlexAttention, train as the
    eager packed model does: fp32, no dropout, 30 updates, losses within 1e-3 (relative) at every one."""
    settings = [*small, "model.dropout=0.0", "train.precision=fp32", "train.max_steps=30", "train.pack_length=64"]
    train(data, work / "packed", device, *settings)
    expected = losses(work / "packed")
    levers = {"compiled": ["train.compile=true"]}
    if device == "cuda":
        levers["CUDA graphs"] = ["train.compile=true", "train.cuda_graphs=true"]
        levers["CUDA graphs + FlexAttention"] = [*levers["CUDA graphs"], "train.flex_attention=true"]
    for name, extra in levers.items():
        run = work / f"packed-{name.replace(' ', '-').replace('+', '')}"
        train(data, run, device, *settings, *extra)
        got = losses(run)
        worst = max(abs(a - b) / abs(a) for a, b in zip(expected, got))
        check(f"packed rows, {name}", len(got) == 30 and worst <= 1e-3, f"largest relative loss difference to eager {worst:.2e} over 30 updates")  # fmt: skip


def check_torchrun(data: Path, work: Path, device: str, small: list[str]) -> None:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    settings = [*small, "model.dropout=0.0", "train.max_steps=20", "train.precision=fp32"]
    train(data, work / "torchrun1", device, *settings, launcher=[*torchrun, "--nproc_per_node=1"])
    check("torchrun, 1 process", len(losses(work / "torchrun1")) == 20, "20 updates")
    if device != "cuda" or torch.cuda.device_count() < 2:
        print("skip  torchrun, 2 processes (nccl): needs 2 GPUs", flush=True)
        return
    train(data, work / "torchrun2", device, *settings, launcher=[*torchrun, "--nproc_per_node=2"])
    train(data, work / "accumulated", device, *settings, "train.update_freq=2")
    from mtkit.model.files import load_payload
    from mtkit.training.checkpoints import STATE_FORMAT

    two = load_payload(work / "torchrun2" / "state.pt", STATE_FORMAT)["model"]
    one = load_payload(work / "accumulated" / "state.pt", STATE_FORMAT)["model"]
    worst = max(float((two[k] - one[k]).abs().max()) for k in one if not k.endswith("kv_proj.bias"))
    check("torchrun, 2 processes (nccl)", worst <= 1e-4, f"largest weight difference to 1 process x update_freq 2: {worst:.2e}")  # fmt: skip


def check_translation(model: Path, text: Path, device: str) -> None:
    slice_ = text / "test2016.en"
    outputs = {}
    for where in ("cpu", device):
        result = subprocess.run(mtkit_command("translate", "-m", model, "-i", slice_, "--beam", "1", "--device", where,
                                              "--precision", "fp32"), capture_output=True, check=True)  # fmt: skip
        outputs[where] = result.stdout.decode().splitlines()
    same = sum(a == b for a, b in zip(outputs["cpu"], outputs[device]))
    check("greedy translation equals the CPU's", same == len(outputs["cpu"]), f"{same} of {len(outputs['cpu'])} lines identical")  # fmt: skip


def check_fp8(data: Path, work: Path, device: str, runs: list[str]) -> None:
    """Trains each run of `runs` ("PRECISION" or "PRECISION:SEED"; the first is the reference) and
    compares its loss curve with the first's: fp8 against bf16, and bf16 with another seed against
    bf16, the gap that training noise alone makes."""
    from mtkit.core.errors import MtkitError
    from mtkit.training.float8 import resolve_training_precision

    if any(run.startswith("fp8") for run in runs):
        try:  # what mtkit train checks: FP8 tensor cores and torchao
            resolve_training_precision("fp8", torch.device(device))
        except MtkitError as refusal:
            print(f"skip  fp8: {refusal}", flush=True)
            return
    big = ["model.preset=transformer-big", "train.max_tokens=32768", "train.max_steps=300", "train.warmup=100",
           "train.lr=5e-4", "train.pack_length=128", "train.compile=true", "train.cuda_graphs=true"]  # fmt: skip
    curves, speeds = {}, {}
    for name in runs:
        precision, _, seed = name.partition(":")
        run = work / f"fp8-check-{precision}-{seed or 1}"
        train(data, run, device, *big, f"train.precision={precision}", f"train.seed={seed or 1}")
        curves[name] = losses(run)
        speeds[name] = throughput_after(metrics_records(run), 100)[0]

    def means(values: list[float]) -> list[float]:
        return [sum(values[i : i + 10]) / 10 for i in range(0, len(values) - 9, 10)]

    reference = runs[0]
    for name in runs[1:]:
        gaps = [abs(f - b) / b for b, f in zip(means(curves[reference]), means(curves[name]))]
        check(f"{name} follows {reference}", len(curves[name]) == 300 and max(gaps) <= 0.01,
              f"transformer-big, 300 updates: largest gap {100 * max(gaps):.2f}% (means of 10 updates), at update "
              f"{10 * gaps.index(max(gaps)) + 10}; last 10 updates {means(curves[name])[-1]:.3f} against "
              f"{means(curves[reference])[-1]:.3f}; target tok/s after 100 updates: {name} {speeds[name]:,.0f}, "
              f"{reference} {speeds[reference]:,.0f} ({speeds[name] / speeds[reference]:.2f}x)")  # fmt: skip
    print("means of 10 updates:", json.dumps({name: [round(v, 4) for v in means(curves[name])] for name in runs}))


def check_graphs(model: Path, text: Path, device: str) -> None:
    """mtkit's search with --cuda-graphs gives the translations it gives without: every line in fp32,
    at least 99% of them in bf16 (where attention over a longer, masked cache may round differently).
    Their speed: bench/decode_speed.py --graphs 0,1."""
    for precision in ("fp32", "bf16"):
        for beam in (1, 5):
            outputs = [subprocess.run(mtkit_command("translate", "-m", model, "-i", text / "test2016.en", "--beam", beam,
                                                    "--device", device, "--precision", precision, *graphs),
                                      capture_output=True, text=True, check=True).stdout.splitlines()
                       for graphs in ([], ["--cuda-graphs"])]  # fmt: skip
            same = sum(a == b for a, b in zip(*outputs))
            needed = len(outputs[0]) if precision == "fp32" else 0.99 * len(outputs[0])
            check(f"CUDA graphs, {precision}, beam {beam}: the same translations", same >= needed,
                  f"{same} of {len(outputs[0])} lines identical")  # fmt: skip


# --- --all: every GPU figure in one command ---------------------------------------------------------


def run_sections(args, only: set[str]) -> None:
    """The sections in `only`, then a line of how many passed; exits 1 where one failed."""
    on_gpu = args.device == "cuda"
    print(f"conditions: {conditions()}\n", flush=True)
    if on_gpu:
        small = ["model.preset=transformer-small", "train.max_tokens=4096"]
    else:  # a check of the script itself
        small = ["model.preset=transformer-tiny", "model.d_model=64", "model.ffn_dim=128", "train.max_tokens=1024"]
    steps = args.steps if on_gpu else 40
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        data, text = prepare(args.data, work, 29000 if on_gpu else 2000)
        if "precisions" in only:
            check_precisions(data, work, args.device, steps, small)
        if "norms" in only:
            check_gradient_norms(data, args.device)
        if "resume" in only:
            check_resume(data, work, args.device, steps if on_gpu else 20, small)
        if "levers" in only:
            check_levers(data, work, args.device, small)
        if "torchrun" in only:
            check_torchrun(data, work, args.device, small)

        def decode_model() -> Path:
            return args.model or fp32_model(data, work, args.device, steps, small)

        if "translation" in only and on_gpu:
            check_translation(decode_model(), text, args.device)
        if "fp8" in only:
            check_fp8(data, work, args.device, args.fp8_runs.split(","))
        if "graphs" in only and on_gpu:
            check_graphs(decode_model(), text, args.device)
    failed = [name for name, passed, _ in RESULTS if not passed]
    print(f"\n{len(RESULTS) - len(failed)} passed, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)
