"""Beam search over a changing set of sentences, with its bookkeeping on the device.

Each step decides on the device which hypotheses end (an </s> among a sentence's k best
candidates; at its length limit, all k of them), keeps them in slots of their sentence, and marks
the sentences that are done. The host reads that only every `sync_every` steps, at a step where
some sentence reaches its length limit (which the host knows without asking), and on a GPU soon
after a copy of "every sentence done", sent behind the steps, arrives. Between reads a done
sentence stays in the batch, frozen: its beams score -inf and end nothing more. So steps replayed
as CUDA graphs queue one after another and the GPU does not wait for the host.

On a CPU, reading is free and every step reads (sync_every 1), as eager steps on a GPU do
(host_reads_every): a done sentence leaves the batch at once and the search makes exactly the
steps it made when the host decided everything.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mtkit.decoding.constraints import constrain
from mtkit.decoding.cuda_graphs import GraphedDecoder
from mtkit.decoding.lexical import ConstrainedStep, missed, pad_phrases, phrase_tensors
from mtkit.decoding.search_rules import Hypothesis, OnDone, Pin, SearchConfig, length_penalty, output_limits
from mtkit.model.kv_cache import DecoderState, pad_to_common_length
from mtkit.model.transformer import Transformer
from mtkit.text.tokenizer import BOS_ID, EOS_ID, PAD_ID

SYNC_EVERY_WITH_GRAPHS = 8  # steps between the host's reads, for steps replayed as CUDA graphs


def host_reads_every(model: Transformer, device: torch.device) -> int:
    """Steps between the host's reads: 8 for steps replayed as CUDA graphs (on an H100, reading every
    step made them 20-40% slower), every step on a CPU, where reading costs nothing, and for eager
    steps on a GPU (there reading every 8 steps measured 10-20% slower; docs/results/gpu.md)."""
    graphed = all(isinstance(member, GraphedDecoder) for member in getattr(model, "models", [model]))  # an Ensemble's
    return SYNC_EVERY_WITH_GRAPHS if device.type == "cuda" and graphed else 1


class EndedHypotheses:
    """The hypotheses that ended, per sentence, in 2k slots: a sentence is done once it holds k, and
    one step ends at most k more. One spare slot takes the writes of the candidates that did not end,
    so a step writes without asking which did. Histories are right-aligned, as BeamStream's."""

    def __init__(self, k: int, device: torch.device):
        self.k, self.slots = k, 2 * k + 1
        self.log_prob = torch.empty(0, self.slots, device=device)
        self.token = torch.empty(0, self.slots, dtype=torch.long, device=device)
        self.length = torch.empty_like(self.token)  # tokens before `token`
        self.history = torch.empty(0, self.slots, 0, dtype=torch.long, device=device)
        self.count = torch.empty(0, dtype=torch.long, device=device)

    def add_sentences(self, count: int) -> None:
        self.log_prob = torch.cat([self.log_prob, self.log_prob.new_zeros(count, self.slots)])
        self.token = torch.cat([self.token, self.token.new_zeros(count, self.slots)])
        self.length = torch.cat([self.length, self.length.new_zeros(count, self.slots)])
        self.history = torch.cat([self.history, self.history.new_full((count, *self.history.shape[1:]), PAD_ID)])
        self.count = torch.cat([self.count, self.count.new_zeros(count)])

    def make_room(self, width: int) -> None:
        """At least `width` history columns, added on the left 16 at a time."""
        missing = width - self.history.size(2)
        if missing > 0:
            pad = self.history.new_full((*self.history.shape[:2], missing + 15), PAD_ID)
            self.history = torch.cat([pad, self.history], dim=2)

    def keep(self, sentences: Tensor, width: int) -> None:
        """Only these sentences, and of the history columns at most the last `width` (the longest
        history still searching; a hypothesis is the last of them, as long as its own history)."""
        self.log_prob, self.token = self.log_prob[sentences], self.token[sentences]
        self.length, self.count = self.length[sentences], self.count[sentences]
        self.history = self.history[sentences][:, :, max(0, self.history.size(2) - width) :].contiguous()

    def record(self, ends: Tensor, log_probs: Tensor, tokens: Tensor, lengths: Tensor, histories: Tensor) -> None:
        """ends (n, k): which of each sentence's k best candidates end, with their log-probabilities,
        last tokens, lengths before them (n,) and histories (n * k, width)."""
        n, k = ends.shape
        slot = torch.where(ends, self.count[:, None] + ends.cumsum(1) - 1, self.slots - 1)
        flat = (torch.arange(n, device=ends.device)[:, None] * self.slots + slot).flatten()
        self.log_prob.view(-1).index_copy_(0, flat, log_probs.flatten())
        self.token.view(-1).index_copy_(0, flat, tokens.flatten())
        self.length.view(-1).index_copy_(0, flat, lengths[:, None].expand(n, k).flatten())
        columns = self.history.view(n * self.slots, -1)[:, self.history.size(2) - histories.size(1) :]
        columns.index_copy_(0, flat, histories)
        self.count += ends.sum(1)

    def read(self, sentences: Tensor, lenpen: float) -> list[list[Hypothesis]]:
        """Every ended hypothesis of these sentences, in the order they ended, from three copies."""
        counts, tokens, lengths = torch.stack(
            [self.count[sentences][:, None].expand(-1, self.slots), self.token[sentences], self.length[sentences]]
        ).tolist()
        log_probs, histories = self.log_prob[sentences].tolist(), self.history[sentences].tolist()
        width = self.history.size(2)
        out = []
        for count, token, length, log_prob, history in zip(counts, tokens, lengths, log_probs, histories):
            hypotheses = []
            for s in range(count[0]):
                output = history[s][width - length[s] :] + ([] if token[s] == EOS_ID else [token[s]])
                normalised = log_prob[s] / length_penalty(length[s] + 1, lenpen)
                hypotheses.append(Hypothesis(output, normalised, log_prob[s], token[s] == EOS_ID))
            out.append(hypotheses)
        return out


