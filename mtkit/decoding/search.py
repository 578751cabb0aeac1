"""Greedy search and sampling over a batch of sentences, with the decoder's KV cache; search(),
which runs them or beam search (mtkit.decoding.beam) as the settings ask; and translate_ids(),
which searches for any number of sentences in batches of like lengths.

All sentences advance together; a sentence that is finished is dropped from the batch, so it costs
no more compute. Scores, the length limit and prefixes follow mtkit.decoding.search_rules.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from mtkit.core.device import autocast
from mtkit.core.errors import MtkitError
from mtkit.data.batching import length_batches, pad_batch
from mtkit.decoding.beam import beam_search
from mtkit.decoding.constraints import constrain
from mtkit.decoding.sampling import draw_keys, sample, sentence_keys, uniforms
from mtkit.decoding.search_rules import (
    MAX_OUTPUT_TOKENS,
    MAX_POSITIONS,
    MAX_SOURCE_TOKENS,
    Hypothesis,
    OnDone,
    Pin,
    SearchConfig,
    length_penalty,
    max_output_length,
    max_output_lengths,
    prefix_tensor,
)
from mtkit.model.transformer import Transformer
from mtkit.text.tokenizer import BOS_ID, EOS_ID, PAD_ID

__all__ = [  # the rules are used from here too
    "MAX_OUTPUT_TOKENS", "MAX_POSITIONS", "MAX_SOURCE_TOKENS", "Hypothesis", "OnDone", "SearchConfig",
    "greedy_search", "length_penalty", "max_output_length", "max_output_lengths", "prefix_tensor", "sample_search",
    "search", "translate_ids",
]  # fmt: skip


class CrossAttentionLog:
    """The cross-attention of the decoder layers cfg.attention_layers at every step, averaged over them
    and their heads, per sentence: kept with each hypothesis for its word alignment."""

    def __init__(self, model: Transformer, layers: tuple[int, ...], src: Tensor, steps: int):
        self.modules = [model.decoder_layers[i].cross_attn for i in layers]
        self.lengths = (src != PAD_ID).sum(dim=1).tolist()  # with </s>
        self.rows = src.new_zeros(*src.shape[:1], steps, src.size(1), dtype=torch.float) if layers else None

    def __enter__(self) -> CrossAttentionLog:
        for module in self.modules:
            module.keep_weights = True
        return self

    def __exit__(self, *exc) -> None:
        for module in self.modules:
            module.keep_weights, module.weights = False, None

    def record(self, step: int, alive: Tensor) -> None:
        if self.rows is not None:  # each module's weights: (rows, heads, 1, S)
            self.rows[alive, step] = torch.stack([m.weights[:, :, 0].float() for m in self.modules]).mean(dim=(0, 2))

    def of(self, sentence: int, steps: int) -> Tensor | None:
        return None if self.rows is None else self.rows[sentence, :steps, : self.lengths[sentence]].cpu()


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
    keys = draw_keys(sentence_keys(src, cfg.seed), 1) if cfg.sample else None  # as sample_search draws its first
    alive = torch.arange(batch, device=src.device)  # original sentence index of each row
    history = torch.empty(batch, 0, dtype=torch.long, device=src.device)
    log_probs = torch.zeros(batch, device=src.device)
    tokens = torch.full((batch,), BOS_ID, dtype=torch.long, device=src.device)
    results: list[list[Hypothesis]] = [[] for _ in range(batch)]
    longest = int(max_lens.max())
    attention = CrossAttentionLog(model, cfg.attention_layers, src, longest)
    with attention:
        for step in range(longest):
            lprobs = F.log_softmax(model.decode_step(tokens, state).float(), dim=-1)
            attention.record(step, alive)
            steps = torch.full((tokens.numel(),), step, dtype=torch.long, device=src.device)  # every row alike
            forcing = forced is not None and step < forced.size(1)  # else Pin has nothing to do
            pin = Pin(lprobs, steps, forced[alive] if forcing else None, cfg.given_prefix)
            lprobs = pin.apply(
                constrain(
                    lprobs, steps, history, cfg.min_len, cfg.banned, cfg.no_repeat_ngram, cfg.loop_guard, cfg.spelling
                )
            )
            tokens = sample(lprobs, cfg, uniforms(keys[alive], step)) if cfg.sample else lprobs.argmax(dim=-1)
            log_probs = log_probs + lprobs.gather(1, tokens[:, None]).squeeze(1)
            history = torch.cat([history, tokens[:, None]], dim=1)
            ended = tokens == EOS_ID
            finished = (ended | (step + 1 >= max_lens[alive])).cpu()  # what the host reads from the device, once
            if finished.any():
                rows = finished.nonzero().flatten().to(src.device)
                outputs = zip(
                    history[rows].tolist(), log_probs[rows].tolist(), ended[rows].tolist(), alive[rows].tolist()
                )
                for output, score, end, sentence in outputs:
                    normalised = score / length_penalty(step + 1, cfg.lenpen)
                    weights = attention.of(sentence, step + 1)
                    results[sentence] = [Hypothesis(output[:-1] if end else output, normalised, score, end, weights)]
                    if on_done:
                        on_done(sentence, results[sentence])
                kept = (~finished).nonzero().flatten()
                if kept.numel() == 0:
                    break
                keep = kept.to(src.device)
                state.select(keep)
                alive, history, log_probs, tokens = alive[keep], history[keep], log_probs[keep], tokens[keep]
    return results


@torch.no_grad()
def sample_search(
    model: Transformer, src: Tensor, cfg: SearchConfig, forced: Tensor | None = None, on_done: OnDone | None = None
) -> list[list[Hypothesis]]:
    """cfg.samples translations drawn for each source of a batch (B, S), in the order drawn: rows
    sentence by sentence, as beam search keeps them; a row that has ended idles until its sentence's
    others have, and the sentence then leaves the batch."""
    n, batch = cfg.samples, src.size(0)
    memory, src_mask = model.encode(src)
    state = model.start_decoding(memory, src_mask, beams=n)
    max_lens = max_output_lengths(src, cfg)
    keys = draw_keys(sentence_keys(src, cfg.seed), n)  # each row's, sentence by sentence
    sentences = torch.arange(batch, device=src.device)  # the sentences still in the batch
    history = torch.empty(batch * n, 0, dtype=torch.long, device=src.device)
    log_probs = torch.zeros(batch * n, device=src.device)
    tokens = torch.full((batch * n,), BOS_ID, dtype=torch.long, device=src.device)
    lengths = torch.zeros(batch * n, dtype=torch.long, device=src.device)  # tokens made, </s> included
    ended, done = (torch.zeros(batch * n, dtype=torch.bool, device=src.device) for _ in range(2))
    results: list[list[Hypothesis]] = [[] for _ in range(batch)]
    for step in range(int(max_lens.max())):
        lprobs = F.log_softmax(model.decode_step(tokens, state).float(), dim=-1)
        row_sentence = sentences.repeat_interleave(n)
        steps = torch.full((tokens.numel(),), step, dtype=torch.long, device=src.device)
        forcing = forced is not None and step < forced.size(1)
        pin = Pin(lprobs, steps, forced[row_sentence] if forcing else None, cfg.given_prefix)
        lprobs = pin.apply(
            constrain(
                lprobs, steps, history, cfg.min_len, cfg.banned, cfg.no_repeat_ngram, cfg.loop_guard, cfg.spelling
            )
        )
        tokens = sample(lprobs, cfg, uniforms(keys, step))
        log_probs = log_probs + lprobs.gather(1, tokens[:, None]).squeeze(1).masked_fill(done, 0.0)
        history = torch.cat([history, tokens[:, None]], dim=1)
        lengths = lengths.masked_fill(~done, step + 1)
        ended = ended | (~done & (tokens == EOS_ID))
        done = done | ended | (step + 1 >= max_lens[row_sentence])
        finished = done.view(-1, n).all(dim=1).cpu()  # what the host reads from the device, once
        if finished.any():
            rows = finished.repeat_interleave(n).nonzero().flatten().to(src.device)
            outputs = zip(history[rows].tolist(), log_probs[rows].tolist(), ended[rows].tolist(),
                          lengths[rows].tolist(), row_sentence[rows].tolist())  # fmt: skip
            for output, score, end, length, sentence in outputs:
                normalised = score / length_penalty(length, cfg.lenpen)
                results[sentence].append(Hypothesis(output[: length - end], normalised, score, end))
                if on_done and len(results[sentence]) == n:
                    on_done(sentence, results[sentence])
            kept = (~finished).nonzero().flatten().to(src.device)
            if kept.numel() == 0:
                break
            keep_rows = (kept[:, None] * n + torch.arange(n, device=src.device)).flatten()
            state.select(keep_rows, kept)
            sentences = sentences[kept]
            history, log_probs, tokens, keys = (
                history[keep_rows],
                log_probs[keep_rows],
                tokens[keep_rows],
                keys[keep_rows],
            )
            lengths, ended, done = lengths[keep_rows], ended[keep_rows], done[keep_rows]
    return results


def search(
    model: Transformer,
    src: Tensor,
    cfg: SearchConfig,
    prefixes: list[list[int]] | None = None,
    on_done: OnDone | None = None,
    constraints: list[list[list[int]]] | None = None,
) -> list[list[Hypothesis]]:
    """Beam search when cfg.beam > 1, else greedy (or sampling); `prefixes`: each sentence's forced
    beginning of the translation (target ids, [] for none); on_done(i, hypotheses): called for each
    sentence as soon as it is finished, before the batch is; `constraints`: each sentence's target
    phrases (ids) that its translation must contain, for beam search (mtkit.decoding.lexical)."""
    forced = prefix_tensor(prefixes, src.size(0), src.device)
    if constraints and any(constraints):
        if cfg.beam == 1 or cfg.sample:
            raise MtkitError("constraints and glossaries need beam search: --beam 2 or more, without --sample")
        return beam_search(model, src, cfg, forced, on_done, constraints)
    if cfg.sample and cfg.samples > 1:
        return sample_search(model, src, cfg, forced, on_done)
    if cfg.beam == 1:
        return greedy_search(model, src, cfg, forced, on_done)
    return beam_search(model, src, cfg, forced, on_done)


@torch.no_grad()
def translate_ids(
    model: Transformer,
    sentences: Sequence[Sequence[int]],
    cfg: SearchConfig,
    device: torch.device,
    precision: str = "fp32",
    batch_size: int = 128,
    max_tokens: int = 8192,
    prefixes: Sequence[list[int]] | None = None,
    on_done: OnDone | None = None,
    constraints: Sequence[list[list[int]]] | None = None,
) -> list[list[Hypothesis]]:
    """Search for every sentence of subword ids, batched by length; results in input order.
    `prefixes`: each sentence's forced target beginning (ids; [] for none); on_done(i, hypotheses)
    is called for sentence i as soon as its search is finished; `constraints`: each sentence's target
    phrases (ids) that its translation must contain."""
    results: list[list[Hypothesis]] = [[] for _ in sentences]
    lengths = [len(s) for s in sentences]
    for group in length_batches(lengths, batch_size, max(1, max_tokens // (cfg.beam * cfg.samples))):
        indices = group.tolist()
        src = pad_batch([sentences[i] for i in indices], device, suffix=EOS_ID)
        forced = [prefixes[i] for i in indices] if prefixes else None
        phrases = [constraints[i] for i in indices] if constraints else None
        done_in_group = (lambda j, hyps, indices=indices: on_done(indices[j], hyps)) if on_done else None
        with autocast(device, precision):
            hypotheses = search(model, src, cfg, forced, done_in_group, phrases)
        for index, hyps in zip(indices, hypotheses):
            results[index] = hyps
    return results
