"""`mtkit train`: the training loop, validation, checkpoints and exact resumption.

One update = `update_freq` micro-batches from the token-bucketed batch stream; under torchrun
each rank takes every world_size-th sentence of each micro-batch, and the summed loss is
divided by the whole update's target tokens, so K processes and 1 process with the same
global batches compute the same gradient.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sacrebleu
import torch
from torch import nn

from mtkit import __version__, console
from mtkit.batching import Batch, collate, make_batches
from mtkit.checkpoint import (
    CHECKPOINT_DIR,
    MODEL_FORMAT,
    STATE_FILE,
    STATE_FORMAT,
    best_entries,
    last_entries,
    load_payload,
    metric_is_better,
    model_payload,
    read_index,
    save_payload,
    write_index,
)
from mtkit.config import RESUMABLE_KEYS, Config, build_config, config_from_dict, merge_trees, parse_overrides
from mtkit.data import ParallelDataset, check_tokenizers_match, load_tokenizers, read_manifest
from mtkit.distributed import Distributed, init_distributed, shutdown_distributed
from mtkit.errors import MtkitError
from mtkit.loss import label_smoothed_loss
from mtkit.model import Transformer
from mtkit.schedule import inverse_sqrt_lr, linear_decay_lr
from mtkit.search import SearchConfig
from mtkit.tokenizer import PAD_ID, Tokenizer
from mtkit.translate import autocast, resolve_device, resolve_precision, translate_ids

MAX_CONSECUTIVE_NONFINITE = 32
METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.yaml"
RUN_FILES = (CONFIG_FILE, METRICS_FILE, STATE_FILE, CHECKPOINT_DIR, "run.json", "tensorboard")


class TrainingObjective(nn.Module):
    """Teacher-forced loss of a batch; the unit that DistributedDataParallel wraps."""

    def __init__(self, model: Transformer, label_smoothing: float):
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing

    def forward(
        self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        memory, src_mask = self.model.encode(src)
        hidden = self.model.decode(tgt_in, memory, src_mask)
        real = tgt_out != PAD_ID
        logits = self.model.logits(hidden[real])  # only real positions reach the vocabulary projection
        return label_smoothed_loss(logits, tgt_out[real], self.label_smoothing)


@dataclass
class Progress:
    """Where training stands; saved in the training state."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # micro-batches of this epoch already consumed
    elapsed: float = 0.0  # seconds of training wall-clock (validation and saving included), across resumptions
    best_metric: float | None = None
    bad_validations: int = 0
    nonfinite_updates: int = 0
    oom_updates: int = 0
    target_tokens: int = 0


class MetricsLog:
    """RUN_DIR/metrics.jsonl, one JSON object per line; tools read it, people read the console."""

    def __init__(self, path: Path, resume_step: int | None):
        self.path = path
        if resume_step is not None and path.exists():  # drop what was logged after the resumed checkpoint
            kept = [
                line
                for line in path.read_text(encoding="utf-8").splitlines()
                if json.loads(line)["step"] <= resume_step
            ]
            path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        self._file = open(path, "a", encoding="utf-8")
        self._tensorboard = _tensorboard_writer(path.parent / "tensorboard")

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tensorboard:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    self._tensorboard.add_scalar(key, value, record["step"])

    def close(self) -> None:
        self._file.close()
        if self._tensorboard:
            self._tensorboard.close()


