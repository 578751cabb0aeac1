"""The string files software is localized in: JSON (i18next and the like: nested keys, `{{name}}`,
`$t(key)`, plural keys `_one`/`_other`) and Android's strings.xml (`string`, `string-array`,
`plurals`; `translatable="false"` kept; `\\'` and `\\"` escapes; `<b>`, `<i>`, `<u>` as runs,
`<xliff:g>` kept whole). Every message is a segment; every placeholder (`%s`, `%1$d`, `%@`, `{0}`,
`{name}`, `{{name}}`, `%{name}`, `$t(...)`) and escaped line break is an inline code kept exactly, so
a translation never breaks the app that formats it. Keys, order and what is not a message stay as
they were; plural groups get the target language's CLDR categories (each new one filled from the
translation of `other`, and those the target lacks left out), as PO files get its Plural-Forms."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from typing import Any

from lxml import etree

from mtkit.core.errors import MtkitError
from mtkit.documents.catalogs import BREAKS, fill_placeholders, read_placeholders
from mtkit.documents.inline import (
    Document,
    FileLimits,
    InlineBuilder,
    decode_text,
    language_tag,
    read_mixed,
    read_xml,
    write_mixed,
)

APP_PLACEHOLDER = re.compile(
    r"\{\{[^{}]*\}\}|\$t\([^()]*\)|%\{\w+\}"  # i18next {{name}} and $t(key), Rails %{name}
    r"|%(?:\d+\$)?[-+ #0]*(?:\d+|\*)?(?:\.\d+)?(?:hh|h|ll|l|q|L|z|j|t)?[@diouxXeEfFgGcsSaA%]"  # printf, %@
    r"|\{[\w.]+(?:,[^{}]*)?\}"  # {0}, {name}, {count, number}
    r"|</?[A-Za-z][^<>]*>|\\[nt]|\n|\t"  # inline HTML, escaped and real line breaks
)
CATEGORIES = ("zero", "one", "two", "few", "many", "other")
CLDR_PLURALS = {  # cardinal plural categories by language (CLDR)
    "zero one two few many other": "ar cy",
    "one two few other": "sl",
    "one few many other": "cs sk pl ru uk be lt",
    "one few other": "ro hr sr bs",
    "one many other": "fr es it pt ca",
    "zero one other": "lv",
    "one two other": "he",
    "other": "ja zh ko vi th id ms lo my km",
}  # fmt: skip
PLURAL_KEY = re.compile(r"(.+)_(zero|one|two|few|many|other)")
ANDROID_RUNS = {"b", "i", "u", "em", "strong", "small", "big", "sup", "sub"}  # runs whose words are translated


def plural_categories(lang: str | None) -> tuple[str, ...]:
    """The CLDR cardinal categories of a language ("one", "other" where the table does not know it)."""
    code = (language_tag(lang) or "").split("-")[0].lower()
    for categories, languages in CLDR_PLURALS.items():
        if code in languages.split():
            return tuple(categories.split())
    return ("one", "other")


def placeholders(text: str) -> InlineBuilder:
    """A message as a segment: its words, and each placeholder kept whole (a line break parts words)."""
    builder = InlineBuilder()
    read_placeholders(builder, text, APP_PLACEHOLDER)
    return builder


class JsonStrings(Document):
    def __init__(self, data: bytes, name: str, limits: FileLimits):
        self.name, text = name, decode_text(data, name)
        try:
            self.data = json.loads(text)
        except json.JSONDecodeError as err:
            raise MtkitError(f"{name}: not JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
        except RecursionError:
            raise MtkitError(f"{name}: nested too deep to read") from None
        indent = re.search(r"\n([ \t]+)\S", text)
        self.indent, self.newline = (indent.group(1) if indent else None), text.endswith("\n")
        self.places: list[tuple[Any, Any]] = []  # each message's container and key, in order
        stack = [self.data]
        while stack:  # depth first, in the file's order
            node = stack.pop()
            items = (
                list(node.items())
                if isinstance(node, dict)
                else list(enumerate(node))
                if isinstance(node, list)
                else []
            )
            for key, value in items:
                if isinstance(value, str):
                    self.places.append((node, key))
            stack.extend(value for _, value in reversed(items) if isinstance(value, dict | list))
        limits.check_segments(len(self.places), "strings")
        self.built = [placeholders(container[key]) for container, key in self.places]

    def segments(self) -> list[str]:
        return [builder.markup() for builder in self.built]

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        for (container, key), builder, translation in zip(self.places, self.built, translations):
            if builder.has_words():
                container[key] = fill_placeholders(translation, builder)
        self.data = _plurals_for(self.data, plural_categories(target_lang)) if target_lang else self.data
        out = json.dumps(self.data, ensure_ascii=False, indent=self.indent)
        return (out + "\n" * self.newline).encode("utf-8")


def _plurals_for(node: Any, categories: tuple[str, ...]) -> Any:
    """The JSON with each group of i18next plural keys (`x_one`, `x_other`, ...) given the target's
    categories, new ones after the group's last key, filled from `x_other`."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, list):
            stack.extend(current)
        if not isinstance(current, dict):
            continue
        groups: dict[str, dict[str, str]] = {}
        for key, value in current.items():
            if isinstance(value, str) and (match := PLURAL_KEY.fullmatch(key)):
                groups.setdefault(match.group(1), {})[match.group(2)] = key
        rebuilt: dict[str, Any] = {}
        for key, value in current.items():
            match = PLURAL_KEY.fullmatch(key) if isinstance(value, str) else None
            group = groups.get(match.group(1)) if match else None
            if group is None or "other" not in group:
                rebuilt[key] = value
            elif key == list(group.values())[-1]:  # the group's last key: the whole group goes here
                base = match.group(1)
                for category in categories:
                    rebuilt[f"{base}_{category}"] = current[group.get(category, group["other"])]
        current.clear()
        current.update(rebuilt)
        stack.extend(value for value in current.values() if isinstance(value, dict | list))
    return node


