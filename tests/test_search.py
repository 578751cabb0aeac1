import itertools

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_model

from mtkit.core.errors import MtkitError
from mtkit.data.batching import pad_batch
from mtkit.decoding.beam import BeamStream, beam_search
from mtkit.decoding.search import (
    MAX_OUTPUT_TOKENS,
    SearchConfig,
    greedy_search,
    length_penalty,
    max_output_length,
    max_output_lengths,
    prefix_tensor,
    search,
)
from mtkit.text.tokenizer import BOS_ID, EOS_ID, UNK_ID

VOCAB = 8  # ids 4..7 are "words"; 0-3 are <pad>, <unk>, <s>, </s>
SOURCES = [[4, 5, 6], [7], [6, 6, 4, 5, 7], [5, 4]]


@torch.no_grad()
def forced_log_probs(model, src_ids, outputs, with_eos=True):
    """The model's own log-probability of each output, followed by </s> unless with_eos is False
    (teacher forcing), in one batch."""
    src = torch.tensor([src_ids + [EOS_ID]] * len(outputs))
    tgt_in = pad_batch(outputs, prefix=BOS_ID)
    tgt_out = pad_batch(outputs, suffix=EOS_ID)
    if not with_eos:
        tgt_out = tgt_out.masked_fill(tgt_out == EOS_ID, 0)
    lprobs = F.log_softmax(model(src, tgt_in).double(), dim=-1).gather(2, tgt_out[:, :, None]).squeeze(2)
    return lprobs.masked_fill(tgt_out == 0, 0.0).sum(dim=1).tolist()


def forced_log_prob(model, src_ids, out_ids, with_eos=True):
    return forced_log_probs(model, src_ids, [out_ids], with_eos)[0]


@pytest.fixture(params=[0, 1, 2])
def model(request):
    return tiny_model(vocab=VOCAB, seed=request.param)


def test_beam_one_equals_greedy(model):
    src = pad_batch(SOURCES, suffix=EOS_ID)
    cfg = SearchConfig(beam=1, max_len_a=1.5, max_len_b=3, lenpen=0.6)
    greedy, beam = greedy_search(model, src, cfg), beam_search(model, src, cfg)
    assert [h[0].tokens for h in greedy] == [h[0].tokens for h in beam]
    assert [h[0].log_prob for h in greedy] == pytest.approx([h[0].log_prob for h in beam], abs=1e-5)


@pytest.mark.parametrize("lenpen", [0.0, 0.6, 1.0])
def test_large_beam_finds_the_exhaustive_optimum(model, lenpen):
    """Within the limit of 3 steps, a translation is 1-2 words and </s>, or 3 words cut at the limit
    (scored without </s>): beam 64 covers them all, so it finds the best of the lot."""
    max_len = 3
    cfg = SearchConfig(beam=64, lenpen=lenpen, max_len_a=0, max_len_b=max_len, min_len=1)
    found = search(model, pad_batch(SOURCES, suffix=EOS_ID), cfg)
    words = [UNK_ID, 4, 5, 6, 7]  # everything but <pad>, <s> and </s>
    for src_ids, hyps in zip(SOURCES, found):
        ended = [list(seq) for n in range(1, max_len) for seq in itertools.product(words, repeat=n)]
        cut = [list(seq) for seq in itertools.product(words, repeat=max_len)]
        scored = [
            (lp / length_penalty(len(seq) + 1, lenpen), seq, True)
            for lp, seq in zip(forced_log_probs(model, src_ids, ended), ended)
        ] + [
            (lp / length_penalty(max_len, lenpen), seq, False)
            for lp, seq in zip(forced_log_probs(model, src_ids, cut, with_eos=False), cut)
        ]
        best_score, best_seq, best_ended = max(scored)
        assert (hyps[0].tokens, hyps[0].ended) == (best_seq, best_ended)
        assert hyps[0].score == pytest.approx(best_score, abs=1e-4)


def test_batched_equals_one_at_a_time(model):
    cfg = SearchConfig(beam=4, max_len_a=1.0, max_len_b=4, lenpen=0.6, nbest=2)
    batched = search(model, pad_batch(SOURCES, suffix=EOS_ID), cfg)
    for src_ids, hyps in zip(SOURCES, batched):
        alone = search(model, pad_batch([src_ids], suffix=EOS_ID), cfg)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-5)


