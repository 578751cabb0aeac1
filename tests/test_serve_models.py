"""`mtkit serve` with several models (mtkit.serving.fleet): three tiny models, two bilingual that chain
through English (de->en, en->fr) and one multilingual (en->de, en->xx). Every pair /languages lists
translates as offline (a pivoted pair as `translate -m A --then B`), markup and a .docx keep their
formatting through the pivot, the models unload and load again under load with every answer right, a
model file that cannot be read is named while the others serve, source auto routes by the text's
language, and the page's menus follow /languages."""

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import TINY_TRAIN, run_mtkit, synthetic_pairs, write_lines
from test_documents import RUNS, word_document, word_runs
from test_page import browser, by_id, open_page, output_lines, type_text, wait  # noqa: F401 - browser: a fixture
from test_serve import Server, offline, wait_until

from mtkit.model.files import load_model_file, resolve_model_path, save_model_file
from mtkit.text.tokenizer import train_tokenizer

pytest.importorskip("fastapi")

GERMAN = "Ein Mann mit einem roten Hut fährt mit seinem Fahrrad über die Brücke, und die Kinder spielen im Garten."
ENGLISH = "A man in a red hat rides his bicycle across the bridge, and the children play in the garden."
PAIRS = [("de", "en"), ("en", "fr"), ("en", "de"), ("en", "xx"), ("de", "fr"), ("de", "xx")]


def relabelled(run, source: str, target: str, path):
    """The run's model saved with other languages in its file (the same weights: a stand-in of its own)."""
    model_file = load_model_file(resolve_model_path(run))
    save_model_file(path, dataclasses.replace(model_file, meta={**model_file.meta, "src_lang": source,
                                                                "tgt_lang": target}))  # fmt: skip
    return path


@pytest.fixture(scope="module")
def models(trained_run, tmp_path_factory):
    """de-en.pt, en-fr.pt (the tiny run's weights) and mul.pt, trained 20 updates on en->de and en->xx."""
    root = tmp_path_factory.mktemp("models")
    pairs = synthetic_pairs(130, seed=5)
    for split, chunk in (("train", pairs[:120]), ("valid", pairs[120:])):
        write_lines(root / f"{split}.en", [en for en, _ in chunk])
        write_lines(root / f"{split}.de", [de for _, de in chunk])
        write_lines(root / f"{split}.xx", [" ".join(reversed(de.upper().split())) for _, de in chunk])
    train_tokenizer(
        [root / f"train.{lang}" for lang in ("en", "de", "xx")], root / "tok.json", 500, tags=["2de", "2xx"]
    )
    done = run_mtkit("preprocess", "--lang-pairs", "en-de,en-xx", "--train", root / "train", "--valid", root / "valid",
                     "--tokenizer", root / "tok.json", "-o", root / "bin")  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    done = run_mtkit("train", "-d", root / "bin", "-o", root / "mul", *TINY_TRAIN, "--set", "train.max_steps=20",
                     "--set", "train.save_every=20", "--set", "train.precision=fp32")  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    multilingual = root / "mul.pt"
    multilingual.write_bytes(resolve_model_path(root / "mul").read_bytes())
    return (
        relabelled(trained_run, "de", "en", root / "de-en.pt"),
        relabelled(trained_run, "en", "fr", root / "en-fr.pt"),
        multilingual,
    )


@pytest.fixture(scope="module")
def lines(corpus):
    return (corpus / "test.en").read_text().splitlines()[:3]


@pytest.fixture(scope="module")
def expected(models, lines):
    """Each pair's offline translation of the lines, beam 2: a model, or two chained through en."""
    de_en, en_fr, mul = models
    chains = {("de", "en"): [de_en], ("en", "fr"): [en_fr], ("en", "de"): [mul, "--tgt-lang", "de"],
              ("en", "xx"): [mul, "--tgt-lang", "xx"], ("de", "fr"): [de_en, "--then", en_fr],
              ("de", "xx"): [de_en, "--then", mul, "--pivot", "en", "--tgt-lang", "xx"]}  # fmt: skip
    return {pair: offline(chain[0], lines, *chain[1:], "--beam", "2") for pair, chain in chains.items()}


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    de_en, en_fr, mul = models
    with Server(de_en, tmp_path_factory.mktemp("models") / "serve.log", "-m", en_fr, "-m", mul, "--beam", "2") as s:
        yield s


def translated(server, source, target, texts, **fields) -> httpx.Response:
    return server.post("/translate", json={"q": texts, "source": source, "target": target, **fields})


def aligned_offline(models, lines) -> list[str]:
    """de->fr through en offline with --alignment (each line whole, as an alignment is of one piece)."""
    de_en, en_fr, _ = models
    return offline(de_en, lines, "--then", en_fr, "--beam", "2", "--alignment")


