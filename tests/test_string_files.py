"""More string files of software (mtkit.documents.strings): YAML, Flutter ARB (ICU MessageFormat),
iOS .strings and .stringsdict, Java .properties and a CSV column. Engines whose output is known keep
every placeholder and ICU structure; each file reopens with its own parser (ruamel.yaml,
pyicumessageformat, plistlib, jproperties, csv); a copying engine gives the file back as it was;
plural forms follow the target language."""

import codecs
import csv
import io
import json
import plistlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jproperties import Properties
from pyicumessageformat import Parser
from ruamel.yaml import YAML
from test_documents import copy_engine, reverse_engine, translated
from test_strings import WORDS, kept, messages

from mtkit.core.errors import MtkitError
from mtkit.documents.formats import document_format, read_document
from mtkit.documents.inline import FileLimits, FileTooLarge
from mtkit.documents.strings.tables import sniffed_prefix

ENGINES = st.sampled_from([copy_engine, reverse_engine])


def yaml_load(data: bytes):
    return YAML(typ="safe").load(data.decode())


# YAML

RAILS = """# shown on the first screen
en:
  greeting: "Hello %{name}!"   # the user's name
  inbox:
    one: "One message"
    other: "%{count} messages"
  steps:
    - First step
    - Second step
  plain: 'Single quoted'
  block: |
    Two lines
    of text
  count: 3
"""


def test_yaml_copied_is_the_file_with_its_root_language_renamed():
    out = translated(RAILS.encode(), "en.yml", copy_engine, target="de").decode()
    assert out == RAILS.replace("\nen:", "\nde:")


def test_yaml_plural_groups_follow_the_target_language():
    out = yaml_load(translated(RAILS.encode(), "en.yml", copy_engine, target="cs"))
    assert list(out["cs"]["inbox"].items()) == [
        ("one", "One message"),
        ("few", "%{count} messages"),
        ("many", "%{count} messages"),
        ("other", "%{count} messages"),
    ]


@settings(max_examples=40, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=5), ENGINES)
def test_yaml_messages_keep_every_placeholder_and_parse(texts, engine):
    source = "en:\n" + "".join(f"  m{i}: {json.dumps(text)}\n" for i, text in enumerate(texts))
    out = yaml_load(translated(source.encode(), "en.yml", engine))
    assert list(out) == ["de"] and list(out["de"]) == [f"m{i}" for i in range(len(texts))]
    for i, text in enumerate(texts):
        assert kept(out["de"][f"m{i}"]) == kept(text)


def test_a_yaml_alias_bomb_costs_its_size_not_its_expansion():
    lines = ["a0: &a0 [the file, is ready]"] + [f"a{k}: &a{k} [*a{k - 1}, *a{k - 1}]" for k in range(1, 40)]
    document = read_document("\n".join(lines).encode(), "bomb.yml", "yaml")  # 2**40 strings expanded
    assert len(document.segments()) == 2


# ARB (ICU MessageFormat)

ARB = {
    "@@locale": "en",
    "title": "Hello {name}, it's {n, number} o'clock",
    "@title": {"description": "The greeting", "placeholders": {"name": {"type": "String"}}},
    "files": "You have {count, plural, =0{no files} one{one file} other{{count} files, # in all}} in '{'folder'}'.",
    "who": "{gender, select, male{He likes it} female{She likes it} other{They like it}}",
}


def shape(node):
    """An ICU message's structure with its literal text left out."""
    if isinstance(node, list):
        return [shape(part) for part in node if not isinstance(part, str)]
    return {key: shape(value) if key == "options" else value for key, value in node.items()} | (
        {"options": {k: shape(v) for k, v in node["options"].items()}} if "options" in node else {}
    )


def test_arb_copied_is_the_file_with_its_locale_set():
    out = json.loads(translated(json.dumps(ARB, indent=2).encode(), "app_en.arb", copy_engine, target="de"))
    assert out == ARB | {"@@locale": "de"}


def test_arb_segments_are_the_messages_and_their_branches():
    document = read_document(json.dumps(ARB).encode(), "app_en.arb", "arb")
    assert document.segments() == [
        'Hello <x id="0"/>, it\'s <x id="1"/> o\'clock',
        'You have <x id="0"/> in <x id="1"/>.',
        "no files",
        "one file",
        '<x id="0"/> files, <x id="1"/> in all',
        '<x id="0"/>',
        "He likes it",
        "She likes it",
        "They like it",
    ]


