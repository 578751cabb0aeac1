"""Ensembles: `translate`/`evaluate -m A -m B` average the models' log-probabilities at every step."""

import pytest
import torch
import torch.nn.functional as F
from conftest import run_mtkit, tiny_model

from mtkit.data.batching import pad_batch
from mtkit.decoding.ensemble import Ensemble
from mtkit.decoding.search import SearchConfig, search
from mtkit.model.files import load_model_file
from mtkit.text.tokenizer import BOS_ID, EOS_ID, PAD_ID
from mtkit.translation.translate import Translator

SOURCES = [[4, 5, 6], [7], [6, 6, 4, 5, 7], [5, 4]]


@pytest.mark.parametrize("beam", [1, 4])
def test_an_ensemble_of_a_model_with_itself_is_that_model(beam):
    model = tiny_model(vocab=8, seed=5)
    cfg = SearchConfig(beam=beam, nbest=beam, lenpen=0.6, max_len_a=1.0, max_len_b=5)
    src = pad_batch(SOURCES, suffix=EOS_ID)
    alone, doubled = search(model, src, cfg), search(Ensemble([model, model]), src, cfg)
    for one, two in zip(alone, doubled):
        assert [h.tokens for h in one] == [h.tokens for h in two]
        assert [h.score for h in one] == pytest.approx([h.score for h in two], abs=1e-5)


@torch.no_grad()
def test_greedy_choice_is_the_argmax_of_the_averaged_log_probabilities():
    models = [tiny_model(vocab=8, seed=seed) for seed in (1, 2, 3)]
    cfg = SearchConfig(beam=1, max_len_a=1.0, max_len_b=5, min_len=1, loop_ngram=0)  # the argmax, unguarded
    found = search(Ensemble(models), pad_batch(SOURCES, suffix=EOS_ID), cfg)
    for src_ids, hyps in zip(SOURCES, found):
        output = hyps[0].tokens + [EOS_ID]
        src = torch.tensor([src_ids + [EOS_ID]])
        for t, chosen in enumerate(output):  # teacher-force the ensemble's own prefix through each model
            tgt_in = torch.tensor([[BOS_ID] + output[:t]])
            averaged = torch.stack([F.log_softmax(m(src, tgt_in)[0, -1], dim=-1) for m in models]).mean(dim=0)
            averaged[[PAD_ID, BOS_ID]] = float("-inf")  # never generated
            if t < cfg.min_len:
                averaged[EOS_ID] = float("-inf")
            limit = int(cfg.max_len_a * len(src_ids) + cfg.max_len_b)
            assert chosen == (EOS_ID if t >= limit else int(averaged.argmax()))


def test_the_cli_takes_several_models(trained_run, corpus):
    lines = (corpus / "test.en").read_bytes()
    model = trained_run / "checkpoints" / "step_00000040.pt"
    alone = run_mtkit("translate", "-m", model, "--beam", "3", stdin=lines)
    twice = run_mtkit("translate", "-m", model, "-m", model, "--beam", "3", stdin=lines)
    assert twice.returncode == 0, twice.stderr.decode()
    assert twice.stdout == alone.stdout
    two_checkpoints = run_mtkit("translate", "-m", model, "-m", trained_run / "checkpoints" / "step_00000020.pt",
                                "--beam", "3", stdin=lines)  # fmt: skip
    assert two_checkpoints.returncode == 0, two_checkpoints.stderr.decode()
    files = [load_model_file(model), load_model_file(trained_run / "checkpoints" / "step_00000020.pt")]
    expected = Translator(files, SearchConfig(beam=3, lenpen=0.6), "cpu").translate(lines.decode().splitlines())
    assert two_checkpoints.stdout.decode().splitlines() == expected  # the two models' averaged search
    refused = run_mtkit("translate", "-m", model, "-m", model, "--engine", "ctranslate2", stdin=lines)
    assert refused.returncode == 1 and "ensembles need --engine pytorch" in refused.stderr.decode()


def test_models_with_other_tokenizers_are_refused(trained_run, corpus, tmp_path):
    from mtkit.model.files import load_model_file, save_model_file
    from mtkit.text.tokenizer import Tokenizer, train_tokenizer

    train_tokenizer([corpus / "train.de"], tmp_path / "other.json", vocab_size=300)
    other = load_model_file(trained_run)
    other.tgt_tokenizer = Tokenizer.load(tmp_path / "other.json")
    save_model_file(tmp_path / "other.pt", other)
    result = run_mtkit("translate", "-m", trained_run, "-m", tmp_path / "other.pt", stdin=b"A dog.\n")
    assert result.returncode == 1
    assert "other.pt: its tokenizers differ" in result.stderr.decode()
