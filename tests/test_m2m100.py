"""mtkit import of NLLB-200 and M2M100 directories (M2M100ForConditionalGeneration): small random models
of both families, built with transformers around SentencePiece models trained here (NLLB's BPE,
M2M100's unigram), tokenize, score and translate as transformers does, the target language given
as forced_bos_token_id gives it."""

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import run_mtkit

from mtkit.decoding.search import SearchConfig
from mtkit.interop.m2m100 import import_m2m100
from mtkit.model.files import load_model_file
from mtkit.text.tokenizer import BOS_ID, UNPRODUCED
from mtkit.translation.forced_decoding import Scorer
from mtkit.translation.translate import Translator

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install -e .[dev])")
spm = pytest.importorskip("sentencepiece", reason="needs sentencepiece (pip install -e .[dev])")

NLLB_LANGUAGES = ["eng_Latn", "deu_Latn", "fra_Latn", "zho_Hans", "zho_Hant"]
SOURCES = ["A man runs on the street.", "3 dogs, 12 hats & 1 ball!", "Café résumé – “quotes” 😀 日本", "a <b> tag"]
TARGETS = ["Ein Mann läuft auf der Straße.", "3 Hunde, 12 Hüte & 1 Ball!", "Café – „Zitate“ 😀", "ein <b> Ball"]
FAMILIES = {"nllb": ("eng_Latn", ["deu_Latn", "fra_Latn"]), "m2m100": ("en", ["de", "fr"])}


def build(root, corpus, family: str):
    """A random M2M100ForConditionalGeneration with the family's tokenizer, saved as transformers saves it."""
    kind = "bpe" if family == "nllb" else "unigram"
    spm.SentencePieceTrainer.train(
        input=f"{corpus / 'train.en'},{corpus / 'train.de'}", model_prefix=str(root / kind), vocab_size=150,
        hard_vocab_limit=False, model_type=kind, character_coverage=1.0, minloglevel=2,
    )  # fmt: skip
    if family == "nllb":
        tokenizer = transformers.NllbTokenizer(str(root / f"{kind}.model"), additional_special_tokens=NLLB_LANGUAGES)
    else:
        processor = spm.SentencePieceProcessor(model_file=str(root / f"{kind}.model"))
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        for i in range(3, processor.get_piece_size()):
            vocab[processor.id_to_piece(i)] = len(vocab)
        (root / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
        tokenizer = transformers.M2M100Tokenizer(str(root / "vocab.json"), str(root / f"{kind}.model"))
    # rows no token names after the vocabulary, as the published models have (M2M100's 8 "madeup words")
    rows = len(tokenizer.get_vocab()) + 2 if family == "nllb" else len(vocab) + len(tokenizer.lang_code_to_id) + 8
    config = transformers.M2M100Config(
        vocab_size=rows, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=256,
        scale_embedding=True, init_std=0.3, dropout=0.0, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.M2M100ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0, 0.1)
    directory = root / family
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, corpus, tmp_path_factory):
    """(family, directory, imported model file, transformers model, its tokenizer class)."""
    name = request.param
    directory = build(tmp_path_factory.mktemp(name), corpus, name)
    model_file = import_m2m100(directory, tmp_path_factory.mktemp("imported") / f"{name}.pt")
    hf_model = transformers.M2M100ForConditionalGeneration.from_pretrained(directory).eval()
    tokenizer_class = transformers.NllbTokenizer if name == "nllb" else transformers.M2M100Tokenizer
    return name, directory, model_file, hf_model, tokenizer_class


def to_mtkit(model_file, tokenizer) -> dict[int, int]:
    """fairseq id -> mtkit id, through the tokens (</s> starts the decoder: mtkit's <s> there)."""
    hf = model_file.src_tokenizer._hf
    out = {}
    for token, i in {**tokenizer.get_vocab(), **getattr(tokenizer, "lang_token_to_id", {})}.items():
        name = "<s:fairseq>" if token == "<s>" else token
        found = hf.token_to_id(name)
        out[i] = found if found is not None else hf.token_to_id(UNPRODUCED + name)
    for i in range(model_file.config.tgt_vocab_size - 1):  # the rows no token names
        out.setdefault(i, hf.token_to_id(f"<unused-{i}>"))
    return out


