"""What other people's software sends a server: text of several lines, placeholders in the styles of
Weblate (`[X7X]`), memoQ (`{1}`), OmegaT and Okapi (`<1>`, `<x2/>`), printf (`%1$s`) and ICU, and
identifiers that mix letters and digits. Through engines that copy or reverse their source, on every
route, split mode and tag handling, each line break and each placeholder comes back exactly; an
engine that makes spans up has them taken out; DeepL's v3 routes answer as DeepL's client reads them."""

import asyncio
import re
import subprocess
import sys
from collections import Counter
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import deepl
import httpx
import pytest
from deepl.api_data import MultilingualGlossaryDictionaryEntries as Dictionary
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_serve import app_on_a_thread

from mtkit.decoding.search import Hypothesis, SearchConfig
from mtkit.serving.settings import ModelInfo, ServeConfig
from mtkit.text.sentence_splitter import split_lines
from mtkit.text.spans import find_spans, invented_spans, mask, without_invented
from mtkit.text.tokenizer import Tokenizer
from mtkit.translation.translate import TextTranslator

KEY = "w" * 32


class MirrorTranslator(TextTranslator):
    """Translates each piece into its own words, in order or reversed, or with spans it makes up
    after them; the word alignment says where each word went. Terms are taken and not placed."""

    takes_constraints = True

    def __init__(self, tokenizer: Tokenizer, rule: str):
        self.src_tokenizer = self.tgt_tokenizer = tokenizer
        self.model_meta, self.rule, self.cfg = {"src_lang": "en", "tgt_lang": "de"}, rule, SearchConfig(beam=1)

    def order(self, n: int) -> list[int]:
        return list(reversed(range(n))) if self.rule == "reverse" else list(range(n))

    def _search(self, sentences, prefixes=None, on_done=None, **_):
        out = []
        for text in self.src_tokenizer.decode_batch(sentences):
            words = text.split()
            words = [words[i] for i in self.order(len(words))]
            if self.rule == "invent":
                words += ["{name}", "11111@example.com", "$5", "https://example.org", "[X9X]", "LH123"]
            out.append(" ".join(words))
        return [[Hypothesis(ids, -1.0, -1.0)] for ids in self.tgt_tokenizer.encode_batch(out)]

    def alignments(self, lines, hypotheses) -> list[str]:
        return [" ".join(f"{i}-{j}" for j, i in enumerate(self.order(len(line.split())))) for line in lines]


def mirror_service(tokenizer, rule: str, folder: Path, **settings):
    """The service `mtkit serve` would run, over a MirrorTranslator (its model file made in folder)."""
    from mtkit.serving.service import Service

    path = folder / f"{rule}.pt"
    path.write_bytes(b"a mirror")
    info = ModelInfo(rule, path, "pytorch", "en", "de", {"src_lang": "en", "tgt_lang": "de"})
    return Service(lambda: MirrorTranslator(tokenizer, rule), (tokenizer, tokenizer), SearchConfig(beam=2), info,
                   replace(ServeConfig(), **settings))  # fmt: skip


@contextmanager
def mirror_server(tokenizer, rule: str, tmp_path, **settings):
    """`mtkit serve`'s app over a MirrorTranslator, on a uvicorn thread of this process."""
    from mtkit.api.app import create_app

    with app_on_a_thread(create_app(mirror_service(tokenizer, rule, tmp_path, **settings), page=False)) as url:
        yield url


@pytest.fixture(scope="module")
def tokenizer(tokenizer_path) -> Tokenizer:
    return Tokenizer.load(tokenizer_path)


@pytest.fixture(scope="module", params=["copy", "reverse"])
def mirrored(request, tokenizer, tmp_path_factory):
    with mirror_server(tokenizer, request.param, tmp_path_factory.mktemp(request.param)) as url:
        yield request.param, url


