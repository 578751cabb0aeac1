"""mtkit import: a MarianMT directory (OPUS-MT's layout) becomes an mtkit model file that tokenizes and
computes what transformers does: the same ids, logits within 1e-4, the same greedy translations."""

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import AS_GIVEN, as_given, perturb_layer_norms, run_mtkit

from mtkit.decoding.search import SearchConfig
from mtkit.interop.marian import import_marian
from mtkit.model.files import load_model_file, save_model_file
from mtkit.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNPRODUCED
from mtkit.translation.translate import Translator

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install -e .[dev])")
spm = pytest.importorskip("sentencepiece", reason="needs sentencepiece (pip install -e .[dev])")

# Punctuation, digits, accents, characters in neither vocabulary or only in the other side's, spaces,
# "<". (Not typed "</s>": MarianTokenizer takes it for the control token, mtkit keeps it text, as a
# test below checks.)
SOURCES = [
    "Zwei Kinder spielen am Strand mit einem roten Ball.",  # ä, ß and capitals the English model lacks
    "A man runs on the street.",
    "Three men wait in the park with a green toy.",
    "3 dogs, 12 hats & 1 ball!",
    "Café résumé – “quotes” 😀 日本",
    "  two   spaces  around ",
    "a <b> tag",
]
TARGETS = [
    "Ein Mann läuft auf der Straße.",
    "Zwei Kinder spielen am Strand mit einem roten Ball.",
    "3 Hunde, 12 Hüte & 1 Ball!",
    "Café – „Zitate“ 😀 日本",
    "  zwei   Leerzeichen  ",
    "ein <b> Ball",
    "Three men wait in the park.",  # T, h, ... the German model lacks
]


@pytest.fixture(scope="module")
def marian_dir(corpus, tmp_path_factory):
    """A small random MarianMTModel (swish FFN, a random final_logits_bias and LayerNorms) with two
    SentencePiece models trained here and a joint vocab.json in Marian's order, as transformers saves it."""
    return build_marian(tmp_path_factory.mktemp("marian"), corpus, "opus-mt-en-de")


