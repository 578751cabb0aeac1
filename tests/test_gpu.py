"""On a CUDA GPU (these skip without one; `python bench/gpu_check.py --all` runs them): what `auto`
chooses there, training in each precision, and forced-decoding scores equal to the CPU's."""

import pytest
import torch
from conftest import TINY_TRAIN, losses, run_mtkit

from mtkit.core.device import Hardware, detect_hardware, resolve_precision


@pytest.mark.gpu("a GPU's own bf16 support")
def test_auto_on_this_gpu_is_what_its_hardware_computes():
    native = torch.cuda.is_bf16_supported(including_emulation=False)
    assert detect_hardware(torch.device("cuda")) == Hardware("cuda", native_bf16=native)
    assert resolve_precision("auto", torch.device("cuda")) == ("bf16" if native else "fp16")


@pytest.mark.gpu("training on a GPU")
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_a_tiny_model_learns_on_the_gpu_in_each_precision(data_dir, tmp_path, precision):
    run = tmp_path / "run"
    result = run_mtkit("train", "-d", data_dir, "-o", run, *TINY_TRAIN, "--set", "train.max_steps=60",
                       "--set", "train.device=cuda", "--set", f"train.precision={precision}")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    assert f"device cuda, precision {precision}," in result.stderr.decode()
    values = [loss for _, loss in losses(run)]
    assert len(values) == 60 and all(v == v for v in values)  # no NaN
    assert sum(values[-10:]) / 10 < 0.85 * sum(values[:10]) / 10  # on the CPU in fp32: 6.50 -> 4.66


@pytest.mark.gpu("scores on a GPU")
def test_forced_decoding_scores_on_the_gpu_equal_the_cpu_s_in_fp32(trained_run, corpus):
    scores = {}
    for device in ("cpu", "cuda"):
        result = run_mtkit("score", "-m", trained_run, "--src", corpus / "test.en", "--tgt", corpus / "test.de",
                           "--device", device, "--precision", "fp32")  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
        scores[device] = [float(value) for value in result.stdout.split()]
    assert len(scores["cpu"]) == 20
    assert scores["cuda"] == pytest.approx(scores["cpu"], abs=1e-4)
