"""mtkit import of NLLB-200 and M2M100 directories (M2M100ForConditionalGeneration): small random models
of both families, built with transformers around SentencePiece models trained here (NLLB's BPE,
M2M100's unigram), tokenize, score and translate as transformers does, the target language given
as forced_bos_token_id gives it."""

import json

import pytest
import sacrebleu
import torch
import torch.nn.functional as F
from conftest import perturb_layer_norms, run_mtkit

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
    perturb_layer_norms(model)
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


def test_evaluate_takes_the_directions_of_the_file_names(nllb_file, corpus):
    """--lang-pairs en-de,de-en: ISO codes of the test files' suffixes name the model's languages;
    each direction scores what translate gives."""
    path, _ = nllb_file
    result = run_mtkit("evaluate", "-m", path, "--test", corpus / "test", "--lang-pairs", "en-de,de-en", "--json",
                       "--precision", "fp32")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    directions = json.loads(result.stdout)["directions"]
    assert list(directions) == ["en-de", "de-en"]
    translated = run_mtkit("translate", "-m", path, "--src-lang", "de", "--tgt-lang", "en", "--precision", "fp32",
                           stdin=(corpus / "test.de").read_bytes())  # fmt: skip
    hypotheses = translated.stdout.decode().splitlines()
    references = (corpus / "test.en").read_text(encoding="utf-8").splitlines()
    expected = sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert directions["de-en"]["bleu"]["score"] == pytest.approx(expected, abs=1e-4)


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


def preprocessed(model_file, corpus, out):
    """corpus's en-de training and valid pairs, encoded with the imported model's tokenizer."""
    from mtkit.data.preprocess import preprocess

    model_file.src_tokenizer.save(out / "tokenizer.json")
    preprocess("en", "de", {"train": corpus / "train", "valid": corpus / "valid"}, out / "tokenizer.json", out / "bin")
    return out / "bin"


@torch.no_grad()
def test_training_batches_and_loss_are_transformers(family, corpus, tmp_path):
    """Fine-tuning data: each source starts with its language's token and each target with its own,
    as the family's tokenizer gives them (src_lang, tgt_lang, text_target); the training loss is
    transformers' loss on those labels."""
    from mtkit.data.batching import collate
    from mtkit.data.dataset import ParallelDataset
    from mtkit.text.targets import language_leads
    from mtkit.training.loss import TrainingObjective

    name, directory, model_file, hf_model, tokenizer_class = family
    source_lang, (target_lang, _) = FAMILIES[name]
    leads = language_leads(model_file.meta, model_file.src_tokenizer, "en", "de")  # ISO codes, as a dataset names them
    data = ParallelDataset(preprocessed(model_file, corpus, tmp_path), "train", leads=leads)
    batch = collate(data, list(range(8)))
    tokenizer = tokenizer_class.from_pretrained(
        directory, src_lang=source_lang, tgt_lang="deu_Latn" if name == "nllb" else "de"
    )
    lines = [(corpus / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:8] for lang in ("en", "de")]
    expected = tokenizer(lines[0], text_target=lines[1], return_tensors="pt", padding=True)
    mapping = to_mtkit(model_file, tokenizer)
    assert torch.equal(batch.src, expected["input_ids"].clone().apply_(mapping.get))
    assert torch.equal(batch.tgt_out, expected["labels"].clone().apply_(mapping.get))  # <pad> 1 -> 0
    assert torch.equal(batch.tgt_in[:, 1:], batch.tgt_out[:, :-1].masked_fill(batch.tgt_out[:, :-1] == 3, 0))
    assert (batch.tgt_in[:, 0] == BOS_ID).all()
    _, nll = TrainingObjective(model_file.build_model(), 0.0)(batch.src, batch.tgt_in, batch.tgt_out)
    hf_labels = expected["labels"].masked_fill(expected["labels"] == 1, -100)
    theirs = hf_model(input_ids=expected["input_ids"], attention_mask=expected["attention_mask"], labels=hf_labels).loss
    assert float(nll) / int((hf_labels != -100).sum()) == pytest.approx(float(theirs), abs=1e-5)


