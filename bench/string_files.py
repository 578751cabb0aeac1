"""The string files of software through translation (`mtkit translate-file`): for each format, 1,000
messages made from Multi30k's held-out sentences (test2016, then val), one or two placeholders of
the format's own kind put between their words, every fifth message a plural (ARB: an ICU `plural`
with `=0`, `one` and `other` branches), translated en->de.

    python bench/string_files.py -m MODEL [--data ../shared/data/multi30k] [--messages 1000] [--beam 5]

For each format: whether its own parser reopens the translated file (json; ruamel.yaml;
pyicumessageformat for every ARB message; lxml; plistlib; jproperties; csv; for iOS .strings,
whose only parser is Apple's, the quoted pairs read back with their escapes); the share of messages
whose placeholders (and, for ARB, whose ICU structure: argument names, types and selectors) came
back exactly; the share translated (changed, and German by mtkit's language identification where
three words or more); and the seconds the file took.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import plistlib
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

from common import DEFAULT_MULTI30K, conditions, print_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PLACEHOLDERS = {
    "json": ["{{name}}", "{{count}}", "$t(app.title)"],
    "yaml": ["%{name}", "%{count}"],
    "android": ["%1$s", "%2$d", "%s"],
    "strings": ["%@", "%1$@", "%d"],
    "stringsdict": ["%@", "%lld"],
    "properties": ["{0}", "{1}"],
    "csv": ["{name}", "%s"],
    "arb": ["{name}", "{date}"],
}


def with_placeholders(sentence: str, kind: str, rng: random.Random) -> str:
    words = sentence.split()
    for placeholder in rng.sample(PLACEHOLDERS[kind], rng.randint(1, 2)):
        words.insert(rng.randint(1, len(words)), placeholder)
    return " ".join(words)


def files(sentences: list[str], rng: random.Random) -> dict[str, tuple[str, bytes, list[tuple[str, str]]]]:
    """Each format's file name, bytes and (key, message) pairs to check."""
    out = {}
    for kind in PLACEHOLDERS:
        messages = [(f"m{i}", with_placeholders(s, kind, rng)) for i, s in enumerate(sentences)]
        out[kind] = MAKERS[kind](messages)
    return out


def json_file(messages):
    tree = {"app": {key: text for key, text in messages}}
    return "en.json", json.dumps(tree, ensure_ascii=False, indent=2).encode(), messages


def yaml_file(messages):
    body = "".join(f"  {key}: {json.dumps(text, ensure_ascii=False)}\n" for key, text in messages)
    return "en.yml", ("# app strings\nen:\n" + body).encode(), messages


def arb_file(messages):
    tree = {"@@locale": "en"}
    for n, (key, text) in enumerate(messages):
        if n % 5 == 0:
            text = f"{{count, plural, =0{{no {text}}} one{{# {text}}} other{{# {text}, {{count}} in all}}}}"
        tree[key] = text
        tree[f"@{key}"] = {"description": "a message"}
    return "app_en.arb", json.dumps(tree, ensure_ascii=False, indent=2).encode(), [(k, tree[k]) for k, _ in messages]


def android_file(messages):
    escape = lambda t: t.replace("&", "&amp;").replace("<", "&lt;").replace("'", "\\'")  # noqa: E731
    body = "".join(f'  <string name="{key}">{escape(text)}</string>\n' for key, text in messages)
    return (
        "strings.xml",
        f'<?xml version="1.0" encoding="utf-8"?>\n<resources>\n{body}</resources>\n'.encode(),
        messages,
    )


def strings_file(messages):
    body = "".join(f'/* {key} */\n"{key}" = "{text.replace(chr(34), chr(92) + chr(34))}";\n' for key, text in messages)
    return "Localizable.strings", body.encode("utf-16"), messages


def stringsdict_file(messages):
    entries = {}
    for key, text in messages:
        entries[key] = {
            "NSStringLocalizedFormatKey": f"{text} %#@items@",
            "items": {"NSStringFormatSpecTypeKey": "NSStringPluralRuleType", "NSStringFormatValueTypeKey": "d",
                      "one": "%d item", "other": "%d items"},
        }  # fmt: skip
    checked = [(key, f"{text} %#@items@") for key, text in messages]
    return "Localizable.stringsdict", plistlib.dumps(entries, sort_keys=False), checked


def properties_file(messages):
    body = "".join(f"{key}={text}\n" for key, text in messages)
    return "messages.properties", ("# app strings\n" + body).encode("utf-8"), messages


