"""Apple's string files: `.strings` (`"key" = "value";` with `/* comments */`, in UTF-8 or UTF-16 as
Xcode writes them; only the values change, every other byte stays) and `.stringsdict` (a property
list of plural rules: each `NSStringLocalizedFormatKey` and each category's string translated, the
categories made the target's; `%#@var@` and the printf placeholders kept as codes)."""

from __future__ import annotations

import codecs
import copy
import re
from collections.abc import Sequence

from lxml import etree

from mtkit.core.errors import MtkitError
from mtkit.documents.inline import Document, FileLimits, read_xml
from mtkit.documents.strings.common import CATEGORIES, Message, MessageFile, plural_categories, target_categories

STRINGS_TOKEN = re.compile(
    r'\s+|/\*.*?\*/|//[^\n]*|(?:"(?:[^"\\]|\\.)*"|[\w.$:/-]+)\s*=\s*"(?P<value>(?:[^"\\]|\\.)*)"\s*;', re.DOTALL
)
STRINGS_ESCAPE = re.compile(r"\\(U[0-9a-fA-F]{4}|u[0-9a-fA-F]{4}|.)", re.DOTALL)
UNESCAPED = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}
ESCAPED = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}
BOMS = [(codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")]


def decode_apple(data: bytes, name: str) -> tuple[str, bytes, str]:
    """A strings file's text, its byte-order mark and its codec (UTF-8 or UTF-16 by its mark)."""
    bom, codec = next(((bom, codec) for bom, codec in BOMS if data.startswith(bom)), (b"", "utf-8"))
    try:
        return data[len(bom) :].decode(codec), bom, codec
    except UnicodeDecodeError as err:
        raise MtkitError(f"{name}: not {codec.upper()} text (byte {err.start + len(bom) + 1})") from None


def unescape_strings(value: str) -> str:
    def one(match: re.Match) -> str:
        code = match.group(1)
        return chr(int(code[1:], 16)) if len(code) == 5 else UNESCAPED.get(code, code)

    return STRINGS_ESCAPE.sub(one, value)


class AppleStrings(MessageFile):
    def __init__(self, data: bytes, name: str, limits: FileLimits):
        self.text, self.bom, self.codec = decode_apple(data, name)
        self.spans: list[tuple[int, int]] = []
        position = 0
        while position < len(self.text):
            token = STRINGS_TOKEN.match(self.text, position)
            if token is None:
                line = self.text.count("\n", 0, position) + 1
                raise MtkitError(f'{name}: line {line}: not a "key" = "value"; entry nor a comment')
            if token.group("value") is not None:
                self.spans.append(token.span("value"))
                limits.check_segments(len(self.spans), "strings")
            position = token.end()
        self.built = [Message(unescape_strings(self.text[start:end])) for start, end in self.spans]

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        out, position = [], 0
        for (start, end), filled in zip(self.spans, self.filled(translations)):
            out.append(self.text[position:start])
            if filled is not None:
                out.append("".join(ESCAPED.get(c, c) for c in filled))
            else:
                out.append(self.text[start:end])
            position = end
        out.append(self.text[position:])
        return self.bom + "".join(out).encode(self.codec)


def pairs(mapping: etree._Element) -> list[tuple[etree._Element, etree._Element]]:
    """A property list <dict>'s (key, value) elements (comments skipped)."""
    children = [child for child in mapping if isinstance(child.tag, str)]
    return list(zip(children[0::2], children[1::2]))


class AppleStringsDict(MessageFile):
    def __init__(self, data: bytes, name: str, limits: FileLimits):
        self.root = read_xml(data, name)
        top = self.root.find("dict")
        if self.root.tag != "plist" or top is None:
            raise MtkitError(f"{name}: not a .stringsdict property list (its root is {self.root.tag})")
        self.units: list[etree._Element] = []
        self.rules: list[etree._Element] = []  # each variable's <dict> of plural categories
        for _, entry in pairs(top):
            for key, value in pairs(entry) if entry.tag == "dict" else []:
                if key.text == "NSStringLocalizedFormatKey" and value.tag == "string":
                    self.units.append(value)
                elif value.tag == "dict" and self._plural_rule(value):
                    self.rules.append(value)
                    self.units += [v for k, v in pairs(value) if k.text in CATEGORIES and v.tag == "string"]
            limits.check_segments(len(self.units), "strings")
        self.built = [Message(unit.text or "") for unit in self.units]

    @staticmethod
    def _plural_rule(variable: etree._Element) -> bool:
        return any(
            k.text == "NSStringFormatSpecTypeKey" and v.text == "NSStringPluralRuleType" for k, v in pairs(variable)
        )

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        for unit, filled in zip(self.units, self.filled(translations)):
            if filled is not None:
                unit.text = filled
        if target_lang:
            for rule in self.rules:
                _categories_for(rule, plural_categories(target_lang))
        return etree.tostring(self.root.getroottree(), xml_declaration=True, encoding="UTF-8")


def _categories_for(rule: etree._Element, categories: tuple[str, ...]) -> None:
    """A plural rule's categories made the target's, in CLDR's order (`zero` kept where given: Apple
    uses it for 0 in every language; new ones copies of `other`, those the target lacks left out)."""
    found = {key.text: (key, value) for key, value in pairs(rule) if key.text in CATEGORIES}
    if "other" not in found:
        return
    first = min(rule.index(key) for key, _ in found.values())
    for key, value in found.values():
        rule.remove(key)
        rule.remove(value)
    wanted = (("zero",) if "zero" in found and "zero" not in categories else ()) + categories
    copied = lambda _, other: (copy.deepcopy(other[0]), copy.deepcopy(other[1]))  # noqa: E731
    for offset, (category, (key, value)) in enumerate(target_categories(found, wanted, copied)):
        key.text = category
        rule.insert(first + 2 * offset, key)
        rule.insert(first + 2 * offset + 1, value)


def read_strings(data: bytes, name: str, limits: FileLimits) -> Document:
    return AppleStrings(data, name, limits)


def read_stringsdict(data: bytes, name: str, limits: FileLimits) -> Document:
    return AppleStringsDict(data, name, limits)