def test_tokenization_is_transformers(family):
    name, directory, model_file, _, tokenizer_class = family
    source_lang, (target_lang, _) = FAMILIES[name]
    tokenizer = tokenizer_class.from_pretrained(directory, src_lang=source_lang, tgt_lang=target_lang)
    mapping = to_mtkit(model_file, tokenizer)
    assert None not in mapping.values()
    translator = Translator(model_file, SearchConfig(beam=1), device="cpu", precision="fp32")
    translator.set_target(target_lang, source_lang)
    for line in SOURCES:
        expected = [mapping[i] for i in tokenizer(line)["input_ids"]]
        assert translator.tagged(model_file.src_tokenizer.encode_batch([line]))[0] + [3] == expected, line


@torch.no_grad()
def test_log_probabilities_and_scores_are_transformers(family, tmp_path):
    """Every target token's log-probability within 1e-5 of log_softmax(model(...).logits); `mtkit
    score` sums them, the target language's token given (not scored), as generate gives it."""
    name, directory, model_file, hf_model, tokenizer_class = family
    source_lang, (target_lang, _) = FAMILIES[name]
    tokenizer = tokenizer_class.from_pretrained(directory, src_lang=source_lang, tgt_lang=target_lang)
    mapping = to_mtkit(model_file, tokenizer)
    ours = model_file.build_model()
    sums = []
    for source, target in zip(SOURCES, TARGETS):
        src = tokenizer(source, return_tensors="pt")["input_ids"]
        labels = tokenizer(text_target=target, return_tensors="pt")["input_ids"]  # tgt_lang ... </s>
        tgt_in = torch.cat([torch.tensor([[2]]), labels[:, :-1]], dim=1)
        theirs = F.log_softmax(hf_model(input_ids=src, decoder_input_ids=tgt_in).logits.double(), dim=-1)
        theirs = theirs.gather(2, labels[..., None]).squeeze(2)
        src, tgt_in, labels = (t.clone().apply_(mapping.get) for t in (src, tgt_in, labels))
        tgt_in[0, 0] = BOS_ID  # the decoder's start: fairseq's </s>, mtkit's <s> (a copy of that row)
        mine = F.log_softmax(ours(src, tgt_in).double(), dim=-1).gather(2, labels[..., None]).squeeze(2)
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-5)
        sums.append(float(theirs[0, 1:].sum()))  # without the given language token
    scorer = Scorer(model_file, "cpu", "fp32", tgt_lang=target_lang, src_lang=source_lang)
    assert scorer.score(SOURCES, TARGETS) == pytest.approx(sums, abs=1e-4)


@pytest.mark.parametrize("beam", [1, 4])
def test_translations_are_generate_s_for_two_targets(family, corpus, beam):
    name, directory, model_file, hf_model, tokenizer_class = family
    source_lang, targets = FAMILIES[name]
    lines = (corpus / "train.en").read_text(encoding="utf-8").splitlines()[:100]
    limit = 10
    cfg = SearchConfig(beam=beam, lenpen=0.0, max_len_a=0, max_len_b=limit, loop_ngram=0)
    ours = Translator(model_file, cfg, device="cpu", precision="fp32")
    for target_lang in targets:
        tokenizer = tokenizer_class.from_pretrained(directory, src_lang=source_lang, tgt_lang=target_lang)
        ours.set_target(target_lang, source_lang)
        generated = hf_model.generate(
            **tokenizer(lines, return_tensors="pt", padding=True), num_beams=beam, do_sample=False,
            max_new_tokens=limit, length_penalty=0.0, forced_bos_token_id=tokenizer.convert_tokens_to_ids(
                tokenizer.lang_code_to_token[target_lang] if name == "m2m100" else target_lang),
        )  # fmt: skip
        mapping = to_mtkit(model_file, tokenizer)
        expected = [
            [mapping[i] for i in row[2:] if i not in (1, 2)] for row in generated.tolist()
        ]  # </s>, tgt_lang ...
        found = ours.translate_hypotheses(lines)
        assert [nbest[0][0].tokens for nbest in found] == expected, target_lang
        if name == "nllb":  # (M2M100Tokenizer's decoding keeps the language tokens that a random model writes)
            assert [nbest[0][1] for nbest in found] == tokenizer.batch_decode(generated, skip_special_tokens=True)


