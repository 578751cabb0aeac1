"""Android's string resources (res/values*/strings.xml): `string`, `string-array` items and `plurals`
items (the target's CLDR quantities) are messages; `translatable="false"` is kept; `\\'` and `\\"`
escapes are read as the characters and escaped again (a message quoted whole keeps its quotes);
`<b>`, `<i>`, `<u>` and the like are runs, `<xliff:g>` is kept whole, and placeholders are codes."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence

from lxml import etree

from mtkit.core.errors import MtkitError
from mtkit.documents.inline import BuiltDocument, Document, FileLimits, InlineBuilder, read_mixed, read_xml, write_mixed
from mtkit.documents.strings.common import plural_categories, target_categories
from mtkit.documents.strings.placeholders import APP_PLACEHOLDER, read_placeholders

ANDROID_RUNS = {"b", "i", "u", "em", "strong", "small", "big", "sup", "sub"}  # runs whose words are translated


class AndroidStrings(BuiltDocument):
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
    """A builder whose text has its placeholders kept whole (tags are the element tree's own)."""

    def text(self, text: str) -> None:
        read_placeholders(super(), text, APP_PLACEHOLDER, markup_is_text=True)


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
    for offset, (_, item) in enumerate(target_categories(by_quantity, categories, _copied_item)):
        plurals.insert(index + offset, item)


def _copied_item(category: str, other: etree._Element) -> etree._Element:
    item = copy.deepcopy(other)
    item.set("quantity", category)
    return item


def read_android(data: bytes, name: str, limits: FileLimits) -> Document:
    return AndroidStrings(data, name, limits)
