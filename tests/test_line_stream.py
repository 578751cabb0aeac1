"""translate.LineStream: raw lines joining a running search, as `mtkit serve` uses it."""

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtkit.decoding.beam import BeamStream
from mtkit.decoding.greedy_stream import GreedyStream
from mtkit.decoding.search import SearchConfig
from mtkit.model.files import load_model_file
from mtkit.serving.dynamic_batching import Batcher
from mtkit.serving.engine import Engine, Options, Sentence
from mtkit.serving.waiting import Job
from mtkit.translation.translate import Translator

HANG_S = 600  # how long a result may take before the test calls it a hang (not a speed bound)


def test_lines_that_join_between_steps_get_the_offline_nbest(trained_run, corpus):
    lines = (corpus / "test.en").read_text(encoding="utf-8").splitlines()[:9]
    lines[4] = "   "  # a blank line: answered at once, with no hypotheses
    translator = Translator(load_model_file(trained_run), SearchConfig(beam=3, nbest=2), device="cpu")
    expected = translator.translate_hypotheses(lines)
    delivered: dict[int, tuple[str, list]] = {}
    stream = translator.open_stream(lambda key, line, nbest: delivered.update({key: (line, nbest)}))
    stream.add([0, 1, 2], lines[:3])
    stream.step()
    stream.add([3, 4], lines[3:5])
    assert delivered[4] == ("", [])
    stream.step()
    stream.step()
    stream.add([5, 6, 7, 8], lines[5:])
    while len(stream.search):
        stream.step()
    assert sorted(delivered) == list(range(9))
    for i, line in enumerate(lines):
        got_line, nbest = delivered[i]
        assert got_line == line.strip()
        assert [(h.tokens, text) for h, text in nbest] == [(h.tokens, text) for h, text in expected[i]]


def test_an_ensemble_translates_in_whole_batches(trained_run):
    model = load_model_file(trained_run)
    assert Translator([model, model], SearchConfig(beam=2), device="cpu").open_stream(print) is None


@pytest.fixture(scope="module")
def lines(corpus):
    return (corpus / "test.en").read_text(encoding="utf-8").splitlines()[:10]


@pytest.fixture(scope="module")
def translators(trained_run, lines):
    """Greedy and beam 3 translators of the test model in fp32, with their offline n-best of `lines`."""
    model = load_model_file(trained_run)
    made = {}
    for beam in (1, 3):
        translator = Translator(model, SearchConfig(beam=beam, nbest=min(beam, 2)), device="cpu", precision="fp32")
        made[beam] = translator, translator.translate_hypotheses(lines)
    return made


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(beam=st.sampled_from([1, 3]), arrivals=st.lists(st.integers(0, 8), min_size=1, max_size=10))
def test_lines_joining_at_any_steps_get_their_offline_nbest(translators, lines, beam, arrivals):
    """arrivals[i]: the step before which line i joins (those of one step join together)."""
    translator, expected = translators[beam]
    delivered: dict[int, list] = {}
    stream = translator.open_stream(lambda key, line, nbest: delivered.update({key: nbest}))
    assert isinstance(stream.search, GreedyStream if beam == 1 else BeamStream)
    clock = 0
    while len(delivered) < len(arrivals):
        joining = [i for i, at in enumerate(arrivals) if at == clock]
        if joining:
            stream.add(joining, [lines[i] for i in joining])
        if len(stream.search):
            stream.step()
        clock += 1
    for i in range(len(arrivals)):
        got = [(h.tokens, round(h.score, 4), text) for h, text in delivered[i]]
        assert got == [(h.tokens, round(h.score, 4), text) for h, text in expected[i]]


class GatedStreams:
    """The engine's streams, each step waiting for a permit (so that a test interleaves its arrivals and
    cancellations with the steps), and a record of every sentence that joined one."""

    def __init__(self, engine: Engine):
        self.engine, self.permits, self.joined = engine, threading.Semaphore(0), []

    def open(self, options, deliver):
        stream = self.engine.open_stream(options, deliver)
        add, step = stream.add, stream.step

        def gated_add(keys, sentences):
            self.joined += [s.text for s in sentences]
            add(keys, sentences)

        def gated_step():
            self.permits.acquire()
            step()

        stream.add, stream.step = gated_add, gated_step
        return stream


@pytest.fixture(scope="module")
def engine(trained_run):
    built = Engine(lambda: Translator(load_model_file(trained_run), SearchConfig(beam=2), "cpu", "fp32"))
    built.build()
    return built


@pytest.fixture(scope="module")
def expected_by_beam(trained_run, lines):
    """Offline greedy and beam 2 translations of `lines` (fp32)."""
    model = load_model_file(trained_run)
    return {beam: Translator(model, SearchConfig(beam=beam), "cpu", "fp32").translate(lines) for beam in (1, 2)}


EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.sampled_from([1, 2]), st.lists(st.integers(0, 9), min_size=1, max_size=3)),
        st.tuples(st.just("cancel"), st.integers(0, 20)),
        st.tuples(st.just("steps"), st.integers(1, 6)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=EVENTS)
