"""translate.LineStream: raw lines joining a running search, as `mtkit serve` uses it."""

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
