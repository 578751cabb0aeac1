"""The learning-rate schedule of the paper, as a pure function of the update step."""

from __future__ import annotations

import math


def inverse_sqrt_lr(step: int, peak_lr: float, warmup: int) -> float:
    """Linear warm-up to `peak_lr` at `warmup`, then decay with 1/sqrt(step).

    This is the paper's d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) rescaled so that its
    maximum is `peak_lr` (the paper's own peak is d_model^-0.5 * warmup^-0.5).
    """
    step = max(step, 1)
    if warmup == 0:
        return peak_lr
    return peak_lr * min(step / warmup, math.sqrt(warmup / step))
