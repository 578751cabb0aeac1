"""The CTranslate2 export computes what mtkit's own model computes."""

import json

import ctranslate2
import pytest
import sacrebleu
import torch
import torch.nn.functional as F
from conftest import run_mtkit, variant, with_output_vocab

from mtkit.core.errors import MtkitError
from mtkit.decoding.search import MAX_SOURCE_TOKENS, SearchConfig
from mtkit.interop.ct2 import CTranslate2Translator, export_ctranslate2
from mtkit.model.files import load_model_file, save_model_file
from mtkit.text.tokenizer import BOS_ID, EOS_ID
from mtkit.translation.translate import Translator


@pytest.fixture(scope="module", params=["post", "pre", "target", "gelu-bias"])
def model_file(request, trained_run, corpus):
    """The tiny trained model, a pre-norm variant with random final norms (exercises the other
    layout), one scoring only the test references' ids and the even ids (output_vocab = target), and
    one with a GELU FFN and a bias on the logits."""
    mf = load_model_file(trained_run)
    if request.param == "target":
        references = mf.tgt_tokenizer.encode_batch((corpus / "test.de").read_text().splitlines())
        mf = with_output_vocab(mf, [i for line in references for i in line] + list(range(0, 200, 2)))
    if request.param == "gelu-bias":
        mf = variant(mf, activation="gelu", output_bias=True)
    if request.param == "pre":
        from mtkit.model.transformer import Transformer

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
    ct2_scores = engine.score_batch(
        [[src_tok.id_to_token(i) for i in s] + ["</s>"] for s in src_ids],
        [[tgt_tok.id_to_token(i) for i in t] for t in tgt_ids],
    )
    model = model_file.build_model()
    for s, t, scored in zip(src_ids, tgt_ids, ct2_scores):
        with torch.no_grad():
            lprobs = F.log_softmax(model(torch.tensor([s + [EOS_ID]]), torch.tensor([[BOS_ID] + t]))[0], dim=-1)
        ours = lprobs.gather(1, torch.tensor(t + [EOS_ID])[:, None]).squeeze(1)
        assert torch.allclose(torch.tensor(scored.log_probs), ours, atol=1e-4)


def test_greedy_translations_are_identical(model_file, corpus, tmp_path):
    export_ctranslate2(model_file, tmp_path / "ct2")
    cfg = SearchConfig(beam=1, max_len_a=1.0, max_len_b=5, loop_ngram=0)
    lines = (corpus / "test.en").read_text().splitlines()
    ours = Translator(model_file, cfg, device="cpu", precision="fp32").translate(lines)
    theirs = CTranslate2Translator(tmp_path / "ct2", cfg, device="cpu", compute_type="float32").translate(lines)
    assert ours == theirs


@pytest.mark.parametrize(
    "beam,lenpen,nbest,eos_scale", [(1, 1.0, 1, 3.0), (4, 0.6, 2, 1.5), (4, 1.0, 4, 2.0), (4, 0.0, 1, 1.5)]
)
def test_one_call_under_the_largest_limit_equals_a_call_per_limit(
    trained_run, corpus, tmp_path, beam, lenpen, nbest, eos_scale
):
    """The engine decodes everything under the largest length limit and, in beam search, decodes
    again only the searches that ran up to their own limit (greedy search stops each sentence at its
    own limit by CTranslate2's step callback); reference: one CTranslate2 call per distinct limit.
    Short limits (a = 0.5, b = 3) and a rescaled </s> embedding make the tiny model stop early on
    some sentences and run into the limit on others, so both paths are taken."""
    model_file = load_model_file(trained_run)
    model_file.weights["tgt_embed.tokens.weight"][EOS_ID] *= eos_scale
    export_ctranslate2(model_file, tmp_path / "ct2")
    cfg = SearchConfig(beam=beam, lenpen=lenpen, nbest=nbest, max_len_a=0.5, max_len_b=3)
    engine = CTranslate2Translator(tmp_path / "ct2", cfg, device="cpu", compute_type="float32")
    src_tok, tgt_tok = model_file.src_tokenizer, model_file.tgt_tokenizer
    lines = (corpus / "train.en").read_text().splitlines()[:60]
    sources = [[src_tok.id_to_token(i) for i in row] + ["</s>"] for row in src_tok.encode_batch(lines)]
    limits = [max(1, int(0.5 * (len(s) - 1) + 3)) for s in sources]
    expected = {}
    for limit in set(limits):
        group = [i for i, value in enumerate(limits) if value == limit]
        results = engine.translator.translate_batch(
            [sources[i] for i in group],
            beam_size=beam,
            num_hypotheses=nbest,
            length_penalty=lenpen,
            max_decoding_length=limit,
            return_scores=True,
            suppress_sequences=engine.suppressed,
        )
        expected.update(
            {
                i: [(r, pytest.approx(score, abs=1e-5)) for r, score in zip(result.hypotheses, result.scores)]
                for i, result in zip(group, results)
            }
        )
    got = engine._search(src_tok.encode_batch(lines))
    reached = sum(len(hyps[0].tokens) >= limit for hyps, limit in zip(got, limits))
    assert 0 < reached < len(sources)
    assert [[([tgt_tok.id_to_token(t) for t in h.tokens], h.score) for h in hyps] for hyps in got] == [
        expected[i] for i in range(len(sources))
    ]


