"""DeepL's API on `mtkit serve` (mtkit.api.deepl), exercised with DeepL's own Python client
library pointed at the server by its server_url, and with form posts as older plugins send them:
its request shapes, answers and errors are the contract."""

import io
import re

import deepl
import docx
import httpx
import pytest
from test_documents import RUNS, word_document, word_runs
from test_serve import Server, offline

from mtkit.api.glossaries import parse_entries
from mtkit.serving.terms import TermsError

KEY, SMALL, SLOW = "k" * 32, "s" * 32, "r" * 32  # SMALL's quota is 40 characters, SLOW's one request a minute
TINY = "t" * 32  # a quota of 30 characters, for the quota on every route


@pytest.fixture(scope="module")
def served(trained_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("deepl")
    (root / "keys.txt").write_text(f"{KEY} 1000 office\n{SMALL} 1000 small 40\n{SLOW} 1 slow\n{TINY} 1000 tiny 30\n")
    with Server(trained_run, root / "serve.log", "--api-keys", root / "keys.txt", "--state-dir", root / "state",
                headers={"Authorization": f"Bearer {KEY}"}) as server:  # fmt: skip
        yield server


@pytest.fixture(autouse=True)
def no_retries(monkeypatch):
    monkeypatch.setattr(deepl.http_client, "max_network_retries", 0)  # a refusal is seen at once


def client(server, key: str = KEY) -> deepl.Translator:
    return deepl.Translator(key, server_url=server.url, send_platform_info=False)


def test_text_is_translated_as_translate_translates_it(served, trained_run):
    lines = ["A dog runs on the beach.", "Two men talk. A woman sings."]
    one = client(served).translate_text(lines[0], target_lang="DE")
    many = client(served).translate_text(lines, source_lang="EN", target_lang="de")
    expected = offline(trained_run, lines)
    assert one.text == expected[0] and [result.text for result in many] == expected
    assert one.detected_source_lang == "EN" and one.billed_characters == len(lines[0])


def test_html_keeps_its_tags_and_ignored_tags_keep_their_words(served):
    result = client(served).translate_text(
        "<p>A <b>dog</b> runs. <code>x = 1</code> <keep>A man</keep></p>", target_lang="DE", tag_handling="html",
        ignore_tags="keep",
    )  # fmt: skip
    assert result.text.startswith("<p>") and "<b>" in result.text and "<keep>A man</keep>" in result.text
    assert "<code>x = 1</code>" in result.text


def test_languages_and_usage_in_deepls_shape(served):
    translator = client(served)
    assert [(lang.code, lang.name) for lang in translator.get_source_languages()] == [("EN", "English")]
    targets = translator.get_target_languages()
    assert [(lang.code, lang.supports_formality) for lang in targets] == [("DE", False)]
    before = translator.get_usage().character.count
    translator.translate_text("A cat.", target_lang="DE")
    usage = translator.get_usage()
    assert usage.character.count == before + len("A cat.") and usage.character.limit == 1_000_000_000_000
    assert [(p.source_lang, p.target_lang) for p in translator.get_glossary_languages()] == [("en", "de")]


def test_a_glossary_is_created_used_listed_and_deleted(served):
    translator = client(served)
    glossary = translator.create_glossary("fruit", "EN", "DE", {"dog": "Köter", "beach": "Strandbad"})
    assert glossary.ready and glossary.entry_count == 2 and (glossary.source_lang, glossary.target_lang) == ("EN", "DE")
    result = translator.translate_text(
        "A dog runs on the beach.", source_lang="EN", target_lang="DE", glossary=glossary
    )
    assert "Köter" in result.text and "Strandbad" in result.text
    assert glossary.glossary_id in [g.glossary_id for g in translator.list_glossaries()]
    assert translator.get_glossary_entries(glossary) == {"dog": "Köter", "beach": "Strandbad"}
    assert glossary.glossary_id not in [g.glossary_id for g in client(served, SMALL).list_glossaries()]  # its owner's
    translator.delete_glossary(glossary)
    with pytest.raises(deepl.GlossaryNotFoundException):
        translator.get_glossary(glossary.glossary_id)


def test_glossaries_outlive_the_server(trained_run, tmp_path):
    state = tmp_path / "state"
    with Server(trained_run, tmp_path / "one.log", "--state-dir", state) as server:
        made = deepl.Translator("any", server_url=server.url).create_glossary("g", "EN", "DE", {"dog": "Hund"})
    with Server(trained_run, tmp_path / "two.log", "--state-dir", state) as server:
        kept = deepl.Translator("any", server_url=server.url).get_glossary(made.glossary_id)
        assert (kept.name, kept.entry_count, kept.creation_time) == ("g", 1, made.creation_time)


def test_a_word_document_is_translated_through_translate_document(served, trained_run, tmp_path):
    (tmp_path / "report.docx").write_bytes(word_document(RUNS))
    out = io.BytesIO()
    status = client(served).translate_document(word_document(RUNS), out, target_lang="DE", filename="report.docx")
    assert status.done and status.billed_characters > 0
    offline_run = __import__("conftest").run_mtkit("translate-file", tmp_path / "report.docx", "-o",
                                                   tmp_path / "out.docx", "-m", trained_run, "--precision", "fp32")  # fmt: skip
    assert offline_run.returncode == 0, offline_run.stderr.decode()
    assert word_runs(out.getvalue()) == word_runs((tmp_path / "out.docx").read_bytes())
    docx.Document(io.BytesIO(out.getvalue()))


def test_a_wrong_key_an_exhausted_quota_and_formality(served):
    with pytest.raises(deepl.AuthorizationException):
        client(served, "wrong").translate_text("A dog.", target_lang="DE")
    small = client(served, SMALL)
    small.translate_text("A dog runs on the beach.", target_lang="DE")  # 24 of 40 characters
    with pytest.raises(deepl.QuotaExceededException):
        small.translate_text("Two dogs run on the beach.", target_lang="DE")
    assert small.get_usage().character.count == 24 and small.get_usage().character.limit == 40
    client(served, SLOW).translate_text("A dog.", target_lang="DE")
    with pytest.raises(deepl.TooManyRequestsException):
        client(served, SLOW).translate_text("A dog.", target_lang="DE")
    with pytest.raises(deepl.DeepLException, match="'formality' is not supported"):
        client(served).translate_text("A dog.", target_lang="DE", formality="more")
    assert client(served).translate_text("A dog.", target_lang="DE", formality="prefer_more").text


def test_every_route_that_translates_charges_the_quota_before_the_work(served):
    """A key with 30 characters left: each route refuses more, in its API's shape, and usage stays
    within the quota (mtkit's and LibreTranslate's routes answered 200 and charged nothing)."""
    text = "A dog runs on the beach with two men."  # 37 characters
    auth = {"Authorization": f"Bearer {TINY}"}
    answers = [
        httpx.post(f"{served.url}/v1/translate", json={"text": [text]}, headers=auth),
        httpx.post(f"{served.url}/translate", json={"q": text, "source": "en", "target": "de", "api_key": TINY}),
        httpx.post(
            f"{served.url}/translate_file",
            files={"file": ("a.txt", text.encode())},
            data={"target": "de", "api_key": TINY},
        ),  # fmt: skip
        httpx.post(f"{served.url}/v2/translate", data={"text": text, "target_lang": "DE"}, headers=auth),
    ]
    assert [answer.status_code for answer in answers] == [429, 429, 429, 456]
    messages = [answer.json().get("error", answer.json().get("message")) for answer in answers]
    assert messages == ["quota exceeded: 0 of 30 characters used"] * 4
    upload = client(served, TINY).translate_document_upload(text.encode(), target_lang="DE", filename="a.txt")
    status = client(served, TINY).translate_document_get_status(upload)
    assert status.status.value == "error" and "quota exceeded" in status.error_message
    assert client(served, TINY).translate_text("A dog.", target_lang="DE").text  # 6 characters fit
    usage = client(served, TINY).get_usage().character
    assert (usage.count, usage.limit) == (6, 30)


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        ({"target_lang": "DE"}, 400, "Parameter 'text' not specified."),
        ({"text": "A dog.", "target_lang": "FR"}, 400, "target fr"),
        ({"text": "A dog.", "target_lang": "D E"}, 400, "Value for 'target_lang' not supported."),
        ({"text": "A dog.", "target_lang": "DE", "tag_handling": "json"}, 400, "Value for 'tag_handling'"),
        ({"text": "A dog.", "target_lang": "DE", "auth_key": "wrong"}, 403, "a valid API key is needed"),
        ({"text": "x" * 20001, "target_lang": "DE"}, 413, "20,001 characters: the limit is 20,000"),
    ],
)
def test_form_posts_as_older_plugins_send_them(served, trained_run, fields, status, message):
    answer = httpx.post(f"{served.url}/v2/translate", data={"auth_key": KEY, **fields})
    assert answer.status_code == status and message in answer.json()["message"], answer.text


