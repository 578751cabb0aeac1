"""Weights prepared once for inference: large fp32 linear layers packed for oneDNN on a CPU, and
linear layers stored in bf16/fp16 for inference under autocast (cast_linear_weights, at the end).

Packing, for fp32 on a CPU:

torch's fp32 matrix product (MKL's sgemm) reads each weight in its plain layout at every call.
Decoding multiplies a few hundred rows at a time by the same weights, step after step, and that
is where a large weight packed once into oneDNN's blocked layout pays: on this project's 2-core AMD
EPYC (AVX2) the Multi30k model's output projection (8,000 x 256) takes 1.6 ms for 5 rows through
F.linear and 0.4 ms packed. The smaller layers gain nothing or lose (a packed call costs more to
set up), and each packed layer adds memory (see ROW_MULTIPLE), so only weights of at least
PACK_MIN_WEIGHTS are packed: in practice the output projection. Measured in docs/results/design-choices.md.
The products are the same up to float rounding (summation order).

Packing uses torch's internal oneDNN operators (the ones torch.compile's freezing uses). Where a
torch build lacks them or they disagree with F.linear, nothing is packed and nothing changes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mtkit.model.transformer import Transformer

ROWS_HINT = 64  # the rows oneDNN chooses its layout for; 64 and 512 measured the same here
# oneDNN keeps memory for every input shape it has multiplied, and decoding brings a new row count at
# almost every step: rows are padded to a multiple of ROW_MULTIPLE, so that there are fewer shapes.
# Peak RSS translating test2016 with every layer packed (as then): about 820 MiB unpadded, 750 with
# 8 (and 690 with 16, but padding 5 rows to 16 made a decoding step 30% slower), against 560 unpacked.
ROW_MULTIPLE = 8
# Only weights at least this large are packed. A packed product costs 45-60 us more per call than
# F.linear (the row padding and oneDNN's per-call work), which only a large weight pays back: on
# the 2-core AMD EPYC, 5 rows by 256 x 256 took 90 us packed against 28 through F.linear, and by the
# 8,000 x 256 output projection 437 us against 1,617 (docs/results/design-choices.md).
PACK_MIN_WEIGHTS = 1 << 19  # the output projection of a 4,000-subword vocabulary and d_model 256 is packed


class PackedLinear(nn.Module):
    """y = x W^T + b with W packed for oneDNN (inference only: no gradients flow through it)."""

    def __init__(self, weight: Tensor, bias: Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ROWS_HINT)
        self.bias = None if bias is None else bias.detach()

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, self.in_features)
        count = rows.size(0)
        padding = -count % ROW_MULTIPLE
        rows = F.pad(rows, (0, 0, 0, padding)) if padding else rows.contiguous()
        y = torch.ops.mkldnn._linear_pointwise(rows, self.packed, self.bias, "none", [], "")
        return y[:count].view(*x.shape[:-1], self.out_features)


def packing_works() -> bool:
    """Whether this torch build packs for oneDNN and gives F.linear's results."""
    if not torch.backends.mkldnn.is_available():
        return False
    generator = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(48, 32, generator=generator), torch.randn(48, generator=generator)
    x = torch.randn(2, 3, 32, generator=generator)
    try:
        packed = PackedLinear(weight, bias)(x)
    except (RuntimeError, AttributeError, NotImplementedError):
        return False
    return torch.allclose(packed, F.linear(x, weight, bias), rtol=1e-4, atol=1e-4)


def pack_linear_layers(model: Transformer, min_weights: int | None = None) -> bool:
    """Swap every nn.Linear of an fp32 CPU model with at least `min_weights` weights (default:
    PACK_MIN_WEIGHTS) for a PackedLinear, in place. The output projection (tied or not) is packed
    with only the rows of the ids it scores (OutputLayer.ids), when those hold as many. The
    model is then for inference only. Returns False (and changes nothing) where packing is not available."""
    if not packing_works():
        return False
    min_weights = PACK_MIN_WEIGHTS if min_weights is None else min_weights
    with torch.no_grad():
        output, output_bias = model.output.inference_weight()
        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, nn.Linear) and _worth_packing(child.weight, min_weights):
                    setattr(module, name, PackedLinear(child.weight, child.bias))
        if _worth_packing(output, min_weights):
            model.output.scored = PackedLinear(output, output_bias)
    return True


def _worth_packing(weight: Tensor, min_weights: int) -> bool:
    return weight.dtype == torch.float32 and weight.numel() >= min_weights


def cast_linear_weights(model: Transformer, dtype: torch.dtype) -> None:
    """Store every linear layer's weights, and the output projection's scored rows, in `dtype` (bf16 or fp16),
    in place, for inference under autocast to that dtype; the model is then for inference only.

    Autocast casts an fp32 weight at every call and keeps the cast only until the outermost autocast
    context ends, so a search that enters a context per decoding step (a server's running search)
    casts all the weights at every step. Cast once, the products are the same: autocast casts these
    weights to the same values. Embeddings and LayerNorms stay fp32, as autocast keeps them.
    """
    with torch.no_grad():
        # A copy of the scored rows: a tied embedding's lookup stays fp32.
        output, bias = model.output.inference_weight()
        scored = nn.Linear(output.size(1), output.size(0), bias=bias is not None, device=output.device, dtype=dtype)
        scored.weight.copy_(output)
        if bias is not None:
            scored.bias.copy_(bias)
        model.output.scored = scored
        for module in model.modules():
            if isinstance(module, nn.Linear):
                module.to(dtype)
