"""Beam search with its bookkeeping on the device (mtkit.decoding.beam): a stream that lets the host read only
every few steps finds what one that reads every step finds, and a step between reads asks the
device nothing."""

import pytest
import torch
from conftest import random_sources, run_joining_stream, tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.overrides import TorchFunctionMode

from mtkit.data.batching import pad_batch
from mtkit.decoding.beam import BeamStream
from mtkit.decoding.cuda_graphs import GraphedDecoder
from mtkit.decoding.ensemble import Ensemble
from mtkit.decoding.search import SearchConfig, max_output_length, prefix_tensor
from mtkit.text.tokenizer import EOS_ID

VOCAB = 40
CPU = torch.device("cpu")
# What makes the host wait for a GPU: copies to the host, and operations whose result's size or
# Python value depends on the data.
HOST_READS = {"tolist", "item", "cpu", "numpy", "nonzero", "__bool__", "__int__", "__float__", "__index__"}


class DeviceReads(TorchFunctionMode):
    """Records every host read of a tensor made inside it (boolean-mask indexing included)."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        boolean_index = name == "__getitem__" and isinstance(args[1], torch.Tensor) and args[1].dtype == torch.bool
        if name in HOST_READS or boolean_index:
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def model():
    return tiny_model(vocab=VOCAB, seed=1)


def sources(lengths: list[int], seed: int) -> list[list[int]]:
    return random_sources(lengths, VOCAB, seed)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    joins=st.lists(st.tuples(st.integers(0, 30), st.integers(1, 12)), min_size=1, max_size=8),
    beam=st.integers(1, 4),
    sync_every=st.integers(2, 9),
    constrained=st.booleans(),
    graphed=st.booleans(),
    seed=st.integers(0, 20),
)
def test_reading_every_few_steps_finds_what_reading_every_step_finds(
    model, joins, beam, sync_every, constrained, graphed, seed
):
    """Sentences joining at drawn steps, one with a target prefix, with or without a minimum length
    and n-gram bans, in the dynamic cache or the static buffers: every sentence gets the n-best of
    a stream that reads every step, and is returned at most sync_every - 1 steps later."""
    extra = {"min_len": 3, "no_repeat_ngram": 2, "loop_ngram": 2, "loop_repeats": 1} if constrained else {}
    cfg = SearchConfig(beam=beam, nbest=beam, max_len_a=1.0, max_len_b=6, lenpen=0.6, **extra)
    srcs = sources([length for _, length in joins], seed)
    schedule: dict[int, list] = {}
    for name, ((step, _), src_ids) in enumerate(zip(joins, srcs)):
        schedule.setdefault(step, []).append((name, src_ids))
    prefixes = {0: srcs[0][:2]}
    decoder = GraphedDecoder(model, capture=False) if graphed else model
    every_step = run_joining_stream(decoder, cfg, schedule, prefixes, sync_every=1)
    deferred = run_joining_stream(decoder, cfg, schedule, prefixes, sync_every=sync_every)
    assert sorted(deferred) == sorted(every_step) == list(range(len(joins)))
    for name, (hyps, step) in every_step.items():
        found, returned = deferred[name]
        assert [(h.tokens, h.ended) for h in found] == [(h.tokens, h.ended) for h in hyps]
        assert [h.score for h in found] == pytest.approx([h.score for h in hyps], abs=1e-5)
        assert [h.log_prob for h in found] == pytest.approx([h.log_prob for h in hyps], abs=1e-5)
        assert step <= returned < step + sync_every


@pytest.mark.parametrize("graphed", [False, True])
def test_the_host_reads_only_every_few_steps_and_at_length_limits(model, graphed):
    """With sync_every 4, the only steps that read the device are every fourth and those where a
    sentence takes its last step (its length limit), with a prefix, bans and a sentence joining
    (no </s> before 100 tokens: every sentence runs to its limit)."""
    cfg = SearchConfig(beam=3, max_len_a=1.0, max_len_b=9, min_len=100, no_repeat_ngram=2, banned=((5, 6),))
    decoder = GraphedDecoder(model, capture=False) if graphed else model
    stream = BeamStream(decoder, cfg, CPU, sync_every=4)
    first, late = sources([4, 3], seed=3)
    stream.add(pad_batch([first], suffix=EOS_ID), ["first"], prefix_tensor([first[:2]], 1, CPU))
    limits = {"first": max_output_length(4, cfg) - 1}  # the step of its last token
    reading, returned, step = [], {}, 0
    while len(stream):
        if step == 2:
            stream.add(pad_batch([late], suffix=EOS_ID), ["late"])
            limits["late"] = 2 + max_output_length(3, cfg) - 1
        with DeviceReads() as reads:
            returned.update((name, step) for name, _ in stream.step())
        if reads.seen:
            reading.append(step)
        step += 1
    assert limits == {"first": 12, "late": 13}
    assert reading == [3, 7, 11, 12, 13]
    assert returned == limits


def test_steps_replayed_as_cuda_graphs_read_every_eighth_step_and_others_every_step(model):
    cuda, graphed = torch.device("cuda"), GraphedDecoder(model, capture=False)
    assert BeamStream(graphed, SearchConfig(), cuda).sync_every == 8
    assert BeamStream(Ensemble([graphed, graphed]), SearchConfig(), cuda).sync_every == 8
    assert BeamStream(model, SearchConfig(), cuda).sync_every == 1  # eager steps
    assert BeamStream(Ensemble([graphed, model]), SearchConfig(), cuda).sync_every == 1
    assert BeamStream(graphed, SearchConfig(), CPU).sync_every == 1
    assert BeamStream(model, SearchConfig(), CPU, sync_every=3).sync_every == 3


class SignalAt:
    """Stands in for a GPU's AllDoneSignal: says "every sentence done" at the given steps."""

    def __init__(self, stream: BeamStream, steps: set[int]):
        self.stream, self.steps = stream, steps

    def send(self, done) -> None:
        pass

    def forget(self) -> None:
        pass

    def arrived(self) -> bool:
        return self.stream.clock - 1 in self.steps  # the step being taken


