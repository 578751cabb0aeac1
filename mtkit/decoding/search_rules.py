"""The rules every search follows (mtkit.decoding.search's greedy search and sampling, mtkit.decoding.beam's beam
search, and the CTranslate2 engine where it can): the settings, hypotheses and their scores, the
length limit, and target prefixes.

Scores are sums of log-probabilities including </s>; a finished hypothesis of n tokens
(counting </s>) is ranked by log_prob / ((5 + n) / 6) ** lenpen (GNMT's length penalty).

The length limit: a search takes at most L = a x source tokens + b steps, one token each, </s>
included. Hypotheses still open after step L are cut there: they keep their L tokens and their
log-probability so far (no </s>), and compete with the finished ones. This is CTranslate2's rule
(and OpenNMT-py's), so both of mtkit's engines give the same translation at the limit.
Long lines: both engines translate at most MAX_SOURCE_TOKENS subwords of a source (the rest is cut,
with a warning; see mtkit.translation.translate) and L is at most MAX_OUTPUT_TOKENS, so that an exported model's
fixed position table (CTranslate2) covers every position either engine can reach.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from mtkit.core.errors import MtkitError
from mtkit.text.tokenizer import PAD_ID, UNK_ID

MAX_SOURCE_TOKENS = 1024  # subwords of a source line that are translated, without </s>
MAX_OUTPUT_TOKENS = 1024  # the largest length limit L
# What an exported model's fixed position table must cover: a longest source and its </s>, every step.
MAX_POSITIONS = max(MAX_SOURCE_TOKENS + 1, MAX_OUTPUT_TOKENS)


@dataclass
class SearchConfig:
    beam: int = 5
    lenpen: float = 1.0
    max_len_a: float = 1.0  # output tokens <= a * source tokens + b (the paper: input + 50)
    max_len_b: int = 50
    min_len: int = 1  # output tokens before </s>
    nbest: int = 1
    no_repeat_ngram: int = 0
    # The loop guard (mtkit.decoding.constraints): an n-gram of loop_ngram tokens occurs at most loop_repeats
    # times in a translation (loop_ngram 0: no guard). None of the 31,014 German captions of Multi30k
    # holds a 4-gram of words three times; runaways do.
    loop_ngram: int = 4
    loop_repeats: int = 2
    sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    epsilon: float = 0.0  # epsilon sampling (Hewitt et al., 2022): no token below this probability but the likeliest
    samples: int = 1  # with sample: translations drawn per sentence (candidates of minimum Bayes risk decoding)
    seed: int = 0
    # Target id sequences a translation never contains: the engine sets its tokenizer's line breaks
    # (Tokenizer.line_break_sequences), so that one line in gives one line out.
    banned: tuple[tuple[int, ...], ...] = ()
    # The first given_prefix tokens of every target prefix are given, not predicted: each scores 0, as
    # transformers' forced_bos_token_id scores the target language's token (mtkit.text.targets).
    given_prefix: int = 0
    # With the loop guard, the spelling guard of the target vocabulary (mtkit.decoding.constraints.SpellingGuard),
    # which the engine sets from its tokenizer: no letter four times in a row, no subword three times in a word.
    spelling: Any = None
    # Decoder layers whose cross-attention greedy search keeps with each hypothesis (Hypothesis.attention),
    # so that word alignments need no second pass (mtkit.translation.alignment); () keeps none.
    attention_layers: tuple[int, ...] = ()

    def validate(self) -> None:
        if self.beam < 1:
            raise MtkitError(f"--beam {self.beam}: must be at least 1")
        if not 1 <= self.nbest <= self.beam:
            raise MtkitError(f"--nbest {self.nbest}: must be between 1 and --beam ({self.beam})")
        if self.temperature <= 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise MtkitError("sampling needs --temperature > 0, 0 < --top-p <= 1 and --top-k >= 0")
        if self.sample and self.beam != 1:
            raise MtkitError("--sample draws one translation per sentence: use it with --beam 1")
        if not 0 <= self.epsilon < 1 or self.samples < 1 or (self.samples > 1 and not self.sample):
            raise MtkitError("sampling needs 0 <= epsilon < 1, and several samples a sentence need --sample")
        if self.samples > 1 and self.attention_layers:
            raise MtkitError("alignments are for one translation a sentence, not several samples")
        if self.loop_ngram < 0 or (self.loop_ngram and self.loop_repeats < 1):
            raise MtkitError(
                f"--loop-ngram {self.loop_ngram} --loop-repeats {self.loop_repeats}: the n-gram size must be"
                " at least 0 (0: no loop guard) and the repeats at least 1"
            )

    @property
    def loop_guard(self) -> tuple[int, int]:
        """(n, most) as mtkit.decoding.constraints.constrain takes it; n = 0: no guard."""
        return (self.loop_ngram, self.loop_repeats)


@dataclass
class Hypothesis:
    tokens: list[int]  # without </s>
    score: float  # length-normalised log-probability: what beam search ranks by
    log_prob: float  # sum of log-probabilities of the tokens and </s> (no </s> where cut at the limit)
    ended: bool = True  # False: cut at the length limit, without </s>
    # With SearchConfig.attention_layers, greedy search's cross-attention at each step, averaged over those
    # layers and their heads: (tokens + 1, source subwords + 1), as alignment.cross_attention_batch gives it.
    attention: Tensor | None = None
    # Minimum Bayes risk decoding's expected utility of this translation (mtkit.translation.mbr), where it chose.
    utility: float | None = None
    # With lexical constraints (mtkit.decoding.lexical), how many of its sentence's phrases it lacks: only
    # a translation cut at the length limit lacks any.
    missed_constraints: int = 0
    # Where the translation came from: "mt" (a search), "tm 100" (a translation memory's unit:
    # mtkit.memory.translator), or "tm 100 + mt" for a line of both.
    origin: str = "mt"


def length_penalty(length: Tensor | int, alpha: float) -> Tensor | float:
    return ((5.0 + length) / 6.0) ** alpha


def max_output_length(source_tokens: int, cfg: SearchConfig) -> int:
    """The length limit, in decoding steps (tokens, </s> included): a x source tokens without </s>
    + b, at least 1 and at most MAX_OUTPUT_TOKENS. Every engine takes it from here, so they agree
    to the last float rounding."""
    return min(MAX_OUTPUT_TOKENS, max(1, int(cfg.max_len_a * source_tokens + cfg.max_len_b)))


def output_limits(src: Tensor, cfg: SearchConfig) -> list[int]:
    """max_output_length of each source of a batch (B, S), read on the host."""
    source_tokens = (src != PAD_ID).sum(dim=1) - 1  # without </s>
    return [max_output_length(n, cfg) for n in source_tokens.tolist()]


def max_output_lengths(src: Tensor, cfg: SearchConfig) -> Tensor:
    return torch.tensor(output_limits(src, cfg), device=src.device)


def prefix_tensor(prefixes: list[list[int]] | None, batch: int, device: torch.device) -> Tensor | None:
    """Target prefixes as a (batch, longest) tensor, -1 after each prefix's end; None without any."""
    if not prefixes or not any(prefixes):
        return None
    out = torch.full((batch, max(len(p) for p in prefixes)), -1, dtype=torch.long)
    for i, prefix in enumerate(prefixes):
        out[i, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
    return out.to(device)


class Pin:
    """Forces each row's prefix token at this step: only it keeps its (unconstrained) log-probability,
    or 0 among the first `given` tokens (SearchConfig.given_prefix). Rows without a prefix token at
    this step are left alone; nothing waits for the device."""

    def __init__(self, lprobs: Tensor, steps: Tensor, forced: Tensor | None, given: int = 0):
        """steps: each row's tokens so far."""
        self.pinned = self.row = None
        if forced is not None:
            inside = steps < forced.size(1)
            tokens = forced.gather(1, steps.clamp(max=forced.size(1) - 1)[:, None]).squeeze(1).masked_fill(~inside, -1)
            self.pinned, token = tokens >= 0, tokens.clamp(min=0)[:, None]
            values = lprobs.gather(1, token)  # before constrain() bans anything
            # An id the model does not score (model.output_vocab = target) counts as <unk>.
            values = torch.where(values.isneginf(), lprobs[:, UNK_ID : UNK_ID + 1], values)
            if given:
                values = values.masked_fill((steps < given)[:, None], 0.0)
            self.row = torch.full_like(lprobs, float("-inf")).scatter_(1, token, values)

    def apply(self, lprobs: Tensor) -> Tensor:
        if self.pinned is None:
            return lprobs
        return torch.where(self.pinned[:, None], self.row, lprobs)


OnDone = Callable[[int, list[Hypothesis]], None]  # (sentence index in the batch, its final n-best)
