"""Scoring: the log-probability of given translations under a model, by forced decoding.

For filtering and reranking: each (source, target) pair gets log p(target + </s> | source), the sum
that the search itself ranks by (Hypothesis.log_prob of a translation that ended with </s>; one cut
at the length limit was ranked without the </s> term), optionally per token or with the search's
length penalty.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mtkit.core.device import autocast, resolve_device, resolve_precision
from mtkit.data.batching import length_batches, pad_batch
from mtkit.decoding.ensemble import Ensemble
from mtkit.decoding.search_rules import length_penalty
from mtkit.model.files import ModelFile
from mtkit.model.transformer import Transformer
from mtkit.text.targets import framing
from mtkit.text.tokenizer import BOS_ID, EOS_ID, PAD_ID


@torch.no_grad()
def forced_log_probs(
    model: Transformer,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    device: torch.device,
    precision: str = "fp32",
    max_tokens: int = 8192,
    given: Sequence[int] = (),
) -> list[tuple[float, int]]:
    """(log p(target + </s> | source), target length with </s>) of each pair of id lists, in input order;
    `given`: ids every target starts with that are given, not scored (the target language's token)."""
    out: list[tuple[float, int]] = [(0.0, 0)] * len(pairs)
    widths = [len(src) + len(given) + len(tgt) + 1 for src, tgt in pairs]
    for group in length_batches(widths, len(pairs) or 1, max_tokens):
        src = pad_batch([pairs[i][0] for i in group], device, suffix=EOS_ID)
        tgt_in = pad_batch([[*given, *pairs[i][1]] for i in group], device, prefix=BOS_ID)
        tgt_out = pad_batch([[*given, *pairs[i][1]] for i in group], device, suffix=EOS_ID)
        with autocast(device, precision):
            logits = model(src, tgt_in)
        lprobs = F.log_softmax(logits.float(), dim=-1).gather(2, tgt_out.unsqueeze(2)).squeeze(2)
        real = tgt_out != PAD_ID
        real[:, : len(given)] = False
        sums = lprobs.masked_fill(~real, 0.0).sum(dim=1)
        for i, total, length in zip(group.tolist(), sums.tolist(), real.sum(dim=1).tolist()):
            out[i] = (total, length)
    return out


@dataclass
class TokenStatistics:
    """What forced decoding knows of one translation: its log-probability and its length (</s> included),
    and the summed entropy of the model's next-token distributions along it."""

    log_prob: float
    length: int
    entropy: float


@torch.no_grad()
def token_statistics(
    model: Transformer | Ensemble,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    device: torch.device,
    precision: str = "fp32",
    max_tokens: int = 8192,
    given: Sequence[int] = (),
    dropout_seed: int | None = None,
) -> list[TokenStatistics]:
    """TokenStatistics of each (source ids, target ids) pair, in input order; an ensemble's distributions
    are the means of its models' log-probabilities, renormalised, as its search uses them. With
    dropout_seed, the model's dropout is on (Monte Carlo dropout), drawn from that seed."""
    models = list(model.models) if isinstance(model, Ensemble) else [model]
    widths = [len(src) + len(given) + len(tgt) + 1 for src, tgt in pairs]
    found: dict[int, TokenStatistics] = {}
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), _dropout(models, dropout_seed):
        for group in length_batches(widths, len(pairs) or 1, max_tokens):
            src = pad_batch([pairs[i][0] for i in group], device, suffix=EOS_ID)
            tgt = [[*given, *pairs[i][1]] for i in group]
            tgt_in, tgt_out = pad_batch(tgt, device, prefix=BOS_ID), pad_batch(tgt, device, suffix=EOS_ID)
            with autocast(device, precision):
                lprobs = torch.stack([F.log_softmax(m(src, tgt_in).float(), dim=-1) for m in models]).mean(dim=0)
            lprobs = F.log_softmax(lprobs, dim=-1)
            entropy = -(lprobs.exp() * lprobs.masked_fill(lprobs.isneginf(), 0.0)).sum(dim=-1)
            real = tgt_out != PAD_ID
            real[:, : len(given)] = False
            chosen = lprobs.gather(2, tgt_out.unsqueeze(2)).squeeze(2).masked_fill(~real, 0.0).sum(dim=1)
            entropies = entropy.masked_fill(~real, 0.0).sum(dim=1)
            for i, total, length, spread in zip(group.tolist(), chosen.tolist(), real.sum(dim=1).tolist(), entropies.tolist()):  # fmt: skip
                found[i] = TokenStatistics(total, length, spread)
    return [found[i] for i in range(len(pairs))]


@contextlib.contextmanager
def _dropout(models: list[Transformer], seed: int | None):
    """Dropout on, drawn from `seed`, within the block (and the models back in eval mode after it)."""
    if seed is None:
        yield
        return
    torch.manual_seed(seed)
    for model in models:
        model.train()
    try:
        yield
    finally:
        for model in models:
            model.eval()


class Scorer:
    """A loaded model that scores raw (source, target) lines."""

    def __init__(
        self,
        model_file: ModelFile,
        device: str = "auto",
        precision: str = "auto",
        max_tokens: int = 8192,
        tgt_lang: str | None = None,
        src_lang: str | None = None,
    ):
        """tgt_lang: the target language, for a model that chooses it by a tag or by language tokens
        (then src_lang too; mtkit.text.targets)."""
        self.source_tag, self.given = framing(model_file.meta, model_file.src_tokenizer, src_lang, tgt_lang)
        self.device = resolve_device(device)
        self.precision = resolve_precision(precision, self.device)
        self.model = model_file.build_model(self.device)
        self.src_tokenizer, self.tgt_tokenizer = model_file.src_tokenizer, model_file.tgt_tokenizer
        self.max_tokens = max_tokens

    def score(
        self, sources: Sequence[str], targets: Sequence[str], normalize: bool = False, lenpen: float = 0.0
    ) -> list[float]:
        """Each pair's log-probability: the sum, or per target token with `normalize`, or divided by
        the search's length penalty ((5 + n) / 6) ** lenpen, which is what beam search ranks by."""
        src_ids = self.src_tokenizer.encode_batch([line.strip() for line in sources])
        if self.source_tag is not None:
            src_ids = [[self.source_tag, *row] for row in src_ids]
        tgt_ids = self.tgt_tokenizer.encode_batch([line.strip() for line in targets])
        pairs = list(zip(src_ids, tgt_ids))
        scored = forced_log_probs(self.model, pairs, self.device, self.precision, self.max_tokens, self.given)
        if normalize:
            return [total / length for total, length in scored]
        return [total / length_penalty(length, lenpen) for total, length in scored]


def kept_pairs(scores: Sequence[float], drop: float) -> list[int]:
    """The indices, in order, of the pairs left when the share `drop` of them (rounded down) with
    the lowest scores goes: Bergamot's cross-entropy filter, given per-token scores."""
    dropped = set(sorted(range(len(scores)), key=lambda i: (scores[i], i))[: int(len(scores) * drop)])
    return [i for i in range(len(scores)) if i not in dropped]