def translate(url: str, route: str, text: str, mode: str) -> str:
    """text through one route: mtkit's /v1/translate, LibreTranslate's /translate or DeepL's /v2/translate
    (mode: a split_sentences value, or xml / html tag handling)."""
    if route == "v1":
        answer = httpx.post(f"{url}/v1/translate", json={"text": [text], "split_sentences": mode == "1"}, timeout=60)
        return answer.json()["translations"][0]
    if route == "libretranslate":
        fmt = "html" if mode == "html" else "text"
        answer = httpx.post(f"{url}/translate", json={"q": text, "source": "en", "target": "de", "format": fmt}, timeout=60)  # fmt: skip
        return answer.json()["translatedText"]
    fields = {"text": [text], "target_lang": "DE", "source_lang": "EN"}
    fields |= {"tag_handling": mode} if mode in ("xml", "html") else {"split_sentences": mode}
    answer = httpx.post(f"{url}/v2/translate", json=fields, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()["translations"][0]["text"]


ROUTES = [("v1", "0"), ("v1", "1"), ("libretranslate", "text"), ("libretranslate", "html"), ("deepl", "0"),
          ("deepl", "1"), ("deepl", "nonewlines"), ("deepl", "xml"), ("deepl", "html")]  # fmt: skip
PLAIN_PLACEHOLDERS = ["[X0X]", "[X11X]", "{1}", "{0}", "<1>", "</1>", "<x2/>", "%1$s", "%s", "%1", "{count}",
                      "{n, number}", "LH1234", "B12", "A320", "XJ-9000", "4B"]  # fmt: skip
MARKUP_PLACEHOLDERS = ["[X0X]", "[X11X]", "{1}", "{0}", "%1$s", "%s", "{count}", "LH1234", "B12", "A320", "XJ-9000"]
WORDS = ["a", "dog", "runs", "on", "the", "beach", "with", "cat", "sleeps", "man", "gate", "at"]
BREAKS = ["\n", "\r\n", "\n\n", "\n  ", "\n\n\n"]


def texts(placeholders: list[str]):
    word = st.sampled_from(WORDS + placeholders)
    line = st.lists(word, min_size=1, max_size=6).map(lambda words: " ".join(words) + ".")
    return st.tuples(st.lists(line, min_size=1, max_size=4), st.lists(st.sampled_from(BREAKS), min_size=3, max_size=3))


def joined(lines: list[str], breaks: list[str]) -> str:
    return "".join(line + (breaks[k] if k < len(lines) - 1 else "") for k, line in enumerate(lines))


def break_runs(text: str) -> list[str]:
    return split_lines(text).breaks


@pytest.mark.parametrize(("route", "mode"), ROUTES)
@given(drawn=texts(PLAIN_PLACEHOLDERS))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_line_break_and_placeholder_comes_back_on_every_route(mirrored, route, mode, drawn):
    rule, url = mirrored
    lines, breaks = drawn
    markup = mode in ("xml", "html")
    if markup:  # markup's own characters are its tags: the placeholders a client escapes are tested as text
        lines = [" ".join(w for w in line[:-1].split() if w in WORDS + MARKUP_PLACEHOLDERS) + "." for line in lines]
    text = joined(lines, breaks)
    out = translate(url, route, text, mode)
    assert break_runs(out) == break_runs(text), (text, out)
    wanted = Counter(span.text for span in find_spans(text))
    assert Counter(span.text for span in find_spans(out)) == wanted, (text, out)
    if rule == "copy" and not markup:
        assert out == text


@pytest.mark.parametrize(("route", "mode"), ROUTES)
def test_a_line_is_never_merged_with_the_next(mirrored, route, mode):
    _, url = mirrored
    text = "A dog runs.\nA cat sleeps.\r\n\r\nThe man waits at gate B12.\n"
    out = translate(url, route, text, mode)
    assert out.count("\n") == text.count("\n") and out.count("\r\n") == 2 and out.endswith("\n"), out
    if mirrored[0] == "copy":
        assert out == text


def test_weblates_placeholders_and_tags_come_back_once_each(mirrored):
    _, url = mirrored
    for text in ["A man with [X11X] dogs walks.", "[X0X] rides a bike.", "A [X2X]black[X10X] dog runs on the grass."]:
        out = translate(url, "libretranslate", text, "text")
        assert Counter(re.findall(r"\[X\d+X\]", out)) == Counter(re.findall(r"\[X\d+X\]", text)), out
    if mirrored[0] == "copy":
        assert translate(url, "libretranslate", "A [X2X]black[X10X] dog.", "text") == "A [X2X]black[X10X] dog."


def test_a_blank_text_keeps_its_line_breaks(mirrored):
    _, url = mirrored
    assert translate(url, "v1", "\n\n", "1") == "\n\n"
    assert translate(url, "deepl", "  ", "1") == ""


def test_spans_an_engine_makes_up_are_taken_out_on_every_route(tokenizer, tmp_path):
    with mirror_server(tokenizer, "invent", tmp_path) as url:
        for route, mode in ROUTES:
            text = "A man at gate B12 writes {user}.\nTom &amp; Jerry run."
            out = translate(url, route, text, mode)
            source = text.replace("&amp;", "&") if mode in ("xml", "html") else text
            assert invented_spans(out.replace("&amp;", "&"), source) == [], (route, mode, out)
            assert "B12" in out and "{user}" in out and out.count("\n") == 1, (route, mode, out)


@pytest.mark.parametrize(
    ("translation", "source", "expected"),
    [
        ("Eine {name}.", "A tag.", "Eine."),
        ("Ein Mann mit 11111@example.com läuft.", "A man walks.", "Ein Mann mit läuft."),
        ("Um 7:45 kostet es $5 (siehe https://x.org).", "At 7:45 it costs $5.", "Um 7:45 kostet es $5 (siehe)."),
        ("Flug LH1234 und LH9 am Gate B12.", "Flight LH1234 at gate B12.", "Flug LH1234 und am Gate B12."),
        ("Ein [X9X] Hund%1$s.", "A dog%1$s.", "Ein Hund%1$s."),
        ("Ein {{}} Hund.", "A dog.", "Ein Hund."),  # what closes up is looked at again
    ],
)
def test_a_span_the_source_lacks_is_taken_out_and_the_words_close_up(translation, source, expected):
    assert without_invented(translation, source) == expected


@pytest.mark.parametrize(
    ("text", "spans"),
    [
        ("Gate B12, flight LH1234, model A320, part XJ-9000, flat 4B, the 2nd floor, 3rd, 21st.",
         ["B12", "LH1234", "A320", "XJ-9000", "4B"]),
        ("Weblate: [X0X] and [X12X]; memoQ {1}; Okapi <x2/> <g3>x</g3>; Qt %1; printf %2$d; ICU {n, number}.",
         ["[X0X]", "[X12X]", "{1}", "<x2/>", "<g3>", "</g3>", "%1", "%2$d", "{n, number}"]),
        ("Tom &amp; Jerry write &lt;b&gt; and &#169;.", ["&amp;", "&lt;b&gt;", "&#169;"]),
    ],
)  # fmt: skip
def test_placeholders_of_every_client_and_identifiers_are_spans(text, spans):
    assert [span.text for span in find_spans(text)] == spans


def test_a_character_of_the_marks_restore_uses_in_the_text_is_dropped_not_read_as_a_span():
    masked = mask("A dog at 7:45.")
    assert masked.restore("Ein Hund \U000f0005um 1 \U000f0000.") == "Ein Hund um 7:45 ."


def test_a_placeholder_against_a_word_is_its_own_word_for_the_model_and_glued_back():
    masked = mask("A [X2X]black[X10X] dog.")
    assert masked.text == "A 1 black 2 dog."
    assert masked.restore("Ein 1 schwarzer 2 Hund.") == "Ein [X2X]schwarzer[X10X] Hund."
    assert masked.restore("Ein schwarzer Hund 1 2.") == "Ein schwarzer Hund [X2X] [X10X]."  # no word to glue to


def on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


@pytest.fixture
def glossary_work(monkeypatch) -> dict[str, set[bool]]:
    """The glossary store's methods, the entries' parser and the terms' builder, each as it is called:
    whether it ran on the server's event loop (a glossary of 27,000 entries once held it a quarter
    of a second, and every other client with it)."""
    from mtkit.api import deepl as deepl_api
    from mtkit.api import deepl_v3
    from mtkit.api.glossaries import GlossaryStore
    from mtkit.serving.terms import ServerTerms

    calls: dict[str, set[bool]] = {}

    def watched(name: str, function):
        def run(*args, **kwargs):
            calls.setdefault(name, set()).add(on_event_loop())
            return function(*args, **kwargs)

        return run

    for name in ("create", "create_multilingual", "change", "get", "owned", "delete"):
        monkeypatch.setattr(GlossaryStore, name, watched(name, getattr(GlossaryStore, name)))
    monkeypatch.setattr(ServerTerms, "stored", watched("stored", ServerTerms.stored))
    for module in (deepl_api, deepl_v3):
        monkeypatch.setattr(module, "parse_entries", watched("parse_entries", module.parse_entries))
    return calls


def test_deepls_v2_glossaries_are_read_written_and_built_off_the_event_loop(tokenizer, tmp_path, glossary_work):
    with mirror_server(tokenizer, "copy", tmp_path) as url:
        client = deepl.DeepLClient(KEY, server_url=url, send_platform_info=False)
        glossary = client.create_glossary("app", "EN", "DE", {"dog": "Köter"})
        assert client.get_glossary(glossary.glossary_id).name == "app"
        assert [g.glossary_id for g in client.list_glossaries()] == [glossary.glossary_id]
        assert client.get_glossary_entries(glossary) == {"dog": "Köter"}
        used = client.translate_text("A dog runs.", source_lang="EN", target_lang="DE", glossary=glossary)
        assert used.text == "A dog runs."
        client.delete_glossary(glossary)
    assert glossary_work == {name: {False} for name in ("create", "get", "owned", "delete", "stored", "parse_entries")}


def test_a_listening_server_keeps_start_up_out_of_the_collector_and_its_threads_take_turns_by_the_ms(
    tokenizer_path, tmp_path
):
    """Once `serve` listens, what it imported and built before (torch's modules, the app) is frozen: a full
    pass of the garbage collector had walked it all, holding the interpreter, and the event loop with
    it, 100-200 ms while a request made many objects. And a thread busy in Python hands the interpreter
    to the event loop within 1 ms of its asking (Python's default: 5 ms, at each of the loop's waits)."""
    script = f"""
import gc, os, signal, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from pathlib import Path
from test_every_client import mirror_service
from mtkit.api.app import serve
from mtkit.text.tokenizer import Tokenizer

service = mirror_service(Tokenizer.load({str(tokenizer_path)!r}), "copy", Path({str(tmp_path)!r}))

def listening(port):
    print(gc.get_freeze_count(), len(gc.get_objects()), sys.getswitchinterval(), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)

serve(service, "127.0.0.1", 0, listening, page=False)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    frozen, tracked, switch_interval = result.stdout.split()
    assert int(frozen) > 50_000 and int(tracked) < int(frozen) / 10
    assert float(switch_interval) == 0.001


def test_deepls_v3_languages_and_multilingual_glossaries_through_its_client(tokenizer, tmp_path, glossary_work):
    with mirror_server(tokenizer, "copy", tmp_path) as url:
        headers = {"Authorization": f"DeepL-Auth-Key {KEY}"}
        languages = httpx.get(f"{url}/v3/languages", params={"resource": "translate_text"}, headers=headers)
        assert languages.json() == [
            {"lang": "de", "name": "German", "usable_as_source": False, "usable_as_target": True,
             "features": {"tag_handling": {}, "glossary": {}}},
            {"lang": "en", "name": "English", "usable_as_source": True, "usable_as_target": False,
             "features": {"tag_handling": {}, "glossary": {}}},
        ]  # fmt: skip
        assert httpx.get(f"{url}/v3/languages", params={"resource": "write"}, headers=headers).json() == []
        wrong = httpx.get(f"{url}/v3/languages", params={"resource": "poetry"}, headers=headers)
        assert (wrong.status_code, wrong.json()) == (400, {"message": "Value for 'resource' not supported: poetry."})
        assert httpx.get(f"{url}/v3/nothing", headers=headers).json() == {"message": "Not Found"}

        client = deepl.DeepLClient(KEY, server_url=url, send_platform_info=False)
        terms = Dictionary("EN", "DE", {"dog": "Köter", "gate": "Flugsteig"})
        glossary = client.create_multilingual_glossary("app", [terms])
        assert [(d.source_lang, d.target_lang, d.entry_count) for d in glossary.dictionaries] == [("EN", "DE", 2)]
        assert client.get_multilingual_glossary(glossary.glossary_id).name == "app"
        assert glossary.glossary_id in [g.glossary_id for g in client.list_multilingual_glossaries()]
        entries = client.get_multilingual_glossary_entries(glossary, "EN", "DE").dictionaries[0].entries
        assert entries == "dog\tKöter\ngate\tFlugsteig\n"  # TSV, as DeepL answers it
        replaced = client.replace_multilingual_glossary_dictionary(glossary, Dictionary("EN", "DE", {"cat": "Mieze"}))
        assert replaced.entry_count == 1
        renamed = client.update_multilingual_glossary_name(glossary, "app strings")
        assert renamed.name == "app strings"
        merged = client.update_multilingual_glossary_dictionary(glossary, Dictionary("EN", "DE", {"dog": "Hund"}))
        assert merged.dictionaries[0].entry_count == 2
        fields = {
            "text": ["A cat runs."],
            "target_lang": "DE",
            "source_lang": "EN",
            "glossary_id": glossary.glossary_id,
        }
        used = httpx.post(f"{url}/v2/translate", json=fields, headers=headers)
        assert used.status_code == 200 and used.json()["translations"][0]["text"] == "A cat runs.", used.text
        client.delete_multilingual_glossary(glossary)
        with pytest.raises(deepl.GlossaryNotFoundException):
            client.get_multilingual_glossary(glossary.glossary_id)
        gone = httpx.post(f"{url}/v2/translate", json=fields, headers=headers)
        assert (gone.status_code, gone.json()) == (404, {"message": "Glossary not found"})
    work = ("create_multilingual", "create", "change", "get", "owned", "delete", "stored", "parse_entries")
    assert glossary_work == {name: {False} for name in work}  # each off the event loop


def test_weblates_deepl_requests_keep_its_placeholders_and_line_breaks(mirrored):
    """Weblate's DeepL backend sends its placeholders as empty <x id="N"></x> elements, tag_handling xml
    and ignore_tags x, several texts in one JSON request."""
    rule, url = mirrored
    texts = ['Hello <x id="6"></x>, you have <x id="19"></x> new messages.\nSee <x id="40"></x>.',
             'A <x id="2"></x>black<x id="10"></x> dog.', "Two lines\r\nand one more."]  # fmt: skip
    fields = {"text": texts, "source_lang": "EN", "target_lang": "DE", "tag_handling": "xml", "ignore_tags": ["x"]}
    answer = httpx.post(f"{url}/v2/translate", json=fields, timeout=60)
    outs = [entry["text"] for entry in answer.json()["translations"]]
    for text, out in zip(texts, outs):
        assert sorted(re.findall(r'<x id="\d+"></x>', out)) == sorted(re.findall(r'<x id="\d+"></x>', text)), out
        assert break_runs(out) == break_runs(text), out
    if rule == "copy":
        assert outs == texts


def test_the_search_never_writes_a_character_only_a_span_holds(tokenizer):
    from mtkit.decoding.constraints import without_made_up_spans
    from mtkit.text.spans import SPAN_MARKS

    banned = set(without_made_up_spans(SearchConfig(), tokenizer).banned)
    texts = tokenizer.decode_batch([[i] for i in range(tokenizer.vocab_size)])
    writing = {i for i, text in enumerate(texts) if any(char in SPAN_MARKS for char in text)}
    assert writing and {(i,) for i in writing} <= banned
    euro = tuple(tokenizer.token_to_id(f"<0x{byte:02X}>") for byte in "€".encode())
    assert euro in banned and "€" in tokenizer.decode_batch([list(euro)])[0]
    assert not {(i,) for i, text in enumerate(texts) if text.strip().isalpha()} & banned  # words stay


@pytest.mark.parametrize("keep_spans", [True, False])
def test_a_served_engine_bans_them_only_where_the_service_masks_spans(tokenizer, tmp_path, keep_spans):
    from mtkit.serving.service import Service

    (tmp_path / "m.pt").write_bytes(b"a mirror")
    info = ModelInfo("m", tmp_path / "m.pt", "pytorch", "en", "de", {"src_lang": "en", "tgt_lang": "de"})
    service = Service(lambda: MirrorTranslator(tokenizer, "copy"), (tokenizer, tokenizer), SearchConfig(beam=2), info,
                      ServeConfig(keep_spans=keep_spans))  # fmt: skip
    service.engine.build()
    at = tokenizer.token_to_id("<0x40>")  # "@"
    assert ((at,) in service.engine.translator.cfg.banned) == keep_spans


def test_translate_bans_them_with_keep_spans_only(trained_run):
    from mtkit.interop.engines import Decoding, build_translator
    from mtkit.text.spans import SPAN_MARKS

    def translator(keep_spans: bool):
        decoding = Decoding(search=SearchConfig(beam=2), device="cpu", precision="fp32", batch_size=16, max_tokens=0,
                            keep_spans=keep_spans)  # fmt: skip
        return build_translator(decoding, [trained_run])

    kept, raw = translator(True), translator(False)
    marks = {tuple(sequence) for sequence in kept.tgt_tokenizer.sequences_writing(SPAN_MARKS)}
    assert set(kept.cfg.banned) == set(raw.cfg.banned) | marks and not marks & set(raw.cfg.banned)


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("route", "body", "shape"),
    [("/v2/translate", '{"text": ["A dog."], "target_lang": "DE", "formality": ["more"]}', "message"),
     ("/v2/translate", '{"text": ["A dog."], "target_lang": "DE", "n": ' + "9" * 5000 + "}", "message"),
     ("/v2/translate", '{"text": ' + DEEP + "}", "message"),
     ("/translate", '{"q": "A dog.", "target": "de", "n": ' + "9" * 5000 + "}", "error"),
     ("/translate", '{"q": ' + DEEP + "}", "error")],
)  # fmt: skip
def test_a_malformed_body_is_a_400_in_the_apis_shape_not_a_500(tokenizer, tmp_path, route, body, shape):
    with mirror_server(tokenizer, "copy", tmp_path) as url:
        answer = httpx.post(url + route, content=body, headers={"content-type": "application/json"}, timeout=60)
    assert answer.status_code == 400 and list(answer.json()) == [shape], answer.text