def test_fine_tuning_keeps_the_languages_and_can_freeze_the_embeddings(nllb_file, corpus, tmp_path):
    path, _ = nllb_file
    model_file = load_model_file(path)
    data = preprocessed(model_file, corpus, tmp_path)
    result = run_mtkit("train", "-d", data, "-o", tmp_path / "ft", "--init-from", path, "--set", "train.max_tokens=600",
                       "--set", "train.max_steps=3", "--set", "train.warmup=1", "--set", "train.lr=1e-2",
                       "--set", "train.freeze_embeddings=true", "--set", "train.valid_every=3")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    tuned = load_model_file(tmp_path / "ft")
    assert tuned.meta["language_tokens"] == model_file.meta["language_tokens"] and tuned.meta["tgt_lang"] == "de"
    name = "src_embed.tokens.weight"
    assert torch.equal(tuned.weights[name], model_file.weights[name])
    moved = [n for n, w in tuned.weights.items() if w.is_floating_point() and not torch.equal(w, model_file.weights[n])]
    assert moved and name not in moved and "tgt_embed.tokens.weight" not in moved
    source = (corpus / "test.en").read_bytes()
    default = run_mtkit("translate", "-m", tmp_path / "ft", "--precision", "fp32", stdin=source)
    named = run_mtkit("translate", "-m", tmp_path / "ft", "--precision", "fp32", "--src-lang", "eng_Latn",
                      "--tgt-lang", "deu_Latn", stdin=source)  # fmt: skip
    assert default.returncode == 0 and default.stdout == named.stdout and default.stdout.count(b"\n") == 20
    exported_as_mtkit_translates(tmp_path / "ft", corpus, tmp_path / "hf")


@torch.no_grad()
def exported_as_mtkit_translates(model, corpus, output):
    """`export --format huggingface` of a model with language tokens: transformers' M2M100 with
    NllbTokenizerFast gives mtkit's greedy translations (forced_bos_token_id) and scores."""
    result = run_mtkit("export", "-m", model, "-o", output, "--format", "huggingface")
    assert result.returncode == 0, result.stderr.decode()
    lines = (corpus / "test.en").read_text(encoding="utf-8").splitlines()
    hf_model = transformers.M2M100ForConditionalGeneration.from_pretrained(output).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(output, src_lang="eng_Latn", tgt_lang="fra_Latn")
    assert type(tokenizer).__name__ == "NllbTokenizerFast"
    generated = hf_model.generate(**tokenizer(lines, return_tensors="pt", padding=True), num_beams=1,
                                  max_new_tokens=12, forced_bos_token_id=tokenizer.convert_tokens_to_ids("fra_Latn"))  # fmt: skip
    theirs = tokenizer.batch_decode(generated, skip_special_tokens=True)
    cfg = SearchConfig(beam=1, max_len_a=0, max_len_b=12, loop_ngram=0)
    ours = Translator(load_model_file(model), cfg, device="cpu", precision="fp32")
    ours.set_target("fra_Latn", "eng_Latn")
    assert ours.translate(lines) == theirs
    batch = tokenizer(lines[:4], text_target=theirs[:4], return_tensors="pt", padding=True)
    labels = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    logits = hf_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).logits
    token_scores = F.log_softmax(logits.double(), dim=-1).gather(2, labels.clamp(min=0)[..., None]).squeeze(2)
    sums = token_scores.masked_fill(labels == -100, 0)[:, 1:].sum(dim=1)  # without the given language token
    scorer = Scorer(load_model_file(model), "cpu", "fp32", tgt_lang="fra_Latn", src_lang="eng_Latn")
    assert scorer.score(lines[:4], theirs[:4]) == pytest.approx(sums.tolist(), abs=1e-4)


def test_the_server_takes_each_request_s_languages(nllb_file, corpus, tmp_path):
    """Requests into German and French at once (sharing batches) get translate's translations; the
    languages may be ISO codes; /languages lists the model's; a wrong one is a 400 naming it."""
    from concurrent.futures import ThreadPoolExecutor

    from test_serve import Server, offline

    httpx = pytest.importorskip("httpx")
    path, _ = nllb_file
    sources = (corpus / "test.en").read_text(encoding="utf-8").splitlines()[:6]
    expected = {target: offline(path, sources, "--src-lang", "en", "--tgt-lang", target) for target in ("de", "fr")}
    server = Server(path, tmp_path / "serve.log", "--src-lang", "eng_Latn")
    try:
        requests = [("de", None), ("fra_Latn", "eng"), ("de", "en"), ("fr", None)]
        with ThreadPoolExecutor(len(requests)) as pool:
            answers = list(pool.map(lambda r: server.post("/v1/translate", json={"text": sources, "target": r[0],
                                                                                 "source": r[1]}), requests))  # fmt: skip
        for (target, _), answer in zip(requests, answers):
            assert answer.status_code == 200, answer.text
            assert answer.json()["translations"] == expected[target[:2]], target
        libre = server.post("/translate", json={"q": sources[0], "source": "en", "target": "fr"})
        assert libre.status_code == 200 and libre.json()["translatedText"] == expected["fr"][0]
        languages = httpx.get(f"{server.url}/languages").json()
        assert [entry["code"] for entry in languages] == NLLB_LANGUAGES
        assert all(len(entry["targets"]) == len(NLLB_LANGUAGES) - 1 for entry in languages)
        for body, message in [
            ({"text": ["A dog."]}, "target: give one of this model's 5 languages (see /languages)"),
            (
                {"text": ["A dog."], "target": "zh"},
                "target zh: several of this model's languages have that code (zho_Hans, zho_Hant)",
            ),  # fmt: skip
            ({"text": ["A dog."], "target": "de", "source": "xx"}, "source xx: not one of this model's 5 languages"),
        ]:
            refused = server.post("/v1/translate", json=body)
            assert refused.status_code == 400 and refused.json()["error"].startswith(message), refused.text
    finally:
        assert server.stop() == 0


