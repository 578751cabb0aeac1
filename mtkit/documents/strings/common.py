"""What every string file of software shares: the placeholders kept whole (`%s`, `%1$d`, `%@`,
`%#@var@`, `{0}`, `{name}`, `{{name}}`, `%{name}`, `$t(...)`, inline HTML, line breaks), so that a
translation never breaks the app that formats it, and the target language's CLDR plural categories
(each new one filled from the translation of `other`, those the target lacks left out), as PO files
get its Plural-Forms."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from mtkit.documents.inline import BuiltDocument, InlineBuilder, language_tag
from mtkit.documents.strings.placeholders import APP_PLACEHOLDER, fill_placeholders, read_placeholders

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


def plural_categories(lang: str | None) -> tuple[str, ...]:
    """The CLDR cardinal categories of a language ("one", "other" where the table does not know it)."""
    code = (language_tag(lang) or "").split("-")[0].lower()
    for categories, languages in CLDR_PLURALS.items():
        if code in languages.split():
            return tuple(categories.split())
    return ("one", "other")


Entry = TypeVar("Entry")


def target_categories(
    found: dict[str, Entry], categories: Sequence[str], copied: Callable[[str, Entry], Entry]
) -> list[tuple[str, Entry]]:
    """A plural's entries for the target's categories, in their order: each category's own where the
    source has it, else copied(category, other's entry); those the target lacks left out. Every format's
    plurals (i18next and Rails keys, Android's <plurals>, Apple's stringsdict, ICU) go through here."""
    return [(category, found[category] if category in found else copied(category, found["other"]))
            for category in categories]  # fmt: skip


class Message:
    """A message as a segment: its words and placeholders (builder); the spaces and line breaks
    around it are kept outside, where they were (a YAML block's last line break, say)."""

    def __init__(self, text: str):
        core = text.strip()
        start = len(text) - len(text.lstrip())
        self.lead, self.trail = text[:start], text[start + len(core) :]
        self.builder = placeholders(core)

    def markup(self) -> str:
        return self.builder.markup()

    def has_words(self) -> bool:
        return self.builder.has_words()

    def filled(self, translation: str) -> str:
        return self.lead + fill_placeholders(translation, self.builder) + self.trail


class MessageFile(BuiltDocument):
    """A string file of messages: self.built holds a Message a segment."""

    built: list[Message]

    def filled(self, translations: Sequence[str]) -> list[str | None]:
        """Each message's translation, its placeholders and the spaces around it put back (None: a
        message without words, which stays as written)."""
        return [message.filled(t) if message.has_words() else None for message, t in zip(self.built, translations)]


def placeholders(text: str) -> InlineBuilder:
    """A message as a segment: its words, and each placeholder kept whole (a line break parts words)."""
    builder = InlineBuilder()
    read_placeholders(builder, text, APP_PLACEHOLDER)
    return builder


Groups = dict[str, dict[str, Any]]  # a plural group's name and its keys by category


def suffixed_groups(mapping: dict) -> Groups:
    """i18next's plural keys: `x_one`, `x_other`, ... grouped by `x`."""
    groups: Groups = {}
    for key, value in mapping.items():
        if isinstance(key, str) and isinstance(value, str) and (match := PLURAL_KEY.fullmatch(key)):
            groups.setdefault(match.group(1), {})[match.group(2)] = key
    return {base: group for base, group in groups.items() if "other" in group}


def category_groups(mapping: dict) -> Groups:
    """Rails' plural groups: a mapping whose keys are all CLDR categories, `other` among them."""
    keys = [key for key in mapping if isinstance(key, str)]
    if len(keys) == len(mapping) and "other" in keys and set(keys) <= set(CATEGORIES):
        if all(isinstance(value, str) for value in mapping.values()):
            return {"": {key: key for key in keys}}
    return {}


def plurals_for(tree: Any, categories: tuple[str, ...], find_groups) -> None:
    """Each plural group of the tree given the target's categories in CLDR's order, where its first
    key was (new ones copies of `other`, those the target lacks left out)."""
    for node in containers(tree):
        if isinstance(node, dict):
            for base, group in find_groups(node).items():
                found = {category: node[key] for category, key in group.items()}
                items = target_categories(found, categories, lambda _, other: other)
                _replace_keys(node, list(group.values()), [(f"{base}_{c}" if base else c, v) for c, v in items])


def containers(tree: Any) -> Iterator[dict | list]:
    """Each mapping and list of a tree, depth first in the file's order, its children looked at once
    the caller is done with it (it may change them); one reached twice (a YAML alias) comes once, so
    an alias bomb costs its size, not its expansion."""
    stack, seen = [tree], set()
    while stack:
        node = stack.pop()
        if id(node) in seen or not isinstance(node, dict | list):
            continue
        seen.add(id(node))
        yield node
        values = list(node.values() if isinstance(node, dict) else node)
        stack.extend(value for value in reversed(values) if isinstance(value, dict | list))


def _replace_keys(mapping: dict, keys: list, items: list[tuple[Any, Any]]) -> None:
    """The mapping with keys replaced by items, where the first of them was (the others kept in place)."""
    if hasattr(mapping, "insert"):  # ruamel's mapping: the other keys keep their comments
        position = list(mapping).index(keys[0])
        for key in keys:
            del mapping[key]
        for offset, (key, value) in enumerate(items):
            mapping.insert(position + offset, key, value)
        return
    rebuilt = []
    for key, value in mapping.items():
        if key == keys[0]:
            rebuilt += items
        elif key not in keys:
            rebuilt.append((key, value))
    mapping.clear()
    mapping.update(rebuilt)
