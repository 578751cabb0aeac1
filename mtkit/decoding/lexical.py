"""Positive lexical constraints: target phrases that every translation of a sentence must contain.

Beam search with dynamic beam allocation (Post & Vilar, 2018), in the batched form of Hu et al.
(2019) that fairseq's --constraints also follows. Each hypothesis tracks, for every phrase of its
sentence, how many of the phrase's tokens it has just produced in a row (the phrase's length: met).
A step's candidates are the usual best ones, each hypothesis' best continuation, and each
hypothesis' next token of every phrase it has not met; a candidate's bank is the number of
constraint tokens it holds. The beam is then shared among the banks in stripes: the best of every
bank first, from the fullest bank down, then the second best of every bank, and so on. So the
search keeps good unconstrained continuations beside hypotheses that have placed the phrases,
and none of them is crowded out by the other. </s> is forbidden until every phrase is met; an </s>
among the k best of its bank ends its hypothesis as a plain beam search would, and a sentence is
done once half its beam has ended (ConstrainedStep.ended_enough).

Phrases are unordered and met where they first appear whole; a phrase that breaks off starts over
(from its first token, if the token that broke it is that). Everything runs on the device, for every
sentence of a batch at once, with no read on the host.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from mtkit.core.errors import MtkitError
from mtkit.text.tokenizer import EOS_ID


def phrase_tensors(constraints: Sequence[Sequence[Sequence[int]]], device: torch.device) -> tuple[Tensor, Tensor]:
    """Each sentence's phrases (token ids) as (phrases (B, P, L), -1 after a phrase's end; lengths (B, P),
    0 for the padding phrases of a sentence with fewer than P)."""
    most = max((len(sentence) for sentence in constraints), default=0)
    longest = max((len(phrase) for sentence in constraints for phrase in sentence), default=0)
    phrases = torch.full((len(constraints), most, max(1, longest)), -1, dtype=torch.long)
    lengths = torch.zeros(len(constraints), most, dtype=torch.long)
    for i, sentence in enumerate(constraints):
        for p, phrase in enumerate(sentence):
            if not phrase:
                raise MtkitError("a constraint holds no tokens")
            phrases[i, p, : len(phrase)] = torch.tensor(phrase, dtype=torch.long)
            lengths[i, p] = len(phrase)
    return phrases.to(device), lengths.to(device)


def pad_phrases(phrases: Tensor, lengths: Tensor, count: int, longest: int) -> tuple[Tensor, Tensor]:
    """The same phrases, padded to `count` a sentence of up to `longest` tokens."""
    phrases = torch.nn.functional.pad(phrases, (0, longest - phrases.size(2), 0, count - phrases.size(1)), value=-1)
    return phrases, torch.nn.functional.pad(lengths, (0, count - lengths.size(1)))


def contains(tokens: Sequence[int], phrase: Sequence[int]) -> bool:
    """Whether the phrase occurs in the tokens, in a row."""
    n = len(phrase)
    return any(list(tokens[i : i + n]) == list(phrase) for i in range(len(tokens) - n + 1))


def missed(tokens: Sequence[int], phrases: Sequence[Sequence[int]]) -> int:
    """How many of the phrases the tokens lack."""
    return sum(not contains(tokens, phrase) for phrase in phrases)


class ConstrainedStep:
    """One step's candidates under the constraints, in the order the beam takes them.

    progress (n * k, P): each hypothesis' tokens of each phrase in a row (= length: met); phrases and
    lengths: the n sentences' (see phrase_tensors)."""

    def __init__(self, phrases: Tensor, lengths: Tensor, progress: Tensor, k: int):
        self.phrases, self.lengths, self.progress, self.k = phrases, lengths, progress, k
        self.active = (lengths > 0).any(dim=1)  # (n,): the sentences with constraints

    def ended_enough(self, nbest: int) -> int:
        """The ended hypotheses that finish a sentence with constraints: half the beam (and the n-best),
        not all of it. Only hypotheses that met every phrase end, a few a step: waiting for k of them
        made the searches of Multi30k's sentences about 1.4x as long, for the same BLEU."""
        return max(nbest, (self.k + 1) // 2)

    def forbid_early_end(self, lprobs: Tensor) -> None:
        """No </s> for a hypothesis that has not met every phrase (lprobs: (n * k, V), in place)."""
        rows_lengths = self.lengths.repeat_interleave(self.k, dim=0)
        unmet = (self.progress < rows_lengths).any(dim=1)
        lprobs[:, EOS_ID] = lprobs[:, EOS_ID].masked_fill(unmet, float("-inf"))

    def order(
        self, candidates: Tensor, top_scores: Tensor, top_beam: Tensor, top_token: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The 2k candidates each sentence's beam takes from, first first: (scores, beams, tokens,
        progress (n, 2k, P)). candidates: (n, k * V) scores of every continuation, and the search's
        own 2k best of them (where a sentence has no constraints, those in their order)."""
        n, k = top_scores.size(0), self.k
        vocab = candidates.size(1) // k
        per_row = candidates.view(n * k, vocab)
        best_score, best_token = per_row.max(dim=1)  # </s> too, where a hypothesis has met every phrase
        next_token = self._next_phrase_tokens()  # (n * k, P)
        phrase_score = per_row.gather(1, next_token.clamp(min=0)).masked_fill(next_token < 0, float("-inf"))
        beams = torch.arange(k, device=candidates.device).repeat(n)
        scores = torch.cat([top_scores, best_score.view(n, k), phrase_score.view(n, -1)], dim=1)
        beam = torch.cat([top_beam, beams.view(n, k), beams[:, None].expand_as(next_token).reshape(n, -1)], dim=1)
        token = torch.cat([top_token, best_token.view(n, k), next_token.clamp(min=0).view(n, -1)], dim=1)
        scores = _without_duplicates(scores, beam * vocab + token)
        progress = self._progress_after(beam, token)  # (n, M, P)
        bank = torch.minimum(progress, self.lengths[:, None]).sum(dim=2)
        picked = _stripes(scores, bank, token == EOS_ID, k, self.phrases.size(1) * self.phrases.size(2))[:, : 2 * k]
        chosen = (scores.gather(1, picked), beam.gather(1, picked), token.gather(1, picked))
        chosen_progress = progress.gather(1, picked[:, :, None].expand(-1, -1, progress.size(2)))
        plain = (top_scores, top_beam, top_token, torch.zeros_like(chosen_progress))
        active = self.active[:, None]
        return tuple(
            torch.where(active[..., None] if mine.dim() == 3 else active, mine, theirs)
            for mine, theirs in zip((*chosen, chosen_progress), plain)
        )

    def _next_phrase_tokens(self) -> Tensor:
        """Each hypothesis' next token of each phrase it has not met (-1 for a met one)."""
        phrases = self.phrases.repeat_interleave(self.k, dim=0)  # (n * k, P, L)
        lengths = self.lengths.repeat_interleave(self.k, dim=0)
        index = self.progress.clamp(max=phrases.size(2) - 1)[:, :, None]
        return phrases.gather(2, index).squeeze(2).masked_fill(self.progress >= lengths, -1)

    def _progress_after(self, beam: Tensor, token: Tensor) -> Tensor:
        """(n, M, P): each candidate's progress through each phrase, its hypothesis' and one token more."""
        n, m = beam.shape
        before = self.progress.view(n, self.k, -1).gather(1, beam[:, :, None].expand(n, m, self.progress.size(1)))
        lengths = self.lengths[:, None].expand_as(before)
        expected = self.phrases[:, None].expand(n, m, *self.phrases.shape[1:])
        expected = expected.gather(3, before.clamp(max=self.phrases.size(2) - 1)[..., None]).squeeze(3)
        met, token = before >= lengths, token[:, :, None]
        restart = (self.phrases[:, None, :, 0] == token).long()
        return torch.where(met, lengths, torch.where(expected == token, before + 1, restart))


def _without_duplicates(scores: Tensor, keys: Tensor) -> Tensor:
    """scores with -inf for every candidate after the first of the same key (hypothesis and token)."""
    sorted_keys, order = keys.sort(dim=1, stable=True)
    repeat = torch.zeros_like(sorted_keys, dtype=torch.bool)
    repeat[:, 1:] = sorted_keys[:, 1:] == sorted_keys[:, :-1]
    duplicate = torch.zeros_like(repeat).scatter_(1, order, repeat)
    return scores.masked_fill(duplicate, float("-inf"))


def _stripes(scores: Tensor, bank: Tensor, ends: Tensor, k: int, most: int) -> Tensor:
    """Candidate indices (n, M) in the order the beam takes them: first the </s> candidates (`ends`)
    among the k best of their bank (that of the hypotheses that met every phrase), which end as a
    plain beam search would end them; then the best of each bank, fullest bank first, then the second
    best of each, ...; candidates scoring -inf last. most: no bank is larger."""
    bank = bank.masked_fill(scores.isneginf(), -1)
    by_score = scores.argsort(dim=1, descending=True, stable=True)
    by_bank = bank.gather(1, by_score).argsort(dim=1, descending=True, stable=True)
    ranked = by_score.gather(1, by_bank)  # by bank, then by score
    banks = bank.gather(1, ranked)
    position = torch.arange(banks.size(1), device=banks.device).expand_as(banks)
    starts = torch.ones_like(banks, dtype=torch.bool)
    starts[:, 1:] = banks[:, 1:] != banks[:, :-1]
    rank_in_bank = position - torch.where(starts, position, 0).cummax(dim=1).values
    top = banks.max(dim=1, keepdim=True).values
    key = rank_in_bank * (most + 1) + (top - banks)
    key = torch.where(ends.gather(1, ranked) & (rank_in_bank < k) & (banks >= 0), rank_in_bank - k, key)
    key = key.masked_fill(banks < 0, torch.iinfo(torch.long).max)
    return ranked.gather(1, key.argsort(dim=1, stable=True))