def build_marian(root, corpus, name: str, extra_tokens: tuple[str, ...] = ()):
    """The directory of such a model under root/name; extra_tokens join the vocabulary (>>fra<< ...)."""
    for lang in ("en", "de"):
        spm.SentencePieceTrainer.train(
            input=str(corpus / f"train.{lang}"), model_prefix=str(root / lang), vocab_size=60, hard_vocab_limit=False,
            model_type="unigram", character_coverage=1.0, minloglevel=2,
        )  # fmt: skip
    pieces = []
    for lang in ("en", "de"):
        processor = spm.SentencePieceProcessor(model_file=str(root / f"{lang}.model"))
        pieces += [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    ordered = ["</s>", "<unk>", *extra_tokens] + sorted(set(pieces) - {"</s>", "<unk>", "<s>"}) + ["<pad>"]
    (root / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(ordered)}), encoding="utf-8")
    pad = len(ordered) - 1
    config = transformers.MarianConfig(
        vocab_size=len(ordered), decoder_vocab_size=len(ordered), d_model=16, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        max_position_embeddings=128, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad,
        activation_function="swish", scale_embedding=True, init_std=0.3, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_()
    perturb_layer_norms(model)
    directory = root / name
    model.save_pretrained(directory)
    tokenizer = transformers.MarianTokenizer(str(root / "en.model"), str(root / "de.model"), str(root / "vocab.json"))
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def imported(marian_dir, tmp_path_factory):
    model_file = import_marian(marian_dir, tmp_path_factory.mktemp("imported") / "en-de.pt")
    hf_model = transformers.MarianMTModel.from_pretrained(marian_dir).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(marian_dir)
    return model_file, hf_model, tokenizer


def marian_to_mtkit(model_file, tokenizer) -> dict[int, int]:
    """Marian id -> mtkit id, through the tokens (Marian's <pad> starts decoding: mtkit's <s>)."""
    hf = model_file.src_tokenizer._hf
    out = {i: hf.token_to_id(t) if hf.token_to_id(t) is not None else hf.token_to_id(UNPRODUCED + t)
           for t, i in tokenizer.get_vocab().items()}  # fmt: skip
    out[tokenizer.pad_token_id] = BOS_ID
    return out


def test_tokenization_is_marian_s(imported):
    model_file, _, tokenizer = imported
    to_mtkit = marian_to_mtkit(model_file, tokenizer)
    for source, target in zip(SOURCES, TARGETS):
        expected = [to_mtkit[i] for i in tokenizer(source)["input_ids"]]
        assert model_file.src_tokenizer.encode_batch([source])[0] + [EOS_ID] == expected, source
        expected = [to_mtkit[i] for i in tokenizer(text_target=target)["input_ids"]]
        assert model_file.tgt_tokenizer.encode_batch([target])[0] + [EOS_ID] == expected, target


@torch.no_grad()
def test_logits_match_within_1e_4(imported):
    model_file, hf_model, tokenizer = imported
    to_mtkit = marian_to_mtkit(model_file, tokenizer)
    ours = model_file.build_model()
    assert model_file.config.activation == "swish" and model_file.config.output_bias
    columns = torch.tensor([to_mtkit[i] for i in range(len(to_mtkit)) if i != tokenizer.pad_token_id])
    for source, target in zip(SOURCES, TARGETS):
        src = tokenizer(source, return_tensors="pt")["input_ids"]
        tgt_in = torch.tensor([[tokenizer.pad_token_id] + tokenizer(text_target=target)["input_ids"][:-1]])
        expected = hf_model(input_ids=src, decoder_input_ids=tgt_in).logits
        got = ours(src.apply_(to_mtkit.get), tgt_in.apply_(to_mtkit.get))
        assert int(tgt_in[0, 0]) == BOS_ID
        real = [i for i in range(len(to_mtkit)) if i != tokenizer.pad_token_id]
        torch.testing.assert_close(got[..., columns], expected[..., real], rtol=0, atol=1e-4)


def target_log_probs(model, src: torch.Tensor, tgt_in: torch.Tensor, labels: torch.Tensor, hf: bool) -> torch.Tensor:
    """(1, T) log-probabilities of the labels under a transformers model (hf) or an mtkit one."""
    logits = model(input_ids=src, decoder_input_ids=tgt_in).logits if hf else model(src, tgt_in)
    return F.log_softmax(logits.double(), dim=-1).gather(2, labels[..., None]).squeeze(2)


@torch.no_grad()
def test_scores_are_transformers_log_probabilities(imported, tmp_path):
    """Marian's decoder-start row (its <pad>, mtkit's <s> and <pad>) has one place in mtkit's output
    distribution, as in MarianMT's softmax: every target token's log-probability is transformers'
    within 1e-5, and `mtkit score` prints their sums within 1e-4."""
    model_file, hf_model, tokenizer = imported
    to_mtkit = marian_to_mtkit(model_file, tokenizer)
    ours = model_file.build_model()
    sums = []
    for source, target in zip(SOURCES, TARGETS):
        src = tokenizer(source, return_tensors="pt")["input_ids"]
        labels = tokenizer(text_target=target, return_tensors="pt")["input_ids"]
        tgt_in = torch.cat([torch.tensor([[tokenizer.pad_token_id]]), labels[:, :-1]], dim=1)
        theirs = target_log_probs(hf_model, src, tgt_in, labels, hf=True)
        mapped = [t.clone().apply_(to_mtkit.get) for t in (src, tgt_in, labels)]
        torch.testing.assert_close(target_log_probs(ours, *mapped, hf=False), theirs, rtol=0, atol=1e-5)
        sums.append(float(theirs.sum()))
    save_model_file(tmp_path / "m.pt", model_file)
    (tmp_path / "src").write_text("".join(f"{s}\n" for s in SOURCES), encoding="utf-8")
    (tmp_path / "tgt").write_text("".join(f"{t}\n" for t in TARGETS), encoding="utf-8")
    scored = run_mtkit("score", "-m", tmp_path / "m.pt", "--src", tmp_path / "src", "--tgt", tmp_path / "tgt",
                       "--precision", "fp32")  # fmt: skip
    assert scored.returncode == 0, scored.stderr.decode()
    assert [float(line) for line in scored.stdout.decode().split()] == pytest.approx(sums, abs=1e-4)


def test_import_reports_the_directory_s_vocabulary(marian_dir, tmp_path):
    result = run_mtkit("import", marian_dir, "-o", tmp_path / "m.pt")
    assert result.returncode == 0, result.stderr.decode()
    rows = len(json.loads((marian_dir / "vocab.json").read_text()))
    assert f" {rows:,} subwords (vocab.json's, and <s> for the decoder's start)" in result.stderr.decode()
    model_file = load_model_file(tmp_path / "m.pt")
    assert model_file.config.tgt_vocab_size == rows + 1
    assert model_file.build_model().output.ids().tolist() == [i for i in range(rows + 1) if i != BOS_ID]


def test_greedy_translations_are_transformers(imported, corpus):
    model_file, hf_model, tokenizer = imported
    sources = (corpus / "test.en").read_text().splitlines()[:10] + SOURCES
    limit = 12
    ours = as_given(Translator(
        model_file, SearchConfig(beam=1, max_len_a=0, max_len_b=limit, loop_ngram=0), device="cpu", precision="fp32"
    ))  # fmt: skip
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    generated = hf_model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=limit,
                                  forced_eos_token_id=None, bad_words_ids=[[tokenizer.pad_token_id]])  # fmt: skip
    assert ours.translate(sources) == tokenizer.batch_decode(generated, skip_special_tokens=True)


