"""The CTranslate2 export computes what mtkit's own model computes."""

import ctranslate2
import pytest
import torch
import torch.nn.functional as F

from mtkit.checkpoint import load_model_file
from mtkit.ct2 import CTranslate2Translator, export_ctranslate2
from mtkit.errors import MtkitError
from mtkit.search import SearchConfig
from mtkit.tokenizer import BOS_ID, EOS_ID
from mtkit.translate import Translator

from conftest import run_mtkit



@pytest.fixture(scope="module", params=["post", "pre"])
def model_file(request, trained_run, tmp_path_factory):
    """The tiny trained model, and a pre-norm variant with random final norms (exercises the other layout)."""
    mf = load_model_file(trained_run)
    if request.param == "pre":
        from mtkit.model import Transformer

        mf.config.norm = "pre"
        torch.manual_seed(0)
        model = Transformer(mf.config)
        state = model.state_dict()
        state.update({k: v for k, v in mf.weights.items() if k in state})
        for name in ("encoder_norm.weight", "decoder_norm.weight"):
            state[name] = 1.0 + 0.1 * torch.randn_like(state[name])
        mf.weights = state
    return mf


def test_forced_decoding_scores_match(model_file, corpus, tmp_path):
    export_ctranslate2(model_file, tmp_path / "ct2")
    engine = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", compute_type="float32")
    src_tok, tgt_tok = model_file.src_tokenizer, model_file.tgt_tokenizer
    sources = (corpus / "test.en").read_text().splitlines()[:10]
    targets = (corpus / "test.de").read_text().splitlines()[:10]
    src_ids, tgt_ids = src_tok.encode_batch(sources), tgt_tok.encode_batch(targets)
    ct2_scores = engine.score_batch([[src_tok.id_to_token(i) for i in s] + ["</s>"] for s in src_ids],
                                    [[tgt_tok.id_to_token(i) for i in t] for t in tgt_ids])
    model = model_file.build_model()
    for s, t, scored in zip(src_ids, tgt_ids, ct2_scores):
        with torch.no_grad():
            lprobs = F.log_softmax(model(torch.tensor([s + [EOS_ID]]), torch.tensor([[BOS_ID] + t]))[0], dim=-1)
        ours = lprobs.gather(1, torch.tensor(t + [EOS_ID])[:, None]).squeeze(1)
        assert torch.allclose(torch.tensor(scored.log_probs), ours, atol=1e-4)


def test_greedy_translations_are_identical(model_file, corpus, tmp_path):
    export_ctranslate2(model_file, tmp_path / "ct2")
    cfg = SearchConfig(beam=1, max_len_a=1.0, max_len_b=5)
    lines = (corpus / "test.en").read_text().splitlines()
    ours = Translator(model_file, cfg, device="cpu", precision="fp32").translate(lines)
    theirs = CTranslate2Translator(tmp_path / "ct2", cfg, device="cpu", compute_type="float32").translate(lines)
    assert ours == theirs


def test_export_and_engine_through_the_cli(trained_run, corpus, tmp_path):
    result = run_mtkit("export", "-m", trained_run, "-o", tmp_path / "ct2", "--quantization", "int8")
    assert result.returncode == 0, result.stderr.decode()
    translated = run_mtkit("translate", "--engine", "ctranslate2", "-m", tmp_path / "ct2", "--beam", "2",
                           stdin=b"A dog.\n\nTwo cats.\n")
    assert translated.returncode == 0, translated.stderr.decode()
    assert len(translated.stdout.decode().split("\n")) == 4
    scored = run_mtkit("evaluate", "--engine", "ctranslate2", "-m", tmp_path / "ct2", "--src", corpus / "test.en",
                       "--ref", corpus / "test.de", "--json")
    assert scored.returncode == 0, scored.stderr.decode()
    again = run_mtkit("export", "-m", trained_run, "-o", tmp_path / "ct2")
    assert again.returncode == 1 and "already exists" in again.stderr.decode()


def test_engine_refuses_a_plain_model_directory(trained_run):
    with pytest.raises(MtkitError, match="not an exported mtkit CTranslate2 model"):
        CTranslate2Translator(trained_run, SearchConfig())
