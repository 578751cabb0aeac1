"""Sampling a token a row: the tokens that may be drawn (temperature, epsilon, top-k, top-p), and the
random numbers, which depend on the sentence, the seed, the draw and the step, never on the batch.

Each draw places one number u in [0, 1) on the cumulative distribution of the kept tokens. u comes from
a counter-based generator (splitmix64's finalizer over the sentence's key, the draw's number and the
step): a sentence translated alone, in a batch of others, offline or by a server, draws the same
tokens. The sentence's key is a hash of its source ids and the seed (SearchConfig.seed).
"""

from __future__ import annotations

import torch
from torch import Tensor

from mtkit.decoding.search_rules import SearchConfig
from mtkit.text.tokenizer import PAD_ID

_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64: splitmix64's increment
_MIX1 = -4658895280553007687  # 0xBF58476D1CE4E5B9
_MIX2 = -7723592293110705685  # 0x94D049BB133111EB


def _wrapped(n: int) -> int:
    """A Python integer as the int64 that wrapping arithmetic gives."""
    return (n + (1 << 63)) % (1 << 64) - (1 << 63)


def _shifted(x: Tensor, bits: int) -> Tensor:
    """x >> bits as an unsigned 64-bit shift (torch shifts int64 arithmetically)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def mix(x: Tensor) -> Tensor:
    """splitmix64's finalizer on int64 tensors (wrapping multiplication): every input bit reaches every
    output bit."""
    x = (x ^ _shifted(x, 30)) * _MIX1
    x = (x ^ _shifted(x, 27)) * _MIX2
    return x ^ _shifted(x, 31)


def sentence_keys(src: Tensor, seed: int) -> Tensor:
    """(B,) int64: a hash of each source row's ids (padding left out) and the seed."""
    positions = torch.arange(1, src.size(1) + 1, device=src.device, dtype=torch.long)
    weights = mix(positions * _GOLDEN)
    ids = torch.where(src == PAD_ID, 0, mix(src.long() + 1))
    return mix((ids * weights).sum(dim=1) + _wrapped(seed * _GOLDEN))


def draw_keys(keys: Tensor, draws: int) -> Tensor:
    """Each key's `draws` keys, draw by draw (rows sentence by sentence, as a search keeps them)."""
    numbers = torch.arange(draws, device=keys.device, dtype=torch.long)
    return mix(keys.repeat_interleave(draws) + numbers.repeat(keys.numel()) * _GOLDEN)


def uniforms(keys: Tensor, step: int) -> Tensor:
    """(rows, 1) float64 in [0, 1): each key's number for this step."""
    bits = _shifted(mix(keys + _wrapped((step + 1) * _GOLDEN)), 11)  # 53 bits
    return (bits.double() / float(1 << 53))[:, None]


def sample(lprobs: Tensor, cfg: SearchConfig, numbers: Tensor) -> Tensor:
    """One token a row, drawn with each row's number at cfg.temperature from the tokens that epsilon (on
    the whole distribution), then top-k, then top-p (on what is left) keep."""
    logits = lprobs / cfg.temperature
    most = min(cfg.top_k or logits.size(-1), int(1 / cfg.epsilon) + 1 if cfg.epsilon else logits.size(-1))
    if most < logits.size(-1):  # no more tokens can be drawn: draw among the likeliest `most`, sorted
        values, ids = logits.topk(most, dim=-1)
        values = _above_epsilon(values, logits, cfg.epsilon)
        return ids.gather(1, _draw(_nucleus(values, cfg.top_p), numbers)[:, None]).squeeze(1)
    logits = _above_epsilon(logits, logits, cfg.epsilon)
    if cfg.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        logits = logits.scatter(1, order, _nucleus(sorted_logits, cfg.top_p))
    return _draw(logits, numbers)


def _above_epsilon(values: Tensor, logits: Tensor, epsilon: float) -> Tensor:
    """values (some of each row's logits) below probability epsilon set to -inf, but each row's likeliest:
    a flat distribution keeps one."""
    if not epsilon:
        return values
    below = (values - logits.logsumexp(dim=-1, keepdim=True)).exp() < epsilon
    likeliest = values.argmax(dim=-1, keepdim=True)
    return values.masked_fill(below.scatter(1, likeliest, False), float("-inf"))


def _nucleus(sorted_logits: Tensor, top_p: float) -> Tensor:
    """Logits sorted high to low, those outside the smallest prefix with mass >= top_p set to -inf."""
    if top_p >= 1.0:
        return sorted_logits
    probs = sorted_logits.softmax(dim=-1)
    return sorted_logits.masked_fill(probs.cumsum(dim=-1) - probs > top_p, float("-inf"))


def _draw(logits: Tensor, numbers: Tensor) -> Tensor:
    """A column a row from softmax(logits): the row's number placed on the cumulative distribution
    (float64: 256k probabilities sum without drift). torch.multinomial, or a random number per
    column, took 60% of a sampled search's time over an 8k vocabulary on the CPU."""
    cdf = logits.softmax(dim=-1).double().cumsum(dim=-1)
    return (
        torch.searchsorted(cdf, numbers.to(cdf.device) * cdf[:, -1:], right=True).squeeze(1).clamp(max=cdf.size(1) - 1)
    )