def test_an_imported_model_keeps_numbers_links_and_placeholders_exactly(imported):
    """Spans are kept by the text stage alone: an imported model with random weights, which copies
    nothing, gives every one of them back, as written, and a line's every sentence."""
    model_file, _, _ = imported
    ours = Translator(model_file, SearchConfig(beam=2, max_len_b=12), device="cpu", precision="fp32")
    lines = [
        "At 7:45 a man pays $5.99 to anna@example.com.",
        "See https://example.org/a?b=1 or %s and {name}. 😀 2019!",
    ]
    spans = [["7:45", "$5.99", "anna@example.com"], ["https://example.org/a?b=1", "%s", "{name}", "😀", "2019"]]
    for line, expected, out in zip(lines, spans, ours.translate(lines)):
        assert all(out.count(span) == 1 for span in expected), (line, out)


def test_typed_special_tokens_stay_text(imported):
    model_file, _, _ = imported
    for tokenizer in (model_file.src_tokenizer, model_file.tgt_tokenizer):
        ids = tokenizer.encode_batch(["</s> <unk> <pad> <s>"])[0]
        assert ids and not set(ids) & {PAD_ID, BOS_ID, EOS_ID}


def test_the_cli_imports_and_refuses_what_is_not_marian(marian_dir, tmp_path):
    result = run_mtkit("import", marian_dir, "-o", tmp_path / "m.pt")
    assert result.returncode == 0, result.stderr.decode()
    assert load_model_file(tmp_path / "m.pt").config.activation == "swish"
    assert (tmp_path / "m.src-tokenizer.json").is_file() and (tmp_path / "m.tgt-tokenizer.json").is_file()
    again = run_mtkit("import", marian_dir, "-o", tmp_path / "m.pt")
    assert again.returncode == 1 and "use --force" in again.stderr.decode()
    missing = run_mtkit("import", tmp_path / "nowhere", "-o", tmp_path / "x.pt")
    assert missing.returncode == 1 and "config.json: missing" in missing.stderr.decode()
    other = tmp_path / "bart"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "bart"}))
    (other / "vocab.json").write_text("{}")
    (other / "model.safetensors").write_bytes((marian_dir / "model.safetensors").read_bytes())
    refused = run_mtkit("import", other, "-o", tmp_path / "y.pt")
    assert refused.returncode == 1 and "is not MarianMT's" in refused.stderr.decode()
    for result in (again, missing, refused):
        assert len(result.stderr.decode().strip().splitlines()) == 1
    assert not (tmp_path / "x.pt").exists() and not (tmp_path / "y.pt").exists()


