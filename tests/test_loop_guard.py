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
from mtkit.decoding.constraints import SpellingGuard, constrain
from mtkit.decoding.search import SearchConfig, search
from mtkit.text.tokenizer import EOS_ID, PAD_ID

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


def spelling_bans_by_mask(guard: SpellingGuard, lprobs: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
    """The reference: the spelling guard as a mask over the whole vocabulary for every row (the way
    it was first written; the guard now scatters a few bans per row, and must ban the same)."""
    vocab = min(len(guard.first), lprobs.size(1))
    first, lead, last, trail, uniform, inner, word_start, counted = (
        torch.tensor(column[:vocab]) for column in (guard.first, guard.lead, guard.last, guard.trail, guard.uniform,
                                                    guard.inner, guard.word_start, guard.counted)
    )  # fmt: skip
    lprobs[:, :vocab] = lprobs[:, :vocab].masked_fill(inner > guard.most_letters, float("-inf"))
    recent = history[:, -(guard.most_letters + 1) :].clamp(max=vocab - 1)
    letter, run, going = last[recent[:, -1]], trail[recent[:, -1]], uniform[recent[:, -1]]
    for k in range(2, recent.size(1) + 1):
        token = recent[:, -k]
        same = going & (last[token] == letter)
        run, going = run + torch.where(same, trail[token], 0), same & uniform[token]
    too_long = (first[None, :] == letter[:, None]) & (letter[:, None] >= 0) & (run[:, None] + lead > guard.most_letters)
    lprobs[:, :vocab] = lprobs[:, :vocab].masked_fill(too_long, float("-inf"))
    word = history[:, -guard.window :].clamp(max=vocab - 1)
    starts = word_start[word].long()
    in_word = (starts.flip(1).cumsum(1).flip(1) - starts == 0) & counted[word]
    counts = torch.zeros(word.size(0), vocab + 1, dtype=torch.long).scatter_add_(
        1, torch.where(in_word, word, vocab), torch.ones_like(word)
    )
    repeated = (counts[:, :vocab] >= guard.most_subwords) & counted[None, :]
    lprobs[:, :vocab] = lprobs[:, :vocab].masked_fill(repeated, float("-inf"))
    return lprobs


PIECES = ["a", "aa", "aaa", "aaaa", "b", "bb", "ab", "ba", "A", "é", "ée", "1", "-", "ß", "ss", "bab"]


@settings(max_examples=300, deadline=None)
@given(
    vocabulary=st.lists(
        st.tuples(st.booleans(), st.lists(st.sampled_from(PIECES), min_size=1, max_size=3)).map(
            lambda token: ("▁" if token[0] else "") + "".join(token[1])
        ),
        min_size=1,
        max_size=30,
    ),
    rows=st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=24), min_size=1, max_size=4),
    scored=st.integers(0, 6),
)
def test_the_spelling_guard_bans_what_the_whole_vocabulary_mask_bans(vocabulary, rows, scored):
    """Any vocabulary of letters, runs, word starts, marks and specials, any left-padded histories
    (ids past the vocabulary included), and a model that may score fewer tokens than the tokenizer has."""
    vocabulary = ["<pad>", "<unk>", "<s>", "</s>", "<0xC3>"] + vocabulary
    guard = SpellingGuard.of(vocabulary)
    width = max(len(r) for r in rows)
    history = torch.tensor([[PAD_ID] * (width - len(r)) + r for r in rows], dtype=torch.long)
    lprobs = torch.randn(len(rows), max(5, len(vocabulary) - scored))
    lprobs[:, PAD_ID] = float("-inf")  # as constrain leaves it for the guard
    expected = spelling_bans_by_mask(guard, lprobs.clone(), history.clamp(max=lprobs.size(1) - 1))
    assert torch.equal(guard.apply(lprobs.clone(), history.clamp(max=lprobs.size(1) - 1)), expected)