def test_the_host_reads_when_the_signal_says_every_sentence_is_done(model):
    """Between the every-few-steps reads, the host also reads at a step where the copy of "every
    sentence done" has arrived (a GPU's, sent behind the steps)."""
    cfg = SearchConfig(beam=2, max_len_a=0.0, max_len_b=30, min_len=100)
    stream = BeamStream(model, cfg, CPU, sync_every=10)
    stream.all_done = SignalAt(stream, {4, 15})
    stream.add(pad_batch(sources([3, 5], seed=1), suffix=EOS_ID), ["a", "b"])
    reading, step = [], 0
    while len(stream):
        with DeviceReads() as reads:
            stream.step()
        if reads.seen:
            reading.append(step)
        step += 1
    assert reading == [4, 14, 15, 25, 29]  # the signal at 4 and 15, 10 steps after a read, the limit (29)


@pytest.mark.gpu("the signal travels from a GPU")
def test_a_gpu_search_ends_soon_after_every_sentence_is_done_without_waiting_for_the_device():
    """Every sentence ends at step 3 (</s> made likely; min_len 3), the limit is 60 steps and the host
    reads only every 100: the copy of "every sentence done" ends the search a few steps later, and
    no step before it makes the host wait for the GPU."""
    model = tiny_model(vocab=VOCAB, seed=1, output_bias=True).cuda()
    with torch.no_grad():
        model.output.bias[EOS_ID] = 30.0  # </s> wherever min_len allows it
    cfg = SearchConfig(beam=3, max_len_a=0.0, max_len_b=60, min_len=3)
    cuda = torch.device("cuda")
    stream = BeamStream(model, cfg, cuda, sync_every=100)
    stream.add(pad_batch(sources([4, 7, 2], seed=2), suffix=EOS_ID).to(cuda), [0, 1, 2])
    results, steps = {}, 0
    while len(stream):
        finishing = stream.step()
        results.update(finishing)
        steps += 1
    assert sorted(results) == [0, 1, 2] and all(
        hyps[0].tokens and len(hyps[0].tokens) == 3 for hyps in results.values()
    )
    assert steps < 20
    stream.add(pad_batch(sources([4, 7, 2], seed=2), suffix=EOS_ID).to(cuda), [0, 1, 2])
    torch.cuda.set_sync_debug_mode("error")  # a second search: its first steps do not wait
    try:
        for _ in range(3):
            assert stream.step() == []
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_the_ended_hypotheses_keep_no_more_history_than_the_longest_search_still_running(model):
    """A 40-step sentence among 5-step ones: once it has finished, the histories kept for ended
    hypotheses shrink back to what the short ones need."""
    cfg = SearchConfig(beam=2, max_len_a=1.0, max_len_b=4, min_len=100)  # every sentence runs to its limit
    stream, widths = BeamStream(model, cfg, CPU), []
    stream.add(pad_batch(sources([36], seed=4), suffix=EOS_ID), ["long"])
    for step, src_ids in enumerate(sources([1] * 60, seed=5)):
        stream.add(pad_batch([src_ids], suffix=EOS_ID), [step])
        stream.step()
        widths.append(stream.ended.history.size(2))
    assert max(widths) >= 39  # the long sentence's history
    assert max(widths[45:]) <= 5 + 16  # room is made 16 columns at a time
