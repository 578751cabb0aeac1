"""translate.LineStream: raw lines joining a running search, as `mtkit serve` uses it."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtkit.decoding.beam import BeamStream
from mtkit.decoding.greedy_stream import GreedyStream
from mtkit.decoding.search import SearchConfig
from mtkit.model.files import load_model_file
from mtkit.translation.translate import Translator


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
