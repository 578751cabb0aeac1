"""A multilingual dataset (preprocess --lang-pairs): each direction of each prefix, every source with
its target's tag, one corpus per direction; and a model trained on it that needs --tgt-lang."""

import json

import pytest
import sacrebleu
from conftest import TINY_TRAIN, records, run_mtkit, synthetic_pairs, write_lines
from typer.testing import CliRunner

from mtkit.cli import app
from mtkit.core.errors import MtkitError
from mtkit.data.dataset import ParallelDataset, model_languages, read_manifest
from mtkit.decoding.search import SearchConfig
from mtkit.model.files import load_model_file, read_index
from mtkit.text.tokenizer import Tokenizer, train_tokenizer
from mtkit.translation.translate import Translator


def third_language(german: str) -> str:
    """A made-up target language "xx": German, uppercased, words reversed (a parallel text all the same)."""
    return " ".join(reversed(german.upper().split()))


@pytest.fixture(scope="module")
def multiway(tmp_path_factory):
    """train (120 lines) and valid (10) in en, de and xx, line i of each the same sentence; a tokenizer
    with the tags <2de> and <2xx>."""
    root = tmp_path_factory.mktemp("multiway")
    pairs = synthetic_pairs(130, seed=5)
    for split, chunk in (("train", pairs[:120]), ("valid", pairs[120:])):
        write_lines(root / f"{split}.en", [en for en, _ in chunk])
        write_lines(root / f"{split}.de", [de for _, de in chunk])
        write_lines(root / f"{split}.xx", [third_language(de) for _, de in chunk])
    inputs = [root / f"train.{lang}" for lang in ("en", "de", "xx")]
    train_tokenizer(inputs, root / "tok.json", vocab_size=500, tags=["2de", "2xx"])
    return root


def preprocess_args(root, output, *extra):
    return ["preprocess", "--lang-pairs", "en-de,en-xx", "--train", str(root / "train"), "--valid",
            str(root / "valid"), "--tokenizer", str(root / "tok.json"), "-o", str(output), *extra]  # fmt: skip


@pytest.fixture(scope="module")
def dataset(multiway):
    result = CliRunner().invoke(app, preprocess_args(multiway, multiway / "bin"))
    assert result.exit_code == 0, result.output
    return multiway / "bin"


def test_each_direction_is_stored_with_its_target_s_tag(multiway, dataset):
    manifest = read_manifest(dataset)
    tokenizer = Tokenizer.load(multiway / "tok.json")
    assert manifest["directions"] == [["en", "de"], ["en", "xx"]]
    assert manifest["target_tags"] == {"de": "<2de>", "xx": "<2xx>"}
    assert [(c["name"], c["kept"]) for c in manifest["corpora"]] == [("en-de", 120), ("en-xx", 120)]
    assert manifest["split_directions"]["valid"] == [["en", "de", 10], ["en", "xx", 10]]
    train = ParallelDataset(dataset, "train")
    english = (multiway / "train.en").read_text().splitlines()
    sources = tokenizer.encode_batch(english)
    for direction, (target, tag) in enumerate((("de", "<2de>"), ("xx", "<2xx>"))):
        targets = tokenizer.encode_batch((multiway / f"train.{target}").read_text().splitlines())
        for i in (0, 57, 119):
            src, tgt = train[direction * 120 + i]
            assert src.tolist() == [tokenizer.tag_id(tag[1:-1]), *sources[i]]
            assert tgt.tolist() == targets[i]
    valid = ParallelDataset(dataset, "valid")
    expected = (multiway / "valid.de").read_text().splitlines() + (multiway / "valid.xx").read_text().splitlines()
    assert (
        valid.raw_lines("tgt") == expected
        and valid.raw_lines("src") == (multiway / "valid.en").read_text().splitlines() * 2
    )
    assert model_languages(manifest) == {
        "src_lang": "en", "tgt_lang": None, "target_tags": {"de": "<2de>", "xx": "<2xx>"},
        "directions": [["en", "de"], ["en", "xx"]],
    }  # fmt: skip


def test_a_typed_tag_stays_text(multiway):
    tokenizer = Tokenizer.load(multiway / "tok.json")
    ids = tokenizer.encode_batch(["<2de> A dog runs."])[0]
    assert tokenizer.tag_id("2de") not in ids
    assert tokenizer.decode_batch([ids]) == ["<2de> A dog runs."]


