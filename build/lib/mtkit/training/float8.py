"""train.precision=fp8: the linear layers' matrix products in FP8 on GPUs with FP8 tensor cores
(compute capability 8.9 on: Ada, Hopper, Blackwell), by torchao's float8 training (as torchtitan
trains): e4m3 inputs and weights, e5m2 gradients, each tensor scaled by its own absolute maximum at
every step. The rest (attention, normalization, the loss) runs in bf16 under autocast, as in
train.precision=bf16. Weights, optimizer state and checkpoints stay fp32: a model trained in fp8 is
an ordinary model file, translated in fp32 or bf16.

Only layers whose both sizes are multiples of 16 are converted (FP8 matrix products need them); the
output projection onto the vocabulary is not an nn.Linear (it may be tied to the embeddings) and
stays bf16, as torchtitan keeps its output layer.
"""

from __future__ import annotations

import torch
from torch import nn

from mtkit.core.device import resolve_precision
from mtkit.core.errors import MtkitError

FP8_CAPABILITY = (8, 9)  # Ada (8.9) and Hopper (9.0) on: FP8 tensor cores


def resolve_training_precision(precision: str, device: torch.device) -> str:
    """resolve_precision, and fp8 where this device computes it (with torchao installed)."""
    if precision != "fp8":
        return resolve_precision(precision, device)
    refusal = fp8_refusal(device)
    if refusal:
        raise MtkitError(refusal)
    require_torchao()
    return "fp8"


def fp8_refusal(device: torch.device) -> str | None:
    """Why this device cannot train in fp8, in one line; None where it can."""
    if device.type != "cuda":
        return "train.precision=fp8 needs a GPU with FP8 tensor cores (compute capability 8.9 or more); training on cpu"
    capability = torch.cuda.get_device_capability(device)
    if capability < FP8_CAPABILITY:
        return (
            f"train.precision=fp8 needs FP8 tensor cores (compute capability 8.9 or more: Ada, Hopper); "
            f"{torch.cuda.get_device_name(device)} has {capability[0]}.{capability[1]} (use train.precision=bf16)"
        )
    return None


def require_torchao() -> None:
    try:
        import torchao.float8  # noqa: F401
    except ImportError:
        raise MtkitError("train.precision=fp8 needs torchao: pip install 'mtkit[fp8]'") from None


def to_training_precision(model: nn.Module, precision: str) -> nn.Module:
    """The model as it trains in `precision`: for fp8, with Float8Linear layers; otherwise as it is."""
    if precision == "fp8":
        convert_to_fp8(model)
    return model


def convert_to_fp8(model: nn.Module) -> list[str]:
    """Swap the model's eligible nn.Linear layers for torchao's Float8Linear, in place (same
    parameters, same state_dict keys); returns the converted layers' names."""
    from torchao.float8 import convert_to_float8_training

    eligible = [name for name, module in model.named_modules() if fp8_eligible(module)]
    convert_to_float8_training(model, module_filter_fn=lambda module, name: fp8_eligible(module))
    return eligible


def fp8_eligible(module: nn.Module) -> bool:
    return type(module) is nn.Linear and module.in_features % 16 == 0 and module.out_features % 16 == 0