def test_a_body_over_the_limit_is_413_in_deepls_shape(served):
    answer = httpx.post(
        f"{served.url}/v2/translate", data={"auth_key": KEY, "target_lang": "DE", "text": "x" * 400_000}
    )
    assert answer.status_code == 413 and answer.json()["message"].startswith("the request body is over")


def test_repeated_text_fields_in_a_form_post(served, trained_run):
    answer = httpx.post(f"{served.url}/v2/translate", data={"text": ["A dog.", "A cat."], "target_lang": "DE"},
                        headers={"Authorization": f"DeepL-Auth-Key {KEY}"})  # fmt: skip
    texts = [t["text"] for t in answer.json()["translations"]]
    assert answer.status_code == 200 and texts == offline(trained_run, ["A dog.", "A cat."])


@pytest.mark.parametrize(
    ("text", "fmt", "entries"),
    [
        ("dog\tHund\n\nbeach\tStrand\n", "tsv", [("dog", "Hund"), ("beach", "Strand")]),
        ('dog,Hund\n"a, b",C\n', "csv", [("dog", "Hund"), ("a, b", "C")]),
    ],
)
def test_glossary_entries_read_as_tsv_and_csv(text, fmt, entries):
    assert parse_entries(text, fmt) == entries


@pytest.mark.parametrize(
    ("text", "fmt", "message"),
    [
        ("dog\tHund\ndog\tKöter\n", "tsv", "entries line 2: given twice"),
        ("dog Hund\n", "tsv", "entries line 1: expected a source term and a target term (tsv)"),
        ("", "tsv", "entries: 0; give between 1 and 100,000"),
        ("dog\tHund", "xlsx", "entries_format xlsx: must be tsv or csv"),
    ],
)
def test_glossary_entries_that_do_not_read_are_named(text, fmt, message):
    with pytest.raises(TermsError, match=re.escape(message)):
        parse_entries(text, fmt)


def test_one_key_cannot_fill_the_glossary_store_for_the_others(monkeypatch):
    from mtkit.api import glossaries as terms
    from mtkit.api.glossaries import GlossaryStore

    monkeypatch.setattr(terms, "MAX_GLOSSARIES_PER_KEY", 3)
    store = GlossaryStore()
    for n in range(3):
        store.create("greedy", f"g{n}", "en", "de", [("dog", "Hund")])
    with pytest.raises(TermsError, match="a key keeps 3 glossaries at most: delete one first"):
        store.create("greedy", "g3", "en", "de", [("dog", "Hund")])
    assert store.create("other", "mine", "en", "de", [("cat", "Katze")]).owner == "other"
    for n in range(4):  # without keys every client is one owner: the store's bound alone
        store.create(None, f"open{n}", "en", "de", [("dog", "Hund")])
