"""train.precision=fp8 (mtkit.training.float8): refused in one line where the hardware has no FP8 tensor
cores, and, on the CPU (torchao's FP8 matrix products run there too, emulated), the same training
path as on a GPU: which layers become Float8Linear, a loss curve beside bf16's, checkpoints that are
ordinary model files, and exact resume."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch
from conftest import losses, run_mtkit, tiny_model
from test_train import tiny_config

import mtkit.training.float8
from mtkit.core.errors import MtkitError
from mtkit.model.files import load_model_file
from mtkit.training.float8 import convert_to_fp8, fp8_refusal, resolve_training_precision
from mtkit.training.train import train

pytestmark = pytest.mark.skipif(  # torchao is imported by the tests that use it (seconds: not at collection)
    importlib.util.find_spec("torchao") is None, reason="torchao is the fp8 extra: pip install 'mtkit[fp8]'"
)


def test_fp8_on_a_cpu_is_refused_in_one_line(data_dir, tmp_path):
    result = run_mtkit("train", "-d", data_dir, "-o", tmp_path / "run", "--set", "model.preset=transformer-tiny",
                       "--set", "train.precision=fp8")  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        "error: train.precision=fp8 needs a GPU with FP8 tensor cores (compute capability 8.9 or more); training on cpu"
    ]
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize(
    ("capability", "name", "refusal"),
    [
        ((8, 0), "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB has 8.0 (use train.precision=bf16)"),
        ((7, 5), "Tesla T4", "Tesla T4 has 7.5 (use train.precision=bf16)"),
        ((8, 9), "NVIDIA L4", None),
        ((9, 0), "NVIDIA H100 80GB HBM3", None),
        ((10, 0), "NVIDIA B200", None),
    ],
)
def test_fp8_needs_compute_capability_8_9(monkeypatch, capability, name, refusal):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    found = fp8_refusal(torch.device("cuda", 0))
    if refusal is None:
        assert found is None
    else:
        assert (
            found
            == f"train.precision=fp8 needs FP8 tensor cores (compute capability 8.9 or more: Ada, Hopper); {refusal}"
        )


def test_fp8_without_torchao_names_the_extra(monkeypatch):
    monkeypatch.setattr(mtkit.training.float8, "fp8_refusal", lambda device: None)  # an FP8 GPU
    monkeypatch.setitem(sys.modules, "torchao.float8", None)  # not installed: importing it fails
    with pytest.raises(MtkitError, match=r"^train.precision=fp8 needs torchao: pip install 'mtkit\[fp8\]'$"):
        resolve_training_precision("fp8", torch.device("cuda", 0))


def test_other_precisions_resolve_as_before():
    assert resolve_training_precision("bf16", torch.device("cpu")) == "bf16"
    assert resolve_training_precision("fp32", torch.device("cpu")) == "fp32"


def test_every_linear_layer_of_the_stacks_becomes_float8_and_the_weights_stay_the_same():
    from torchao.float8.float8_linear import Float8Linear

    model = tiny_model(vocab=48)  # d_model 16, FFN 32: every projection's sizes are multiples of 16
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    converted = convert_to_fp8(model)
    attention = ["q_proj", "kv_proj", "out_proj"]
    encoder = [f"encoder_layers.0.{part}" for part in [f"self_attn.{p}" for p in attention] + ["ffn.fc1", "ffn.fc2"]]
    decoder = [f"decoder_layers.0.{part}" for part in [f"{a}.{p}" for a in ("self_attn", "cross_attn") for p in attention]
               + ["ffn.fc1", "ffn.fc2"]]  # fmt: skip
    assert converted == encoder + decoder
    assert all(isinstance(model.get_submodule(name), Float8Linear) for name in converted)
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)


def test_a_layer_whose_sizes_are_not_multiples_of_16_stays_as_it_is():
    layers = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 24), torch.nn.Linear(24, 16))
    assert convert_to_fp8(layers) == ["0"]
    assert [type(layer).__name__ for layer in layers] == ["Float8Linear", "Linear", "Linear"]


@pytest.fixture
def fp8_on_this_cpu(monkeypatch):
    """The GPU path on the CPU: the device check passes, torchao's FP8 matrix products run emulated."""
    monkeypatch.setattr(mtkit.training.float8, "fp8_refusal", lambda device: None)


FP8_RUN = ("train.max_tokens=300", "train.seed=3")


def test_fp8_training_follows_bf16_s_loss_curve_and_saves_an_ordinary_model(tmp_path, data_dir, fp8_on_this_cpu):
    train(tiny_config("train.max_steps=30", "train.precision=bf16", *FP8_RUN), data_dir, tmp_path / "bf16")
    train(tiny_config("train.max_steps=30", "train.precision=fp8", *FP8_RUN), data_dir, tmp_path / "fp8")
    bf16, fp8 = losses(tmp_path / "bf16"), losses(tmp_path / "fp8")
    assert [step for step, _ in fp8] == list(range(1, 31))
    assert [loss for _, loss in fp8] == pytest.approx([loss for _, loss in bf16], rel=0.01)
    assert fp8 != bf16  # FP8 products round otherwise: the layers did compute in FP8
    assert fp8[-1][1] < 0.9 * fp8[0][1]  # and it learns
    model_file = load_model_file(tmp_path / "fp8")  # plain fp32 weights under the plain layers' names
    assert model_file.weights.keys() == load_model_file(tmp_path / "bf16").weights.keys()
    assert all(tensor.dtype == torch.float32 for tensor in model_file.weights.values())
    result = run_mtkit("translate", "-m", tmp_path / "fp8", "--beam", "2", stdin=b"a dog runs\n")
    assert result.returncode == 0 and len(result.stdout.decode().splitlines()) == 1


def test_fp8_training_resumes_exactly(tmp_path, data_dir, fp8_on_this_cpu):
    dropout = ("train.precision=fp8", "model.dropout=0.2", *FP8_RUN)
    train(tiny_config("train.max_steps=8", *dropout), data_dir, tmp_path / "whole")
    train(tiny_config("train.max_steps=4", *dropout), data_dir, tmp_path / "half")
    train(None, None, tmp_path / "half", resume=True, overrides=["train.max_steps=8"])
    assert losses(tmp_path / "half") == losses(tmp_path / "whole")  # bitwise, the FP8 scales included