def test_cached_greedy_equals_recomputing_everything(model):
    cfg = SearchConfig(beam=1, max_len_a=0, max_len_b=6, min_len=0, loop_ngram=0)
    for src_ids, hyps in zip(SOURCES, greedy_search(model, pad_batch(SOURCES, suffix=EOS_ID), cfg)):
        src = torch.tensor([src_ids + [EOS_ID]])
        out: list[int] = []
        while len(out) <= 6:
            lprobs = F.log_softmax(model(src, torch.tensor([[BOS_ID] + out]))[0, -1], dim=-1)
            lprobs[[0, BOS_ID]] = float("-inf")
            if len(out) == 6:
                break
            token = int(lprobs.argmax())
            if token == EOS_ID:
                break
            out.append(token)
        assert hyps[0].tokens == out


def test_nbest_is_sorted_and_scores_are_forced_log_probs(model):
    cfg = SearchConfig(beam=5, nbest=5, lenpen=0.0, max_len_a=0, max_len_b=4)
    for src_ids, hyps in zip(SOURCES, search(model, pad_batch(SOURCES, suffix=EOS_ID), cfg)):
        assert len(hyps) == 5
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == 5
        for hyp in hyps:
            assert len(hyp.tokens) <= 4 and hyp.ended == (len(hyp.tokens) < 4)  # 4 tokens: cut at the limit
            assert hyp.log_prob == pytest.approx(forced_log_prob(model, src_ids, hyp.tokens, hyp.ended), abs=1e-4)
            assert hyp.score == hyp.log_prob


def test_length_limits(model):
    src = pad_batch(SOURCES, suffix=EOS_ID)
    for beam in (1, 3):
        for hyps, src_ids in zip(
            search(model, src, SearchConfig(beam=beam, max_len_a=0.5, max_len_b=1, min_len=2)), SOURCES
        ):
            limit = max(int(0.5 * len(src_ids) + 1), 1)
            assert min(2, limit) <= len(hyps[0].tokens) <= limit


def test_no_repeat_ngram(model):
    cfg = SearchConfig(beam=3, max_len_a=0, max_len_b=12, min_len=12, no_repeat_ngram=2)
    for hyps in search(model, pad_batch(SOURCES, suffix=EOS_ID), cfg):
        tokens = hyps[0].tokens
        bigrams = list(zip(tokens, tokens[1:]))
        assert len(tokens) == 12 and len(bigrams) == len(set(bigrams))


def test_sampling_is_seeded_and_top_k_one_is_greedy(model):
    src = pad_batch(SOURCES, suffix=EOS_ID)
    greedy = search(model, src, SearchConfig(beam=1, max_len_b=5))
    top1 = search(model, src, SearchConfig(beam=1, max_len_b=5, sample=True, top_k=1, seed=3))
    assert [h[0].tokens for h in greedy] == [h[0].tokens for h in top1]
    draws = [
        search(model, src, SearchConfig(beam=1, max_len_b=5, sample=True, temperature=2.0, seed=s))
        for s in (7, 7, 8, 9)
    ]
    as_tokens = [[h[0].tokens for h in d] for d in draws]
    assert as_tokens[0] == as_tokens[1]  # same seed, same draw
    assert as_tokens[0] != as_tokens[2] or as_tokens[0] != as_tokens[3]  # other seeds draw otherwise


def test_invalid_settings():
    with pytest.raises(MtkitError, match="--beam 0"):
        SearchConfig(beam=0).validate()
    with pytest.raises(MtkitError, match="--nbest"):
        SearchConfig(beam=2, nbest=3).validate()


def test_length_limit_is_computed_in_double_precision_for_every_engine():
    # In float32, 0.7 x 10 is 6.9999998 and would truncate to 6; the limit is 7 for every engine.
    cfg = SearchConfig(max_len_a=0.7, max_len_b=0)
    src = pad_batch([[4] * 10, [5] * 3, []], suffix=EOS_ID)
    assert max_output_length(10, cfg) == 7
    assert max_output_lengths(src, cfg).tolist() == [7, 2, 1]  # 0.7 x 3 = 2.1; at least 1


