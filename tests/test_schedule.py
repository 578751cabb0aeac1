"""The optimizer and the learning-rate schedules as pure functions, and the stops by time."""

import pytest
import torch

from mtkit.core.config import build_config
from mtkit.training.checkpoints import Progress
from mtkit.training.schedule import learning_rate, make_optimizer


def train_cfg(**values):
    return build_config({"train": values}).train


def test_the_linear_schedule_decays_by_whichever_budget_is_nearer_its_end():
    cfg = train_cfg(lr=1e-3, warmup=0, lr_schedule="linear", max_steps=1000, max_time=100.0)
    assert learning_rate(cfg, 10, elapsed=50.0) == pytest.approx(0.5e-3)  # half the time, 1% of the steps
    assert learning_rate(cfg, 900, elapsed=10.0) == pytest.approx(0.1e-3)  # 90% of the steps, 10% of the time
    assert learning_rate(cfg, 10, elapsed=100.0) == 0.0
    by_steps = train_cfg(lr=1e-3, warmup=0, lr_schedule="linear", max_steps=1000)
    assert learning_rate(by_steps, 500, elapsed=1e9) == pytest.approx(0.5e-3)  # no max_time: time does not count


def test_max_time_stops_training():
    cfg = train_cfg(max_time=100.0)
    assert Progress(step=5, elapsed=99.9).stop_reason(cfg) is None
    assert Progress(step=5, elapsed=100.0).stop_reason(cfg) == "reached train.max_time=100s"


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_weight_decay_is_adamw_decoupled_from_the_gradient(weight_decay):
    weight = torch.nn.Parameter(torch.full((4,), 2.0))
    model = torch.nn.Module()
    model.weight = weight
    optimizer = make_optimizer(model, train_cfg(lr=0.01, weight_decay=weight_decay))
    assert type(optimizer) is (torch.optim.AdamW if weight_decay else torch.optim.Adam)
    weight.grad = torch.zeros(4)  # no gradient: Adam moves nothing, AdamW shrinks by lr x decay
    optimizer.step()
    assert weight.tolist() == pytest.approx([2.0 * (1 - 0.01 * weight_decay)] * 4, abs=1e-7)
