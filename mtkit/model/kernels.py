"""The kernels under the model: attention (torch's SDPA, and the CPU's own paths) and dropout.

`attend` chooses how softmax(Q K^T / sqrt(d_k) + B) V is computed, so that the model reads as
the paper: torch's scaled_dot_product_attention on GPUs and in CPU inference; two bf16 matrix
products around an fp32 softmax in CPU bf16 training (about twice as fast there); a slow path that
also returns the weights, for inspection. `Dropout` draws a cheaper mask on CPUs.
"""

from __future__ import annotations

import contextlib
import math
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from mtkit.core.errors import MtkitError

# Eagerly (tests, CPUs) FlexAttention runs its reference implementation; compiled, its own kernel.
warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")


class Dropout(nn.Dropout):
    """nn.Dropout with a cheaper mask on a CPU, where torch draws one Bernoulli number per element
    (about a tenth of a 2-core training step). Here each 64-bit draw decides four elements with 16
    bits each, so p is rounded to a multiple of 1/65536 and kept values are scaled by exactly
    1 / (1 - that p). Other devices, and compiled code, use torch's own kernel."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0 or x.device.type != "cpu":
            return super().forward(x)
        return cpu_dropout(x, self.p)


def cpu_dropout(x: Tensor, p: float) -> Tensor:
    if torch.compiler.is_compiling():  # Dynamo cannot trace random_; compiled code draws torch's mask cheaply
        return F.dropout(x, p)
    dropped = round(p * 65536)  # of the 65,536 values a 16-bit lane can take
    if dropped >= 65536:
        return x * 0.0
    bits = torch.empty((x.numel() + 3) // 4, dtype=torch.int64).random_(-(2**63), None)  # all 64 bits uniform
    keep = bits.view(torch.int16)[: x.numel()].view(x.shape) >= dropped - 32768
    return x * keep * (65536 / (65536 - dropped))


def softmax_weights(q: Tensor, k: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
    """softmax(Q K^T / sqrt(d_k) + B): (B, h, Lq, Lk)."""
    return masked_scores(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), mask, is_causal).softmax(dim=-1)


def masked_scores(scores: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
    """(B, h, Lq, Lk) scores with -inf where a query may not look: past the causal diagonal (aligned
    at the last key) and where mask is False."""
    if is_causal:
        causal = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril(
            scores.size(-1) - scores.size(-2)
        )
        scores = scores.masked_fill(~causal, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores


def matmul_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, dropout: float) -> Tensor:
    """softmax(Q K^T / sqrt(d_k) + B) V as two batched matrix products in q's dtype around an fp32
    softmax (attention as "eager" implementations compute it under autocast). For training on a CPU
    under bf16 autocast: with sentence-length sequences, forward and backward take about half the
    time of the flash kernel in fp32 (docs/results/design-choices.md). CPU tensors only (its dropout is cpu_dropout)."""
    scores = (q @ k.transpose(-2, -1)).float() * q.size(-1) ** -0.5  # (B, h, Lq, Lk)
    weights = masked_scores(scores, mask, is_causal).softmax(dim=-1)
    if dropout > 0:
        weights = cpu_dropout(weights, dropout)
    return weights.to(v.dtype) @ v


def _bf16_training_on_cpu(q: Tensor, training: bool) -> bool:
    """Whether attention takes matmul_attention: training under CPU bf16 autocast. Evaluation and
    decoding keep the kernel, whose incremental steps (one query per row) it serves well."""
    return training and q.device.type == "cpu" and q.dtype == torch.bfloat16 and torch.is_autocast_enabled("cpu")


def _fp32_attention_on_cpu(q: Tensor) -> contextlib.AbstractContextManager:
    """Under CPU autocast, run the attention kernel in fp32: torch's CPU kernels are about 5x slower
    in bf16 (measured here with AVX-512 bf16), while the projections around them keep the speed-up."""
    if q.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        return torch.autocast("cpu", enabled=False)
    return contextlib.nullcontext()


def attention_dtype(x: Tensor) -> torch.dtype:
    """What attention computes in: fp32 on a CPU (see _fp32_attention_on_cpu), x's dtype elsewhere."""
    return torch.float32 if x.device.type == "cpu" else x.dtype


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | BlockMask | None,
    is_causal: bool,
    dropout: float,
    training: bool,
    keep_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """softmax(Q K^T / sqrt(d_k) + B) V for (B, h, L, d_k) queries, keys and values, with B = -inf
    where `mask` is False and past the causal diagonal; returns the weights too with keep_weights."""
    if isinstance(mask, BlockMask):  # packed rows, train.flex_attention
        if dropout and training:
            raise MtkitError("train.flex_attention takes no attention dropout: set model.attention_dropout=0")
        return flex_attention(q, k, v, block_mask=mask), None
    if keep_weights:  # the output as the usual kernel gives it: recording the weights changes nothing
        return attend(q, k, v, mask, is_causal, dropout, training)[0], softmax_weights(q, k, mask, is_causal)
    if _bf16_training_on_cpu(q, training):
        return matmul_attention(q, k, v, mask, is_causal, dropout), None
    with _fp32_attention_on_cpu(q):
        q, k, v = (t.to(attention_dtype(t)) for t in (q, k, v))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout if training else 0.0, is_causal=is_causal
        )
    return out, None