def test_every_pair_languages_lists_translates_as_offline(server, models, lines, expected):
    languages = httpx.get(f"{server.url}/languages").json()
    assert [(entry["code"], entry["targets"]) for entry in languages] == [
        ("de", ["en", "fr", "xx"]), ("en", ["de", "fr", "xx"]), ("fr", []), ("xx", []),
    ]  # fmt: skip
    listed = [(entry["code"], target) for entry in languages for target in entry["targets"]]
    assert sorted(listed) == sorted(PAIRS)
    for source, target in listed:
        answer = translated(server, source, target, lines)
        assert answer.status_code == 200, answer.text
        assert answer.json()["translatedText"] == expected[source, target], (source, target)
    v1 = server.post("/v1/translate", json={"text": lines, "source": "de", "target": "fr", "nbest": 2})
    assert [hyps[0]["text"] for hyps in v1.json()["translations"]] == expected["de", "fr"]
    assert all(len(hyps) == 2 for hyps in v1.json()["translations"])  # the last leg's n-best
    aligned = server.post("/v1/translate", json={"text": lines, "source": "de", "target": "fr", "alignment": True})
    assert [f"{hyps[0]['text']}\t{hyps[0]['alignment']}" for hyps in aligned.json()["translations"]] == aligned_offline(
        models, lines
    )  # the legs' alignments composed, as the offline chain composes them
    legs, into = [], lines
    for source, target in (("de", "en"), ("en", "fr")):
        leg = server.post("/v1/translate", json={"text": into, "source": source, "target": target, "confidence": True})
        legs.append(leg.json()["confidences"])
        into = leg.json()["translations"]
    both = server.post("/v1/translate", json={"text": lines, "source": "de", "target": "fr", "confidence": True}).json()
    assert both["translations"] == into == expected["de", "fr"]
    assert both["confidences"] == pytest.approx([a * b for a, b in zip(*legs)])  # from both legs
    deepl = server.post("/v2/translate", data={"text": lines, "source_lang": "DE", "target_lang": "FR"}).json()
    assert [entry["text"] for entry in deepl["translations"]] == expected["de", "fr"]  # DeepL's API routes alike
    unknown = translated(server, "fr", "de", lines)
    assert unknown.status_code == 400
    assert unknown.json() == {"error": "fr->de: no model translates it, directly or through en (see /languages)"}
    models = {model["id"]: model for model in httpx.get(f"{server.url}/v1/models").json()["models"]}
    assert {name: model["state"] for name, model in models.items()} == {"de-en": "loaded", "en-fr": "loaded",
                                                                         "mul": "loaded"}  # fmt: skip
    assert models["mul"]["directions"] == [["en", "de"], ["en", "xx"]] and models["mul"]["alignment"] is False
    assert httpx.get(f"{server.url}/ready").json() == {"status": "ready", "models": {"de-en": "loaded", "en-fr": "loaded",
                                                                                     "mul": "loaded"}}  # fmt: skip


def test_markup_and_a_word_document_keep_their_formatting_through_the_pivot(server, models, lines, tmp_path):
    de_en, en_fr, _ = models
    html = [f'<p>{lines[0]} <b id="x">{lines[1]}</b></p>']
    answer = server.post("/v1/translate", json={"text": html, "source": "de", "target": "fr", "format": "html"})
    assert answer.json()["translations"] == offline(de_en, html, "--then", en_fr, "--beam", "2", "--format", "html")
    assert '<b id="x">' in answer.json()["translations"][0]
    document = word_document(RUNS)
    upload = server.post("/translate_file", files={"file": ("report.docx", document)},
                         data={"source": "de", "target": "fr"})  # fmt: skip
    assert upload.status_code == 200, upload.text
    downloaded = httpx.get(server.url + upload.json()["translatedFileUrl"])
    (tmp_path / "report.docx").write_bytes(document)
    done = run_mtkit("translate-file", tmp_path / "report.docx", "-o", tmp_path / "out.docx", "-m", de_en, "--then",
                     en_fr, "--beam", "2", "--precision", "fp32")  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert word_runs(downloaded.content) == word_runs((tmp_path / "out.docx").read_bytes())
    glossary = server.post("/v1/translate", json={"text": lines[0], "source": "de", "target": "fr",
                                                  "glossary": [["a", "b"]]})  # fmt: skip
    assert glossary.status_code == 422
    assert glossary.json() == {"error": "glossary: not for a pair translated through en (two models)"}


def test_source_auto_goes_by_the_text_s_language(server, lines):
    pytest.importorskip("py3langid")
    for text, target, source in ((GERMAN, "en", "de"), (ENGLISH, "fr", "en"), (GERMAN, "fr", "de")):
        given = translated(server, source, target, [text]).json()["translatedText"]
        auto = translated(server, "auto", target, [text]).json()
        assert auto["translatedText"] == given and auto["detectedLanguage"][0]["language"] == source
        v1 = server.post("/v1/translate", json={"text": [text], "target": target})
        assert v1.json()["translations"] == given