class AndroidStrings(Document):
    def __init__(self, data: bytes, name: str, limits: FileLimits):
        self.name, self.root = name, read_xml(data, name)
        if self.root.tag != "resources":
            raise MtkitError(f"{name}: not an Android string resource (its root is {self.root.tag})")
        self.units: list[etree._Element] = []
        for element in self.root:
            if element.get("translatable") == "false" or not isinstance(element.tag, str):
                continue
            if element.tag == "string":
                self.units.append(element)
            elif element.tag in ("string-array", "plurals"):
                self.units += [item for item in element if item.tag == "item"]
        limits.check_segments(len(self.units), "strings")
        self.quoted = [_unescape(unit) for unit in self.units]
        self.built = [read_mixed(unit, lambda e: e.tag in ANDROID_RUNS, builder=_AppBuilder()) for unit in self.units]

    def segments(self) -> list[str]:
        return [builder.markup() for builder in self.built]

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        for unit, quoted, builder, translation in zip(self.units, self.quoted, self.built, translations):
            if builder.has_words():
                write_mixed(unit, builder, translation)
            _escape(unit, quoted)
        if target_lang:
            for plurals in self.root.iter("plurals"):
                _android_plurals(plurals, plural_categories(target_lang))
        return etree.tostring(self.root.getroottree(), xml_declaration=True, encoding="utf-8")


class _AppBuilder(InlineBuilder):
    """A builder whose text has its placeholders kept whole."""

    def text(self, text: str) -> None:
        position = 0
        for match in APP_PLACEHOLDER.finditer(text):
            if match.group().startswith("<"):  # markup is the element tree's own
                continue
            super().text(text[position : match.start()])
            self.kept(match.group(), match.group() in BREAKS)
            position = match.end()
        super().text(text[position:])


ANDROID_ESCAPED = re.compile(r"\\(['\"@?])")
ANDROID_NEEDS_ESCAPE = re.compile(r"(?<!\\)(['\"])")


def _unescape(unit: etree._Element) -> bool:
    """The element's text and tails with `\\'` and `\\"` as the characters (the model reads words);
    whether the message was quoted whole ("...", where Android needs no escapes: the quotes are taken
    off here and put back by _escape)."""
    last = unit[-1] if len(unit) else None
    end = (last.tail if last is not None else unit.text) or ""
    quoted = (unit.text or "").startswith('"') and end.endswith('"') and len("".join(unit.itertext())) >= 2
    if quoted:
        unit.text = unit.text[1:]
        if last is None:
            unit.text = unit.text[:-1]
        else:
            last.tail = last.tail[:-1]
        return True
    for node in unit.iter():
        node.text = ANDROID_ESCAPED.sub(r"\1", node.text) if node.text else node.text
        if node is not unit and node.tail:
            node.tail = ANDROID_ESCAPED.sub(r"\1", node.tail)
    return quoted


def _escape(unit: etree._Element, quoted: bool) -> None:
    """Apostrophes and quotes escaped again as Android needs them (a message quoted whole: its quotes back)."""
    if quoted:
        last = unit[-1] if len(unit) else None
        unit.text = '"' + (unit.text or "")
        if last is None:
            unit.text += '"'
        else:
            last.tail = (last.tail or "") + '"'
        return
    for node in unit.iter():
        if isinstance(node.tag, str) and node.tag.endswith("}g"):  # xliff:g is kept as written
            continue
        node.text = ANDROID_NEEDS_ESCAPE.sub(r"\\\1", node.text) if node.text else node.text
        if node is not unit and node.tail:
            node.tail = ANDROID_NEEDS_ESCAPE.sub(r"\\\1", node.tail)


def _android_plurals(plurals: etree._Element, categories: tuple[str, ...]) -> None:
    """A <plurals> element with an item for each of the target's categories, in CLDR's order, where
    the first item was (new ones copies of "other", those the target lacks left out)."""
    items = [item for item in plurals if item.tag == "item"]
    by_quantity = {item.get("quantity"): item for item in items}
    if "other" not in by_quantity:
        return
    index = plurals.index(items[0])
    for item in items:
        plurals.remove(item)
    for offset, category in enumerate(categories):
        item = by_quantity.get(category)
        if item is None:
            item = copy.deepcopy(by_quantity["other"])
            item.set("quantity", category)
        plurals.insert(index + offset, item)


def read_json(data: bytes, name: str, limits: FileLimits) -> Document:
    return JsonStrings(data, name, limits)


def read_android(data: bytes, name: str, limits: FileLimits) -> Document:
    return AndroidStrings(data, name, limits)
