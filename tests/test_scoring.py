import pytest
import torch
from conftest import run_mtkit, tiny_model

from mtkit.batching import pad_batch
from mtkit.scoring import forced_log_probs
from mtkit.search import SearchConfig, search
from mtkit.tokenizer import EOS_ID

SOURCES = [[4, 5, 6], [7], [6, 6, 4, 5, 7], [5, 4], []]


@pytest.mark.parametrize("beam, lenpen", [(1, 1.0), (4, 0.0), (4, 0.6), (5, 1.0)])
def test_forced_scores_equal_the_search_s_own_scores(beam, lenpen):
    model = tiny_model(vocab=8, seed=3)
    cfg = SearchConfig(beam=beam, nbest=beam, lenpen=lenpen, max_len_a=1.0, max_len_b=4)
    found = search(model, pad_batch(SOURCES, suffix=EOS_ID), cfg)
    pairs = [(src, hyp.tokens) for src, hyps in zip(SOURCES, found) for hyp in hyps]
    expected = [hyp for hyps in found for hyp in hyps]
    scored = forced_log_probs(model, pairs, torch.device("cpu"), max_tokens=16)  # small batches, reordered
    for (total, length), hyp in zip(scored, expected):
        assert length == len(hyp.tokens) + 1
        assert total == pytest.approx(hyp.log_prob, abs=1e-4)
        assert total / ((5 + length) / 6) ** lenpen == pytest.approx(hyp.score, abs=1e-4)


def test_score_command_one_number_per_line(trained_run, corpus, tmp_path):
    sources = (corpus / "test.en").read_text().splitlines()
    best = run_mtkit("translate", "-m", trained_run, "--beam", "4", "--nbest", "4", "--lenpen", "0.6",
                     "-i", corpus / "test.en")  # fmt: skip
    rows = [line.split("\t") for line in best.stdout.decode().splitlines()]
    top = {int(index): (float(value), text) for index, value, text in reversed(rows)}  # first row of each index
    (tmp_path / "hyp.de").write_text("".join(top[i][1] + "\n" for i in range(len(sources))))
    scored = run_mtkit(
        "score", "-m", trained_run, "--src", corpus / "test.en", "--tgt", tmp_path / "hyp.de", "--lenpen", "0.6"
    )
    assert scored.returncode == 0, scored.stderr.decode()
    values = [float(v) for v in scored.stdout.decode().splitlines()]
    assert len(values) == len(sources) and all(v < 0 for v in values)
    # Re-encoding the detokenized text usually gives the search's own subwords back: then the score is the search's.
    same = sum(v == pytest.approx(top[i][0], abs=1e-3) for i, v in enumerate(values))
    assert same >= len(sources) // 2
    per_token = run_mtkit(
        "score", "-m", trained_run, "--src", corpus / "test.en", "--tgt", tmp_path / "hyp.de", "--normalize"
    )
    assert len(per_token.stdout.decode().splitlines()) == len(sources)
