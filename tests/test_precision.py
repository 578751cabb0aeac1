"""What `precision: auto` chooses on each kind of machine, pretended through its one seam
(mtkit.core.device.detect_hardware); MTKIT_NO_BF16=1, which makes a CPU with bf16 instructions choose
as one without; and the record of who resolved `auto`, from which the suite finds its tests that
depend on the machine."""

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import REPO, TINY_TRAIN, run_mtkit

from mtkit.core import device as device_module
from mtkit.core.device import Hardware, auto_precision, detect_hardware, resolve_precision
from mtkit.core.errors import MtkitError

KINDS = [  # (the hardware, what auto chooses there)
    (Hardware("cuda", native_bf16=True), "bf16"),  # Ampere and later
    (Hardware("cuda", native_bf16=False), "fp16"),  # a V100 or T4: fp16 with loss scaling
    (Hardware("cpu", native_bf16=True), "bf16"),  # AVX-512 BF16 or AMX
    (Hardware("cpu", native_bf16=False), "fp32"),  # AVX2 only, or AVX-512 without BF16
]
OLD_MODEL = REPO / "tests" / "data" / "model_file_v1"


@pytest.fixture(autouse=True)
def no_switch(monkeypatch):
    """Each test starts without MTKIT_NO_BF16 (the suite's second pass sets it for every test)."""
    monkeypatch.delenv(device_module.NO_BF16_SWITCH, raising=False)


@pytest.mark.parametrize(("hardware", "chosen"), KINDS)
def test_auto_chooses_bf16_only_where_the_hardware_computes_it(hardware, chosen):
    assert auto_precision(hardware) == chosen


@pytest.mark.parametrize(("hardware", "chosen"), KINDS)
def test_every_command_resolves_auto_through_the_one_seam(hardware, chosen, monkeypatch):
    monkeypatch.setattr(device_module, "detect_hardware", lambda device: hardware)
    device = torch.device(hardware.device_type)
    assert resolve_precision("auto", device) == chosen
    assert [resolve_precision(p, device) for p in ("fp32", "bf16", "fp16")] == ["fp32", "bf16", "fp16"]
    with pytest.raises(MtkitError, match="precision 'fp64': must be auto, fp32, bf16, fp16"):
        resolve_precision("fp64", device)


@pytest.mark.parametrize(
    ("flags", "native"),
    [("fpu sse avx2 fma", False), ("fpu avx512f avx512_bf16 avx2", True), ("fpu amx_bf16 amx_tile", True),
     ("fpu avx512f avx512_vnni avx512bw", False), ("", False)],
)  # fmt: skip
def test_a_cpu_computes_bf16_natively_with_avx512_bf16_or_amx(flags, native):
    assert device_module.cpu_has_native_bf16(f"processor\t: 0\nflags\t\t: {flags}\n") is native


@pytest.mark.parametrize(
    ("native", "switch", "seen"),
    [(True, None, True), (True, "1", False), (True, "true", False), (True, "0", True), (True, "", True),
     (False, None, False), (False, "1", False)],
)  # fmt: skip
def test_the_switch_makes_a_cpu_with_bf16_look_like_one_without(native, switch, seen, monkeypatch):
    monkeypatch.setattr(device_module, "cpu_has_native_bf16", lambda: native)
    if switch is not None:
        monkeypatch.setenv("MTKIT_NO_BF16", switch)
    assert detect_hardware(torch.device("cpu")) == Hardware("cpu", native_bf16=seen)


@pytest.mark.parametrize("native", [True, False])
def test_a_gpu_is_seen_by_its_own_bf16_support_and_the_switch_leaves_it_alone(native, monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation: asked.append(including_emulation) or native)  # fmt: skip
    monkeypatch.setenv("MTKIT_NO_BF16", "1")
    assert detect_hardware(torch.device("cuda")) == Hardware("cuda", native_bf16=native)
    assert asked == [False]  # emulated bf16 (a V100's) does not count


def test_with_the_switch_auto_gives_fp32_s_numbers_on_any_cpu():
    """The old model file's recorded fp32 scores, from `score` without --precision."""
    result = run_mtkit("score", "-m", OLD_MODEL / "tiny.pt", "--src", OLD_MODEL / "test.en",
                       "--tgt", OLD_MODEL / "test.de", env={"MTKIT_NO_BF16": "1"})  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    recorded = (OLD_MODEL / "score.fp32.txt").read_text().split()
    assert [float(v) for v in result.stdout.split()] == pytest.approx([float(v) for v in recorded], abs=1e-4)


def test_training_says_the_precision_auto_chose(data_dir, tmp_path):
    runs = {}
    for switch in ("0", "1"):
        run = run_mtkit("train", "-d", data_dir, "-o", tmp_path / switch, *TINY_TRAIN, "--set", "train.max_steps=1",
                        env={"MTKIT_NO_BF16": switch})  # fmt: skip
        assert run.returncode == 0, run.stderr.decode()
        runs[switch] = run.stderr.decode()
    on_this_cpu = "bf16" if device_module.cpu_has_native_bf16() else "fp32"
    assert f"device cpu, precision {on_this_cpu}," in runs["0"]
    assert "device cpu, precision fp32," in runs["1"]


