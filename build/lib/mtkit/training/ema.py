"""An exponential moving average (EMA) of the weights, kept beside them during training.

After every update: average = decay x average + (1 - decay) x weights, starting from the initial
weights (fairseq's `--ema-decay`, Marian's `--exponential-smoothing`). Averages are float32 whatever the
training precision. Tied weights are one parameter, so they stay one tensor in the average.
The trainer saves the average as a model file of its own (EMA_FILE in the run directory) at every
checkpoint, and in the training state for an exact resume.
"""

from __future__ import annotations

import torch
from torch import nn


class WeightAverage:
    def __init__(self, model: nn.Module, decay: float):
        self.decay = decay
        self._params = list(model.parameters())  # unique: a tied weight appears once
        self.averages = [p.detach().float().clone() for p in self._params]

    @torch.no_grad()
    def update(self) -> None:
        torch._foreach_mul_(self.averages, self.decay)
        torch._foreach_add_(self.averages, [p.detach().float() for p in self._params], alpha=1.0 - self.decay)

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """model.state_dict() with every parameter replaced by its average (tied names share one tensor)."""
        by_storage = {p.data_ptr(): avg for p, avg in zip(self._params, self.averages)}
        return {
            name: by_storage[t.data_ptr()].to(t.dtype) if t.data_ptr() in by_storage else t
            for name, t in model.state_dict().items()
        }

    def state_dict(self) -> list[torch.Tensor]:
        return self.averages

    def load_state_dict(self, averages: list[torch.Tensor]) -> None:
        if len(averages) != len(self.averages):
            raise ValueError(f"{len(averages)} averages for {len(self.averages)} parameters")
        for mine, saved in zip(self.averages, averages):
            mine.copy_(saved)
