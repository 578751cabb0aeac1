"""train.compile: the compiled objective (model + fused loss) trains as the eager one does.

The tests trace with torch.compile's "aot_eager" backend: the same graph capture (Dynamo) and
autograd (AOTAutograd) as the default Inductor backend, without generating C++ for these tiny
models; bench/train_throughput.py --levers compile measures Inductor's kernels on a GPU."""

from __future__ import annotations

import pytest
import torch
from conftest import losses
from hypothesis import given, settings
from hypothesis import strategies as st
from test_train import tiny_config

import mtkit.training.trainer
from mtkit.model.files import load_model_file, resolve_model_path
from mtkit.model.transformer import Transformer
from mtkit.training.loss import TrainingObjective, fused_label_smoothed_loss, label_smoothed_loss
from mtkit.training.train import train


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 40),
    vocab=st.integers(2, 300),
    epsilon=st.sampled_from([0.0, 0.1, 0.2]),
    seed=st.integers(0, 99),
)
def test_the_fused_loss_equals_the_chunked_one_and_its_gradient(rows, vocab, epsilon, seed):
    generator = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(rows, vocab, generator=generator, dtype=torch.float64)).float()
    target = torch.randint(0, vocab, (rows,), generator=generator)
    results = []
    for loss_fn in (label_smoothed_loss, fused_label_smoothed_loss):
        x = logits.clone().requires_grad_()
        loss, nll = loss_fn(x, target, epsilon)
        loss.backward()
        results.append((loss.detach(), nll, x.grad))
    (loss_a, nll_a, grad_a), (loss_b, nll_b, grad_b) = results
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(nll_b, nll_a, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(grad_b, grad_a, rtol=1e-4, atol=1e-6)
    assert not nll_b.requires_grad


def assert_the_compiled_objective_gives_the_eager_loss_and_gradients(model: torch.nn.Module) -> None:
    """On one padded batch: the loss, the NLL and every parameter's gradient, eager and compiled."""
    model.train()
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    tgt_in = torch.tensor([[2, 10, 11, 12], [2, 13, 0, 0]])
    tgt_out = torch.tensor([[10, 11, 12, 3], [13, 3, 0, 0]])
    results = []
    for objective in (
        TrainingObjective(model, 0.1),
        torch.compile(TrainingObjective(model, 0.1, fused=True), dynamic=True, backend="aot_eager"),
    ):
        model.zero_grad()
        loss, nll = objective(src, tgt_in, tgt_out)
        loss.backward()
        results.append((loss.detach(), nll, [p.grad.clone() for p in model.parameters()]))
    (loss_a, nll_a, grads_a), (loss_b, nll_b, grads_b) = results
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(nll_b, nll_a, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


@pytest.fixture
def traced(monkeypatch):
    monkeypatch.setattr(mtkit.training.trainer, "COMPILE_BACKEND", "aot_eager")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compiled_training_logs_the_eager_losses_and_resumes_exactly(tmp_path, data_dir, traced):
    settings_ = ("train.max_tokens=300", "train.precision=fp32")
    train(tiny_config("train.max_steps=8", *settings_), data_dir, tmp_path / "eager")
    train(tiny_config("train.max_steps=8", *settings_, "train.compile=true"), data_dir, tmp_path / "compiled")
    eager, compiled = losses(tmp_path / "eager"), losses(tmp_path / "compiled")
    assert [s for s, _ in compiled] == list(range(1, 9))
    assert [loss for _, loss in compiled] == pytest.approx([loss for _, loss in eager], rel=1e-4)
    # One batch's gradients too, on a model of the trained one's shapes (no dropout, as the preset has
    # none), so that the graph just traced is the one checked: a new shape would cost a second trace.
    torch.manual_seed(0)
    shapes = load_model_file(resolve_model_path(tmp_path / "compiled")).config
    assert shapes.dropout == 0.0
    assert_the_compiled_objective_gives_the_eager_loss_and_gradients(Transformer(shapes))

    dropout = (*settings_, "model.dropout=0.2", "train.compile=true")
    train(tiny_config("train.max_steps=8", *dropout), data_dir, tmp_path / "whole")
    train(tiny_config("train.max_steps=4", *dropout), data_dir, tmp_path / "half")
    train(None, None, tmp_path / "half", resume=True, overrides=["train.max_steps=8"])
    assert losses(tmp_path / "half") == losses(tmp_path / "whole")  # bitwise, dropout included