def test_the_imported_model_scores_and_serves_as_it_translates(marian_dir, corpus, tmp_path):
    from test_serve import Server, offline

    assert run_mtkit("import", marian_dir, "-o", tmp_path / "m.pt").returncode == 0
    sources = (corpus / "test.en").read_text().splitlines()[:4]
    translations = offline(tmp_path / "m.pt", sources)
    (tmp_path / "hyp.de").write_text("".join(f"{t}\n" for t in translations))
    (tmp_path / "src.en").write_text("".join(f"{s}\n" for s in sources))
    scored = run_mtkit("score", "-m", tmp_path / "m.pt", "--src", tmp_path / "src.en", "--tgt", tmp_path / "hyp.de")
    assert scored.returncode == 0, scored.stderr.decode()
    assert len(scored.stdout.decode().splitlines()) == len(sources)
    server = Server(tmp_path / "m.pt", tmp_path / "serve.log")
    try:
        response = server.post("/v1/translate", json={"text": sources})
        assert response.status_code == 200, response.text
        assert response.json()["translations"] == translations
    finally:
        assert server.stop() == 0


def test_a_vocabulary_that_does_not_match_the_weights_is_refused(marian_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for path in marian_dir.iterdir():
        (broken / path.name).write_bytes(path.read_bytes())
    vocab = json.loads((broken / "vocab.json").read_text())
    vocab.pop(next(t for t in vocab if t not in ("</s>", "<unk>", "<pad>")))
    (broken / "vocab.json").write_text(json.dumps(vocab))
    result = run_mtkit("import", broken, "-o", tmp_path / "b.pt")
    assert result.returncode == 1 and "do not match the weights'" in result.stderr.decode()
    assert not (tmp_path / "b.pt").exists()


def test_the_imported_model_fine_tunes_and_exports_back(marian_dir, corpus, tmp_path):
    """Preprocess with the imported tokenizers, train --init-from the model, then export the
    fine-tuned model to transformers (MarianMT again: the same logits) and to CTranslate2 (the same
    translations)."""
    assert run_mtkit("import", marian_dir, "-o", tmp_path / "m.pt").returncode == 0
    prepared = run_mtkit("preprocess", "-s", "en", "-t", "de", "--train", corpus / "train", "--valid", corpus / "valid",
                         "--tokenizer", tmp_path / "m.src-tokenizer.json", "--tgt-tokenizer",
                         tmp_path / "m.tgt-tokenizer.json", "-o", tmp_path / "bin")  # fmt: skip
    assert prepared.returncode == 0, prepared.stderr.decode()
    tuned = run_mtkit("train", "-d", tmp_path / "bin", "-o", tmp_path / "ft", "--init-from", tmp_path / "m.pt",
                      "--set", "train.max_steps=40", "--set", "train.max_tokens=400", "--set", "train.valid_every=40",
                      "--set", "train.lr=3e-3", "--set", "train.warmup=5",
                      "--set", "train.precision=fp32", "--set", "train.device=cpu")  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr.decode()
    model_file = load_model_file(tmp_path / "ft")
    sources = (corpus / "test.en").read_text().splitlines()[:8]
    limit = 10
    ours = Translator(
        model_file, SearchConfig(beam=1, max_len_a=0, max_len_b=limit, loop_ngram=0), device="cpu", precision="fp32"
    )
    expected = ours.translate(sources)
    exported = run_mtkit("export", "-m", tmp_path / "ft", "--format", "huggingface", "-o", tmp_path / "hf")
    assert exported.returncode == 0, exported.stderr.decode()
    # The logits on mtkit's ids: the exported fast tokenizer cannot look up an unknown run in the
    # joint vocabulary (it gives <unk> there; see docs/REFERENCE.md)
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf").eval()
    ours = model_file.build_model()
    with torch.no_grad():
        for source, target in zip(sources, (corpus / "test.de").read_text().splitlines()):
            src = torch.tensor([model_file.src_tokenizer.encode_batch([source])[0] + [EOS_ID]])
            tgt_in = torch.tensor([[BOS_ID] + model_file.tgt_tokenizer.encode_batch([target])[0]])
            expected_logits = ours(src, tgt_in)
            got = hf_model(input_ids=src, decoder_input_ids=tgt_in).logits
            torch.testing.assert_close(got, expected_logits, rtol=0, atol=1e-4)
            labels = torch.tensor([tgt_in[0, 1:].tolist() + [EOS_ID]])
            theirs = target_log_probs(hf_model, src, tgt_in, labels, hf=True)
            torch.testing.assert_close(target_log_probs(ours, src, tgt_in, labels, hf=False), theirs, rtol=0, atol=1e-4)
    ct2 = run_mtkit("export", "-m", tmp_path / "ft", "-o", tmp_path / "ct2")
    assert ct2.returncode == 0, ct2.stderr.decode()
    translated = run_mtkit("translate", "-m", tmp_path / "ct2", "--engine", "ctranslate2", "--beam", "1",
                           "--max-len-a", "0", "--max-len-b", str(limit), "--loop-ngram", "0", stdin="\n".join(sources).encode())  # fmt: skip
    assert translated.stdout.decode().splitlines() == expected


def test_beam_translations_are_transformers(imported, corpus):
    """Beam 4, no length penalty on either side, all beams finished before the search stops; one
    sentence at a time, so that neither side's padding moves a near tie of this random model."""
    model_file, hf_model, tokenizer = imported
    limit = 12
    cfg = SearchConfig(beam=4, lenpen=0.0, max_len_a=0, max_len_b=limit, loop_ngram=0)
    ours = as_given(Translator(model_file, cfg, device="cpu", precision="fp32"))
    for source in (corpus / "test.en").read_text().splitlines()[:10] + SOURCES:
        generated = hf_model.generate(**tokenizer([source], return_tensors="pt"), num_beams=4, do_sample=False,
                                      length_penalty=0.0, early_stopping=True, max_new_tokens=limit,
                                      forced_eos_token_id=None, bad_words_ids=[[tokenizer.pad_token_id]])  # fmt: skip
        assert ours.translate([source]) == tokenizer.batch_decode(generated, skip_special_tokens=True), source


MULTILINGUAL_TAGS = (">>fra<<", ">>spa<<", ">>por<<")


def test_a_multilingual_model_translates_into_the_language_its_tag_chooses(corpus, tmp_path):
    """A MarianMTModel whose vocabulary holds >>fra<<, >>spa<< and >>por<<: --tgt-lang puts the tag
    before every source, and each language's translations are generate()'s for ">>xxx<< text";
    the ISO 639-1 code works where it names one tag; without --tgt-lang, the model is refused."""
    directory = build_marian(tmp_path, corpus, "opus-mt-en-ROMANCE", MULTILINGUAL_TAGS)
    result = run_mtkit("import", directory, "-o", tmp_path / "mul.pt")
    assert result.returncode == 0, result.stderr.decode()
    assert "translates into 3 languages, chosen with --tgt-lang: fra, por, spa" in result.stderr.decode()
    model_file = load_model_file(tmp_path / "mul.pt")
    assert model_file.meta["target_tags"] == {"fra": ">>fra<<", "spa": ">>spa<<", "por": ">>por<<"}
    hf_model = transformers.MarianMTModel.from_pretrained(directory).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(directory)
    sources = (corpus / "test.en").read_text().splitlines()[:8] + SOURCES[:4]
    limit = 12
    cfg = SearchConfig(beam=1, max_len_a=0, max_len_b=limit, loop_ngram=0)
    ours = as_given(Translator(model_file, cfg, device="cpu", precision="fp32"))
    outputs = {}
    for lang in ("fra", "spa", "por"):
        batch = tokenizer([f">>{lang}<< {line}" for line in sources], return_tensors="pt", padding=True)
        generated = hf_model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=limit,
                                      forced_eos_token_id=None, bad_words_ids=[[tokenizer.pad_token_id]])  # fmt: skip
        ours.set_target(lang)
        outputs[lang] = ours.translate(sources)
        assert outputs[lang] == tokenizer.batch_decode(generated, skip_special_tokens=True)
    assert len({tuple(lines) for lines in outputs.values()}) == 3  # the tag chooses
    stdin = "".join(line + "\n" for line in sources).encode()
    options = ("--beam", "1", "--max-len-a", "0", "--max-len-b", str(limit), "--loop-ngram", "0", *AS_GIVEN)
    by_iso = run_mtkit("translate", "-m", tmp_path / "mul.pt", "--tgt-lang", "es", *options, stdin=stdin)
    assert by_iso.returncode == 0 and by_iso.stdout.decode().splitlines() == outputs["spa"]
    refused = run_mtkit("translate", "-m", tmp_path / "mul.pt", *options, stdin=stdin)
    assert refused.returncode == 1
    assert "choose one with --tgt-lang (fra, por, spa)" in refused.stderr.decode()
    wrong = run_mtkit("translate", "-m", tmp_path / "mul.pt", "--tgt-lang", "de", *options, stdin=stdin)
    assert wrong.returncode == 1 and "--tgt-lang de: this model translates into fra, por, spa" in wrong.stderr.decode()


