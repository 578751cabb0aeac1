"""The string files of software (mtkit.documents.strings): JSON and Android strings.xml translated
by engines whose output is known keep every placeholder of every message, their keys and what is not
a message, parse again with their own parser (json, lxml), and follow the target's plural categories."""

import json
import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree
from test_documents import copy_engine, reverse_engine, translated

from mtkit.core.errors import MtkitError
from mtkit.documents.formats import document_format, read_document
from mtkit.documents.strings.common import plural_categories
from mtkit.documents.strings.placeholders import APP_PLACEHOLDER

PLACEHOLDERS = ["%s", "%d", "%1$s", "%2$d", "%@", "%1$@", "{0}", "{name}", "{{count}}", "%{user}", "$t(common.ok)",
                "{count, number}", "%.2f", "%%"]  # fmt: skip
WORDS = ["the", "app", "file", "is", "ready", "open", "now", "new", "message", "from", "you", "have"]


def kept(text: str) -> Counter:
    return Counter(match.group() for match in APP_PLACEHOLDER.finditer(text) if not match.group().startswith("<"))


@st.composite
def messages(draw) -> str:
    parts = draw(st.lists(st.one_of(st.sampled_from(WORDS), st.sampled_from(PLACEHOLDERS)), min_size=1, max_size=8))
    return " ".join(parts)


@settings(max_examples=60, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=6), st.sampled_from([copy_engine, reverse_engine]))
def test_json_messages_keep_every_placeholder_and_parse(texts, engine):
    source = {"screen": {f"m{i}": text for i, text in enumerate(texts)}, "count": 3, "flags": [True, None]}
    out = json.loads(translated(json.dumps(source, indent=2).encode(), "en.json", engine))
    assert list(out["screen"]) == list(source["screen"]) and out["count"] == 3 and out["flags"] == [True, None]
    for key, text in source["screen"].items():
        assert kept(out["screen"][key]) == kept(text), (text, out["screen"][key])


@pytest.mark.parametrize(
    ("target", "keys"),
    [
        ("de", ["items_one", "items_other"]),
        ("cs", ["items_one", "items_few", "items_many", "items_other"]),
        ("ja", ["items_other"]),
        ("ar", ["items_zero", "items_one", "items_two", "items_few", "items_many", "items_other"]),
    ],
)
def test_i18next_plural_keys_follow_the_target_language(target, keys):
    source = {"title": "Files", "items_one": "one file", "items_other": "{{count}} files", "end": "Bye"}
    out = json.loads(translated(json.dumps(source).encode(), "en.json", copy_engine, target=target))
    assert list(out) == ["title", *keys, "end"]
    assert all(out[key] == ("one file" if key == "items_one" else "{{count}} files") for key in keys)


def test_json_keeps_its_indentation_and_what_is_not_a_message():
    source = b'{\n    "a": "open now",\n    "n": 1.5,\n    "list": [\n        "the file"\n    ]\n}\n'
    assert translated(source, "en.json", copy_engine) == source


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"a": "x",}', "en.json: not JSON (line 1, column 11"),
        (b"[" * 100_000 + b"]" * 100_000, "en.json: nested too deep to read"),
        (b'<resources><string name="a">x</string>', "strings.xml: not well-formed XML"),
        (b"<manifest/>", "strings.xml: not an Android string resource (its root is manifest)"),
    ],
)
def test_string_files_that_do_not_read_are_one_line(data, message):
    name = "strings.xml" if data.startswith(b"<") else "en.json"
    with pytest.raises(MtkitError) as err:
        read_document(data, name, document_format(name))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


ANDROID = """<?xml version="1.0" encoding="utf-8"?>
<resources xmlns:xliff="urn:oasis:names:tc:xliff:document:1.2">
    <string name="app_name" translatable="false">MyApp</string>
    <string name="hello">Hello <b>%1$s</b>, you don\\'t have <xliff:g id="n">%2$d</xliff:g> messages.\\nBye.</string>
    <string name="quoted">"It's here"</string>
    <string-array name="days"><item>Monday</item><item>Tuesday</item></string-array>
    <plurals name="songs">
        <item quantity="one">%d song found.</item>
        <item quantity="other">%d songs found.</item>
    </plurals>
</resources>
"""


def android_units(data: bytes) -> dict[str, list[str]]:
    root = etree.fromstring(data)
    return {f"{e.tag}:{e.get('name')}": [etree.tostring(e, encoding="unicode", with_tail=False)] for e in root}


def test_android_strings_keep_placeholders_escapes_runs_and_what_is_not_translated():
    out = translated(ANDROID.encode(), "strings.xml", reverse_engine)
    root = etree.fromstring(out)  # lxml reads it
    hello = root.find("string[@name='hello']")
    text = etree.tostring(hello, encoding="unicode", with_tail=False)
    assert kept(text) == kept(ANDROID.split('name="hello">')[1].split("</string>")[0])
    assert "<b>%1$s</b>" in text and '<xliff:g id="n">%2$d</xliff:g>' in text and "don\\'t" in text
    assert not re.search(r"(?<!\\)'", "".join(hello.itertext()).replace("\\'", ""))  # every apostrophe escaped
    assert root.find("string[@name='app_name']").text == "MyApp"
    assert root.find("string[@name='quoted']").text == '"here It\'s"'  # quoted whole: no escapes needed


def test_android_plurals_follow_the_target_language():
    out = etree.fromstring(translated(ANDROID.encode(), "strings.xml", copy_engine, target="ru"))
    items = out.find("plurals").findall("item")
    assert [item.get("quantity") for item in items] == ["one", "few", "many", "other"]
    assert [item.text for item in items] == ["%d song found.", "%d songs found.", "%d songs found.", "%d songs found."]


@settings(max_examples=40, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=5), st.sampled_from([copy_engine, reverse_engine]))
def test_android_messages_keep_every_placeholder_and_parse(texts, engine):
    body = "".join(f'<string name="m{i}">{text}</string>' for i, text in enumerate(texts))
    out = etree.fromstring(translated(f"<resources>{body}</resources>".encode(), "strings.xml", engine))
    for i, text in enumerate(texts):
        assert kept("".join(out.find(f"string[@name='m{i}']").itertext())) == kept(text)


def test_cldr_categories_of_a_few_languages():
    assert plural_categories("pt-BR") == ("one", "many", "other")
    assert plural_categories("zh_Hans") == ("other",) and plural_categories("xx") == ("one", "other")