class AllDoneSignal:
    """On a GPU, a copy of "every sentence is done" that travels to pinned host memory behind the
    steps, so that the host sees it a step or two later without waiting for the device; on other
    devices, never raised (a CPU reads every step)."""

    def __init__(self, device: torch.device):
        self.cuda, self.in_flight, self.flag, self.event = device.type == "cuda", False, None, None

    def send(self, done: Tensor) -> None:
        if self.cuda and not self.in_flight:
            if self.flag is None:
                self.flag, self.event = torch.zeros((), dtype=torch.bool, pin_memory=True), torch.cuda.Event()
            self.flag.copy_(done.all(), non_blocking=True)
            self.event.record()
            self.in_flight = True

    def forget(self) -> None:
        self.in_flight = False  # a later copy is ordered after it on the device

    def arrived(self) -> bool:
        """Whether a copy sent earlier has arrived, saying that every sentence was done."""
        if not (self.in_flight and self.event.query()):
            return False
        self.in_flight = False
        return bool(self.flag)


class BeamStream:
    """Beam search over a changing set of sentences: add() sources between steps, and each step()
    advances every sentence by one token and returns the ones it finished, with their n-best (on
    an accelerator, at the steps where the host reads; see the module's docstring).

    A sentence added while others are searching joins them at the next step, at its own positions
    (mtkit.model.transformer.DecoderState.join), and finishes as it would have alone. beam_search runs one
    batch through it; a translation server keeps one running, so that a new sentence need not
    wait for a whole batch to finish.
    """

    def __init__(self, model: Transformer, cfg: SearchConfig, device: torch.device, sync_every: int | None = None):
        self.model, self.cfg, self.k, self.device = model, cfg, cfg.beam, device
        self.sync_every = sync_every or host_reads_every(model, device)
        self.state: DecoderState | None = None
        self.ids: list = []  # the caller's name for each sentence in the batch (done ones until read)
        self.clock = 0  # steps taken by the stream: the index of the next one
        self.started: list[int] = []  # the clock when each sentence joined
        self.forcing_until = 0  # the clock from which no sentence is inside its target prefix
        self.last_steps: list[int] = []  # the step at which each sentence reaches its length limit
        self.next_read = self.sync_every - 1  # the step at which the host reads next
        self.all_done = AllDoneSignal(device)  # or earlier, once it sees every sentence done

    def __len__(self) -> int:
        return len(self.ids)

    @torch.no_grad()
    def add(self, src: Tensor, ids: list, forced: Tensor | None = None, constraints: list | None = None) -> None:
        """Start searching for a batch of sources (B, S), known as `ids`; `forced`: prefix_tensor;
        `constraints`: each sentence's target phrases (lists of ids) that its translations must contain
        (mtkit.decoding.lexical)."""
        batch, k, device = src.size(0), self.k, self.device
        memory, src_mask = self.model.encode(src)
        state = self.model.start_decoding(memory, src_mask, beams=k)
        if self.state is None:  # nothing searching: start from empty rows
            self.state = state
            self.history, self.tokens = torch.empty(0, 0, dtype=torch.long, device=device), src.new_empty(0)
            self.max_lens, self.steps = src.new_empty(0), src.new_empty(0)
            self.scores, self.forced = torch.empty(0, k, device=device), src.new_empty(0, 0)
            self.done, self.ended = torch.empty(0, dtype=torch.bool, device=device), EndedHypotheses(k, device)
            self.phrases, self.phrase_lengths = phrase_tensors([], device)
            self.progress, self.phrase_lists = src.new_zeros(0, 0), []
        else:
            self.state.join(state)
        scores = torch.full((batch, k), float("-inf"), device=device)
        scores[:, 0] = 0.0  # all beams start identical: let only the first one expand
        self.scores = torch.cat([self.scores, scores])
        self.history = torch.cat([self.history, self.history.new_full((batch * k, self.history.size(1)), PAD_ID)])
        self.tokens = torch.cat([self.tokens, self.tokens.new_full((batch * k,), BOS_ID)])
        limits = output_limits(src, self.cfg)
        self.max_lens = torch.cat([self.max_lens, torch.tensor(limits, device=device)])
        self.steps = torch.cat([self.steps, self.steps.new_zeros(batch)])  # tokens chosen so far
        self.done = torch.cat([self.done, self.done.new_zeros(batch)])
        self.ended.add_sentences(batch)
        self._add_constraints(constraints or [[] for _ in range(batch)])
        forced = forced if forced is not None else src.new_full((batch, 0), -1)
        self.forcing_until = max(self.forcing_until, self.clock + forced.size(1))
        self.forced = torch.cat(pad_to_common_length([self.forced, forced], dim=1, value=-1))
        self.ids += ids
        self.started += [self.clock] * batch
        self.last_steps += [self.clock + limit - 1 for limit in limits]
        self.next_read = min([self.next_read, *self.last_steps[-batch:]])

    def _add_constraints(self, constraints: list) -> None:
        phrases, lengths = phrase_tensors(constraints, self.device)
        count = max(phrases.size(1), self.phrases.size(1))
        longest = max(phrases.size(2), self.phrases.size(2))
        old, new = (
            pad_phrases(self.phrases, self.phrase_lengths, count, longest),
            pad_phrases(phrases, lengths, count, longest),
        )
        self.phrases, self.phrase_lengths = torch.cat([old[0], new[0]]), torch.cat([old[1], new[1]])
        progress = torch.nn.functional.pad(self.progress, (0, count - self.progress.size(1)))
        self.progress = torch.cat([progress, progress.new_zeros(len(constraints) * self.k, count)])
        self.phrase_lists += [[list(phrase) for phrase in sentence] for sentence in constraints]

    @torch.no_grad()
    def step(self) -> list[tuple]:
        """One token more for every sentence; returns (id, n-best) for the sentences finished since
        the last read, at a step where the host reads."""
        n_alive, k, cfg = len(self.ids), self.k, self.cfg
        logits = self.model.decode_step(self.tokens, self.state).float()
        # In place where it can be: a step's rows span the vocabulary, and a fresh tensor that large costs its page faults
        in_place = {"out": logits} if logits.is_contiguous() else {}
        lprobs = torch.log_softmax(logits, dim=-1, **in_place)
        row_steps = self.steps.repeat_interleave(k)
        forcing = self.forced.size(1) and self.clock < self.forcing_until  # else Pin has nothing to do
        forced = self.forced.repeat_interleave(k, dim=0) if forcing else None
        pin = Pin(lprobs, row_steps, forced, cfg.given_prefix)
        constrained = constrain(
            lprobs, row_steps, self.history, cfg.min_len, cfg.banned, cfg.no_repeat_ngram, cfg.loop_guard, cfg.spelling
        )
        lprobs = pin.apply(constrained)
        guided = ConstrainedStep(self.phrases, self.phrase_lengths, self.progress, k) if self.progress.size(1) else None
        if guided:
            guided.forbid_early_end(lprobs)
        vocab = lprobs.size(-1)
        candidates = lprobs.add_(self.scores.view(-1, 1)).reshape(n_alive, k * vocab)  # lprobs is not read again
        top_scores, top_index = candidates.topk(min(2 * k, k * vocab), dim=1)  # (n, 2k)
        top_beam, top_token = top_index // vocab, top_index % vocab
        if guided:  # where a sentence has constraints, its 2k candidates in the order its beam takes them
            top_scores, top_beam, top_token, top_progress = guided.order(candidates, top_scores, top_beam, top_token)
        last_step = self.steps + 1 >= self.max_lens
        self._record_ended(top_scores[:, :k], top_beam[:, :k], top_token[:, :k], last_step)
        enough = self.ended.count >= (torch.where(guided.active, guided.ended_enough(cfg.nbest), k) if guided else k)
        self.done = self.done | enough | ~torch.isfinite(top_scores[:, 0]) | last_step
        # Continue with the k best candidates that did not end; a done sentence's score -inf.
        continuing = top_scores.masked_fill(top_token == EOS_ID, float("-inf"))
        next_scores, pick = continuing.topk(k, dim=1)  # (n, k)
        next_progress = self.progress
        if guided:  # the first k that go on, in that order
            position = -torch.arange(continuing.size(1), device=self.device, dtype=continuing.dtype)
            in_order = torch.where(continuing.isneginf(), continuing, position.expand_as(continuing))
            pick = torch.where(guided.active[:, None], in_order.topk(k, dim=1).indices, pick)
            next_scores = continuing.gather(1, pick)
            phrases = top_progress.size(2)
            next_progress = top_progress.gather(1, pick[:, :, None].expand(-1, -1, phrases)).view(-1, phrases)
        next_scores = next_scores.masked_fill(self.done[:, None], float("-inf"))
        next_beam, next_token = top_beam.gather(1, pick), top_token.gather(1, pick)
        now, self.clock = self.clock, self.clock + 1
        if now < self.next_read and not self.all_done.arrived():
            self.all_done.send(self.done)
            self._advance(next_beam, next_token, next_scores, next_progress)
            return []
        self.all_done.forget()  # a copy still on its way describes the rows before this read
        results, kept = self._read_done(now)
        if len(kept) == n_alive:
            self._advance(next_beam, next_token, next_scores, next_progress)
            return results
        if not kept:
            self.state, self.ids, self.next_read = None, [], self.clock + self.sync_every - 1
            return results
        keep = torch.tensor(kept, dtype=torch.long, device=self.device)
        rows = self._rows(keep, next_beam[keep])
        self.state.select(rows, keep)
        width = max(now - start for start in self.started) + 1  # the longest history still searching
        history = self.history.index_select(0, rows)[:, self.history.size(1) - (width - 1) :]
        self.history = torch.cat([history, next_token[keep].reshape(-1, 1)], dim=1)
        self.ended.keep(keep, width)
        self.tokens = self.history[:, -1]
        self.steps = self.steps[keep] + 1
        self.scores, self.max_lens, self.forced = next_scores[keep], self.max_lens[keep], self.forced[keep]
        self.done = self.done[keep]
        self.progress = next_progress.view(n_alive, k, -1)[keep].flatten(0, 1)
        self.phrases, self.phrase_lengths = self.phrases[keep], self.phrase_lengths[keep]
        return results

    def _rows(self, sentences: Tensor, beams: Tensor) -> Tensor:
        """The batch rows of each sentence's chosen beams (sentences (n,), beams (n, b)): (n * b,)."""
        return (sentences[:, None] * self.k + beams).flatten()

    def _advance(self, beams: Tensor, tokens: Tensor, scores: Tensor, progress: Tensor) -> None:
        """A step the host does not read: every sentence goes on, done ones frozen."""
        self.progress = progress
        rows = self._rows(torch.arange(len(self.ids), device=self.device), beams)
        self.state.select(rows, None)
        self.history = torch.cat([self.history.index_select(0, rows), tokens.reshape(-1, 1)], dim=1)
        self.tokens = self.history[:, -1]
        self.steps, self.scores = self.steps + 1, scores

    def _record_ended(self, scores: Tensor, beams: Tensor, tokens: Tensor, last_step: Tensor) -> None:
        """An </s> among a sentence's k best candidates ends a hypothesis; at the last step, all k do."""
        ends = ((tokens == EOS_ID) | last_step[:, None]) & torch.isfinite(scores) & ~self.done[:, None]
        rows = self._rows(torch.arange(tokens.size(0), device=self.device), beams)
        self.ended.make_room(self.history.size(1))
        self.ended.record(ends, scores, tokens, self.steps, self.history.index_select(0, rows))

    def _read_done(self, now: int) -> tuple[list[tuple], list[int]]:
        """The host reads which sentences are done and their hypotheses; returns (id, n-best) for
        each and the indices of the sentences that go on."""
        done = self.done.cpu()
        finished = done.nonzero().flatten()
        hypotheses = self.ended.read(finished.to(self.device), self.cfg.lenpen) if finished.numel() else []
        results = []
        for i, ended in zip(finished.tolist(), hypotheses):  # every sentence gets here once
            for hypothesis in ended:  # only one cut at the length limit can miss one
                hypothesis.missed_constraints = missed(hypothesis.tokens, self.phrase_lists[i])
            best = sorted(ended, key=lambda h: (-h.missed_constraints, h.score), reverse=True)
            results.append((self.ids[i], best[: self.cfg.nbest]))
        kept = (~done).nonzero().flatten().tolist()
        self.phrase_lists = [self.phrase_lists[i] for i in kept]
        self.ids = [self.ids[i] for i in kept]
        self.started = [self.started[i] for i in kept]
        self.last_steps = [self.last_steps[i] for i in kept]
        self.next_read = min([now + self.sync_every, *self.last_steps])
        return results, kept


def beam_search(
    model: Transformer,
    src: Tensor,
    cfg: SearchConfig,
    forced: Tensor | None = None,
    on_done: OnDone | None = None,
    constraints: list | None = None,
) -> list[list[Hypothesis]]:
    """Beam search for a batch of sources (B, S); returns the cfg.nbest best hypotheses per sentence.
    With `forced` (prefix_tensor), every hypothesis of a sentence starts with its prefix; with
    `constraints` (each sentence's target phrases, as ids), each contains them (mtkit.decoding.lexical).
    on_done(i, hypotheses) is called for each sentence as soon as its n-best is final."""
    stream = BeamStream(model, cfg, src.device)
    stream.add(src, list(range(src.size(0))), forced, constraints)
    results: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    while len(stream):
        for sentence, hypotheses in stream.step():
            results[sentence] = hypotheses
            if on_done:
                on_done(sentence, hypotheses)
    return results