def test_a_validation_direction_must_be_the_dataset_s(dataset, data_dir, tmp_path):
    for data, message in ((dataset, "its directions are en-de, en-xx"), (data_dir, "it is not multilingual")):
        result = run_mtkit("train", "-d", data, "-o", tmp_path / "r", *TINY_TRAIN, "--set", "train.valid_metric=bleu",
                           "--set", "train.valid_direction=en-fr")  # fmt: skip
        assert result.returncode == 1
        assert f"train.valid_direction en-fr: not a direction of the dataset ({message})" in result.stderr.decode()


def test_a_target_without_a_tag_and_mixed_options_are_refused(multiway, tmp_path):
    runner = CliRunner()
    for split in ("train", "valid"):
        (multiway / f"{split}.fr").write_text((multiway / f"{split}.xx").read_text())
    missing = runner.invoke(app, preprocess_args(multiway, tmp_path / "a") + ["--lang-pairs", "en-de,en-fr"])
    assert missing.exit_code == 1
    assert "the tokenizer has no tag for target language fr (it has de, xx;" in missing.output
    both = runner.invoke(app, preprocess_args(multiway, tmp_path / "b", "-s", "en"))
    assert both.exit_code == 1 and "give --src-lang and --tgt-lang, or --lang-pairs" in both.output
    same = runner.invoke(app, ["preprocess", "--lang-pairs", "en-en", "--train", str(multiway / "train"),
                               "--tokenizer", str(multiway / "tok.json"), "-o", str(tmp_path / "c")])  # fmt: skip
    assert same.exit_code == 1 and "--lang-pairs en-en: the source and target language are the same" in same.output
    assert not any((tmp_path / name).exists() for name in "abc")


@pytest.fixture(scope="module")
def run(dataset, tmp_path_factory):
    """A tiny model trained 30 updates on the dataset, validated per direction at 15 and 30."""
    run_dir = tmp_path_factory.mktemp("multilingual") / "run"
    result = run_mtkit("train", "-d", dataset, "-o", run_dir, *TINY_TRAIN, "--set", "train.max_steps=30",
                       "--set", "train.save_every=30", "--set", "train.sampling_temperature=2",
                       "--set", "train.valid_every=15", "--set", "train.valid_direction=en-xx",
                       "--set", "train.valid_metric=bleu")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    return run_dir, result.stderr.decode()


def test_a_multilingual_model_translates_into_the_language_asked_for(dataset, run):
    run_dir, log = run
    validations = [r for r in records(run_dir) if "valid_loss" in r]
    assert [r["step"] for r in validations] == [15, 30]
    for r in validations:  # each direction's scores, and their macro averages
        assert r["valid_bleu"] == pytest.approx((r["valid_bleu_en-de"] + r["valid_bleu_en-xx"]) / 2)
        assert r["valid_chrf"] == pytest.approx((r["valid_chrf_en-de"] + r["valid_chrf_en-xx"]) / 2)
    assert "bleu_en-de " in log and "chrf_en-xx " in log
    chosen = {entry["step"]: entry["metric"] for entry in read_index(run_dir) if entry.get("metric") is not None}
    assert chosen == {r["step"]: pytest.approx(r["valid_bleu_en-xx"]) for r in validations}  # valid_direction's
    meta = load_model_file(run_dir).meta
    assert meta["target_tags"] == {"de": "<2de>", "xx": "<2xx>"} and meta["src_lang"] == "en"
    stdin = b"A dog runs in the park.\nTwo men wait.\n"
    refused = run_mtkit("translate", "-m", run_dir, stdin=stdin)
    assert refused.returncode == 1
    assert (
        "this model translates into several languages: choose one with --tgt-lang (de, xx)" in refused.stderr.decode()
    )
    outputs = {}
    for lang in ("de", "xx"):
        done = run_mtkit("translate", "-m", run_dir, "--tgt-lang", lang, "--beam", "2", stdin=stdin)
        assert done.returncode == 0, done.stderr.decode()
        outputs[lang] = done.stdout.decode().splitlines()
        assert len(outputs[lang]) == 2 and not any("<2" in line for line in outputs[lang])
    valid = dataset.parent / "valid"
    scored = run_mtkit("evaluate", "-m", run_dir, "--tgt-lang", "xx", "--src", f"{valid}.en",
                       "--ref", f"{valid}.xx", "--metrics", "bleu", "--json", "--beam", "2")  # fmt: skip
    assert scored.returncode == 0, scored.stderr.decode()
    translated = run_mtkit("translate", "-m", run_dir, "--tgt-lang", "xx", "--beam", "2", "-i", f"{valid}.en")
    references = [f"{valid}.xx"]
    hypotheses = translated.stdout.decode().splitlines()
    expected = sacrebleu.corpus_bleu(hypotheses, [open(references[0], encoding="utf-8").read().splitlines()]).score
    assert json.loads(scored.stdout)["bleu"]["score"] == pytest.approx(expected)