def _tensorboard_writer(path: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is an optional extra
        return None
    return SummaryWriter(str(path))


def _rng_state() -> dict[str, Any]:
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy = state["numpy"]
    np.random.set_state(
        ("MT19937", numpy["keys"].numpy().astype(np.uint32), numpy["pos"], numpy["has_gauss"], numpy["cached_gaussian"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class StopSignal:
    """SIGINT/SIGTERM ask training to stop after the current update, save, and exit cleanly."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. some test runners): no handler
                pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C stops at once
        self.requested = True

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def prepare_run_dir(run_dir: Path, force: bool) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    existing = [name for name in RUN_FILES if (run_dir / name).exists()]
    if existing and not force:
        raise MtkitError(
            f"{run_dir}: already holds a run ({', '.join(existing)}); use --resume to continue it or --force to replace it"
        )
    for name in existing:
        target = run_dir / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()


def resume_config(run_dir: Path, overrides: list[str]) -> Config:
    """The run's saved config with only the stopping/reporting settings changed."""
    saved = load_payload(run_dir / STATE_FILE, STATE_FORMAT)["config"]
    before = config_from_dict(saved).to_dict()
    config = config_from_dict(merge_trees(saved, parse_overrides(overrides)))
    config.train.validate()
    after = config.to_dict()
    for section, values in after.items():
        for key, value in values.items():
            dotted = f"{section}.{key}"
            if value != before[section][key] and dotted not in RESUMABLE_KEYS:
                raise MtkitError(
                    f"--set {dotted}: cannot change on resume (it would change the model or the data order); "
                    f"these can: {', '.join(sorted(RESUMABLE_KEYS))}"
                )
    return config


class Trainer:
    def __init__(self, config: Config, data_dir: Path, run_dir: Path, resume: bool):
        self.config = config
        self.cfg = config.train
        self.data_dir = Path(data_dir)
        self.run_dir = Path(run_dir)
        self.device = resolve_device(self.cfg.device)
        self.precision = resolve_precision(self.cfg.precision, self.device)
        self.dist: Distributed = init_distributed(self.device.type)
        if self.device.type == "cuda":
            self.device = torch.device("cuda", self.dist.local_rank)
            torch.cuda.set_device(self.device)
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        self.train_data = ParallelDataset(self.data_dir, "train")
        manifest = read_manifest(self.data_dir)
        self.valid_data = ParallelDataset(self.data_dir, "valid") if "valid" in manifest["splits"] else None
        self.src_tokenizer, self.tgt_tokenizer = load_tokenizers(self.data_dir)
        model_cfg = config.model
        model_cfg.src_vocab_size = manifest["src_tokenizer"]["vocab_size"]
        model_cfg.tgt_vocab_size = manifest["tgt_tokenizer"]["vocab_size"]
        model_cfg.joint_vocab = bool(manifest["joint_vocab"])
        torch.manual_seed(self.cfg.seed)
        self.model = Transformer(model_cfg).to(self.device)
        self.objective: nn.Module = TrainingObjective(self.model, self.cfg.label_smoothing)
        if self.dist.enabled:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            self.objective = nn.parallel.DistributedDataParallel(self.objective, device_ids=device_ids)
        self.optimizer = self._make_optimizer()
        self.scaler = torch.amp.GradScaler(self.device.type) if self.precision == "fp16" else None
        self.progress = Progress()
        if resume:
            self._load_state()
        # Each rank draws its own dropout masks.
        if not resume:
            torch.manual_seed(self.cfg.seed + self.dist.rank)

    def _make_optimizer(self) -> torch.optim.Optimizer:
        options: dict[str, Any] = dict(lr=self.cfg.lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=self.cfg.weight_decay)
        options["fused" if self.device.type == "cuda" else "foreach"] = True
        return (
            torch.optim.AdamW(self.model.parameters(), **options)
            if self.cfg.weight_decay
            else torch.optim.Adam(self.model.parameters(), **options)
        )

    # --- the batch stream --------------------------------------------------------------------

    def _epoch_batches(self, epoch: int) -> list[np.ndarray]:
        batches, skipped = make_batches(
            self.train_data.src_lengths, self.train_data.tgt_lengths, self.cfg.max_tokens, self.cfg.seed, epoch
        )
        if len(skipped) and epoch == self.progress.epoch and self.dist.is_main and self.progress.batch_in_epoch == 0:
            console.warn(
                f"skipped {len(skipped)} sentence pairs longer than train.max_tokens={self.cfg.max_tokens} on their own"
            )
        if not batches:
            raise MtkitError(f"no training batch fits train.max_tokens={self.cfg.max_tokens}: raise it")
        return batches

    def _next_update(self, batches: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The next update_freq global micro-batches, moving through epochs; returns (micro, batches)."""
        micro = []
        for _ in range(self.cfg.update_freq):
            if self.progress.batch_in_epoch >= len(batches):
                self.progress.epoch += 1
                self.progress.batch_in_epoch = 0
                batches = self._epoch_batches(self.progress.epoch)
            micro.append(batches[self.progress.batch_in_epoch])
            self.progress.batch_in_epoch += 1
        return micro, batches

    # --- one update --------------------------------------------------------------------------

    def _update(self, micro_batches: list[np.ndarray]) -> dict[str, Any]:
        """Forward/backward over the micro-batches and one optimizer step.

        Returns the update's statistics, or {"skipped": "nonfinite" | "out_of_memory"} when the
        update was not applied.
        """
        total_tgt = sum(int(self.train_data.tgt_lengths[b].sum()) + len(b) for b in micro_batches)  # + </s>
        loss_sum = nll_sum = 0.0
        src_tokens = 0
        out_of_memory = False
        for i, indices in enumerate(micro_batches):
            share = indices[self.dist.rank :: self.dist.world_size]
            weight = float(self.dist.world_size) / total_tgt  # DDP averages gradients over ranks
            if len(share) == 0:  # fewer sentences than ranks: join the all-reduce with a zero loss
                share, weight = indices[:1], 0.0
            last = i == len(micro_batches) - 1
            try:
                loss, nll, batch_src = self._forward_backward(share, weight, last)
            except torch.OutOfMemoryError:
                out_of_memory = True
                self._free_memory(len(share))
                if self.dist.enabled:  # the other ranks wait in the gradient all-reduce: join it with nothing
                    self._forward_backward(indices[:1], 0.0, last)
                continue
            if weight:
                loss_sum, nll_sum, src_tokens = loss_sum + loss, nll_sum + nll, src_tokens + batch_src
        if self.dist.any(out_of_memory):
            self.optimizer.zero_grad(set_to_none=True)
            return {"skipped": "out_of_memory"}
        if self.scaler:
            self.scaler.unscale_(self.optimizer)  # before clipping, so the norm is the true one
        max_norm = self.cfg.clip_norm if self.cfg.clip_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))
        finite = math.isfinite(grad_norm)
        lr = self._learning_rate()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if self.scaler:
            self.scaler.step(self.optimizer)  # skips the step itself when gradients are not finite
            self.scaler.update()
        elif finite:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if not finite:
            return {"skipped": "nonfinite"}
        sums = self._sum_over_ranks([loss_sum, nll_sum, float(src_tokens)])
        return {
            "loss": sums[0] / total_tgt,
            "nll": sums[1] / total_tgt,
            "lr": lr,
            "grad_norm": grad_norm,
            "tgt_tokens": float(total_tgt),
            "src_tokens": sums[2],
        }

    def _learning_rate(self) -> float:
        step = self.progress.step + 1
        if self.cfg.lr_schedule == "inverse_sqrt":
            return inverse_sqrt_lr(step, self.cfg.lr, self.cfg.warmup)
        budget_used = step / self.cfg.max_steps
        if self.cfg.max_time:
            # Ranks measure slightly different times; the schedule must be the same on all of them.
            budget_used = max(budget_used, self.dist.max(self.progress.elapsed) / self.cfg.max_time)
        return linear_decay_lr(step, self.cfg.lr, self.cfg.warmup, budget_used)

    def _forward_backward(self, indices: np.ndarray, weight: float, sync: bool) -> tuple[float, float, int]:
        """Accumulate the gradient of weight x (summed loss of these sentences); returns (loss, nll, source tokens)."""
        batch = collate(self.train_data, indices).to(self.device)
        context = contextlib.nullcontext() if sync or not self.dist.enabled else self.objective.no_sync()
        with context:
            with autocast(self.device, self.precision):
                loss, nll = self.objective(batch.src, batch.tgt_in, batch.tgt_out)
            scaled = loss * weight
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        return loss.item(), nll.item(), batch.src_tokens

    def _free_memory(self, sentences: int) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        console.warn(
            f"out of memory on a batch of {sentences} sentences at step {self.progress.step + 1}: "
            "skipped that update (lower train.max_tokens if this repeats)"
        )

    def _sum_over_ranks(self, values: list[float]) -> list[float]:
        if not self.dist.enabled:
            return values
        tensor = torch.tensor(values, dtype=torch.float64)
        torch.distributed.all_reduce(tensor)
        return tensor.tolist()

    # --- validation --------------------------------------------------------------------------

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        assert self.valid_data is not None
        self.model.eval()
        loss_sum = nll_sum = tokens = 0.0
        batches, _ = make_batches(
            self.valid_data.src_lengths,
            self.valid_data.tgt_lengths,
            max(self.cfg.max_tokens, 1 << 14),
            0,
            0,
            shuffle=False,
        )
        for indices in batches:
            batch = collate(self.valid_data, indices).to(self.device)
            with autocast(self.device, self.precision):
                loss, nll = TrainingObjective(self.model, self.cfg.label_smoothing)(
                    batch.src, batch.tgt_in, batch.tgt_out
                )
            loss_sum, nll_sum, tokens = loss_sum + loss.item(), nll_sum + nll.item(), tokens + batch.tgt_tokens
        result = {"valid_loss": nll_sum / tokens, "valid_ppl": math.exp(min(nll_sum / tokens, 50.0))}
        if self.cfg.valid_metric != "loss" or self.cfg.valid_beam > 1:
            result.update(self._valid_scores())
        self.model.train()
        return result

    def _valid_scores(self) -> dict[str, float]:
        assert self.valid_data is not None
        count = (
            len(self.valid_data)
            if not self.cfg.valid_max_sentences
            else min(len(self.valid_data), self.cfg.valid_max_sentences)
        )
        sources = [self.valid_data.src[i] for i in range(count)]
        search_cfg = SearchConfig(beam=self.cfg.valid_beam, lenpen=0.6 if self.cfg.valid_beam > 1 else 1.0)
        hyps = translate_ids(self.model, sources, search_cfg, self.device, self.precision)
        texts = self.tgt_tokenizer.decode_batch([h[0].tokens if h else [] for h in hyps])
        references = self.valid_data.raw_lines("tgt")[:count]
        return {
            "valid_bleu": sacrebleu.corpus_bleu(texts, [references]).score,
            "valid_chrf": sacrebleu.corpus_chrf(texts, [references]).score,
        }

    # --- checkpoints -------------------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        return {
            "step": self.progress.step,
            "epoch": self.progress.epoch,
            "data_dir": str(self.data_dir.resolve()),
            "src_lang": self.train_data.src_lang,
            "tgt_lang": self.train_data.tgt_lang,
        }

    def save_checkpoint(self, metric: float | None) -> None:
        rng_states = self.dist.gather_objects(_rng_state())  # every rank's dropout RNG, for exact resume
        if not self.dist.is_main:
            return
        step = self.progress.step
        name = f"step_{step:08d}.pt"
        weights = self.model.state_dict()
        save_payload(
            model_payload(weights, self.config.model, self.src_tokenizer, self.tgt_tokenizer, self._meta()),
            self.run_dir / CHECKPOINT_DIR / name,
        )
        state = {
            "format": STATE_FORMAT,
            "mtkit_version": __version__,
            "config": self.config.to_dict(),
            "model": weights,
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "progress": vars(self.progress),
            "rng": rng_states,
            "data_dir": str(self.data_dir.resolve()),
            "src_tokenizer_sha256": self.src_tokenizer.sha256,
            "tgt_tokenizer_sha256": self.tgt_tokenizer.sha256,
        }
        save_payload(state, self.run_dir / STATE_FILE)
        entries = [e for e in read_index(self.run_dir) if e["step"] != step]
        entries.append({"step": step, "file": name, "metric_name": self.cfg.valid_metric, "metric": metric})
        entries.sort(key=lambda e: e["step"])
        keep = {
            e["file"] for e in last_entries(entries, self.cfg.keep_last) + best_entries(entries, self.cfg.keep_best)
        }
        write_index(self.run_dir, [e for e in entries if e["file"] in keep])
        for entry in entries:
            if entry["file"] not in keep:
                (self.run_dir / CHECKPOINT_DIR / entry["file"]).unlink(missing_ok=True)

    def _load_state(self) -> None:
        state = load_payload(self.run_dir / STATE_FILE, STATE_FORMAT)
        check_tokenizers_match(
            self.data_dir, state["src_tokenizer_sha256"], state["tgt_tokenizer_sha256"], "the run's checkpoint"
        )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        self.progress = Progress(**state["progress"])
        rng = state["rng"]
        _set_rng_state(rng[self.dist.rank] if self.dist.rank < len(rng) else rng[0])

    # --- the loop ----------------------------------------------------------------------------

    def _should_stop(self) -> str | None:
        p, c = self.progress, self.cfg
        if p.step >= c.max_steps:
            return f"reached train.max_steps={c.max_steps}"
        if c.max_epochs and p.epoch >= c.max_epochs:
            return f"reached train.max_epochs={c.max_epochs}"
        if c.max_time and p.elapsed >= c.max_time:
            return f"reached train.max_time={c.max_time:g}s"
        if c.patience and p.bad_validations >= c.patience:
            return f"no improvement of valid {c.valid_metric} in {c.patience} validations (train.patience)"
        return None

    def _after_validation(self, scores: dict[str, float]) -> float:
        metric = scores[f"valid_{self.cfg.valid_metric}"]
        best = self.progress.best_metric
        if best is None or metric_is_better(metric, best, self.cfg.valid_metric):
            self.progress.best_metric, self.progress.bad_validations = metric, 0
        else:
            self.progress.bad_validations += 1
        return metric

    def run(self) -> str:
        """Train until a stopping criterion; returns why training stopped."""
        log = MetricsLog(self.run_dir / METRICS_FILE, self.progress.step) if self.dist.is_main else None
        self.model.train()
        batches = self._epoch_batches(self.progress.epoch)
        window = {"tgt": 0.0, "src": 0.0, "time": 0.0, "loss": 0.0, "nll": 0.0, "updates": 0}
        consecutive_bad = 0
        reason = self._should_stop()
        loop_start, elapsed_before = time.perf_counter(), self.progress.elapsed

        def wall_clock() -> float:  # training wall-clock across resumptions, validation and saving included
            return elapsed_before + time.perf_counter() - loop_start

        with StopSignal() as stop, console.progress("training", total=self.cfg.max_steps) as bar:
            bar.advance(self.progress.step)
            while reason is None:
                started = time.perf_counter()
                micro, batches = self._next_update(batches)
                stats = self._update(micro)
                elapsed = time.perf_counter() - started
                self.progress.elapsed = wall_clock()
                if stats.get("skipped") == "out_of_memory":
                    self.progress.oom_updates += 1
                    continue
                if stats.get("skipped") == "nonfinite":
                    self.progress.nonfinite_updates += 1
                    consecutive_bad += 1
                    if consecutive_bad >= MAX_CONSECUTIVE_NONFINITE:
                        self.save_checkpoint(None)
                        raise MtkitError(
                            f"training diverged: {consecutive_bad} updates in a row had inf/nan gradients; the weights of "
                            f"step {self.progress.step} (the last good update) are saved in {self.run_dir / CHECKPOINT_DIR}; "
                            "lower train.lr or use train.precision=fp32/bf16"
                        )
                    continue
                consecutive_bad = 0
                self.progress.step += 1
                self.progress.target_tokens += int(stats["tgt_tokens"])
                for key, value in (
                    ("tgt", stats["tgt_tokens"]),
                    ("src", stats["src_tokens"]),
                    ("time", elapsed),
                    ("loss", stats["loss"]),
                    ("nll", stats["nll"]),
                    ("updates", 1),
                ):
                    window[key] += value
                step = self.progress.step
                bar.advance(
                    1,
                    f"loss {stats['loss']:.3f} lr {stats['lr']:.2e} {window['tgt'] / max(window['time'], 1e-9):,.0f} tgt tok/s",
                )
                if step % self.cfg.log_every == 0 and log:
                    log.write(self._log_record(stats, window))
                if step % self.cfg.log_every == 0:
                    window = {key: 0.0 for key in window}
                validated = step % self.cfg.valid_every == 0 and self.valid_data is not None
                metric = None
                if validated:
                    scores = self.dist.broadcast_object(self.validate() if self.dist.is_main else None)
                    metric = self._after_validation(scores)
                    if log:
                        log.write({"step": step, **scores})
                        console.info(
                            f"step {step}: "
                            + " ".join(f"{k.removeprefix('valid_')} {v:.3f}" for k, v in scores.items())
                        )
                self.progress.elapsed = wall_clock()
                reason = self._should_stop()
                # Ranks must agree on stopping (elapsed time and signals differ between them).
                if self.dist.any(reason is not None or stop.requested):
                    reason = reason or "interrupted (a checkpoint was saved; continue with mtkit train --resume)"
                if validated or step % self.cfg.save_every == 0 or reason:
                    self.save_checkpoint(metric)
        if log:
            log.close()
        return reason

    def _log_record(self, stats: dict[str, float], window: dict[str, float]) -> dict[str, Any]:
        seconds = max(window["time"], 1e-9)
        updates = max(window["updates"], 1)
        nll = window["nll"] / updates
        return {
            "step": self.progress.step,
            "epoch": self.progress.epoch,
            "loss": window["loss"] / updates,
            "nll": nll,
            "ppl": math.exp(min(nll, 50.0)),
            "lr": stats["lr"],
            "grad_norm": stats["grad_norm"],
            "tokens_per_s": window["tgt"] / seconds,
            "src_tokens_per_s": window["src"] / seconds,
            "elapsed": round(self.progress.elapsed, 3),
            "target_tokens": self.progress.target_tokens,
            "skipped_updates": self.progress.nonfinite_updates,
            "oom_updates": self.progress.oom_updates,
        }


def train(
    config: Config | None,
    data_dir: Path | None,
    run_dir: Path,
    resume: bool = False,
    force: bool = False,
    overrides: list[str] | None = None,
) -> str:
    """Start (or resume) a run; returns the reason it stopped."""
    run_dir = Path(run_dir)
    if resume:
        if not (run_dir / STATE_FILE).is_file():
            raise MtkitError(
                f"{run_dir}: nothing to resume (no {STATE_FILE}; start a run with mtkit train -d DATA -o {run_dir})"
            )
        config = resume_config(run_dir, overrides or [])
        state_data_dir = load_payload(run_dir / STATE_FILE, STATE_FORMAT)["data_dir"]
        data_dir = Path(data_dir) if data_dir else Path(state_data_dir)
    else:
        assert config is not None and data_dir is not None
        read_manifest(data_dir)  # a clear error before anything is written
        if int(os.environ.get("RANK", "0")) == 0:
            prepare_run_dir(run_dir, force)
    trainer = Trainer(config, data_dir, run_dir, resume)
    try:
        if trainer.dist.is_main:
            config.save(run_dir / CONFIG_FILE)
            _describe(trainer)
        reason = trainer.run()
        if trainer.dist.is_main:
            console.info(f"stopped at step {trainer.progress.step}: {reason}")
        return reason
    finally:
        shutdown_distributed()


def _describe(trainer: Trainer) -> None:
    m = trainer.config.model
    console.info(
        f"model {m.preset}-shaped: {m.encoder_layers}+{m.decoder_layers} layers, d_model {m.d_model}, {m.heads} heads, "
        f"FFN {m.ffn_dim}, {m.norm}-norm, {trainer.model.num_parameters():,} parameters; device {trainer.device}, "
        f"precision {trainer.precision}, {trainer.dist.world_size} process(es); {len(trainer.train_data):,} training pairs"
    )