def test_arb_plural_branches_follow_the_target_and_reparse():
    out = json.loads(translated(json.dumps(ARB).encode(), "app_en.arb", reverse_engine, target="cs"))
    (plural,) = [part for part in Parser().parse(out["files"]) if not isinstance(part, str)]
    assert list(plural["options"]) == ["=0", "one", "few", "many", "other"]
    assert plural["options"]["few"] == plural["options"]["other"]
    assert out["@title"] == ARB["@title"] and "'{'folder'}'" in out["files"]  # a quoted brace stays quoted


ICU_PARTS = ["{name}", "{n, number}", "{d, date, short}", "#", "'", "{", "}"]


@st.composite
def icu_messages(draw) -> str:
    def text() -> str:
        parts = draw(st.lists(st.one_of(st.sampled_from(WORDS), st.sampled_from(ICU_PARTS[:3])), max_size=5))
        return " ".join(parts)

    branches = " ".join(
        f"{sel}{{{text()} #}}" for sel in draw(st.sampled_from([["one", "other"], ["=0", "one", "other"]]))
    )
    return f"{text()} {{count, plural, {branches}}} {text()}"


@settings(max_examples=40, deadline=None)
@given(st.lists(icu_messages(), min_size=1, max_size=4), ENGINES)
def test_arb_messages_keep_their_icu_structure(texts, engine):
    source = {f"m{i}": text for i, text in enumerate(texts)}
    out = json.loads(translated(json.dumps(source).encode(), "app_en.arb", engine, target="de"))
    for key, text in source.items():
        assert shape(Parser().parse(out[key])) == shape(Parser().parse(text)), (text, out[key])


def test_apostrophes_are_quoted_only_where_icu_needs_it():
    source = {"a": "l'homme {name}", "b": "It's '{'here'}'", "c": "{n, plural, one{it's #} other{it's # '#'}}"}
    assert json.loads(translated(json.dumps(source).encode(), "x.arb", copy_engine)) == source
    doubled = json.loads(translated(b'{"d": "It\'\'s {x}"}', "x.arb", copy_engine))["d"]
    assert doubled == "It's {x}" and Parser().parse(doubled) == Parser().parse("It''s {x}")


# iOS

STRINGS = '/* The title */\n"title" = "Open the file";\n// a line comment\n"count" = "%d files in \\"%@\\"\\nnow";\nkey = "unquoted key";\n'


@pytest.mark.parametrize("codec", ["utf-8", "utf-16", "utf-16-be"])
def test_strings_copied_are_the_same_bytes_in_their_encoding(codec):
    data = STRINGS.encode(codec) if codec != "utf-16-be" else codecs.BOM_UTF16_BE + STRINGS.encode(codec)
    assert translated(data, "Localizable.strings", copy_engine) == data


@settings(max_examples=40, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=5), ENGINES)
def test_strings_messages_keep_every_placeholder_and_parse(texts, engine):
    escaped = [text.replace("\\", "\\\\").replace('"', '\\"') for text in texts]
    source = "".join(f'"m{i}" = "{text}";\n' for i, text in enumerate(escaped))
    out = translated(source.encode(), "Localizable.strings", engine).decode()
    values = parse_strings(out)
    for i, text in enumerate(texts):
        assert kept(values[f"m{i}"]) == kept(text)


def parse_strings(text: str) -> dict[str, str]:
    """The entries of a .strings file: quoted keys and values with their backslash escapes."""
    found = re.findall(r'"((?:[^"\\]|\\.)*)"\s*=\s*"((?:[^"\\]|\\.)*)"\s*;', text)
    unescape = lambda s: re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)  # noqa: E731
    return {unescape(key): unescape(value) for key, value in found}


STRINGSDICT = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>files</key>
  <dict>
    <key>NSStringLocalizedFormatKey</key>
    <string>You have %#@files@ in the folder</string>
    <key>files</key>
    <dict>
      <key>NSStringFormatSpecTypeKey</key>
      <string>NSStringPluralRuleType</string>
      <key>NSStringFormatValueTypeKey</key>
      <string>d</string>
      <key>zero</key>
      <string>no files</string>
      <key>one</key>
      <string>%d file</string>
      <key>other</key>
      <string>%d files</string>
    </dict>
  </dict>