def csv_file(messages):
    out = io.StringIO()
    csv.writer(out).writerows([["key", "en"], *messages])
    return "strings.csv", out.getvalue().encode(), messages


MAKERS = {"json": json_file, "yaml": yaml_file, "arb": arb_file, "android": android_file, "strings": strings_file,
          "stringsdict": stringsdict_file, "properties": properties_file, "csv": csv_file}  # fmt: skip


def reopened(kind: str, data: bytes) -> dict[str, str]:
    """The translated messages by key, as the format's own parser reads them."""
    if kind == "json":
        return json.loads(data)["app"]
    if kind == "yaml":
        from ruamel.yaml import YAML

        return dict(YAML(typ="safe").load(data.decode())["de"])
    if kind == "arb":
        return {k: v for k, v in json.loads(data).items() if not k.startswith("@")}
    if kind == "android":
        from lxml import etree

        return {e.get("name"): "".join(e.itertext()).replace("\\'", "'") for e in etree.fromstring(data)}
    if kind == "strings":
        pairs = re.findall(r'"((?:[^"\\]|\\.)*)"\s*=\s*"((?:[^"\\]|\\.)*)"\s*;', data.decode("utf-16"))
        return {k: re.sub(r"\\(.)", r"\1", v) for k, v in pairs}
    if kind == "stringsdict":
        return {k: v["NSStringLocalizedFormatKey"] for k, v in plistlib.loads(data).items()}
    if kind == "properties":
        from jproperties import Properties

        found = Properties()
        found.load(data, "utf-8")
        return {k: v.data for k, v in found.items()}
    rows = list(csv.reader(io.StringIO(data.decode(), newline="")))
    return {row[0]: row[1] for row in rows[1:]}


def structure(kind: str, text: str):
    """What must come back exactly: the placeholders (ARB: the ICU structure without its text)."""
    if kind == "arb":
        from pyicumessageformat import Parser

        def shape(node):
            if isinstance(node, list):
                return [shape(part) for part in node if not isinstance(part, str)]
            return {
                k: ({b: shape(v) for b, v in node["options"].items()} if k == "options" else v) for k, v in node.items()
            }

        return shape(Parser().parse(text))
    from mtkit.documents.strings.placeholders import APP_PLACEHOLDER

    return Counter(m.group() for m in APP_PLACEHOLDER.finditer(text) if m.group().strip())


def measure(kind: str, name: str, data: bytes, checked, translator) -> list[object]:
    from mtkit.documents.formats import document_format, read_document
    from mtkit.text.langid import identify
    from mtkit.translation.markup import translate_document

    started = time.perf_counter()
    document = read_document(data, name, document_format(name), column="en")
    out = translate_document(translator, document, "de")
    seconds = time.perf_counter() - started
    try:
        got = reopened(kind, out)
    except Exception as err:  # the point of the measure: whether the parser takes it
        return [kind, f"no: {type(err).__name__}", "-", "-", f"{seconds:.1f}"]
    kept = translated = 0
    for key, source in checked:
        target = got[key]
        kept += structure(kind, target) == structure(kind, source)
        plain = re.sub(r"%#@\w+@|\{[^{}]*\}|%\S+|\$t\([^)]*\)", " ", target)
        translated += target != source and (len(plain.split()) < 3 or identify(plain, ("en", "de"))[0] == "de")
    n = len(checked)
    return [kind, "yes", f"{kept / n:.1%}", f"{translated / n:.1%}", f"{seconds:.1f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    from mtkit.decoding.search_rules import SearchConfig
    from mtkit.model.files import load_model_file
    from mtkit.translation.translate import Translator

    read = lambda name: (args.data / name).read_text(encoding="utf-8").splitlines()  # noqa: E731
    sentences = (read("test2016.en") + read("val.en"))[: args.messages]
    translator = Translator(load_model_file(args.model), SearchConfig(beam=args.beam), "cpu")
    print(f"conditions: {conditions()}")
    print(f"model: {args.model}; en->de, beam {args.beam}; {len(sentences):,} messages a format, seed {args.seed}\n")
    rows = [measure(kind, *made, translator) for kind, made in files(sentences, random.Random(args.seed)).items()]
    print_table(["format", "its parser reopens it", "placeholders kept", "translated", "seconds"], rows)
    print("\ntargets: every file reopens; 100% of placeholders and ICU structures kept; messages translated")


if __name__ == "__main__":
    main()