SENTENCES = ["A dog runs in the park.", "Two men wait at the beach with a red ball.", "A girl sits."]


def greedy(model_file, lang):
    ours = Translator(model_file, SearchConfig(beam=1, max_len_a=0, max_len_b=12, loop_ngram=0), "cpu", "fp32")
    ours.set_target(lang)
    return ours.translate(SENTENCES)


def test_the_ctranslate2_export_translates_into_the_language_asked_for(run, tmp_path):
    pytest.importorskip("ctranslate2")
    from mtkit.interop.ct2 import CTranslate2Translator

    run_dir, _ = run
    assert run_mtkit("export", "-m", run_dir, "-o", tmp_path / "ct2").returncode == 0
    model_file = load_model_file(run_dir)
    engine = CTranslate2Translator(tmp_path / "ct2", SearchConfig(beam=1, max_len_a=0, max_len_b=12, loop_ngram=0))
    for lang in ("de", "xx"):
        engine.set_target(lang)
        assert engine.translate(SENTENCES) == greedy(model_file, lang)
    with pytest.raises(MtkitError, match="choose one with --tgt-lang"):
        engine.set_target(None)


def test_the_hugging_face_export_takes_the_tag_as_a_special_token(run, tmp_path):
    transformers = pytest.importorskip("transformers")
    run_dir, _ = run
    assert run_mtkit("export", "-m", run_dir, "--format", "huggingface", "-o", tmp_path / "hf").returncode == 0
    model_file = load_model_file(run_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf").eval()
    for lang in ("de", "xx"):
        batch = tokenizer([f"<2{lang}> {line}" for line in SENTENCES], return_tensors="pt", padding=True)
        assert batch["input_ids"][0][0].item() == model_file.src_tokenizer.tag_id(f"2{lang}")
        generated = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=12, forced_eos_token_id=None)
        assert tokenizer.batch_decode(generated, skip_special_tokens=True) == greedy(model_file, lang)