</dict>
</plist>
"""


def test_stringsdict_plural_rules_follow_the_target_and_reparse():
    out = plistlib.loads(translated(STRINGSDICT.encode(), "Localizable.stringsdict", reverse_engine, target="ru"))
    rule = out["files"]["files"]
    assert list(rule) == [
        "NSStringFormatSpecTypeKey",
        "NSStringFormatValueTypeKey",
        "zero",
        "one",
        "few",
        "many",
        "other",
    ]
    assert rule["few"] == rule["many"] == rule["other"] == "%d files" and rule["zero"] == "files no"
    assert out["files"]["NSStringLocalizedFormatKey"].count("%#@files@") == 1


@settings(max_examples=40, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=4), ENGINES)
def test_stringsdict_messages_keep_every_placeholder_and_parse(texts, engine):
    rule = {"NSStringFormatSpecTypeKey": "NSStringPluralRuleType", "NSStringFormatValueTypeKey": "d"}
    source = {f"m{i}": {"NSStringLocalizedFormatKey": f"{text} %#@n@", "n": rule | {"one": text, "other": text}}
              for i, text in enumerate(texts)}  # fmt: skip
    out = plistlib.loads(translated(plistlib.dumps(source), "x.stringsdict", engine, target="de"))
    for key, entry in source.items():
        assert kept(out[key]["NSStringLocalizedFormatKey"]) == kept(entry["NSStringLocalizedFormatKey"])
        assert kept(out[key]["n"]["one"]) == kept(out[key]["n"]["other"]) == kept(entry["n"]["one"].strip())


def test_stringsdict_copied_keeps_its_values():
    assert plistlib.loads(translated(STRINGSDICT.encode(), "x.stringsdict", copy_engine)) == plistlib.loads(
        STRINGSDICT.encode()
    )


# Java properties

PROPERTIES = b"# The app's messages\n! another comment\n\ngreeting = Hello {0}, welcome!\nlong: first part \\\n    second part\nkey value with \\u00e9 here\nempty=\n"


def java_properties(data: bytes, encoding: str = "iso-8859-1") -> dict[str, str]:
    properties = Properties()
    properties.load(data, encoding)
    return {key: value.data for key, value in properties.items()}


def test_properties_translated_keep_keys_comments_and_their_encoding():
    out = translated(PROPERTIES, "messages.properties", reverse_engine)
    assert out.isascii() and out.startswith(b"# The app's messages\n! another comment\n\n")
    assert java_properties(out) == {
        "greeting": "welcome! , Hello {0}",
        "long": "part second part first",
        "key": "here \u00e9 with value",
        "empty": "",
    }


def test_properties_in_utf8_stay_utf8():
    source = "title=Grüße aus Köln\n".encode()
    assert translated(source, "m.properties", copy_engine) == source


@settings(max_examples=40, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=5), ENGINES)
def test_properties_messages_keep_every_placeholder_and_parse(texts, engine):
    source = "".join(f"m{i}={text.replace(chr(92), chr(92) * 2)}\n" for i, text in enumerate(texts))
    out = java_properties(translated(source.encode(), "m.properties", engine))
    for i, text in enumerate(texts):
        assert kept(out[f"m{i}"]) == kept(text.strip())


# CSV

TABLE = b'key,en,de\r\ngreeting,"Open the file, now",\r\nbye,the app is ready,Die App ist fertig\r\n'


def csv_rows(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode("utf-8-sig"), newline="")))


def test_csv_into_another_column_leaves_filled_cells_alone_unless_retranslated():
    out = csv_rows(translated(TABLE, "t.csv", reverse_engine, column="en:de"))
    assert out == [["key", "en", "de"], ["greeting", "Open the file, now", "now file, the Open"],
                   ["bye", "the app is ready", "Die App ist fertig"]]  # fmt: skip
    again = csv_rows(translated(TABLE, "t.csv", reverse_engine, column="en:de", retranslate=True))
    assert again[2][2] == "ready is app the"
    made = csv_rows(translated(TABLE, "t.csv", copy_engine, column="en:fr"))
    assert made[0] == ["key", "en", "de", "fr"] and [row[3] for row in made[1:]] == [row[1] for row in made[1:]]


@settings(max_examples=40, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=5), ENGINES)
def test_csv_cells_keep_every_placeholder_and_parse(texts, engine):
    out = io.StringIO()
    csv.writer(out).writerows([["key", "en"], *([f"m{i}", text] for i, text in enumerate(texts))])
    rows = csv_rows(translated(out.getvalue().encode(), "t.csv", engine, column="en:de"))
    assert [row[0] for row in rows] == ["key"] + [f"m{i}" for i in range(len(texts))] and rows[0] == ["key", "en", "de"]
    for row, text in zip(rows[1:], texts):
        assert row[1] == text and kept(row[2]) == kept(text.strip())


def test_csv_copied_in_place_is_the_same_bytes():
    assert translated(TABLE, "t.csv", copy_engine, column="en") == TABLE
    semicolons = "\ufeffa;b\n1;the file\n".encode()
    assert translated(semicolons, "t.csv", copy_engine, column="2") == semicolons


def test_properties_escapes_come_back_as_java_wrote_them():
    data = b"a=smile \\uD83D\\uDE00 now\nb=lone \\uD800 half\nc=two \\\\uZZZZ backslash\n"
    document = read_document(data, "m.properties", document_format("m.properties"))
    assert document.segments()[0] == "smile \U0001f600 now"  # a surrogate pair is one character
    assert document.segments()[1] == ""  # a lone surrogate: the value stays as written
    assert document.segments()[2] == "two \\uZZZZ backslash"
    assert document.write(document.segments(), None) == data
    with pytest.raises(MtkitError) as err:
        read_document(b"a=ok\nb=bad \\uZZZZ\n", "m.properties", "properties")
    assert str(err.value) == "m.properties: line 2: a \\u not followed by four hexadecimal digits (Java refuses it too)"


def test_continued_lines_are_joined_as_java_joins_them_however_many():
    lines = 50_000
    data = b"k = a\\\n" + b"    b\\\n" * lines + b"  c\nnext = d\n"
    document = read_document(data, "m.properties", "properties")
    assert document.segments() == ["a" + "b" * lines + "c", "d"]


def test_cells_a_spreadsheet_would_run_are_written_as_text():
    table = b"key,en\r\na,=HYPERLINK(1)\r\nb,-5 apples\r\nc,@home\r\nd,+49 30 1234\r\ne,plain text\r\n"
    rows = csv_rows(translated(table, "t.csv", copy_engine, column="en:de"))
    assert [row[2] for row in rows[1:]] == ["'=HYPERLINK(1)", "'-5 apples", "'@home", "'+49 30 1234", "plain text"]


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ("1:99999999999999999999", "--column 99999999999999999999: the rows have at most 3 columns"),
        ("4", "--column 4: the rows have at most 3 columns"),
        ("en:5", "--column 5: the rows have at most 3 columns"),
    ],
)
def test_a_column_past_the_widest_row_is_one_line(column, message):
    with pytest.raises(MtkitError) as err:
        read_document(TABLE, "t.csv", document_format("t.csv"), column=column)
    assert str(err.value) == f"t.csv: {message}"
    made = csv_rows(translated(TABLE, "t.csv", copy_engine, column="en:4"))  # one past the widest: a new column
    assert made[1] == ["greeting", "Open the file, now", "", "Open the file, now"]


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab,;\"'\n\t|")), max_size=20_000))
def test_the_delimiter_is_sniffed_on_at_most_20_lines_and_4096_characters(text):
    """csv.Sniffer's time grows faster than its input (65,536 crafted characters took it 41 s)."""
    prefix = sniffed_prefix(text)
    assert text.startswith(prefix) and len(prefix) <= 4096 and len(prefix.splitlines()) <= 20