def test_any_interleaving_of_arrivals_and_cancellations_gives_each_sentence_its_offline_translation(
    engine, expected_by_beam, lines, events
):
    """Requests of beam 1 or 2 arrive, clients cancel sentences still queued, and the running searches
    step, in any order: every sentence not cancelled gets its offline translation, and none cancelled
    is translated."""
    streams = GatedStreams(engine)
    batcher = Batcher(engine.translate, 4096, 0.0, 1000, open_stream=streams.open)
    batcher.start()
    submitted = []
    tokenizer = engine.translator.src_tokenizer
    for event in events:
        if event[0] == "submit":
            _, beam, chosen = event
            options = Options(beam=beam, nbest=1, lenpen=SearchConfig().lenpen, alignment=False)
            jobs = [
                Job(Sentence(lines[i], ids), 10, options)
                for i, ids in zip(chosen, tokenizer.encode_batch([lines[i] for i in chosen]))
            ]
            submitted += [(beam, i, future) for i, future in zip(chosen, batcher.submit(jobs))]
        elif event[0] == "cancel" and event[1] < len(submitted):
            submitted[event[1]][2].cancel()  # False once the sentence is searching
        elif event[0] == "steps":
            streams.permits.release(event[1])
    streams.permits.release(10**6)  # every search runs to its end
    batcher.stop()
    for beam, i, future in submitted:
        if future.cancelled():
            continue
        nbest, _, _ = future.result(HANG_S)
        assert nbest[0][1] == expected_by_beam[beam][i]
    translated = sorted(streams.joined)
    assert translated == sorted(lines[i] for _, i, future in submitted if not future.cancelled())


def test_a_steps_aligned_sentences_are_aligned_together_as_each_alone(engine, lines, monkeypatch):
    """A document's sentences want alignments: those a step finishes are aligned in one call after it
    (one at a time, thousands held every other client's steps), each as it would be alone; a blank
    one at once, plain ones without. Copies of a line finish at the same step."""
    translator = engine.translator
    calls = []
    align = translator.alignments
    monkeypatch.setattr(translator, "alignments", lambda texts, hyps: calls.append(len(texts)) or align(texts, hyps))
    options = Options(beam=2, nbest=2, lenpen=SearchConfig().lenpen, alignment=False)
    delivered: dict[int, tuple] = {}
    stream = engine.open_stream(options, lambda key, result: delivered.update({key: result}))
    texts = [lines[0], lines[0], lines[0], lines[1], lines[2], lines[2], "  "]
    aligned = [True, True, False, True, True, True, True]
    ids = translator.src_tokenizer.encode_batch([text.strip() for text in texts])
    stream.add(list(range(len(texts))), [Sentence(t, i, aligned=a) for t, i, a in zip(texts, ids, aligned)])
    assert delivered.pop(6) == ([], [], None) and calls == [0]
    calls.clear()
    finished_by_step = []  # the aligned sentences each step finished
    while len(stream.stream.search):
        before = {i for i in delivered if aligned[i]}
        stream.step()
        finished_by_step.append(len({i for i in delivered if aligned[i]} - before))
    assert sorted(delivered) == list(range(6))
    assert calls == [2 * n for n in finished_by_step if n]  # one call a step, both hypotheses of each
    assert max(finished_by_step) >= 2
    monkeypatch.undo()
    for i, (nbest, alignments, _) in delivered.items():
        alone = translator.alignments([texts[i].strip()] * len(nbest), [h for h, _ in nbest]) if aligned[i] else None
        assert alignments == alone and (alone is None or all(alone))


def test_a_batch_with_confidences_aligns_its_aligned_sentences_in_one_call_as_each_alone(engine, lines, monkeypatch):
    """Confidences are of whole batches (no running search): its aligned sentences are aligned together
    once the batch is done, each as it would be alone, beside its confidence."""
    translator = engine.translator
    calls = []
    align = translator.alignments
    monkeypatch.setattr(translator, "alignments", lambda texts, hyps: calls.append(len(texts)) or align(texts, hyps))
    options = Options(beam=2, nbest=2, lenpen=SearchConfig().lenpen, alignment=False, confidence=True)
    texts, aligned = lines[:4], [True, False, True, True]
    ids = translator.src_tokenizer.encode_batch([text.strip() for text in texts])
    delivered: dict[int, tuple] = {}
    sentences = [Sentence(t, i, aligned=a) for t, i, a in zip(texts, ids, aligned)]
    engine.translate(sentences, options, lambda i, result: delivered.update({i: result}))
    assert calls == [2 * 3]  # both hypotheses of the three aligned sentences
    monkeypatch.undo()
    for i, (nbest, alignments, confidence) in delivered.items():
        alone = translator.alignments([texts[i].strip()] * len(nbest), [h for h, _ in nbest]) if aligned[i] else None
        assert alignments == alone and (alone is None or all(alone)) and 0 <= confidence <= 1
