"""Where a model runs and in which precision: the device, the numeric precision, autocast.

Training and translation both choose through these functions, so `auto` means the same in both.
"""

from __future__ import annotations

import contextlib

import torch

from mtkit.core.errors import MtkitError

PRECISIONS = ("fp32", "bf16", "fp16")


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
    """auto: bf16 where the hardware computes it natively, else fp16 (with loss scaling) on CUDA, fp32 on CPU.

    GPUs: bf16 from Ampere on; a V100 or T4 only emulates it (slowly), so it gets fp16.
    CPUs: bf16 with AVX-512 BF16 or AMX; elsewhere fp32 (bf16 can still be asked for explicitly).
    """
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp16"
        return "bf16" if cpu_has_native_bf16() else "fp32"
    if precision not in PRECISIONS:
        raise MtkitError(f"precision {precision!r}: must be auto, {', '.join(PRECISIONS)}")
    return precision


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