@torch.no_grad()
def test_a_multilingual_model_scores_with_its_target_s_tag(corpus, tmp_path):
    """`mtkit score --tgt-lang por` gives transformers' log-probabilities of ">>por<< source"."""
    directory = build_marian(tmp_path, corpus, "opus-mt-en-ROMANCE", MULTILINGUAL_TAGS)
    import_marian(directory, tmp_path / "mul.pt")
    hf_model = transformers.MarianMTModel.from_pretrained(directory).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(directory)
    sums = []
    for source, target in zip(SOURCES, TARGETS):
        src = tokenizer(f">>por<< {source}", return_tensors="pt")["input_ids"]
        labels = tokenizer(text_target=target, return_tensors="pt")["input_ids"]
        tgt_in = torch.cat([torch.tensor([[tokenizer.pad_token_id]]), labels[:, :-1]], dim=1)
        sums.append(float(target_log_probs(hf_model, src, tgt_in, labels, hf=True).sum()))
    (tmp_path / "src").write_text("".join(f"{s}\n" for s in SOURCES), encoding="utf-8")
    (tmp_path / "tgt").write_text("".join(f"{t}\n" for t in TARGETS), encoding="utf-8")
    scored = run_mtkit("score", "-m", tmp_path / "mul.pt", "--src", tmp_path / "src", "--tgt", tmp_path / "tgt",
                       "--precision", "fp32", "--tgt-lang", "por")  # fmt: skip
    assert scored.returncode == 0, scored.stderr.decode()
    assert [float(line) for line in scored.stdout.decode().split()] == pytest.approx(sums, abs=1e-4)


