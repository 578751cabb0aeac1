"""The loop guard: no n-gram occurs in a translation more often than allowed, so a hypothesis
caught in a loop must leave it; below the bound, the search is what it was."""

from collections import Counter

import pytest
import torch
from conftest import tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

from mtkit.core.errors import MtkitError
from mtkit.data.batching import pad_batch
from mtkit.decoding.constraints import constrain
from mtkit.decoding.search import SearchConfig, search
from mtkit.text.tokenizer import EOS_ID

VOCAB = 8  # ids 4..7 are "words"; 0-3 are <pad>, <unk>, <s>, </s>
SOURCES = [[4, 5, 6], [7], [6, 6, 4, 5, 7], [5, 4]]


def ngram_counts(tokens: list[int], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def guard_bans(history: list[int], n: int, most: int, vocab: int) -> set[int]:
    """The reference: the tokens that would give some n-gram its (most + 1)-th occurrence."""
    return {t for t in range(vocab) if ngram_counts(history + [t], n)[tuple((history + [t])[-n:])] > most}


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.lists(st.integers(4, 9), min_size=0, max_size=24), min_size=1, max_size=4),
    n=st.integers(1, 5),
    most=st.integers(1, 3),
)
def test_the_guard_bans_exactly_the_tokens_that_pass_the_bound(rows, n, most):
    """Left-padded rows of any content: every other token keeps its log-probability."""
    vocab = 10
    width = max(len(r) for r in rows)
    history = torch.tensor([[0] * (width - len(r)) + r for r in rows], dtype=torch.long)
    lprobs = torch.randn(len(rows), vocab)
    expected = lprobs.clone()
    expected[:, 0] = expected[:, 2] = float("-inf")  # <pad>, <s>: always
    for i, row in enumerate(rows):
        for token in guard_bans(row, n, most, vocab) if len(row) >= n - 1 else ():
            expected[i, token] = float("-inf")
    steps = torch.tensor([len(r) for r in rows])
    got = constrain(lprobs.clone(), steps, history, 0, (), 0, (n, most))
    # <pad> is banned anyway, so left padding's n-grams (which end in <pad>) change nothing.
    assert torch.equal(got.isneginf(), expected.isneginf())
    assert torch.equal(got[~got.isneginf()], lprobs[~got.isneginf()])


def looping(model):
    """The model, made to prefer the loop 4 5 4 5 ... at every step, </s> next, other words last."""
    decode_step = model.decode_step

    def step(tokens, state):
        decode_step(tokens, state)  # the cache advances as usual
        logits = torch.full((tokens.numel(), VOCAB), -10.0)
        logits[torch.arange(tokens.numel()), torch.where(tokens == 4, 5, 4)] = 0.0
        logits[:, EOS_ID] = -3.0
        return logits

    model.decode_step = step
    return model


def test_a_loop_ends_at_the_bound_instead_of_the_length_limit():
    model, src = looping(tiny_model(vocab=VOCAB)), pad_batch(SOURCES, suffix=EOS_ID)
    unguarded = SearchConfig(beam=1, max_len_a=0, max_len_b=20, loop_ngram=0)
    for hyps in search(model, src, unguarded):  # the runaway: cut at the limit, no </s>
        assert hyps[0].tokens == [4, 5] * 10 and not hyps[0].ended
    guarded = SearchConfig(beam=1, max_len_a=0, max_len_b=20, loop_ngram=4, loop_repeats=2)
    for hyps in search(model, src, guarded):
        # 4 5 4 5 4 5 4 holds "4 5 4 5" and "5 4 5 4" twice each; a 5 more would be a third.
        assert hyps[0].tokens == [4, 5, 4, 5, 4, 5, 4] and hyps[0].ended


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_translation_passes_the_bound_and_below_it_nothing_changes(beam, seed):
    """Random models made to run to the limit (min_len): every translation keeps each bigram to
    two occurrences, and a bound that is never reached gives the search without the guard."""
    model, src = tiny_model(vocab=VOCAB, seed=seed), pad_batch(SOURCES, suffix=EOS_ID)
    cfg = dict(beam=beam, max_len_a=0, max_len_b=12, min_len=12, lenpen=0.6)
    for hyps in search(model, src, SearchConfig(**cfg, loop_ngram=2, loop_repeats=2)):
        assert len(hyps[0].tokens) == 12 and max(ngram_counts(hyps[0].tokens, 2).values()) <= 2
    unguarded = search(model, src, SearchConfig(**cfg, loop_ngram=0))
    unreachable = search(model, src, SearchConfig(**cfg, loop_ngram=2, loop_repeats=12))
    assert [[(h.tokens, h.score) for h in hyps] for hyps in unguarded] == [
        [(h.tokens, h.score) for h in hyps] for hyps in unreachable
    ]


def test_settings_are_checked():
    SearchConfig(loop_ngram=0, loop_repeats=0).validate()  # off: the repeats do not matter
    with pytest.raises(MtkitError, match="--loop-ngram -1"):
        SearchConfig(loop_ngram=-1).validate()
    with pytest.raises(MtkitError, match="--loop-repeats 0"):
        SearchConfig(loop_ngram=4, loop_repeats=0).validate()
