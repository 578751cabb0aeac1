"""The trainer: the batch stream, one update, the learning rate, and the loop that runs them.

`train.max_tokens` is per process (fairseq's convention): the batch stream is one list of batches of up to
max_tokens each, the same on every rank; one update takes world_size x update_freq of them and rank r trains on
every world_size-th, starting at r. The summed loss is divided by the whole update's target tokens, so K processes
and 1 process with K times the update_freq compute the same gradient. On a GPU the next update's batches are
collated into pinned memory in a background thread while the current one trains. Checkpoints and the training state
are in mtkit.training.checkpoints, validation in mtkit.training.validation, the run directory in mtkit.training.rundir.
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from mtkit.core import console, faults
from mtkit.core.config import Config
from mtkit.core.device import autocast, resolve_device
from mtkit.core.distributed import Distributed, init_distributed
from mtkit.core.errors import MtkitError
from mtkit.data.batching import Batch, BatchStream
from mtkit.data.dataset import check_tokenizers_match, dataset_digest, load_tokenizers, open_splits, read_manifest
from mtkit.data.sentence_packing import pairs_of
from mtkit.model.files import CHECKPOINT_DIR, model_payload, save_payload
from mtkit.model.transformer import Transformer
from mtkit.text.targets import LANGUAGE_TOKENS, carried_languages, language_leads
from mtkit.training.checkpoints import Progress, rng_state, save_checkpoint, set_rng_state
from mtkit.training.ema import WeightAverage
from mtkit.training.float8 import resolve_training_precision, to_training_precision
from mtkit.training.loss import TrainingObjective, compile_objective
from mtkit.training.rundir import EMA_FILE, METRICS_FILE, LogWindow, MetricsLog, StopSignal
from mtkit.training.schedule import budget_text, budget_used, learning_rate, make_optimizer
from mtkit.training.validation import check_valid_direction, metric_key, validate

MAX_CONSECUTIVE_NONFINITE = 32
COMPILE_BACKEND = "inductor"  # train.compile's; tests trace with "aot_eager", which generates no code


class Trainer:
    def __init__(
        self,
        config: Config,
        data_dir: Path,
        run_dir: Path,
        state: dict | None = None,
        init_weights: dict | None = None,
        init_meta: dict | None = None,
    ):
        """state: the run's training state, to resume from; init_weights and init_meta: a model's, to
        fine-tune (a model with language tokens has them start every source and target)."""
        resume = state is not None
        self.config, self.cfg = config, config.train
        self.data_dir, self.run_dir = Path(data_dir), Path(run_dir)
        self.device = resolve_device(self.cfg.device)
        self.precision = resolve_training_precision(self.cfg.precision, self.device)
        self.dist: Distributed = init_distributed(self.device.type, self.cfg.collective_timeout)
        if self.device.type == "cuda":
            self.device = torch.device("cuda", self.dist.local_rank)
            torch.cuda.set_device(self.device)
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        self.manifest = read_manifest(self.data_dir)  # read once, here; each node may hold its own copy
        self.dist.require_same(dataset_digest(self.manifest), f"the dataset {self.data_dir}")
        self.src_tokenizer, self.tgt_tokenizer = load_tokenizers(self.data_dir, self.manifest)
        self.carried_meta = carried_languages((state or {}).get("carried_meta") or init_meta or {})
        leads = self._language_leads()
        temperature = config.train.sampling_temperature
        self.train_data, self.valid_data = open_splits(self.data_dir, config.model, self.manifest, temperature, leads)
        check_valid_direction(config.train.valid_direction, self.manifest)
        torch.manual_seed(self.cfg.seed)
        self.model = Transformer(config.model)
        if init_weights is not None and not resume:  # fine-tuning: a model's weights, a fresh optimizer
            self.model.load_state_dict(init_weights)
        if config.model.output_vocab == "target" and not resume:
            self._score_training_targets(fine_tuning=init_weights is not None)
        if self.cfg.freeze_embeddings:
            for embedding in {self.model.src_embed, self.model.tgt_embed}:
                embedding.tokens.weight.requires_grad_(False)
        to_training_precision(self.model.to(self.device), self.precision)  # before DDP and compile wrap it
        self.objective: nn.Module = TrainingObjective(
            self.model, self.cfg.label_smoothing, self.cfg.rdrop_alpha, fused=self.cfg.compile
        )
        if self.dist.enabled:
            self.objective = self.dist.data_parallel(self.objective, self.device)
        if self.cfg.compile:
            self.objective = compile_objective(self.objective, self.cfg, COMPILE_BACKEND, self.device)
        self.optimizer = make_optimizer(self.model, self.cfg)
        self.ema = WeightAverage(self.model, self.cfg.ema_decay) if self.cfg.ema_decay else None
        self.scaler = torch.amp.GradScaler(self.device.type) if self.precision == "fp16" else None
        self.progress = Progress()
        if resume:
            self._load_state(state)
        else:
            torch.manual_seed(self.cfg.seed + self.dist.rank)  # each rank draws its own dropout masks
        start = (self.progress.epoch, self.progress.batch_in_epoch)  # the data position: where resuming goes on
        self.stream = BatchStream(self.train_data, self.cfg, self.dist, self.device, start)

    def _language_leads(self) -> tuple[tuple[int, ...], ...]:
        """A model with language tokens (NLLB) trains on sources that start with the source language's
        token and targets that start with the target's (mtkit.text.targets)."""
        if not self.carried_meta.get(LANGUAGE_TOKENS):
            return ((), ())
        if "directions" in self.manifest:
            raise MtkitError("a model with language tokens (NLLB, M2M100) fine-tunes on a bilingual dataset (preprocess -s SRC -t TGT)")  # fmt: skip
        src, tgt = self.manifest["src_lang"], self.manifest["tgt_lang"]
        return language_leads(self.carried_meta, self.src_tokenizer, src, tgt)

    def _score_training_targets(self, fine_tuning: bool) -> None:
        """model.output_vocab = target: the output layer scores the ids of the training data's
        target side (every sample); a fine-tuned model keeps scoring what it scored before too."""
        ids = torch.from_numpy(self.train_data.target_ids(self.config.model.tgt_vocab_size))
        if fine_tuning:
            ids = torch.cat([ids, self.model.output.ids()])
        self.model.output.set_vocab(ids)

    # --- one update --------------------------------------------------------------------------

    def _update(self, micro_batches: list[np.ndarray], mine: list[Batch]) -> dict[str, Any]:
        """Forward/backward over this rank's micro-batches and one optimizer step.

        `micro_batches` is the whole update (every rank's), `mine` this rank's share as tensors.
        Returns the update's statistics, or {"skipped": "nonfinite" | "out_of_memory"} when the
        update was not applied.
        """
        total_tgt = sum(int(self.train_data.tgt_lengths[b].sum()) + len(b) for b in map(pairs_of, micro_batches))
        weight = float(self.dist.world_size) / total_tgt  # DDP averages gradients over ranks
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss, nll: read once per update
        src_tokens, out_of_memory = 0, False
        for i, batch in enumerate(mine):
            last = i == len(mine) - 1
            try:
                sums += self._forward_backward(batch, weight, last)
            except torch.OutOfMemoryError:
                out_of_memory = True
                self._free_memory(len(batch.indices))
                if self.dist.enabled:  # the other ranks wait in the gradient all-reduce: join it with nothing
                    self._forward_backward(self.stream.collate(batch.indices[:1]), 0.0, last)
                continue
            src_tokens += batch.src_tokens
        if self.dist.any(out_of_memory):
            self.optimizer.zero_grad(set_to_none=True)
            return {"skipped": "out_of_memory"}
        if self.scaler:
            self.scaler.unscale_(self.optimizer)  # before clipping, so the norm is the true one
        max_norm = self.cfg.clip_norm if self.cfg.clip_norm > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        linear_by_time = self.cfg.lr_schedule == "linear" and self.cfg.max_time
        elapsed = self.dist.max(self.progress.elapsed) if linear_by_time else 0.0  # the same on every rank
        lr = learning_rate(self.cfg, self.progress.step + 1, elapsed)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if self.scaler:
            self.scaler.step(self.optimizer)  # skips the step itself when gradients are not finite
            self.scaler.update()
        else:  # the fused kernel skips the step when found_inf: launched before the host waits for the norm
            self.optimizer.found_inf = grad_norm.isfinite().logical_not().float()
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum, nll_sum, grad_norm = torch.cat([sums, grad_norm.double().reshape(1)]).tolist()  # one host sync
        if not math.isfinite(grad_norm):
            return {"skipped": "nonfinite"}
        if self.ema:
            self.ema.update()
        loss_sum, nll_sum, src_sum = self.dist.sum([loss_sum, nll_sum, float(src_tokens)])
        return {"loss": loss_sum / total_tgt, "nll": nll_sum / total_tgt, "lr": lr, "grad_norm": grad_norm,
                "tgt_tokens": float(total_tgt), "src_tokens": src_sum}  # fmt: skip

    def _forward_backward(self, batch: Batch, weight: float, sync: bool) -> torch.Tensor:
        """Accumulate the gradient of weight x (summed loss of the batch); returns (loss, nll) in float64."""
        batch = batch.to(self.device, non_blocking=True)
        context = contextlib.nullcontext() if sync or not self.dist.enabled else self.objective.no_sync()
        with context:
            with autocast(self.device, self.precision):
                loss, nll = self.objective(batch.src, batch.tgt_in, batch.tgt_out, batch.layout)
            scaled = loss * weight
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        return torch.stack([loss.detach(), nll.detach()]).double()

    def _free_memory(self, sentences: int) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        console.warn(
            f"out of memory on a batch of {sentences} sentences at step {self.progress.step + 1}: "
            "skipped that update (lower train.max_tokens if this repeats)"
        )

    # --- validation and checkpoints ----------------------------------------------------------

    def _validate(self) -> dict[str, float]:
        """Every rank validates its shard of the validation set; every rank gets the scores."""
        assert self.valid_data is not None
        data, tokenizer = self.valid_data, self.tgt_tokenizer
        return validate(self.model, data, tokenizer, self.cfg, self.device, self.precision, self.dist)

    def save_checkpoint(self, metric: float | None) -> None:
        rng_states = self.dist.gather_objects(rng_state(self.device))  # every rank's dropout RNG, for exact resume
        if not self.dist.is_main:
            return
        weights, step = self.model.state_dict(), self.progress.step
        meta = {"step": step, "epoch": self.progress.epoch, "data_dir": str(self.data_dir.resolve()),
                **self.train_data.languages, "max_len": self.manifest.get("cleaning", {}).get("max_len", 0),
                **self.carried_meta}  # fmt: skip
        state = {"config": self.config.to_dict(), "model": weights, "optimizer": self.optimizer.state_dict(),
                 "scaler": self.scaler.state_dict() if self.scaler else None, "progress": vars(self.progress),
                 "rng": rng_states, "data_dir": str(self.data_dir.resolve()),
                 "ema": self.ema.state_dict() if self.ema else None, "carried_meta": self.carried_meta,
                 "src_tokenizer_sha256": self.src_tokenizer.sha256, "tgt_tokenizer_sha256": self.tgt_tokenizer.sha256}  # fmt: skip
        model_file = model_payload(weights, self.config.model, self.src_tokenizer, self.tgt_tokenizer, meta)
        keep = self.cfg.keep_last, self.cfg.keep_best
        save_checkpoint(self.run_dir, step, model_file, state, (self.cfg.valid_metric, metric), keep)
        if self.ema:
            ema_meta = {**meta, "ema_decay": self.ema.decay}
            ema_state = self.ema.model_state(self.model)
            ema_file = model_payload(ema_state, self.config.model, self.src_tokenizer, self.tgt_tokenizer, ema_meta)
            save_payload(ema_file, self.run_dir / EMA_FILE)

    def _load_state(self, state: dict[str, Any]) -> None:
        digests = state["src_tokenizer_sha256"], state["tgt_tokenizer_sha256"]
        check_tokenizers_match(self.data_dir, *digests, "the run's checkpoint", self.manifest)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        self.progress = Progress(**state["progress"])
        if self.ema and state.get("ema") is not None:
            self.ema.load_state_dict(state["ema"])
        rng = state["rng"]
        set_rng_state(rng[self.dist.rank] if self.dist.rank < len(rng) else rng[0], self.device)

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> str:
        """Train until a stopping criterion; returns why training stopped."""
        log = MetricsLog(self.run_dir / METRICS_FILE, self.progress.step) if self.dist.is_main else None
        self.model.train()
        micro, position = self.stream.upcoming((self.progress.epoch, self.progress.batch_in_epoch))
        tensors = self.stream.prepare(micro)
        window, consecutive_bad = LogWindow(), 0
        reason = self.progress.stop_reason(self.cfg)
        loop_start, elapsed_before = time.perf_counter(), self.progress.elapsed

        def wall_clock() -> float:  # training wall-clock across resumptions, validation and saving included
            return elapsed_before + time.perf_counter() - loop_start

        def show(fields: str = "") -> None:  # against train.max_steps, or train.max_time where that binds
            step, elapsed = self.progress.step, self.progress.elapsed
            bar.set(budget_used(self.cfg, step, elapsed), f"{budget_text(self.cfg, step, elapsed)} {fields}".rstrip())

        with StopSignal() as stop, console.progress("training", total=1.0, unit="share") as bar:
            show()
            while reason is None:
                started = time.perf_counter()
                this_update, mine = micro, tensors.result()
                self.progress.epoch, self.progress.batch_in_epoch = position
                micro, position = self.stream.upcoming(position)
                tensors = self.stream.prepare(micro)  # collates while this update trains, on a GPU
                stats = self._update(this_update, mine)
                seconds = time.perf_counter() - started
                self.progress.elapsed = wall_clock()
                if stats.get("skipped") == "out_of_memory":
                    self.progress.oom_updates += 1
                    continue
                if stats.get("skipped") == "nonfinite":
                    self.progress.nonfinite_updates += 1
                    consecutive_bad += 1
                    if consecutive_bad >= MAX_CONSECUTIVE_NONFINITE:
                        self._diverged(consecutive_bad)
                    continue
                consecutive_bad = 0
                self.progress.step += 1
                self.progress.target_tokens += int(stats["tgt_tokens"])
                faults.reached("update")
                window.add(stats, seconds)
                step = self.progress.step
                show(f"loss {stats['loss']:.3f} lr {stats['lr']:.2e} {window.tokens_per_s():,.0f} tgt tok/s")
                if step % self.cfg.log_every == 0:
                    if log:
                        log.write(window.record(stats, vars(self.progress)))
                    window = LogWindow()
                validated = step % self.cfg.valid_every == 0 and self.valid_data is not None
                metric = None
                if validated:
                    scores = self._validate()
                    metric = scores[metric_key(self.cfg)]
                    self.progress.record_validation(metric, self.cfg.valid_metric)
                    if log:
                        log.write({"step": step, **scores})
                        console.info(f"step {step}: " + " ".join(f"{k.removeprefix('valid_')} {v:.3f}" for k, v in scores.items()))  # fmt: skip
                self.progress.elapsed = wall_clock()
                reason = self.progress.stop_reason(self.cfg)
                # Ranks must agree on stopping (elapsed time and signals differ between them).
                if self.dist.any(reason is not None or stop.requested):
                    reason = reason or "interrupted (a checkpoint was saved; continue with mtkit train --resume)"
                if validated or step % self.cfg.save_every == 0 or reason:
                    self.save_checkpoint(metric)
        if log:
            log.close()
        self.stream.close()
        return reason

    def _diverged(self, updates: int) -> None:
        self.save_checkpoint(None)
        raise MtkitError(
            f"training diverged: {updates} updates in a row had inf/nan gradients; the weights of "
            f"step {self.progress.step} (the last good update) are saved in {self.run_dir / CHECKPOINT_DIR}; "
            "lower train.lr or use train.precision=fp32/bf16"
        )