def test_evaluate_scores_each_direction_and_their_macro_average(dataset, run):
    run_dir, _ = run
    valid = dataset.parent / "valid"
    result = run_mtkit("evaluate", "-m", run_dir, "--test", valid, "--lang-pairs", "en-de,en-xx", "--beam", "2",
                       "--metrics", "bleu,chrf", "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    for lang in ("de", "xx"):
        alone = run_mtkit("evaluate", "-m", run_dir, "--tgt-lang", lang, "--src", f"{valid}.en", "--ref",
                          f"{valid}.{lang}", "--beam", "2", "--metrics", "bleu,chrf", "--json")  # fmt: skip
        expected = json.loads(alone.stdout)
        assert report["directions"][f"en-{lang}"]["sentences"] == 10
        for metric in ("bleu", "chrf"):
            assert report["directions"][f"en-{lang}"][metric]["score"] == pytest.approx(
                expected[metric]["score"], abs=1e-4
            )
    for metric in ("bleu", "chrf"):
        per_direction = [report["directions"][d][metric]["score"] for d in ("en-de", "en-xx")]
        assert report["macro"][metric]["score"] == pytest.approx(sum(per_direction) / 2)
    table = run_mtkit("evaluate", "-m", run_dir, "--test", valid, "--lang-pairs", "en-de,en-xx", "--beam", "2")
    assert table.returncode == 0 and "en-xx (10 sentences)" in table.stdout.decode()
    assert "macro average" in table.stdout.decode()
    mixed = run_mtkit(
        "evaluate", "-m", run_dir, "--lang-pairs", "en-de", "--src", f"{valid}.en", "--ref", f"{valid}.de"
    )
    assert mixed.returncode == 1 and "--lang-pairs evaluates --test PREFIX with --model" in mixed.stderr.decode()


def test_the_server_lists_the_directions_and_translates_into_each_request_s_target(run, tmp_path):
    pytest.importorskip("fastapi")
    import httpx
    from test_serve import Server, offline

    run_dir, _ = run
    expected = {lang: offline(run_dir, SENTENCES, "--tgt-lang", lang, "--beam", "1") for lang in ("de", "xx")}
    server = Server(run_dir, tmp_path / "serve.log", "--beam", "1")
    try:
        languages = server.post("/translate", json={"q": "x", "target": "fr"})
        assert languages.status_code == 400 and "this server translates into de, xx" in languages.json()["error"]
        assert httpx.get(f"{server.url}/languages").json() == [
            {"code": "en", "name": "English", "targets": ["de", "xx"]},
            {"code": "de", "name": "German", "targets": []},
            {"code": "xx", "name": "xx", "targets": []},
        ]
        for lang in ("de", "xx"):
            answer = server.post("/v1/translate", json={"text": SENTENCES, "source": "en", "target": lang})
            assert answer.json() == {"translations": expected[lang]}
        from libretranslatepy import LibreTranslateAPI

        client = LibreTranslateAPI(server.url)
        assert [entry["code"] for entry in client.languages()] == ["en", "de", "xx"]
        assert [client.translate(line, "en", "xx") for line in SENTENCES] == expected["xx"]
        wrong_source = server.post("/v1/translate", json={"text": SENTENCES, "source": "de", "target": "xx"})
        assert wrong_source.status_code == 400 and "source de: this server translates from en" in wrong_source.text
    finally:
        assert server.stop() == 0


def test_a_bilingual_model_grows_into_a_multilingual_one_with_the_same_tokenizer(multiway, dataset, tmp_path):
    args = ["preprocess", "-s", "en", "-t", "de", "--train", str(multiway / "train"), "--tokenizer",
            str(multiway / "tok.json"), "-o", str(tmp_path / "en-de")]  # fmt: skip
    assert CliRunner().invoke(app, args).exit_code == 0
    first = run_mtkit("train", "-d", tmp_path / "en-de", "-o", tmp_path / "bilingual", *TINY_TRAIN, "--set",
                      "train.max_steps=5", "--set", "train.save_every=5")  # fmt: skip
    assert first.returncode == 0, first.stderr.decode()
    assert load_model_file(tmp_path / "bilingual").meta["tgt_lang"] == "de"
    grown = run_mtkit("train", "-d", dataset, "-o", tmp_path / "grown", "--init-from", tmp_path / "bilingual",
                      "--set", "train.max_steps=5", "--set", "train.save_every=5")  # fmt: skip
    assert grown.returncode == 0, grown.stderr.decode()
    meta = load_model_file(tmp_path / "grown").meta
    assert meta["target_tags"] == {"de": "<2de>", "xx": "<2xx>"} and meta["tgt_lang"] is None


def test_a_corpus_may_hold_only_some_of_the_directions(multiway, tmp_path):
    """A low-resource direction from a corpus of its own: --pairs NAME=en-xx."""
    (tmp_path / "cut").mkdir()
    for lang in ("en", "xx"):
        lines = (multiway / f"train.{lang}").read_text().splitlines()[:30]
        write_lines(tmp_path / "cut" / f"train.{lang}", lines)
    args = ["preprocess", "--lang-pairs", "en-de,en-xx", "--train", f"main={multiway / 'train'}", "--train",
            f"cut={tmp_path / 'cut' / 'train'}", "--pairs", "main=en-de", "--pairs", "cut=en-xx", "--tokenizer",
            str(multiway / "tok.json"), "-o", str(tmp_path / "bin")]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    manifest = read_manifest(tmp_path / "bin")
    assert [(c["name"], c["kept"]) for c in manifest["corpora"]] == [("main.en-de", 120), ("cut.en-xx", 30)]
    tokenizer = Tokenizer.load(multiway / "tok.json")
    train = ParallelDataset(tmp_path / "bin", "train")
    assert train[120][0][0] == tokenizer.tag_id("2xx") and train[119][0][0] == tokenizer.tag_id("2de")
    wrong = CliRunner().invoke(app, [*args[:-2], "-o", str(tmp_path / "bin2"), "--pairs", "cut=en-fr"])
    assert wrong.exit_code == 1 and "--pairs cut: give directions of --lang-pairs (en-de,en-xx)" in wrong.output