def test_a_switch_that_is_neither_on_nor_off_is_one_line():
    result = run_mtkit("score", "-m", OLD_MODEL / "tiny.pt", "--src", OLD_MODEL / "test.en",
                       "--tgt", OLD_MODEL / "test.de", env={"MTKIT_NO_BF16": "maybe"})  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.decode() == "error: environment variable MTKIT_NO_BF16='maybe': must be 1 or 0\n"


def test_each_resolution_of_auto_is_recorded_with_who_asked(tmp_path, monkeypatch):
    log = tmp_path / "auto.log"
    monkeypatch.setenv("MTKIT_AUTO_PRECISION_LOG", str(log))
    monkeypatch.setenv("MTKIT_AUTO_PRECISION_CONTEXT", "test somewhere")
    monkeypatch.setattr(device_module, "detect_hardware", lambda device: Hardware("cpu", native_bf16=True))
    resolve_precision("fp32", torch.device("cpu"))  # an explicit precision depends on no machine
    assert not log.exists()
    resolve_precision("auto", torch.device("cpu"))
    resolve_precision("auto", torch.device("cpu"))
    line = {"context": "test somewhere", "device": "cpu", "native_bf16": True, "chosen": "bf16"}
    assert [json.loads(text) for text in log.read_text().splitlines()] == [line, line]


SAMPLE_SUITE = """
import subprocess, sys
import pytest, torch
from mtkit.core.device import resolve_precision

AUTO = "import torch; from mtkit.core.device import resolve_precision; resolve_precision('auto', torch.device('cpu'))"


@pytest.fixture(scope="session")  # set up at the root, not under the test's folder
def model_trained_in_auto():
    return resolve_precision("auto", torch.device("cpu"))


def test_asks_in_its_own_process():
    resolve_precision("auto", torch.device("cpu"))


def test_asks_in_a_child_process():
    subprocess.run([sys.executable, "-c", AUTO], check=True)


def test_uses_a_fixture_that_asked(model_trained_in_auto):
    pass


def test_names_its_precision():
    resolve_precision("fp32", torch.device("cpu"))


@pytest.mark.parametrize("value", [1, 2])
def test_asks_for_one_value_only(value):
    if value == 2:
        resolve_precision("auto", torch.device("cpu"))
"""


def test_the_second_pass_runs_exactly_the_tests_that_resolved_auto(tmp_path):
    """A pass that records, then one that runs what it recorded: the tests that asked in their own
    process or a child, and the users of a fixture that asked (the first to use it and the others)."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_sample.py").write_text(SAMPLE_SUITE + "\n\ndef test_uses_it_too(model_trained_in_auto):\n    pass\n")
    (suite / "pytest.ini").write_text("[pytest]\n")
    log = tmp_path / "auto.log"
    env = {**os.environ, "MTKIT_AUTO_PRECISION_LOG": str(log), "PYTHONPATH": str(REPO / "tests")}
    env.pop("MTKIT_AUTO_PRECISION_CONTEXT", None)
    pytest_run = [sys.executable, "-m", "pytest", "-p", "precision_plugin", "-p", "no:cacheprovider", "-q",
                  "--rootdir", suite, "-c", suite / "pytest.ini"]  # fmt: skip

    def passed(*options: str) -> list[str]:
        result = subprocess.run([*map(str, pytest_run), *options, "-rA", str(suite)], env=env, capture_output=True, text=True)  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        return sorted(line.split("::")[1] for line in result.stdout.splitlines() if line.startswith("PASSED"))

    assert len(passed()) == 7
    assert passed(f"--only-precision-dependent={log}") == [
        "test_asks_for_one_value_only[2]", "test_asks_in_a_child_process", "test_asks_in_its_own_process",
        "test_uses_a_fixture_that_asked", "test_uses_it_too",
    ]  # fmt: skip


@pytest.mark.parametrize("preset", [None, "64"])
def test_serve_bounds_onednns_kernel_caches_unless_the_environment_does(preset, monkeypatch):
    """oneDNN reads its caches' capacities from the environment at its first kernel: `serve` sets them
    before anything else (here, before it refuses its port), and an operator's own value wins."""
    from typer.testing import CliRunner

    from mtkit.cli.app import app

    for name in device_module.KERNEL_CACHE_CAPACITY:
        if preset is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, preset)
    result = CliRunner().invoke(app, ["serve", "-m", str(OLD_MODEL / "tiny.pt"), "--port", "70000"])
    assert result.exit_code == 1 and "--port 70000: must be between 0 and 65535" in result.output
    expected = preset or "256"
    seen = {name: os.environ.get(name) for name in device_module.KERNEL_CACHE_CAPACITY}
    assert seen == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": expected, "LRU_CACHE_CAPACITY": expected}
