"""The optimizer (Adam, as the paper has it) and its learning-rate schedules, as pure functions of
the update step (and of the budget used)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from mtkit.core.config import TrainConfig
from mtkit.core.console import clock


def inverse_sqrt_lr(step: int, peak_lr: float, warmup: int) -> float:
    """Linear warm-up to `peak_lr` at `warmup`, then decay with 1/sqrt(step).

    This is the paper's d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) rescaled so that its
    maximum is `peak_lr` (the paper's own peak is d_model^-0.5 * warmup^-0.5).
    """
    step = max(step, 1)
    if warmup == 0:
        return peak_lr
    return peak_lr * min(step / warmup, math.sqrt(warmup / step))


def linear_decay_lr(step: int, peak_lr: float, warmup: int, budget_used: float) -> float:
    """Linear warm-up, then a linear decay that reaches zero when the training budget is spent.

    `budget_used` is the fraction (0..1) of the budget (train.max_steps or train.max_time, whichever
    runs out first) already used. Annealing to zero at the end of a fixed budget is the advice of
    Li et al. 2020 ("Budgeted Training"); docs/results/design-choices.md
    records how it did on Multi30k here.
    """
    step = max(step, 1)
    ramp = step / warmup if warmup else 1.0
    return peak_lr * max(0.0, min(ramp, 1.0, 1.0 - budget_used))


def learning_rate(cfg: TrainConfig, step: int, elapsed: float = 0.0) -> float:
    """The learning rate of update `step` (1-based) under cfg.lr_schedule; `elapsed` is the training
    wall-clock so far, which the linear schedule counts against cfg.max_time."""
    if cfg.lr_schedule == "inverse_sqrt":
        return inverse_sqrt_lr(step, cfg.lr, cfg.warmup)
    return linear_decay_lr(step, cfg.lr, cfg.warmup, budget_used(cfg, step, elapsed))


def budget_used(cfg: TrainConfig, step: int, elapsed: float) -> float:
    """The share of the training budget spent after `step` updates and `elapsed` seconds: of
    train.max_steps, or of train.max_time where that share is the larger (it will run out first)."""
    return max(step / cfg.max_steps, elapsed / cfg.max_time) if cfg.max_time else step / cfg.max_steps


def budget_text(cfg: TrainConfig, step: int, elapsed: float) -> str:
    """Where training stands against the limit that binds: "1,609/100,000 updates", or, where the time
    runs out first, "1,609 updates, 3:12 of 8:00"."""
    if cfg.max_time and elapsed / cfg.max_time >= step / cfg.max_steps:
        return f"{step:,} updates, {clock(elapsed)} of {clock(cfg.max_time)}"
    return f"{step:,}/{cfg.max_steps:,} updates"


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam (AdamW with weight decay) with the paper's betas and eps, in torch's fused kernels."""
    options: dict[str, Any] = dict(lr=cfg.lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=cfg.weight_decay, fused=True)
    adam = torch.optim.AdamW if cfg.weight_decay else torch.optim.Adam
    return adam([p for p in model.parameters() if p.requires_grad], **options)