def test_length_limit_is_capped_for_every_engine():
    cfg = SearchConfig(max_len_a=1.0, max_len_b=50)
    assert max_output_length(MAX_OUTPUT_TOKENS - 50, cfg) == MAX_OUTPUT_TOKENS
    assert max_output_length(MAX_OUTPUT_TOKENS, cfg) == MAX_OUTPUT_TOKENS == 1024


@pytest.mark.parametrize("beam", [1, 3])
def test_each_sentence_is_reported_once_as_soon_as_it_is_finished(model, beam):
    """on_done gets every sentence exactly once, with what the search returns for it, at the step
    where it finished: the one-word source (a length limit of 2 steps) before the search ends."""
    cfg = SearchConfig(beam=beam, max_len_a=1.0, max_len_b=1, lenpen=0.6, nbest=beam)
    steps, reported = [0], {}
    decode_step = model.decode_step

    def counting_step(tokens, state):
        steps[0] += 1
        return decode_step(tokens, state)

    def on_done(i, hyps):
        assert i not in reported
        reported[i] = (steps[0], hyps)

    model.decode_step = counting_step
    results = search(model, pad_batch(SOURCES, suffix=EOS_ID), cfg, on_done=on_done)
    assert sorted(reported) == list(range(len(SOURCES)))
    assert [reported[i][1] for i in range(len(SOURCES))] == results
    assert reported[1][0] <= 2 < steps[0]  # SOURCES[1] has one subword: at most 2 steps
    assert all(reported[i][0] <= max_output_length(len(s), cfg) for i, s in enumerate(SOURCES))


@pytest.mark.parametrize(
    "cfg",
    [
        SearchConfig(beam=4, nbest=2, max_len_a=1.0, max_len_b=4, lenpen=0.6),
        SearchConfig(beam=1, max_len_a=1.0, max_len_b=4, lenpen=0.6),
        SearchConfig(beam=3, nbest=3, max_len_a=0.5, max_len_b=5, min_len=3, no_repeat_ngram=2),
    ],
)
def test_sentences_that_join_a_running_search_finish_as_they_would_alone(model, cfg):
    """Sentences added between steps (one by one, two before the first step and two at once later,
    the same source twice) each get the hypotheses a search of that sentence alone gives; one of
    them has a target prefix."""
    prefix = {"late": [6, 5]}
    schedule = {0: [("a", 0), ("z", 3)], 1: [("b", 1)], 3: [("c", 2), ("d", 3)], 5: [("late", 0)], 6: [("e", 2)]}
    stream, results, step = BeamStream(model, cfg, torch.device("cpu")), {}, 0
    while step <= max(schedule) or len(stream):
        for name, source in schedule.get(step, []):
            forced = prefix_tensor([prefix.get(name, [])], 1, torch.device("cpu"))
            stream.add(pad_batch([SOURCES[source]], suffix=EOS_ID), [name], forced)
        results.update(stream.step() if len(stream) else [])
        step += 1
    for joined in schedule.values():
        for name, source in joined:
            src = pad_batch([SOURCES[source]], suffix=EOS_ID)
            alone = search(model, src, cfg, prefixes=[prefix.get(name, [])])[0]
            assert [(h.tokens, h.ended) for h in results[name]] == [(h.tokens, h.ended) for h in alone]
            assert [h.score for h in results[name]] == pytest.approx([h.score for h in alone], abs=1e-5)


def test_a_search_that_sentences_keep_joining_keeps_a_bounded_cache(model):
    """A new sentence every step for 60 steps: positions that no sentence still searching can see
    are dropped, so the cache never holds more than the longest search needs."""
    cfg = SearchConfig(beam=2, max_len_a=0, max_len_b=4)
    stream, finished, longest, ended = BeamStream(model, cfg, torch.device("cpu")), [], 0, 0
    for step in range(60):
        stream.add(pad_batch([SOURCES[step % len(SOURCES)]], suffix=EOS_ID), [step])
        finished += [name for name, _ in stream.step()]
        longest = max(longest, stream.state.step if stream.state else 0, stream.history.size(1))
        ended = max(ended, stream.ended.history.size(2))  # the ended hypotheses' histories
    assert longest <= 4  # a sentence takes at most 4 steps
    assert ended <= 4 + 16  # room is made 16 columns at a time
    while len(stream):
        finished += [name for name, _ in stream.step()]
    assert sorted(finished) == list(range(60))
