"""What a search may not produce, as -inf log-probabilities: <pad> and <s>, </s> before the least
length, banned id sequences (a tokenizer's line breaks), repeated n-grams, and loops.

The loop guard lets an n-gram occur a bounded number of times in a translation: a token that
would make it occur once more is banned. Legitimate repeats ("a man and a man") stay possible,
but a hypothesis stuck in a loop ("-S-S-S-S-...") must leave it, whatever the loop's period.

Each step applies them to every row at once, and none waits for the device: on a GPU, a read of a
device value on the host stalls the search until every queued kernel has run.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from mtkit.text.tokenizer import BOS_ID, EOS_ID, PAD_ID


def constrain(
    lprobs: Tensor,
    steps: Tensor,
    history: Tensor,
    min_len: int,
    banned: tuple[tuple[int, ...], ...],
    no_repeat: int,
    loop_guard: tuple[int, int] = (0, 0),
) -> Tensor:
    """Forbid <pad>/<s>, </s> before min_len, the banned sequences, repeated n-grams of size
    no_repeat (0: allowed), and with loop_guard (n, most) an n-gram's occurrence past its most-th
    (n = 0: no guard); steps: each row's tokens so far; history: each row's tokens (the last ones:
    rows may be left-padded)."""
    lprobs[:, PAD_ID] = float("-inf")
    lprobs[:, BOS_ID] = float("-inf")
    lprobs[:, EOS_ID] = lprobs[:, EOS_ID].masked_fill(steps < min_len, float("-inf"))
    if banned:
        lprobs = _ban_sequences(lprobs, history, banned)
    if no_repeat and history.size(1) >= no_repeat:
        lprobs = _ban_repeated_ngrams(lprobs, history, no_repeat)
    loop_n, most = loop_guard
    if loop_n and history.size(1) >= loop_n + most - 1:  # the shortest history with `most` of one n-gram
        lprobs = _ban_ngrams_past(lprobs, history, loop_n, most)
    return lprobs


def _ban_sequences(lprobs: Tensor, history: Tensor, banned: tuple[tuple[int, ...], ...]) -> Tensor:
    """Forbid the last token of every banned sequence whose other tokens end a row's history."""
    singles, longer = _banned_tensors(banned, lprobs.device)
    lprobs.index_fill_(1, singles, float("-inf"))
    for before, last in longer:
        if history.size(1) >= before.numel():
            ends_with = (history[:, history.size(1) - before.numel() :] == before).all(dim=1)
            lprobs[:, last] = lprobs[:, last].masked_fill(ends_with, float("-inf"))  # no wait for the device
    return lprobs


@functools.lru_cache(maxsize=8)
def _banned_tensors(banned: tuple[tuple[int, ...], ...], device: torch.device) -> tuple[Tensor, list]:
    """The banned single tokens, and (earlier tokens, last token) of the longer sequences, on `device` once."""
    singles = torch.tensor([sequence[0] for sequence in banned if len(sequence) == 1], dtype=torch.long)
    longer = [(torch.tensor(sequence[:-1], device=device), sequence[-1]) for sequence in banned if len(sequence) > 1]
    return singles.to(device), longer


def _completions(history: Tensor, n: int, spare: int) -> Tensor:
    """(N, t - n + 1): the token that followed each earlier occurrence of the row's last n - 1
    tokens, where that occurrence is the start of an n-gram of the history; `spare` elsewhere."""
    ngrams = history.unfold(1, n, 1)  # (N, t - n + 1, n)
    prefix = history[:, history.size(1) - n + 1 :]  # the last n - 1 tokens, (N, n - 1)
    matches = (ngrams[:, :, :-1] == prefix[:, None, :]).all(dim=2)  # (N, t - n + 1)
    return ngrams[:, :, -1].masked_fill(~matches, spare)


def _ban_repeated_ngrams(lprobs: Tensor, history: Tensor, n: int) -> Tensor:
    """Forbid every token that would complete an n-gram already present in the row's history."""
    # Scattered into a spare column where there is no match: no count of the matches to wait for.
    tokens = _completions(history, n, lprobs.size(1))
    return F.pad(lprobs, (0, 1)).scatter_(1, tokens, float("-inf"))[:, :-1]


def _ban_ngrams_past(lprobs: Tensor, history: Tensor, n: int, most: int) -> Tensor:
    """Forbid every token that would complete an n-gram already present `most` times in the row's
    history (occurrences may overlap: "a a a a" holds "a a a" twice)."""
    tokens = _completions(history, n, lprobs.size(1))
    counts = lprobs.new_zeros(lprobs.size(0), lprobs.size(1) + 1).scatter_add_(
        1, tokens, torch.ones_like(lprobs[:, :1]).expand_as(tokens)
    )
    return lprobs.masked_fill_(counts[:, :-1] >= most, float("-inf"))