@torch.no_grad()
def test_a_trimmed_vocabulary_keeps_the_texts_and_their_logits(family, corpus):
    """The texts encode as before (each id renumbered), and the kept ids' logits are the model's own."""
    from mtkit.interop.vocab_trim import kept_ids, trim_vocabulary

    _, _, model_file, _, _ = family
    lines = [line for lang in ("en", "de") for line in (corpus / f"train.{lang}").read_text().splitlines()[:40]]
    trimmed, differing = trim_vocabulary(model_file, lines)
    kept = kept_ids(model_file.src_tokenizer, lines)
    assert differing == 0 and trimmed.config.tgt_vocab_size == len(kept) < model_file.config.tgt_vocab_size
    assert trimmed.src_tokenizer.vocabulary() == [model_file.src_tokenizer.vocabulary()[i] for i in kept]
    new_id = {old: new for new, old in enumerate(kept)}
    ids = model_file.src_tokenizer.encode_batch(lines[:8])
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(row + [3]) for row in ids], batch_first=True)
    tgt_in = torch.nn.utils.rnn.pad_sequence([torch.tensor([2] + row) for row in ids], batch_first=True)
    full = model_file.build_model()(src, tgt_in)
    small = trimmed.build_model()(src.clone().apply_(new_id.get), tgt_in.clone().apply_(new_id.get))
    torch.testing.assert_close(small, full[..., kept], rtol=0, atol=1e-5)


def test_trim_vocab_writes_a_model_that_translates(nllb_file, corpus, tmp_path):
    path, _ = nllb_file
    result = run_mtkit("trim-vocab", "-m", path, "-i", corpus / "train.en", "-i", corpus / "train.de",
                       "-o", tmp_path / "small.pt")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    total = load_model_file(path).config.tgt_vocab_size
    kept = load_model_file(tmp_path / "small.pt").config.tgt_vocab_size
    assert (
        result.stderr.decode()
        .strip()
        .endswith(
            f"{kept:,} of {total:,} subwords kept ({kept / total:.1%}); tokenizers {tmp_path / 'small.src-tokenizer.json'} "
            f"and {tmp_path / 'small.tgt-tokenizer.json'}"
        )
    )
    translated = run_mtkit("translate", "-m", tmp_path / "small.pt", "--src-lang", "en", "--tgt-lang", "de",
                           stdin=(corpus / "test.en").read_bytes())  # fmt: skip
    assert translated.returncode == 0 and translated.stdout.count(b"\n") == 20
    exported_as_mtkit_translates(tmp_path / "small.pt", corpus, tmp_path / "hf")


def test_an_incomplete_directory_is_refused_in_one_line(family, tmp_path):
    _, directory, _, _, _ = family
    broken = tmp_path / "broken"
    broken.mkdir()
    for path in directory.iterdir():
        if path.name != "sentencepiece.bpe.model":
            (broken / path.name).write_bytes(path.read_bytes())
    missing = run_mtkit("import", broken, "-o", tmp_path / "m.pt")
    config = json.loads((broken / "config.json").read_text())
    (broken / "sentencepiece.bpe.model").write_bytes((directory / "sentencepiece.bpe.model").read_bytes())
    (broken / "config.json").write_text(json.dumps({**config, "activation_function": "gelu"}))
    gelu = run_mtkit("import", broken, "-o", tmp_path / "m.pt")
    for result, message in ((missing, "sentencepiece.bpe.model: missing"), (gelu, "activation_function 'gelu'")):
        lines = result.stderr.decode().strip().splitlines()
        assert result.returncode == 1 and len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "m.pt").exists()


def test_alignments_and_markup_say_they_are_not_available(nllb_file):
    path, _ = nllb_file
    languages = ["--src-lang", "en", "--tgt-lang", "de"]
    for options, what in ((["--alignment"], "--alignment"), (["--format", "html"], "--format html")):
        result = run_mtkit("translate", "-m", path, *languages, *options, stdin=b"A <b>dog</b>.\n")
        expected = f"error: {what} is not available for a model with target tags or language tokens"
        assert result.returncode == 1 and result.stderr.decode().strip() == expected
