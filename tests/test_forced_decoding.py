import pytest
import torch
from conftest import run_mtkit, tiny_model

from mtkit.data.batching import pad_batch
from mtkit.decoding.search import SearchConfig, search
from mtkit.model.files import load_model_file
from mtkit.text.tokenizer import EOS_ID
from mtkit.translation.forced_decoding import forced_log_probs

SOURCES = [[4, 5, 6], [7], [6, 6, 4, 5, 7], [5, 4], []]


@pytest.mark.parametrize("beam, lenpen", [(1, 1.0), (4, 0.0), (4, 0.6), (5, 1.0)])
def test_forced_scores_equal_the_search_s_own_scores(beam, lenpen):
    model = tiny_model(vocab=8, seed=2)
    cfg = SearchConfig(beam=beam, nbest=beam, lenpen=lenpen, max_len_a=1.0, max_len_b=4, loop_ngram=0)
    found = search(model, pad_batch(SOURCES, suffix=EOS_ID), cfg)
    pairs = [(src, hyp.tokens) for src, hyps in zip(SOURCES, found) for hyp in hyps]
    expected = [hyp for hyps in found for hyp in hyps]
    scored = forced_log_probs(model, pairs, torch.device("cpu"), max_tokens=16)  # small batches, reordered
    ended = {hyp.ended for hyp in expected}  # cut at the limit (False) and, in beams, ended with </s> (True)
    assert ended == ({True, False} if beam > 1 else {False})
    for (total, length), hyp in zip(scored, expected):
        assert length == len(hyp.tokens) + 1
        if hyp.ended:
            assert total == pytest.approx(hyp.log_prob, abs=1e-4)
            assert total / ((5 + length) / 6) ** lenpen == pytest.approx(hyp.score, abs=1e-4)
        else:  # the search's score of a cut hypothesis has no </s> term; scoring the text adds one
            assert total < hyp.log_prob


def test_score_command_one_number_per_line(trained_run, corpus):
    """The CLI prints, per line, the forced-decoding score computed here from the model's own pieces."""
    sources = (corpus / "test.en").read_text().splitlines()
    targets = (corpus / "test.de").read_text().splitlines()
    model_file = load_model_file(trained_run)
    pairs = list(zip(model_file.src_tokenizer.encode_batch(sources), model_file.tgt_tokenizer.encode_batch(targets)))
    expected = forced_log_probs(model_file.build_model(), pairs, torch.device("cpu"))
    args = ("score", "-m", trained_run, "--src", corpus / "test.en", "--tgt", corpus / "test.de")
    args += ("--precision", "fp32")  # as expected is computed: auto is bf16 on a CPU that has it
    scored = run_mtkit(*args, "--lenpen", "0.6")
    assert scored.returncode == 0, scored.stderr.decode()
    values = [float(v) for v in scored.stdout.decode().splitlines()]
    assert values == pytest.approx([total / ((5 + n) / 6) ** 0.6 for total, n in expected], abs=1e-3)
    per_token = [float(v) for v in run_mtkit(*args, "--normalize").stdout.decode().splitlines()]
    assert per_token == pytest.approx([total / n for total, n in expected], abs=1e-3)