def test_an_imported_model_places_glossary_terms_in_its_own_pieces(imported, tmp_path):
    """A target term is encoded by the imported SentencePiece vocabulary, and every translation holds
    it; a term that vocabulary cannot write (no byte fallback) is refused naming its glossary line."""
    from mtkit.core.errors import MtkitError
    from mtkit.translation.terminology import use_glossary

    model_file, _, _ = imported
    translator = Translator(model_file, SearchConfig(beam=4, max_len_b=20), device="cpu", precision="fp32")
    (tmp_path / "g.tsv").write_text("dog\tHund\nbeach\tStrand\n", encoding="utf-8")
    use_glossary(translator, tmp_path / "g.tsv")
    lines = ["A dog runs at the beach.", "A woman sits on the grass."]
    found = translator.translate_hypotheses(lines)
    for (best, text), wanted in zip((nbest[0] for nbest in found), (["Hund", "Strand"], [])):
        assert best.missed_constraints == 0
        assert all(term in text for term in wanted)
    (tmp_path / "snow.tsv").write_text("# weather\nsnowman\t\u2603\n", encoding="utf-8")
    with pytest.raises(MtkitError, match=r"snow.tsv line 2: the model's target vocabulary cannot write '\u2603'$"):
        use_glossary(translator, tmp_path / "snow.tsv")
