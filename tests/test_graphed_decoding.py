"""Decoding in static buffers (mtkit.decoding.cuda_graphs) finds what the dynamic KV cache finds: the
same translations, in every search, as sentences finish, join and outgrow the buffers. On a CPU
the static steps run eagerly; on a GPU, replayed as CUDA graphs, they must match the eager steps."""

import contextlib

import pytest
import torch
from conftest import random_sources, run_joining_stream, run_mtkit, tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtkit.data.batching import pad_batch
from mtkit.decoding.beam import BeamStream
from mtkit.decoding.cuda_graphs import POSITION_BUCKET, GraphedDecoder, Shape
from mtkit.decoding.search import SearchConfig, search
from mtkit.text.tokenizer import EOS_ID

VOCAB = 40
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model():
    return tiny_model(vocab=VOCAB, seed=1)


def sources(lengths: list[int], seed: int = 0) -> list[list[int]]:
    return random_sources(lengths, VOCAB, seed)


def assert_same(found, expected):
    """The same hypotheses (tokens, ended) in the same order, with scores equal to float rounding."""
    assert [[(h.tokens, h.ended) for h in hyps] for hyps in found] == [
        [(h.tokens, h.ended) for h in hyps] for hyps in expected
    ]
    scores = [h.score for hyps in found for h in hyps]
    assert scores == pytest.approx([h.score for hyps in expected for h in hyps], abs=1e-5)


def test_shapes_are_bucketed():
    assert Shape.covering(1, 5, 1, 1) == Shape(1, 5, 16, 64)
    assert Shape.covering(5, 4, 16, 64) == Shape(8, 4, 16, 64)
    assert Shape.covering(8, 1, 17, 65) == Shape(8, 1, 32, 128)
    assert Shape.covering(0, 2, 40, 200) == Shape(1, 2, 48, 256)


@pytest.mark.parametrize(
    "cfg",
    [
        SearchConfig(beam=1, max_len_a=2.0, max_len_b=70),  # random weights: most run to the limit
        SearchConfig(beam=4, nbest=2, max_len_a=2.0, max_len_b=70, lenpen=0.6),
        SearchConfig(beam=3, nbest=3, max_len_a=0.5, max_len_b=5, min_len=3, no_repeat_ngram=2),
        SearchConfig(beam=1, sample=True, seed=3, max_len_b=20),
    ],
    ids=["greedy", "beam", "constrained", "sampling"],
)
def test_static_buffers_find_what_the_dynamic_cache_finds(model, cfg):
    """Seven sentences of 1-20 subwords, one with a prefix: searches of up to 110 steps outgrow
    the first 64 cached positions, and finished sentences shrink the rows to a smaller bucket."""
    srcs = sources([3, 9, 1, 20, 5, 7, 2])
    src, prefixes = pad_batch(srcs, suffix=EOS_ID), [[], [7, 8], [], [], [], [], []]
    decoder = GraphedDecoder(model, capture=False)
    assert_same(search(decoder, src, cfg, prefixes), search(model, src, cfg, prefixes))
    positions = {shape.positions for shape, *_ in decoder.buffers}
    sentences = {shape.sentences for shape, *_ in decoder.buffers}
    assert (max(positions) > POSITION_BUCKET) == (cfg.max_len_b > POSITION_BUCKET)
    assert min(sentences) < 8 or cfg.max_len_b < POSITION_BUCKET  # a smaller bucket once sentences finished


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    joins=st.lists(st.tuples(st.integers(0, 90), st.integers(1, 24)), min_size=1, max_size=12),
    beam=st.integers(1, 3),
    seed=st.integers(0, 10),
)
def test_sentences_joining_a_running_search_find_what_the_dynamic_cache_finds(model, joins, beam, seed):
    """A server's search: sentences join between steps (several at one step, some long after the
    first began), so the rows and the source grow, cached positions no live sentence sees are
    dropped, and the buffers move to other shapes; every sentence finds what it finds with the
    dynamic cache."""
    cfg = SearchConfig(beam=beam, nbest=beam, max_len_a=1.5, max_len_b=20, lenpen=0.6)
    srcs = sources([length for _, length in joins], seed)
    schedule: dict[int, list] = {}
    for name, ((step, _), src_ids) in enumerate(zip(joins, srcs)):
        schedule.setdefault(step, []).append((name, src_ids))
    prefixes = {0: srcs[0][:2]}
    graphed = run_joining_stream(GraphedDecoder(model, capture=False), cfg, schedule, prefixes)
    dynamic = run_joining_stream(model, cfg, schedule, prefixes)
    assert sorted(graphed) == sorted(dynamic) == list(range(len(joins)))
    assert_same([graphed[name][0] for name in sorted(graphed)], [dynamic[name][0] for name in sorted(dynamic)])


def test_a_search_that_sentences_keep_joining_keeps_bounded_buffers(model):
    """A new sentence every step for 300 steps: the cached positions stay within one bucket, as
    those that no sentence still searching sees are dropped."""
    cfg = SearchConfig(beam=2, max_len_a=0, max_len_b=6)
    decoder = GraphedDecoder(model, capture=False)
    stream, finished = BeamStream(decoder, cfg, CPU), []
    for step, src_ids in enumerate(sources([1 + step % 5 for step in range(300)])):
        stream.add(pad_batch([src_ids], suffix=EOS_ID), [step])
        finished += [name for name, _ in stream.step()]
    while len(stream):
        finished += [name for name, _ in stream.step()]
    assert sorted(finished) == list(range(300))
    assert {shape.positions for shape, *_ in decoder.buffers} == {POSITION_BUCKET}


def test_cuda_graphs_need_a_gpu(trained_run, tmp_path):
    result = run_mtkit("translate", "-m", trained_run, "--device", "cpu", "--cuda-graphs", stdin=b"a dog\n")
    assert result.returncode == 1
    assert result.stderr.decode().strip() == "error: --cuda-graphs: CUDA graphs need a GPU (the device is cpu)"
    assert result.stdout == b""


@pytest.mark.gpu("CUDA graphs need a GPU")
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_graphs_replay_what_the_eager_steps_compute(dtype):
    model = tiny_model(vocab=VOCAB, seed=1).cuda()
    src = pad_batch(sources([3, 9, 1, 20, 5, 7, 2]), torch.device("cuda"), suffix=EOS_ID)
    cfg = SearchConfig(beam=4, nbest=2, max_len_a=2.0, max_len_b=70, lenpen=0.6)
    with torch.autocast("cuda", dtype=dtype) if dtype else contextlib.nullcontext():
        eager = search(GraphedDecoder(model, capture=False), src, cfg)
        graphed = search(GraphedDecoder(model, capture=True), src, cfg)
    assert_same(graphed, eager)
