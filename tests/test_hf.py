"""The Hugging Face export computes what mtkit computes: logits within 1e-4, the same greedy
translations; post-norm models as MarianMT, pre-norm ones as Pegasus."""

import json

import pytest
import torch
from conftest import run_mtkit, variant, with_output_vocab

from mtkit.core.errors import MtkitError
from mtkit.decoding.search import SearchConfig
from mtkit.interop.hf import export_huggingface, marian_order
from mtkit.model.files import load_model_file, save_model_file
from mtkit.text.tokenizer import BOS_ID, EOS_ID
from mtkit.translation.translate import Translator

transformers = pytest.importorskip("transformers", reason="the export test needs transformers (pip install -e .[dev])")


@pytest.fixture(scope="module", params=["all", "target", "pre-norm", "swish-bias"])
def exported(request, trained_run, tmp_path_factory):
    """The tiny trained model, one scoring only the even ids (output_vocab = target), a pre-norm one
    scoring those (as the Multi30k recipe's), and one with a swish FFN and a bias on the logits (as
    OPUS-MT's), exported (MarianMT, MarianMT, Pegasus, MarianMT)."""
    model_file = load_model_file(trained_run)
    if request.param in ("target", "pre-norm"):
        model_file = with_output_vocab(model_file, list(range(0, model_file.config.tgt_vocab_size, 2)))
    if request.param == "pre-norm":
        model_file = variant(model_file, norm="pre")
    if request.param == "swish-bias":
        model_file = variant(model_file, activation="swish", output_bias=True)
    directory = tmp_path_factory.mktemp("hf") / request.param
    export_huggingface(model_file, directory)
    architecture = "PegasusForConditionalGeneration" if request.param == "pre-norm" else "MarianMTModel"
    assert json.loads((directory / "config.json").read_text())["architectures"] == [architecture]
    return model_file, directory


def test_the_permutation_turns_interleaved_sinusoids_into_marian_s_blocks():
    from mtkit.model.transformer import sinusoidal_positions

    config = transformers.MarianConfig(
        vocab_size=10, d_model=16, max_position_embeddings=50, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=8, decoder_ffn_dim=8, pad_token_id=0,
    )  # fmt: skip
    theirs = transformers.MarianMTModel(config).model.encoder.embed_positions.weight
    ours = sinusoidal_positions(50, 16)[:, marian_order(16)]
    assert torch.allclose(ours, theirs, atol=1e-6)


@torch.no_grad()
def test_logits_match_within_1e_4(exported, corpus):
    model_file, directory = exported
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(directory).eval()
    ours = model_file.build_model()
    sources = (corpus / "test.en").read_text().splitlines()[:8]
    targets = (corpus / "test.de").read_text().splitlines()[:8]
    for source, target in zip(sources, targets):
        src = torch.tensor([model_file.src_tokenizer.encode_batch([source])[0] + [EOS_ID]])
        tgt_in = torch.tensor([[BOS_ID] + model_file.tgt_tokenizer.encode_batch([target])[0]])
        expected = ours(src, tgt_in)
        got = hf(input_ids=src, decoder_input_ids=tgt_in).logits
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)  # -inf where the model scores nothing


def test_greedy_translations_are_identical(exported, corpus):
    model_file, directory = exported
    sources = (corpus / "test.en").read_text().splitlines()
    limit = 12
    ours = Translator(
        model_file, SearchConfig(beam=1, max_len_a=0, max_len_b=limit, loop_ngram=0), device="cpu", precision="fp32"
    )
    expected = ours.translate(sources)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    assert tokenizer(sources[0])["input_ids"] == model_file.src_tokenizer.encode_batch([sources[0]])[0] + [EOS_ID]
    translate = transformers.pipeline("translation", model=str(directory), device="cpu")
    # mtkit's rule at the length limit: the search stops after `limit` tokens, without forcing </s>.
    got = translate(sources, num_beams=1, do_sample=False, max_new_tokens=limit, forced_eos_token_id=None)
    assert [row["translation_text"] for row in got] == expected
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(directory).eval()
    batch = tokenizer(sources[:4], return_tensors="pt", padding=True)  # the standard idiom, without pipeline()
    assert set(batch) == {"input_ids", "attention_mask"}
    generated = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=limit, forced_eos_token_id=None)
    assert tokenizer.batch_decode(generated, skip_special_tokens=True) == expected[:4]


def test_the_cli_writes_a_complete_directory_and_refuses_separate_vocabularies(trained_run, tmp_path):
    result = run_mtkit("export", "-m", trained_run, "--format", "huggingface", "-o", tmp_path / "hf")
    assert result.returncode == 0, result.stderr.decode()
    names = {path.name for path in (tmp_path / "hf").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["decoder_start_token_id"] == BOS_ID and config["scale_embedding"] is True
    model_file = load_model_file(trained_run)
    model_file.config.joint_vocab = False
    with pytest.raises(MtkitError, match="needs one joint vocabulary"):
        export_huggingface(model_file, tmp_path / "separate")
    save_model_file(tmp_path / "separate.pt", model_file)
    refused = run_mtkit("export", "-m", tmp_path / "separate.pt", "--format", "huggingface", "-o", tmp_path / "s")
    assert refused.returncode == 1 and "needs one joint vocabulary" in refused.stderr.decode()
    assert not (tmp_path / "s").exists()