def test_models_unload_and_load_again_under_load_and_every_answer_is_right(models, lines, expected, tmp_path):
    de_en, en_fr, mul = models
    with Server(
        de_en,
        tmp_path / "serve.log",
        "-m",
        en_fr,
        "-m",
        mul,
        "--beam",
        "2",
        "--max-loaded",
        "2",
        "--model-turn",
        "0",
        "--max-loads",
        "0",
    ) as server:  # swapped as often as the requests ask
        assert httpx.get(f"{server.url}/ready").json()["models"] == {"de-en": "loaded", "en-fr": "loaded",
                                                                      "mul": "unloaded"}  # fmt: skip
        mix = [PAIRS[i % len(PAIRS)] for i in range(36)]
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda pair: translated(server, *pair, lines), mix))
        assert [answer.status_code for answer in answers] == [200] * len(mix)
        assert [answer.json()["translatedText"] for answer in answers] == [expected[pair] for pair in mix]
        for pair in (("en", "de"), ("de", "fr")):  # mul loaded, then both of the others: one loads again
            assert translated(server, *pair, lines).json()["translatedText"] == expected[pair]
        wait_until(server.settled, "every answer counted")
        metrics = server.metrics()
        loads = sum(metrics[f'mtkit_model_loads_total{{model="{m}"}}'] for m in ("de-en", "en-fr", "mul"))
        unloads = sum(metrics.get(f'mtkit_model_unloads_total{{model="{m}"}}', 0) for m in ("de-en", "en-fr", "mul"))
        assert loads >= 4 and unloads == loads - 2  # two loaded at the end
        states = httpx.get(f"{server.url}/v1/models").json()["models"]
        assert sorted(model["state"] for model in states) == ["loaded", "loaded", "unloaded"]


def test_a_model_that_cannot_be_read_is_named_and_the_others_serve(models, lines, expected, tmp_path):
    de_en, en_fr, _ = models
    (tmp_path / "broken.pt").write_bytes(b"not a model")
    with Server(de_en, tmp_path / "serve.log", "-m", tmp_path / "broken.pt", "-m", en_fr) as server:  # no --beam:
        broken = next(m for m in httpx.get(f"{server.url}/v1/models").json()["models"] if m["id"] == "broken")
        # Clients read the model's name, never its file on the server (the operator's log has the path).
        assert broken["state"] == "failed" and broken["error"].startswith("model broken")
        assert str(tmp_path) not in httpx.get(f"{server.url}/v1/models").text
        through = offline(de_en, lines, "--then", en_fr)  # each model's default beam
        assert translated(server, "de", "fr", lines).json()["translatedText"] == through
        assert server.metric('mtkit_model_state{model="broken",state="failed"}') == 1
    assert f"warning: model broken ({tmp_path / 'broken.pt'}) is not served: " in (tmp_path / "serve.log").read_text()


def test_serve_refuses_options_of_one_model_with_several(models, tmp_path):
    de_en, en_fr, _ = models
    result = run_mtkit("serve", "-m", de_en, "-m", en_fr, "--tgt-lang", "fr")
    assert result.returncode == 1
    assert (
        result.stderr.decode().strip()
        == "error: --tgt-lang: of one model, not of several (give languages in --models FILE)"
    )
    (tmp_path / "models.txt").write_text(f"{de_en} de\n")
    result = run_mtkit("serve", "--models", tmp_path / "models.txt")
    assert result.returncode == 1
    assert (
        result.stderr.decode().strip()
        == f"error: {tmp_path / 'models.txt'}:1: expected PATH or PATH SOURCE TARGET, got 2 fields"
    )


def test_the_page_s_menus_follow_languages_and_a_pivoted_pair_translates(browser, server, models, lines, expected):  # noqa: F811
    from selenium.webdriver.support.ui import Select

    open_page(browser, server.url)
    source, target = Select(by_id(browser, "source")), Select(by_id(browser, "target"))
    assert [option.get_attribute("value") for option in source.options if option.get_attribute("value") != "auto"] == [
        "de", "en",
    ]  # fmt: skip
    for code, targets in (("en", ["de", "fr", "xx"]), ("de", ["en", "fr", "xx"])):
        source.select_by_value(code)
        wait(browser, lambda: [o.get_attribute("value") for o in target.options] == targets, f"{code}'s targets")  # noqa: B023
    target.select_by_value("fr")
    type_text(browser, "\n".join(lines))
    through = [line.split("\t")[0] for line in aligned_offline(models, lines)]  # the page asks for alignments
    wait(browser, lambda: output_lines(browser) == through, "de->fr through en on the page")
    source.select_by_value("en")
    target.select_by_value("xx")  # the multilingual model, which gives no alignments: none asked for
    wait(browser, lambda: output_lines(browser) == expected["en", "xx"], "en->xx on the page")