@pytest.fixture(scope="module")
def nllb_file(corpus, tmp_path_factory):
    """An NLLB directory imported by the CLI: (model file, the import's report)."""
    root = tmp_path_factory.mktemp("nllb-cli")
    directory = build(root, corpus, "nllb")
    result = run_mtkit("import", directory, "-o", root / "m.pt")
    assert result.returncode == 0, result.stderr.decode()
    return root / "m.pt", result.stderr.decode()


def test_the_import_says_what_it_found(nllb_file):
    path, report = nllb_file
    model_file = load_model_file(path)
    rows = model_file.config.tgt_vocab_size
    parameters = rows * 16 + sum(w.numel() for n, w in model_file.weights.items() if "layers" in n or "_norm" in n)
    assert (
        f"nllb, 2+2 layers, d_model 16, {parameters / 1e6:,.1f}M parameters, 5 languages, {rows - 1:,} subwords"
        in report
    )
    assert (path.with_suffix(".src-tokenizer.json")).is_file() and (path.with_suffix(".tgt-tokenizer.json")).is_file()


def test_iso_codes_name_the_model_s_languages(nllb_file, corpus):
    """de and deu are deu_Latn: the same translations as the model's own code, from translate and score."""
    path, _ = nllb_file
    source = (corpus / "test.en").read_bytes()
    outputs = []
    for code in ("deu_Latn", "de", "deu"):
        result = run_mtkit("translate", "-m", path, "--src-lang", "en", "--tgt-lang", code, "--precision", "fp32",
                           stdin=source)  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1] == outputs[2] and outputs[0].count(b"\n") == source.count(b"\n")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--src-lang", "en"], "this model translates between 5 languages: give --tgt-lang (e.g. deu_Latn)"),
        (["--tgt-lang", "de"], "this model translates between 5 languages: give --src-lang (e.g. deu_Latn)"),
        (
            ["--src-lang", "en", "--tgt-lang", "zh"],
            "--tgt-lang zh: several of this model's languages have that code (zho_Hans, zho_Hant)",
        ),  # fmt: skip
        (
            ["--src-lang", "xx", "--tgt-lang", "de"],
            "--src-lang xx: not one of this model's 5 languages (eng_Latn, deu_Latn, fra_Latn, zho_Hans, zho_Hant)",
        ),  # fmt: skip
    ],
)
def test_a_missing_or_wrong_language_is_one_line(nllb_file, options, message):
    path, _ = nllb_file
    for command in (["translate", "-m", path], ["score", "-m", path, "--src", "/dev/null", "--tgt", "/dev/null"]):
        result = run_mtkit(*command, *options, stdin=b"A dog.\n")
        assert result.returncode == 1 and result.stderr.decode().strip() == f"error: {message}"


@pytest.mark.parametrize("beam", [1, 4])
def test_the_ctranslate2_export_translates_as_mtkit(nllb_file, corpus, tmp_path, beam):
    pytest.importorskip("ctranslate2", reason="needs ctranslate2 (pip install -e .[ct2])")
    from mtkit.interop.ct2 import CTranslate2Translator, export_ctranslate2

    path, _ = nllb_file
    model_file = load_model_file(path)
    export_ctranslate2(model_file, tmp_path / "ct2")
    lines = (corpus / "train.en").read_text(encoding="utf-8").splitlines()[:50]
    cfg = SearchConfig(beam=beam, lenpen=0.0, max_len_a=0, max_len_b=10, loop_ngram=0)
    engines = [
        Translator(model_file, cfg, device="cpu", precision="fp32"),
        CTranslate2Translator(tmp_path / "ct2", cfg),
    ]
    for engine in engines:
        engine.set_target("fra_Latn", "eng_Latn")
    ours, theirs = (engine.translate_hypotheses(lines) for engine in engines)
    assert [n[0][0].tokens for n in theirs] == [n[0][0].tokens for n in ours]
    assert [n[0][1] for n in theirs] == [n[0][1] for n in ours]
