"""The optimizer and the learning-rate schedules as pure functions, and the stops by time."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mtkit.core import console
from mtkit.core.config import build_config
from mtkit.training.checkpoints import Progress
from mtkit.training.schedule import budget_text, budget_used, learning_rate, make_optimizer


def train_cfg(**values):
    return build_config({"train": values}).train


def test_the_linear_schedule_decays_by_whichever_budget_is_nearer_its_end():
    cfg = train_cfg(lr=1e-3, warmup=0, lr_schedule="linear", max_steps=1000, max_time=100.0)
    assert learning_rate(cfg, 10, elapsed=50.0) == pytest.approx(0.5e-3)  # half the time, 1% of the steps
    assert learning_rate(cfg, 900, elapsed=10.0) == pytest.approx(0.1e-3)  # 90% of the steps, 10% of the time
    assert learning_rate(cfg, 10, elapsed=100.0) == 0.0
    by_steps = train_cfg(lr=1e-3, warmup=0, lr_schedule="linear", max_steps=1000)
    assert learning_rate(by_steps, 500, elapsed=1e9) == pytest.approx(0.5e-3)  # no max_time: time does not count


def test_progress_shows_the_time_where_the_time_limit_binds_and_the_updates_where_they_do():
    cfg = train_cfg(max_steps=100_000, max_time=480.0)
    assert budget_text(cfg, 1609, 192.0) == "1,609 updates, 3:12 of 8:00"
    assert budget_used(cfg, 1609, 192.0) == pytest.approx(0.4)
    quick = train_cfg(max_steps=1000, max_time=3600.0)
    assert budget_text(quick, 500, 60.0) == "500/1,000 updates" and budget_used(quick, 500, 60.0) == 0.5
    assert budget_text(train_cfg(max_steps=1000), 500, 1e6) == "500/1,000 updates"
    assert budget_text(train_cfg(max_steps=100, max_time=5400.0), 12, 3725.4) == "12 updates, 1:02:05 of 1:30:00"


@settings(deadline=None)  # any machine, any load
@given(step=st.integers(0, 10**6), elapsed=st.floats(0, 10**5), max_steps=st.integers(1, 10**6))
def test_the_progress_names_the_limit_with_the_larger_share_spent(step, elapsed, max_steps):
    cfg = train_cfg(max_steps=max_steps, max_time=3600.0)
    by_time = elapsed / 3600.0 >= step / max_steps
    assert budget_used(cfg, step, elapsed) == max(step / max_steps, elapsed / 3600.0)
    assert budget_text(cfg, step, elapsed).endswith(" of 1:00:00") == by_time
    assert budget_text(cfg, step, elapsed).startswith(f"{step:,} updates," if by_time else f"{step:,}/{max_steps:,} ")


def test_piped_progress_of_a_share_prints_what_its_fields_say():
    line = console.LineProgress("training", 1.0, every_s=0.0, unit="share")
    with console.console.capture() as captured:
        line.set(0.4, "1,609 updates, 3:12 of 8:00 loss 2.5")
    assert captured.get() == "training: 1,609 updates, 3:12 of 8:00 loss 2.5\n"
    counted = console.LineProgress("preprocess", 10, every_s=0.0)
    with console.console.capture() as captured:
        counted.advance(3, "lines")
    assert captured.get() == "preprocess: 3/10 lines\n"


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
