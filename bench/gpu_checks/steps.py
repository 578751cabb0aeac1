"""The steps of `bench/gpu_check.py --all`, in order, each adding rows to one table: the GPU-only
tests, the --gpu recipe, training throughput, decoding with and without CUDA graphs, serving."""

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
from common import (
    REPO,
    conditions,
    flops_per_target_token,
    gpu_peak_tflops,
    metrics_records,
    mtkit_command,
    prepare,
    print_table,
)
from train_throughput import LEVERS

ALL_STEPS = ("tests", "recipe", "throughput", "decoding", "serving")
# The RESULTS settings of training throughput (results/gpu.md): (preset, lever, max_tokens); a CPU's
# dry run trains transformer-tiny instead.
THROUGHPUT = {"cuda": [("transformer-big", "packed+graphs", 32768), ("transformer-base", "packed+flex+graphs", 32768)],
              "cpu": [("transformer-tiny", "eager", 1024), ("transformer-tiny", "packed", 1024)]}  # fmt: skip
# The recipe's --gpu --dry-run on a CPU: the same steps with a tiny model and budget.
TINY_RECIPE = ["model.d_model=32", "model.heads=2", "model.ffn_dim=64", "model.encoder_layers=1",
               "model.decoder_layers=1", "train.max_time=0", "train.max_steps=30", "train.save_every=10",
               "train.valid_every=10", "train.max_tokens=1024", "train.warmup=10", "train.log_every=10"]  # fmt: skip


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
        from mtkit.interop.engines import Decoding, build_translator

        outputs = {}
        for graphs in (False, True) if self.on_gpu else (False,):
            decoding = Decoding(search=SearchConfig(beam=5, lenpen=0.6), device=self.args.device, cuda_graphs=graphs)
            translator = build_translator(decoding, self.models[:1])
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