# What does not read, and bounds


@pytest.mark.parametrize(
    ("data", "name", "message"),
    [
        (b"en:\n  a: [unclosed", "en.yml", "en.yml: not YAML ("),
        (
            b'{"a": "{n, plural, one{x}"}',
            "x.arb",
            "x.arb: a: not an ICU message (a plural without its } at character 19)",
        ),
        (b'{"a": "x}"}', "x.arb", "x.arb: a: not an ICU message (a } that closes nothing at character 2)"),
        (
            b'"a" = "x";\n"b" = unquoted;\n',
            "L.strings",
            'L.strings: line 2: not a "key" = "value"; entry nor a comment',
        ),
        (b"\xff\xfe\x00\xd8", "L.strings", "L.strings: not UTF-16-LE text"),
        (b"<plist><array/></plist>", "L.stringsdict", "L.stringsdict: not a .stringsdict property list"),
        (b"a,b\n1,2\n", "t.csv", "t.csv: which column is to be translated? Give --column"),
    ],
)
def test_string_files_that_do_not_read_are_one_line(data, name, message):
    with pytest.raises(MtkitError) as err:
        read_document(data, name, document_format(name))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_icu_nesting_is_bounded():
    deep = "{a, select, other{" * 200 + "x" + "}}" * 200
    with pytest.raises(MtkitError, match="nest"):
        read_document(json.dumps({"m": deep}).encode(), "x.arb", "arb")


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("m.properties", b"".join(b"k%d=v\n" % i for i in range(60))),
        ("L.strings", b"".join(b'"k%d" = "v";\n' % i for i in range(60))),
        ("en.yml", b"".join(b"k%d: v\n" % i for i in range(60))),
        ("t.csv", b"a\n" + b"v\n" * 60),
    ],
)
def test_string_files_keep_the_segment_bound(name, data):
    with pytest.raises(FileTooLarge):
        read_document(data, name, document_format(name), limits=FileLimits(max_segments=50), column="1")
