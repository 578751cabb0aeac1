"""Where a model runs and in which precision: the device, the numeric precision, autocast.

Training and translation both choose through these functions, so `auto` means the same in both.
What `auto` chooses depends on the hardware, seen through one seam (`detect_hardware`), so that each
kind of machine can be pretended in a test; `MTKIT_NO_BF16=1` makes a CPU with bf16 instructions
choose as one without them (fp32).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass

import torch

from mtkit.core.errors import MtkitError

PRECISIONS = ("fp32", "bf16", "fp16")
NO_BF16_SWITCH = "MTKIT_NO_BF16"
# A file to which every resolution of `auto` appends who asked (MTKIT_AUTO_PRECISION_CONTEXT) and what
# it chose: the test suite finds with it the tests whose behaviour depends on the machine's precision.
AUTO_PRECISION_LOG = "MTKIT_AUTO_PRECISION_LOG"
AUTO_PRECISION_CONTEXT = "MTKIT_AUTO_PRECISION_CONTEXT"


# oneDNN (bf16 and other mkldnn kernels on a CPU) keeps a compiled kernel for every shape it meets, in two
# caches of 1,024 by default (its own primitives; PyTorch's ideep computations, with their reordered
# weights). A server's continuous batching meets a new shape at most steps: beside a glossary attack, 15 s
# took a bf16 server from 313 to 732 MB (fp32, which does not use them: 390). 256 each kept it at 603 MB
# and its throughput (docs/results/hostile-files.md). Training keeps the defaults: there 256 saved 600 MiB
# but cost 3-5% of its tokens/s.
KERNEL_CACHE_CAPACITY = {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "256", "LRU_CACHE_CAPACITY": "256"}


def bound_kernel_caches() -> None:
    """Bound oneDNN's caches of kernels by shape (KERNEL_CACHE_CAPACITY), unless the environment sets
    them; before the first kernel runs (they read the environment once), and inherited by the
    processes this one starts."""
    for name, capacity in KERNEL_CACHE_CAPACITY.items():
        os.environ.setdefault(name, capacity)


@dataclass(frozen=True)
class Hardware:
    """What `auto` looks at: the kind of device, and whether it computes bf16 natively."""

    device_type: str  # "cpu" or "cuda"
    native_bf16: bool


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise MtkitError("device cuda was asked for, but no CUDA GPU is available (use --device cpu)")
    if device not in ("cpu", "cuda"):
        raise MtkitError(f"device {device!r}: must be auto, cpu or cuda")
    if device == "cuda":
        # cuDNN's attention builds a plan for every new batch shape, ~10 ms of host time per call: with
        # the batches' varying lengths that made GPU training host-bound (5-6x slower on an H100).
        torch.backends.cuda.enable_cudnn_sdp(False)
    return torch.device(device)


def resolve_precision(precision: str, device: torch.device) -> str:
    if precision == "auto":
        hardware = detect_hardware(device)
        chosen = auto_precision(hardware)
        record_auto_choice(hardware, chosen)
        return chosen
    if precision not in PRECISIONS:
        raise MtkitError(f"precision {precision!r}: must be auto, {', '.join(PRECISIONS)}")
    return precision


def auto_precision(hardware: Hardware) -> str:
    """bf16 where the hardware computes it natively, else fp16 (with loss scaling) on CUDA, fp32 on CPU.

    GPUs: bf16 from Ampere on; a V100 or T4 only emulates it (slowly), so it gets fp16.
    CPUs: bf16 with AVX-512 BF16 or AMX; elsewhere fp32 (bf16 can still be asked for explicitly: it
    is emulated there, 34-49x slower)."""
    if hardware.native_bf16:
        return "bf16"
    return "fp16" if hardware.device_type == "cuda" else "fp32"


def detect_hardware(device: torch.device) -> Hardware:
    """The seam between `auto` and the machine: tests replace it to pretend each kind."""
    if device.type == "cuda":
        return Hardware("cuda", torch.cuda.is_bf16_supported(including_emulation=False))
    switched_off = bf16_switched_off()  # read on every CPU: a switch that is neither on nor off is an error anywhere
    return Hardware("cpu", cpu_has_native_bf16() and not switched_off)


def bf16_switched_off() -> bool:
    """MTKIT_NO_BF16=1: choose on a CPU as if it had no bf16 instructions."""
    value = os.environ.get(NO_BF16_SWITCH, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise MtkitError(f"environment variable {NO_BF16_SWITCH}={os.environ[NO_BF16_SWITCH]!r}: must be 1 or 0")


def record_auto_choice(hardware: Hardware, chosen: str) -> None:
    log = os.environ.get(AUTO_PRECISION_LOG)
    if not log:
        return
    line = json.dumps({"context": os.environ.get(AUTO_PRECISION_CONTEXT, ""), "device": hardware.device_type,
                       "native_bf16": hardware.native_bf16, "chosen": chosen})  # fmt: skip
    with open(log, "a", encoding="utf-8") as handle:  # one short write: whole lines from parallel processes
        handle.write(line + "\n")


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """Mixed precision for bf16/fp16 (the weights stay fp32, unless an inference model cast its linear
    layers once: mtkit.model.packed.cast_linear_weights); nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=autocast_dtype(precision))


def autocast_dtype(precision: str) -> torch.dtype:
    """The lower precision that autocast computes in for bf16 or fp16 (and fp8 training, whose other
    operations are bf16's)."""
    return torch.float16 if precision == "fp16" else torch.bfloat16


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU has bf16 instructions (AVX-512 BF16 or AMX-BF16), from /proc/cpuinfo's flags."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as handle:
                cpuinfo = handle.read()
        except OSError:  # not Linux: stay with fp32
            return False
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    return "avx512_bf16" in flags or "amx_bf16" in flags
