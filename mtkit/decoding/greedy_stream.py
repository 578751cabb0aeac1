"""Greedy search over a changing set of sentences: BeamStream's interface (mtkit.decoding.beam) for a
server's running search with one beam, without a beam's bookkeeping.

Each step takes every sentence's most likely token; a sentence that ends (</s>, or its length limit)
leaves the batch at once. Sentences join between steps at their own positions
(mtkit.model.kv_cache.DecoderState.join); histories are right-aligned, each row's last `steps`
columns its own. A sentence finds what greedy_search finds for it alone; a beam search of one beam
would keep 2k+1 slots of ended hypotheses and take two top-k's a step for the same result.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from mtkit.core.errors import MtkitError
from mtkit.decoding.constraints import constrain
from mtkit.decoding.search_rules import Hypothesis, Pin, SearchConfig, length_penalty, output_limits
from mtkit.model.kv_cache import pad_to_common_length
from mtkit.model.transformer import Transformer
from mtkit.text.tokenizer import BOS_ID, EOS_ID, PAD_ID


class GreedyStream:
    """add() sources between steps; each step() advances every sentence by one token and returns
    (id, [hypothesis]) for the sentences it finished."""

    def __init__(self, model: Transformer, cfg: SearchConfig, device: torch.device):
        if cfg.beam != 1 or cfg.sample:
            raise ValueError("GreedyStream searches with one beam and no sampling")
        self.model, self.cfg, self.device = model, cfg, device
        self.state = None
        self.ids: list = []  # the caller's name for each sentence (row) in the batch
        self.clock = 0  # steps taken by the stream
        self.forcing_until = 0  # the clock from which no sentence is inside its target prefix

    def __len__(self) -> int:
        return len(self.ids)

    @torch.no_grad()
    def add(self, src: Tensor, ids: list, forced: Tensor | None = None, constraints: list | None = None) -> None:
        """Start searching for a batch of sources (B, S), known as `ids`; `forced`: prefix_tensor."""
        if constraints and any(constraints):
            raise MtkitError("constraints and glossaries need beam search: beam 2 or more")
        batch = src.size(0)
        memory, src_mask = self.model.encode(src)
        state = self.model.start_decoding(memory, src_mask)
        forced = forced if forced is not None else src.new_full((batch, 0), -1)
        limits = torch.tensor(output_limits(src, self.cfg), device=self.device)
        if self.state is None:
            self.state, self.forced, self.max_lens = state, forced, limits
            self.history = src.new_empty(batch, 0)
            self.tokens = src.new_full((batch,), BOS_ID)
            self.steps, self.log_probs = src.new_zeros(batch), torch.zeros(batch, device=self.device)
        else:
            self.state.join(state)
            self.forced = torch.cat(pad_to_common_length([self.forced, forced], dim=1, value=-1))
            self.max_lens = torch.cat([self.max_lens, limits])
            self.history = torch.cat([self.history, self.history.new_full((batch, self.history.size(1)), PAD_ID)])
            self.tokens = torch.cat([self.tokens, self.tokens.new_full((batch,), BOS_ID)])
            self.steps = torch.cat([self.steps, self.steps.new_zeros(batch)])
            self.log_probs = torch.cat([self.log_probs, self.log_probs.new_zeros(batch)])
        self.ids += ids
        self.forcing_until = max(self.forcing_until, self.clock + forced.size(1))

    @torch.no_grad()
    def step(self) -> list[tuple]:
        """One token more for every sentence; returns (id, [its hypothesis]) for those that ended."""
        cfg = self.cfg
        lprobs = F.log_softmax(self.model.decode_step(self.tokens, self.state).float(), dim=-1)
        forcing = self.clock < self.forcing_until  # else Pin has nothing to do
        self.clock += 1
        pin = Pin(lprobs, self.steps, self.forced if forcing else None, cfg.given_prefix)
        lprobs = pin.apply(
            constrain(
                lprobs,
                self.steps,
                self.history,
                cfg.min_len,
                cfg.banned,
                cfg.no_repeat_ngram,
                cfg.loop_guard,
                cfg.spelling,
            )
        )
        tokens = lprobs.argmax(dim=-1)
        self.log_probs = self.log_probs + lprobs.gather(1, tokens[:, None]).squeeze(1)
        self.history = torch.cat([self.history, tokens[:, None]], dim=1)
        self.steps = self.steps + 1
        self.tokens = tokens
        ended = tokens == EOS_ID
        finished = (ended | (self.steps >= self.max_lens)).cpu()  # what the host reads from the device, once
        if not finished.any():
            return []
        return self._leave(finished, ended)

    def _leave(self, finished: Tensor, ended: Tensor) -> list[tuple]:
        """The finished sentences' hypotheses; the others go on without them."""
        rows = finished.nonzero().flatten()
        on_device = rows.to(self.device)
        outputs = zip(
            self.history[on_device].tolist(), self.steps[on_device].tolist(), self.log_probs[on_device].tolist(),
            ended[on_device].tolist(), rows.tolist(),
        )  # fmt: skip
        results = []
        width = self.history.size(1)
        for history, steps, score, end, row in outputs:
            output = history[width - steps : width - end]
            normalised = score / length_penalty(steps, self.cfg.lenpen)
            results.append((self.ids[row], [Hypothesis(output, normalised, score, end)]))
        kept = (~finished).nonzero().flatten()
        if not kept.numel():
            self.state, self.ids = None, []
            return results
        self.ids = [self.ids[i] for i in kept.tolist()]
        keep = kept.to(self.device)
        self.state.select(keep)
        self.steps, self.max_lens, self.forced = self.steps[keep], self.max_lens[keep], self.forced[keep]
        longest = int(self.steps.max())  # history columns still read
        self.history = self.history[keep][:, width - longest :]
        self.tokens, self.log_probs = self.tokens[keep], self.log_probs[keep]
        return results