def test_export_and_engine_through_the_cli(trained_run, corpus, tmp_path):
    result = run_mtkit("export", "-m", trained_run, "-o", tmp_path / "ct2", "--quantization", "int8")
    assert result.returncode == 0, result.stderr.decode()
    translated = run_mtkit(
        "translate", "--engine", "ctranslate2", "-m", tmp_path / "ct2", "--beam", "2", stdin=b"A dog.\n\nTwo cats.\n"
    )
    assert translated.returncode == 0, translated.stderr.decode()
    engine = CTranslate2Translator(tmp_path / "ct2", SearchConfig(beam=2, lenpen=0.6), device="cpu")
    assert translated.stdout.decode().split("\n") == engine.translate(["A dog.", "", "Two cats."]) + [""]
    scored = run_mtkit(
        "evaluate",
        "--engine",
        "ctranslate2",
        "-m",
        tmp_path / "ct2",
        "--src",
        corpus / "test.en",
        "--ref",
        corpus / "test.de",
        "--json",
    )
    assert scored.returncode == 0, scored.stderr.decode()
    beam5 = CTranslate2Translator(tmp_path / "ct2", SearchConfig(beam=5, lenpen=0.6), device="cpu")
    hypotheses = beam5.translate((corpus / "test.en").read_text().splitlines())
    expected = sacrebleu.corpus_bleu(hypotheses, [(corpus / "test.de").read_text().splitlines()]).score
    assert json.loads(scored.stdout)["bleu"]["score"] == pytest.approx(expected, abs=1e-4)
    again = run_mtkit("export", "-m", trained_run, "-o", tmp_path / "ct2")
    assert again.returncode == 1 and "already exists" in again.stderr.decode()


def test_engine_refuses_a_plain_model_directory(trained_run):
    with pytest.raises(MtkitError, match="not an exported mtkit CTranslate2 model"):
        CTranslate2Translator(trained_run, SearchConfig())


def test_both_engines_translate_a_long_line_in_the_same_pieces(model_file, corpus, tmp_path):
    """One policy for lines over the model's training length (its data's --max-len, 250), in both
    engines: translated in pieces (mtkit.translation.sentences), each searched alone, the translations joined,
    and a warning that names the line."""
    export_ctranslate2(model_file, tmp_path / "ct2")
    words = (corpus / "train.en").read_text().split()
    long_line = " ".join(words[:1500])
    ids = model_file.src_tokenizer.encode_batch([long_line])[0]
    assert len(ids) > MAX_SOURCE_TOKENS
    lines = ["A dog runs.", long_line, "Two men talk."]
    cfg = SearchConfig(beam=1, max_len_a=0, max_len_b=6, loop_ngram=0)
    ours = Translator(model_file, cfg, device="cpu", precision="fp32")
    (pieces,) = ours.segmenter.pieces([long_line], [ids])
    assert ours.segmenter.max_len == 250 and all(len(piece) <= 250 for piece in pieces) and len(pieces) > 4
    found = ours._search(pieces)
    expected = " ".join(text for text in ours.tgt_tokenizer.decode_batch([h[0].tokens for h in found]) if text)
    ct2 = CTranslate2Translator(tmp_path / "ct2", cfg, device="cpu", compute_type="float32")
    assert ours.translate(lines)[1] == ct2.translate(lines)[1] == expected
    save_model_file(tmp_path / "model.pt", model_file)
    stdin = "".join(line + "\n" for line in lines).encode()
    for engine, model in (("pytorch", tmp_path / "model.pt"), ("ctranslate2", tmp_path / "ct2")):
        result = run_mtkit(
            "translate", "--engine", engine, "-m", model, "--beam", "1", "--max-len-a", "0", "--max-len-b", "6",
            "--loop-ngram", "0", "--precision", "fp32",  # as above: a CPU with bf16 would choose it
            stdin=stdin,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
        assert result.stdout.decode().splitlines()[1] == expected
        stderr = result.stderr.decode()
        assert f"line 2: {len(ids):,} subwords, more than 250: translated in {len(pieces)} pieces" in stderr


@pytest.mark.parametrize("engine", ["pytorch", "ctranslate2"])
def test_each_line_is_handed_over_once_with_what_is_returned(model_file, corpus, tmp_path, engine):
    """translate_hypotheses(on_line=...) gives every line, blank ones included, exactly once."""
    cfg = SearchConfig(beam=3, nbest=2, max_len_a=1.0, max_len_b=5)
    lines = (corpus / "test.en").read_text().splitlines()[:12]
    lines[3] = lines[7] = "  "
    if engine == "pytorch":
        translator = Translator(model_file, cfg, device="cpu", precision="fp32", batch_size=5)
    else:
        export_ctranslate2(model_file, tmp_path / "ct2")
        translator = CTranslate2Translator(tmp_path / "ct2", cfg, device="cpu", compute_type="float32")
    handed: list[tuple[int, list]] = []
    returned = translator.translate_hypotheses(lines, on_line=lambda i, nbest: handed.append((i, nbest)))
    assert sorted(i for i, _ in handed) == list(range(len(lines)))
    assert [nbest for _, nbest in sorted(handed, key=lambda item: item[0])] == returned
    assert returned[3] == returned[7] == [] and all(len(returned[i]) == 2 for i in (0, 1, 2, 4))
