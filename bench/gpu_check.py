"""One command that proves the GPU paths: precisions, resume, torchrun/nccl, translation, FP8, CUDA graphs.

    python bench/gpu_check.py --all --data DIR [--budget-s 540] [--work DIR]
    python bench/gpu_check.py [--data ../shared/data/multi30k] [--steps 200] [--work DIR] [--only SECTIONS]

--all is the one command for whoever holds a GPU for a few minutes: in this order, it runs
  1. the GPU-only tests (pytest -m gpu);
  2. the --gpu recipe (recipes/multi30k_en_de/run.sh --gpu: its sweep of settings trained at once,
     mtkit choose on val, test2016 decoded once, cased and lowercased);
  3. the training throughput and MFU of transformer-big and transformer-base at the RESULTS settings;
  4. beam 5 on test2016 with and without CUDA graphs (the recipe's first chosen model);
  5. the server at 32 and 256 clients against offline decoding (needs mtkit[serve] and httpx);
and prints one table with the device, the date and every figure (9 minutes on one H100 or H200).
A step that cannot run (a missing extra, no time left in --budget-s) says so in its row and the
others go on; a step that fails is a row too, and the exit code is 1. With --device cpu it runs the
same steps end to end with tiny budgets, as the test suite does, so the GPU run never meets a
renamed option. mtkit runs from this tree (nothing needs installing but torch and the core packages).

Without --all, the sections below (--only picks some):

On a CUDA machine it checks, and prints a PASS/FAIL line for each:
  1. transformer-small trains --steps updates in fp32, bf16 and fp16: the mean loss of the last 10
     updates is below 0.9 x that of the first 10, and fp16's GradScaler skips at most 10 updates;
  2. on one fixed batch the bf16 and fp16 gradient norms of the loss per target token (fp16 unscaled
     before the norm) are within 5% of fp32's;
  3. a run stopped half way and resumed logs the losses of the uninterrupted run (rel. 1e-4: GPU
     kernels are not bitwise deterministic); packed rows compiled, replayed as CUDA graphs and with
     FlexAttention log the eager packed losses (rel. 1e-3);
  4. torchrun with 1 process trains (no process group: world size 1), and with 2 GPUs, 2 processes
     (nccl) reach the weights of 1 process with update_freq 2 (atol 1e-4);
  5. greedy translations of a test slice on the GPU (fp32) equal the CPU's, and translations with
     --cuda-graphs those without: every line in fp32, 99% in bf16, greedy and beam 5;
  6. on a GPU with FP8 tensor cores (compute capability 8.9 on, torchao installed), transformer-big
     trains 300 updates of 32,768 tokens (packed, graphed) in fp8 with the loss curve of bf16 within
     1% (means of 10 updates), and the two runs' throughput after 100 updates (--fp8-runs
     bf16,bf16:2 measures the gap between two bf16 runs of different seeds instead);
Speeds, and the profile of a training update, are bench/train_throughput.py's and
bench/decode_speed.py's.
`--device cpu` runs the same code on a CPU with small sizes, to check the script itself.
`--only precisions,norms,...` runs some of the sections (all of SECTIONS by default); with `--work DIR`
the tokenizer, the dataset and the fp32 model are kept there and reused by a later call, so the whole
check can be split over several calls on a machine that limits each one. `--model FILE` translates
with a trained model (a recipe's model1.pt) instead of the few-hundred-update fp32 run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sacrebleu
import torch
from common import (
    DEFAULT_MULTI30K,
    REPO,
    conditions,
    flops_per_target_token,
    gpu_peak_tflops,
    metrics_records,
    mtkit_command,
    prepare,
    print_table,
    run_measured,
    throughput_after,
)
from train_throughput import LEVERS

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

ALL_STEPS = ("tests", "recipe", "throughput", "decoding", "serving")
# The RESULTS settings of training throughput (results/gpu.md): (preset, lever, max_tokens); a CPU's
# dry run trains transformer-tiny instead.
THROUGHPUT = {"cuda": [("transformer-big", "packed+graphs", 32768), ("transformer-base", "packed+flex+graphs", 32768)],
              "cpu": [("transformer-tiny", "eager", 1024), ("transformer-tiny", "packed", 1024)]}  # fmt: skip
# The recipe's --gpu --dry-run on a CPU: the same steps with a tiny model and budget.
TINY_RECIPE = ["model.d_model=32", "model.heads=2", "model.ffn_dim=64", "model.encoder_layers=1",
               "model.decoder_layers=1", "train.max_time=0", "train.max_steps=30", "train.save_every=10",
               "train.valid_every=10", "train.max_tokens=1024", "train.pack_length=64", "train.warmup=10",
               "train.log_every=10"]  # fmt: skip


class Skip(Exception):
    """A step that cannot run here, and why (a missing extra, no model, the budget spent)."""


class AllChecks:
    """The steps of --all in order; each adds (step, figure, value) rows to one table and leaves what
    later steps use (the recipe's models, the offline decoding speeds)."""

    def __init__(self, args: argparse.Namespace, work: Path):
        self.args, self.work, self.on_gpu = args, work, args.device == "cuda"
        self.rows: list[list[str]] = []
        self.started = time.monotonic()
        self.models: list[Path] = [args.model] if args.model else []
        self.offline: dict[bool, float] = {}  # sentences/s with and without CUDA graphs
        self.sentences = (args.data / "test2016.en").read_text(encoding="utf-8").splitlines()
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                    "PATH": f"{self.command_folder()}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip

    def command_folder(self) -> Path:
        """`mtkit` and `python3` for the recipe: this interpreter and the tree (where mtkit is not installed)."""
        folder = self.work / "bin"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "mtkit").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m mtkit "$@"\n')
        (folder / "mtkit").chmod(0o755)
        (folder / "python3").unlink(missing_ok=True)
        (folder / "python3").symlink_to(sys.executable)
        return folder

    def add(self, step: str, figure: str, value: object) -> None:
        self.rows.append([step, figure, f"{value:,.1f}" if isinstance(value, float) else str(value)])
        print(f"{step}: {figure}: {self.rows[-1][-1]}", flush=True)

    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.started)

    def run(self) -> bool:
        """Every step, whatever happened to the ones before; True where none failed."""
        failed = False
        for step in ALL_STEPS:
            began = time.monotonic()
            print(f"\n== {step} ({self.left():.0f} s of --budget-s left)", flush=True)
            try:
                if self.left() < 30:
                    raise Skip(f"--budget-s {self.args.budget_s:g} spent")
                getattr(self, step)()
            except Skip as why:
                self.add(step, "skipped", why)
            except Exception as error:  # a failed step is a row too; the others go on
                failed = True
                self.add(step, "FAILED", f"{type(error).__name__}: {str(error).strip().splitlines()[-1][:200]}")
            self.add(step, "seconds", f"{time.monotonic() - began:.0f}")
        return not failed

    def tests(self) -> None:
        try:
            import hypothesis  # noqa: F401
            import pytest  # noqa: F401
        except ImportError:
            raise Skip("needs pytest and hypothesis (pip install 'mtkit[dev]')") from None
        files = sorted(str(p) for p in (REPO / "tests").glob("test_*.py") if "pytest.mark.gpu" in p.read_text())
        with open(self.work / "tests.log", "w+b") as log:
            code = run_in_group([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *files],
                                self.left(), cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, check=False)  # fmt: skip
            log.seek(0)
            output = log.read().decode(errors="replace")
        summary = next((line.strip("= ") for line in reversed(output.splitlines()) if " in " in line), "no summary")
        self.add("tests", f"pytest -m gpu ({len(files)} files)", summary)
        if code != 0:
            raise RuntimeError(f"pytest exited {code}: {output[-400:]}")

    def recipe(self) -> None:
        out = self.work / "recipe"
        command = ["bash", str(REPO / "recipes/multi30k_en_de/run.sh"), "--gpu", "--out", str(out)]
        env = {**self.env, "DATA": str(self.args.data)}
        if not self.on_gpu:
            command += ["--dry-run", *(arg for setting in TINY_RECIPE for arg in ("--set", setting))]
            env["LENPENS"] = "1.0 2.0"
        with open(self.work / "recipe.log", "wb") as log:
            code = run_in_group(command, self.left(), check=False, env=env, stdout=log, stderr=subprocess.STDOUT)
        if code != 0:
            last = (self.work / "recipe.log").read_text(errors="replace").strip().splitlines()[-1:]
            raise RuntimeError(f"run.sh exited {code} ({self.work / 'recipe.log'}): {' '.join(last)}")
        choice = json.loads((out / "chosen" / "choice.json").read_text())
        self.models = self.models or [out / "chosen" / name for name in choice["models"]]
        for run in sorted((out / "sweep").iterdir()):
            if run.is_dir():
                records = metrics_records(run)
                timed = [record for record in records if "elapsed" in record]  # updates, not validations
                took = f" in {timed[-1]['elapsed']:.0f} s" if timed else ""
                self.add("recipe", f"{run.name}: updates{took}", f"{records[-1]['step']:,}")
        chosen = ", ".join(
            f"{Path(run).name} ({averaging})" for run, averaging in zip(choice["runs"], choice["averaging"])
        )
        self.add("recipe", "chosen on val", f"{chosen}; lenpen {choice['lenpen']}; val BLEU {choice['val_bleu']:.2f}")
        scores = json.loads((out / "test2016.json").read_text())
        hypotheses = (out / "test2016.hyp.de").read_text(encoding="utf-8").splitlines()
        references = (self.args.data / "test2016.de").read_text(encoding="utf-8").splitlines()
        lowercased = sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score
        self.add("recipe", "test2016 BLEU cased / lowercased", f"{scores['bleu']['score']:.2f} / {lowercased:.2f}")
        self.add("recipe", "test2016 chrF", f"{scores['chrf']['score']:.2f}")

    def throughput(self) -> None:
        from train_throughput import measure

        data = self.work / "recipe" / "data-bin"  # the recipe's dataset, else one made here
        data = data if (data / "manifest.json").exists() else prepare(self.args.data, self.work / "data", 29000)[0]
        vocab = json.loads((data / "manifest.json").read_text())["src_tokenizer"]["vocab_size"]
        steps, skip = (80, 30) if self.on_gpu else (12, 4)
        for preset, lever, max_tokens in THROUGHPUT[self.args.device]:
            settings = [f"model.preset={preset}", f"train.max_tokens={max_tokens}", f"train.max_steps={steps}",
                        f"train.device={self.args.device}", "train.valid_every=1000000", "train.save_every=1000000",
                        "train.log_every=1", *(s.format(pack=128 if self.on_gpu else 64) for s in LEVERS[lever])]  # fmt: skip
            result = measure(data, self.work / f"throughput-{preset}-{lever}", settings, skip)
            if isinstance(result, str):
                raise RuntimeError(f"{preset} {lever}: {result}")
            tok_s, src_per_tgt = result[0], result[1]
            figure = f"{preset}, {lever}, {max_tokens:,} tokens: target tok/s"
            if self.on_gpu:
                tflops = flops_per_target_token(preset, vocab, src_per_tgt) * tok_s / 1e12
                figure, tok_s = f"{figure} (MFU {100 * tflops / gpu_peak_tflops():.1f}%)", tok_s
            self.add("throughput", figure, tok_s)

    def decoding(self) -> None:
        if not self.models:
            raise Skip("no model: the recipe did not finish (or give --model)")
        from mtkit.decoding.search_rules import SearchConfig
        from mtkit.interop.engines import make_translator

        outputs = {}
        for graphs in (False, True) if self.on_gpu else (False,):
            translator = make_translator("pytorch", self.models[:1], "best", SearchConfig(beam=5, lenpen=0.6),
                                         self.args.device, "auto", 128, 8192, graphs)  # fmt: skip
            translator.translate(self.sentences[:100])  # warm-up (and graph capture)
            began = time.perf_counter()
            outputs[graphs] = translator.translate(self.sentences)
            self.offline[graphs] = len(self.sentences) / (time.perf_counter() - began)
            name = "with CUDA graphs" if graphs else "eager"
            self.add("decoding", f"beam 5, {translator.precision}, {name}: sentences/s", self.offline[graphs])
        if self.on_gpu:
            same = sum(a == b for a, b in zip(outputs[False], outputs[True]))
            self.add("decoding", "lines identical with and without graphs", f"{same:,} of {len(self.sentences):,}")

    def serving(self) -> None:
        try:
            import fastapi  # noqa: F401
            import httpx
            import uvicorn  # noqa: F401
        except ImportError:
            raise Skip("needs pip install 'mtkit[serve]' httpx") from None
        from serve_load import free_port, load, percentile

        if not self.offline:
            raise Skip("no offline speed to compare with: the decoding step did not finish")
        graphs = self.on_gpu
        port = free_port()
        options = ["--beam", "5", "--max-wait-ms", "20"] + ["--cuda-graphs"] * graphs
        server = subprocess.Popen(mtkit_command("serve", "-m", self.models[0], "--port", port, "--device", self.args.device, *options),
                                  env=self.env, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            while not self.ready(httpx, port):
                if server.poll() is not None:
                    raise RuntimeError("the server did not start")
                time.sleep(0.5)
            seconds = 8.0 if self.on_gpu else 1.0
            for clients in (32, 256) if self.on_gpu else (2, 4):
                processes = min(max(1, (os.cpu_count() or 2) // 2), -(-clients // 32))
                latencies, _ = load(port, self.sentences, clients, seconds, processes)
                rate = len(latencies) / seconds
                self.add("serving", f"{clients} clients: sentences/s, p95 ms, of offline",
                         f"{rate:,.1f}, {1000 * percentile(latencies, 0.95):,.0f}, {rate / self.offline[graphs]:.0%}")  # fmt: skip
        finally:
            server.terminate()
            server.wait(60)

    @staticmethod
    def ready(httpx, port: int) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/ready").status_code == 200
        except httpx.TransportError:
            return False

    def table(self) -> None:
        print(f"\npython bench/gpu_check.py {' '.join(sys.argv[1:])}\n{conditions()}\n")
        print_table(["step", "figure", "value"], self.rows)


def run_in_group(command: list, timeout: float, check: bool = True, **options) -> int:
    """Run a command in a process group of its own, all of it killed when `timeout` runs out (a recipe's
    trainings too); its exit code, or CalledProcessError with check."""
    process = subprocess.Popen([str(part) for part in command], start_new_session=True, **options)
    try:
        code = process.wait(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    if check and code != 0:
        raise subprocess.CalledProcessError(code, command[:3])
    return code


def run_all(args: argparse.Namespace) -> None:
    print(f"conditions: {conditions()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        checks = AllChecks(args, work)
        passed = checks.run()
        checks.table()
    sys.exit(0 if passed else 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--work", type=Path, default=None, help="keep runs here (default: a temporary folder)")
    parser.add_argument("--model", type=Path, default=None, help="translate and decode with this model file")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections to run (default: all)")
    parser.add_argument(
        "--fp8-runs", default="bf16,fp8", help="the fp8 section's runs, PRECISION[:SEED], the first the reference"
    )
    parser.add_argument("--all", action="store_true", help="the GPU check in one command: tests, recipe, throughput, decoding, serving")  # fmt: skip
    parser.add_argument("--budget-s", type=float, default=540.0, help="--all: start no step after this many seconds")
    args = parser.parse_args()
    if args.all:
        run_all(args)
    only = set(args.only.split(","))
    if not only <= set(SECTIONS):
        parser.error(f"--only: unknown section(s) {', '.join(sorted(only - set(SECTIONS)))}; choose from {', '.join(SECTIONS)}")  # fmt: skip
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


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", str(min(8, os.cpu_count() or 1)))
    main()
