"""Greedy search, beam search and sampling over a batch of sentences, with the decoder's KV cache.

All sentences (and all beams of a sentence, flattened into the batch axis) advance together;
a sentence that is finished is dropped from the batch, so it costs no more compute.
Scores are sums of log-probabilities including </s>; a finished hypothesis of n tokens
(counting </s>) is ranked by log_prob / ((5 + n) / 6) ** lenpen (GNMT's length penalty).

The length limit: a search takes at most L = a x source tokens + b steps, one token each, </s>
included. Hypotheses still open after step L are cut there: they keep their L tokens and their
log-probability so far (no </s>), and compete with the finished ones. This is CTranslate2's rule
(and OpenNMT-py's), so both of mtkit's engines give the same translation at the limit.
Long lines: both engines translate at most MAX_SOURCE_TOKENS subwords of a source (the rest is cut,
with a warning; see mtkit.translate) and L is at most MAX_OUTPUT_TOKENS, so that an exported model's
fixed position table (CTranslate2) covers every position either engine can reach.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from mtkit.constraints import constrain
from mtkit.errors import MtkitError
from mtkit.kv_cache import DecoderState, pad_to_common_length
from mtkit.model import Transformer
from mtkit.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

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
    # The loop guard (mtkit.constraints): an n-gram of loop_ngram tokens occurs at most loop_repeats
    # times in a translation (loop_ngram 0: no guard). None of the 31,014 German captions of Multi30k
    # holds a 4-gram of words three times; runaways do.
    loop_ngram: int = 4
    loop_repeats: int = 2
    sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    # Target id sequences a translation never contains: the engine sets its tokenizer's line breaks
    # (Tokenizer.line_break_sequences), so that one line in gives one line out.
    banned: tuple[tuple[int, ...], ...] = ()

    def validate(self) -> None:
        if self.beam < 1:
            raise MtkitError(f"--beam {self.beam}: must be at least 1")
        if not 1 <= self.nbest <= self.beam:
            raise MtkitError(f"--nbest {self.nbest}: must be between 1 and --beam ({self.beam})")
        if self.temperature <= 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise MtkitError("sampling needs --temperature > 0, 0 < --top-p <= 1 and --top-k >= 0")
        if self.sample and self.beam != 1:
            raise MtkitError("--sample draws one translation per sentence: use it with --beam 1")
        if self.loop_ngram < 0 or (self.loop_ngram and self.loop_repeats < 1):
            raise MtkitError(
                f"--loop-ngram {self.loop_ngram} --loop-repeats {self.loop_repeats}: the n-gram size must be"
                " at least 0 (0: no loop guard) and the repeats at least 1"
            )

    @property
    def loop_guard(self) -> tuple[int, int]:
        """(n, most) as mtkit.constraints.constrain takes it; n = 0: no guard."""
        return (self.loop_ngram, self.loop_repeats)


@dataclass
class Hypothesis:
    tokens: list[int]  # without </s>
    score: float  # length-normalised log-probability: what beam search ranks by
    log_prob: float  # sum of log-probabilities of the tokens and </s> (no </s> where cut at the limit)
    ended: bool = True  # False: cut at the length limit, without </s>


def length_penalty(length: Tensor | int, alpha: float) -> Tensor | float:
    return ((5.0 + length) / 6.0) ** alpha


def max_output_length(source_tokens: int, cfg: SearchConfig) -> int:
    """The length limit, in decoding steps (tokens, </s> included): a x source tokens without </s>
    + b, at least 1 and at most MAX_OUTPUT_TOKENS. Every engine takes it from here, so they agree
    to the last float rounding."""
    return min(MAX_OUTPUT_TOKENS, max(1, int(cfg.max_len_a * source_tokens + cfg.max_len_b)))


def max_output_lengths(src: Tensor, cfg: SearchConfig) -> Tensor:
    source_tokens = (src != PAD_ID).sum(dim=1) - 1  # without </s>
    return torch.tensor([max_output_length(n, cfg) for n in source_tokens.tolist()], device=src.device)


def prefix_tensor(prefixes: list[list[int]] | None, batch: int, device: torch.device) -> Tensor | None:
    """Target prefixes as a (batch, longest) tensor, -1 after each prefix's end; None without any."""
    if not prefixes or not any(prefixes):
        return None
    out = torch.full((batch, max(len(p) for p in prefixes)), -1, dtype=torch.long)
    for i, prefix in enumerate(prefixes):
        out[i, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
    return out.to(device)


class _Pin:
    """Forces each row's prefix token at this step: only it keeps its (unconstrained) log-probability."""

    def __init__(self, lprobs: Tensor, steps: Tensor, forced: Tensor | None):
        """steps: each row's tokens so far."""
        self.rows = self.tokens = self.values = None
        if forced is not None:
            inside = steps < forced.size(1)
            tokens = forced.gather(1, steps.clamp(max=forced.size(1) - 1)[:, None]).squeeze(1).masked_fill(~inside, -1)
            rows = (tokens >= 0).nonzero().flatten()
            if rows.numel():
                self.rows, self.tokens = rows, tokens[rows]
                values = lprobs[rows, self.tokens]  # before constrain() bans anything
                # An id the model does not score (model.output_vocab = target) counts as <unk>.
                self.values = torch.where(values.isneginf(), lprobs[rows, UNK_ID], values)

    def apply(self, lprobs: Tensor) -> Tensor:
        if self.rows is not None:
            lprobs[self.rows] = float("-inf")
            lprobs[self.rows, self.tokens] = self.values
        return lprobs


def _sample(lprobs: Tensor, cfg: SearchConfig, generator: torch.Generator) -> Tensor:
    logits = lprobs / cfg.temperature
    if cfg.top_k:
        kth = logits.topk(min(cfg.top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        outside = probs.cumsum(dim=-1) - probs > cfg.top_p  # keep the smallest prefix with mass >= top_p
        logits = logits.scatter(1, order, sorted_logits.masked_fill(outside, float("-inf")))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(1)


OnDone = Callable[[int, list[Hypothesis]], None]  # (sentence index in the batch, its final n-best)


@torch.no_grad()
def greedy_search(
    model: Transformer, src: Tensor, cfg: SearchConfig, forced: Tensor | None = None, on_done: OnDone | None = None
) -> list[list[Hypothesis]]:
    """Argmax (or a sample, with cfg.sample) at every step, for a batch of sources (B, S);
    `forced` (prefix_tensor) gives target prefixes, which count towards scores and length limits.
    on_done(i, hypotheses) is called for each sentence as soon as it is finished."""
    batch = src.size(0)
    memory, src_mask = model.encode(src)
    state = model.start_decoding(memory, src_mask)
    max_lens = max_output_lengths(src, cfg)
    generator = torch.Generator(device=src.device).manual_seed(cfg.seed)
    alive = torch.arange(batch, device=src.device)  # original sentence index of each row
    history = torch.empty(batch, 0, dtype=torch.long, device=src.device)
    log_probs = torch.zeros(batch, device=src.device)
    tokens = torch.full((batch,), BOS_ID, dtype=torch.long, device=src.device)
    results: list[list[Hypothesis]] = [[] for _ in range(batch)]
    for step in range(int(max_lens.max())):
        lprobs = F.log_softmax(model.decode_step(tokens, state).float(), dim=-1)
        steps = torch.full((tokens.numel(),), step, dtype=torch.long, device=src.device)  # every row alike
        pin = _Pin(lprobs, steps, None if forced is None else forced[alive])
        lprobs = pin.apply(
            constrain(lprobs, steps, history, cfg.min_len, cfg.banned, cfg.no_repeat_ngram, cfg.loop_guard)
        )
        tokens = _sample(lprobs, cfg, generator) if cfg.sample else lprobs.argmax(dim=-1)
        log_probs = log_probs + lprobs.gather(1, tokens[:, None]).squeeze(1)
        history = torch.cat([history, tokens[:, None]], dim=1)
        ended = tokens == EOS_ID
        finished = (ended | (step + 1 >= max_lens[alive])).cpu()  # what the host reads from the device, once
        if finished.any():
            rows = finished.nonzero().flatten().to(src.device)
            outputs = zip(history[rows].tolist(), log_probs[rows].tolist(), ended[rows].tolist(), alive[rows].tolist())
            for output, score, end, sentence in outputs:
                normalised = score / length_penalty(step + 1, cfg.lenpen)
                results[sentence] = [Hypothesis(output[:-1] if end else output, normalised, score, end)]
                if on_done:
                    on_done(sentence, results[sentence])
            kept = (~finished).nonzero().flatten()
            if kept.numel() == 0:
                break
            keep = kept.to(src.device)
            state.select(keep)
            alive, history, log_probs, tokens = alive[keep], history[keep], log_probs[keep], tokens[keep]
    return results


class BeamStream:
    """Beam search over a changing set of sentences: add() sources between steps, and each step()
    advances every sentence by one token and returns the ones it finished, with their n-best.

    A sentence added while others are searching joins them at the next step, at its own positions
    (mtkit.model.DecoderState.join), and finishes as it would have alone. beam_search runs one
    batch through it; a translation server keeps one running, so that a new sentence need not
    wait for a whole batch to finish.
    """

    def __init__(self, model: Transformer, cfg: SearchConfig, device: torch.device):
        self.model, self.cfg, self.k, self.device = model, cfg, cfg.beam, device
        self.state: DecoderState | None = None
        self.ids: list = []  # the caller's name for each sentence still searching
        self.finished: dict = {}  # id -> every ended or cut hypothesis so far

    def __len__(self) -> int:
        return len(self.ids)

    @torch.no_grad()
    def add(self, src: Tensor, ids: list, forced: Tensor | None = None) -> None:
        """Start searching for a batch of sources (B, S), known as `ids`; `forced`: prefix_tensor."""
        batch, k, device = src.size(0), self.k, self.device
        memory, src_mask = self.model.encode(src)
        state = self.model.start_decoding(memory, src_mask, beams=k)
        if self.state is None:  # nothing searching: start from empty rows
            self.state = state
            self.history, self.tokens = torch.empty(0, 0, dtype=torch.long, device=device), src.new_empty(0)
            self.max_lens, self.steps = src.new_empty(0), src.new_empty(0)
            self.scores, self.forced = torch.empty(0, k, device=device), src.new_empty(0, 0)
        else:
            self.state.join(state)
        scores = torch.full((batch, k), float("-inf"), device=device)
        scores[:, 0] = 0.0  # all beams start identical: let only the first one expand
        self.scores = torch.cat([self.scores, scores])
        self.history = torch.cat([self.history, self.history.new_full((batch * k, self.history.size(1)), PAD_ID)])
        self.tokens = torch.cat([self.tokens, self.tokens.new_full((batch * k,), BOS_ID)])
        self.max_lens = torch.cat([self.max_lens, max_output_lengths(src, self.cfg)])
        self.steps = torch.cat([self.steps, self.steps.new_zeros(batch)])  # tokens chosen so far
        forced = forced if forced is not None else src.new_full((batch, 0), -1)
        self.forced = torch.cat(pad_to_common_length([self.forced, forced], dim=1, value=-1))
        self.ids += ids
        self.finished.update((i, []) for i in ids)

    @torch.no_grad()
    def step(self) -> list[tuple]:
        """One token more for every sentence; returns (id, n-best) for the sentences it finished."""
        n_alive, k, cfg = len(self.ids), self.k, self.cfg
        lprobs = F.log_softmax(self.model.decode_step(self.tokens, self.state).float(), dim=-1)
        row_steps = self.steps.repeat_interleave(k)
        pin = _Pin(lprobs, row_steps, self.forced.repeat_interleave(k, dim=0) if self.forced.size(1) else None)
        constrained = constrain(
            lprobs, row_steps, self.history, cfg.min_len, cfg.banned, cfg.no_repeat_ngram, cfg.loop_guard
        )
        lprobs = pin.apply(constrained)
        vocab = lprobs.size(-1)
        candidates = (self.scores.view(-1, 1) + lprobs).view(n_alive, k * vocab)
        top_scores, top_index = candidates.topk(min(2 * k, k * vocab), dim=1)  # (n, 2k)
        top_beam, top_token = top_index // vocab, top_index % vocab
        # The host decides from three copies a step (on a GPU, every read waits for the device).
        scores, index = top_scores.cpu(), top_index.cpu()
        steps, max_lens = torch.stack([self.steps, self.max_lens]).cpu()
        beams, tokens, last_step = index // vocab, index % vocab, steps + 1 >= max_lens
        self._collect_ended(scores, beams, tokens, steps, last_step)
        done = torch.tensor([len(self.finished[s]) >= k for s in self.ids]) | ~torch.isfinite(scores[:, 0]) | last_step
        results = []
        for i in done.nonzero().flatten().tolist():  # every sentence gets here once: at its length limit at the latest
            hypotheses = self.finished.pop(self.ids[i])
            results.append((self.ids[i], sorted(hypotheses, key=lambda h: h.score, reverse=True)[: cfg.nbest]))
        kept = (~done).nonzero().flatten()
        if kept.numel() == 0:
            self.state, self.ids = None, []
            return results
        # Continue with the k best candidates that did not end.
        continuing = top_scores.masked_fill(top_token == EOS_ID, float("-inf"))
        next_scores, pick = continuing.topk(k, dim=1)  # (n, k)
        next_beam, next_token = top_beam.gather(1, pick), top_token.gather(1, pick)
        keep = kept.to(self.device)
        rows = (keep[:, None] * k + next_beam[keep]).flatten()
        self.state.select(rows, keep if kept.numel() < n_alive else None)
        self.steps = self.steps[keep] + 1
        width = int(steps[kept].max()) + 1  # the longest history still searching
        history = self.history.index_select(0, rows)[:, self.history.size(1) - (width - 1) :]
        self.history = torch.cat([history, next_token[keep].reshape(-1, 1)], dim=1)
        self.tokens = self.history[:, -1]
        self.scores, self.max_lens, self.forced = next_scores[keep], self.max_lens[keep], self.forced[keep]
        self.ids = [self.ids[i] for i in kept.tolist()]
        return results

    def _collect_ended(self, scores: Tensor, beams: Tensor, tokens: Tensor, steps: Tensor, last_step: Tensor) -> None:
        """Keep the hypotheses this step ends, from host copies of the 2k best candidates: an </s>
        among the k best candidates finishes one; at the last step, all k best do."""
        ends = ((tokens == EOS_ID) | last_step[:, None]) & torch.isfinite(scores)
        ended = ends[:, : self.k].nonzero().tolist()
        if not ended:
            return
        score_of, beam_of, token_of, length_of = scores.tolist(), beams.tolist(), tokens.tolist(), steps.tolist()
        rows = torch.tensor([i * self.k + beam_of[i][j] for i, j in ended], device=self.device)
        width = self.history.size(1)
        for (i, j), history in zip(ended, self.history[rows].tolist()):  # one copy from the device
            token, log_prob, length = token_of[i][j], score_of[i][j], length_of[i]
            output = history[width - length :] + ([] if token == EOS_ID else [token])
            normalised = log_prob / length_penalty(length + 1, self.cfg.lenpen)
            self.finished[self.ids[i]].append(Hypothesis(output, normalised, log_prob, token == EOS_ID))


def beam_search(
    model: Transformer, src: Tensor, cfg: SearchConfig, forced: Tensor | None = None, on_done: OnDone | None = None
) -> list[list[Hypothesis]]:
    """Beam search for a batch of sources (B, S); returns the cfg.nbest best hypotheses per sentence.
    With `forced` (prefix_tensor), every hypothesis of a sentence starts with its prefix.
    on_done(i, hypotheses) is called for each sentence as soon as its n-best is final."""
    stream = BeamStream(model, cfg, src.device)
    stream.add(src, list(range(src.size(0))), forced)
    results: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    while len(stream):
        for sentence, hypotheses in stream.step():
            results[sentence] = hypotheses
            if on_done:
                on_done(sentence, hypotheses)
    return results


def search(
    model: Transformer,
    src: Tensor,
    cfg: SearchConfig,
    prefixes: list[list[int]] | None = None,
    on_done: OnDone | None = None,
) -> list[list[Hypothesis]]:
    """Beam search when cfg.beam > 1, else greedy (or sampling); `prefixes`: each sentence's forced
    beginning of the translation (target ids, [] for none); on_done(i, hypotheses): called for each
    sentence as soon as it is finished, before the batch is."""
    forced = prefix_tensor(prefixes, src.size(0), src.device)
    if cfg.beam == 1:
        return greedy_search(model, src, cfg, forced, on_done)
    return beam_search(model, src, cfg, forced, on_done)
