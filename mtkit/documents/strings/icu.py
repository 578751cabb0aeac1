"""Flutter's Application Resource Bundle (.arb): a JSON object of ICU MessageFormat messages. The
text of each message and of each `plural`/`select` branch is a segment, its arguments kept whole as
codes; the syntax (argument names, types, styles, selectors, `#`) is written back exactly, literal
text quoted where ICU needs it, plural branches given the target's categories; `@` metadata is left
untouched and `@@locale` set to the target."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from mtkit.core.errors import MtkitError
from mtkit.documents.inline import (
    BuiltDocument,
    Document,
    FileLimits,
    InlineBuilder,
    decode_text,
    language_tag,
    pieces,
)
from mtkit.documents.strings.common import plural_categories, target_categories
from mtkit.documents.strings.placeholders import APP_PLACEHOLDER, read_placeholders
from mtkit.documents.strings.trees import read_json_tree
from mtkit.text.markup import MAX_DEPTH, too_deep


@dataclass
class IcuMessage:
    """An ICU MessageFormat message: literal text and arguments, in order (ICU's `#` is the code "#")."""

    parts: list[Any] = field(default_factory=list)  # str, "#" codes and IcuArgument
    plural: bool = False  # a plural branch, where `#` is the number


@dataclass
class IcuArgument:
    head: str  # as written: a whole simple argument ("{name}", "{n, number}"), or "{count, plural,"
    kind: str = ""  # "plural", "selectordinal", "select"; "" for a simple argument
    branches: list[tuple[str, IcuMessage]] = field(default_factory=list)  # selector as written, message
    tail: str = ""  # what closes the argument ("}" and the spaces before it)


HASH = object()  # ICU's `#` in a plural branch
SELECTOR = re.compile(r"(\s*(?:offset:\s*\d+\s+)?(=-?\d+(?:\.\d+)?|[\w-]+)\s*)\{")
ARGUMENT_HEAD = re.compile(r"\{\s*[^\s,{}]+\s*(?:,\s*(\w+)\s*)?")


class IcuParser:
    """ICU MessageFormat's syntax, apostrophes as ICU reads them (`''` one, `'{'` a quoted brace)."""

    def __init__(self, text: str, where: str):
        self.text, self.where, self.i = text, where, 0

    def parse(self) -> IcuMessage:
        message = self.message(0, False)
        if self.i < len(self.text):
            self.fail("a } that closes nothing")
        return message

    def fail(self, what: str):
        raise MtkitError(f"{self.where}: not an ICU message ({what} at character {self.i + 1})")

    def message(self, depth: int, plural: bool) -> IcuMessage:
        if depth > MAX_DEPTH:
            raise too_deep()
        message, literal, text = IcuMessage(plural=plural), [], self.text
        while self.i < len(text) and text[self.i] != "}":
            char, following = text[self.i], text[self.i + 1 : self.i + 2]
            if char == "{" or char == "#" and plural:
                message.parts += ["".join(literal)] if literal else []
                literal = []
                message.parts.append(self.argument(depth) if char == "{" else HASH)
                self.i += char == "#"
            elif char == "'" and following == "'":
                literal.append("'")
                self.i += 2
            elif char == "'" and following and following in "{}#|":
                end = text.find("'", self.i + 1)
                end = len(text) if end < 0 else end
                literal.append(text[self.i + 1 : end])
                self.i = end + 1
            else:
                literal.append(char)
                self.i += 1
        message.parts += ["".join(literal)] if literal else []
        return message

    def argument(self, depth: int) -> IcuArgument:
        start, text = self.i, self.text
        head = ARGUMENT_HEAD.match(text, self.i)
        if head is None:
            self.fail("an argument without a name")
        kind = head.group(1) or ""
        self.i = head.end()
        if kind in ("plural", "selectordinal", "select") and text.startswith(",", self.i):
            self.i += 1
            argument = IcuArgument(text[start : self.i], kind)
            while selector := SELECTOR.match(text, self.i):
                self.i = selector.end()
                branch = self.message(depth + 1, kind != "select")
                if not text.startswith("}", self.i):
                    self.fail("a branch without its }")
                self.i += 1
                argument.branches.append((selector.group(1), branch))
            closing = re.compile(r"\s*\}").match(text, self.i)
            if not argument.branches:
                self.fail(f"a {kind} without its branches")
            if closing is None:
                self.fail(f"a {kind} without its }}")
            self.i, argument.tail = closing.end(), closing.group()
            return argument
        end = text.find("}", self.i)
        if end < 0 or "{" in text[self.i : end]:
            self.fail("an argument without its }")
        self.i = end + 1
        return IcuArgument(text[start : self.i])


def icu_messages(message: IcuMessage) -> Iterator[IcuMessage]:
    """The message and every branch's message, depth first (the order of the segments)."""
    yield message
    for part in message.parts:
        if isinstance(part, IcuArgument):
            for _, branch in part.branches:
                yield from icu_messages(branch)


def icu_builder(message: IcuMessage) -> InlineBuilder:
    """A message's own words as a segment: its arguments (the whole of a plural or select) kept whole."""
    builder = InlineBuilder()
    for part in message.parts:
        if isinstance(part, str):
            read_placeholders(builder, part, APP_PLACEHOLDER)
        else:
            builder.kept(part)  # HASH or an IcuArgument: written back as ICU (icu_text)
    return builder


def icu_text(message: IcuMessage, written: dict[int, list], categories: tuple[str, ...] | None) -> str:
    """The message as ICU MessageFormat: each message's parts as written[id] gives them (translated),
    literal text quoted where ICU needs it, plural branches given the target's categories."""
    out: list[tuple[str, bool]] = []  # (text, whether literal)
    for part in written.get(id(message), message.parts):
        if isinstance(part, IcuArgument):
            out.append((_argument_text(part, written, categories), False))
        else:
            out.append(("#", False) if part is HASH else (part, True))
    return "".join(
        _quoted(text, out[k + 1][0][:1] if k + 1 < len(out) else "", message.plural) if literal else text
        for k, (text, literal) in enumerate(out)
    )


def _argument_text(argument: IcuArgument, written: dict[int, list], categories: tuple[str, ...] | None) -> str:
    branches = argument.branches
    if argument.kind == "plural" and categories:
        keyword = {selector.strip(): (selector, branch) for selector, branch in branches if "=" not in selector}
        if "other" in keyword:
            copied = lambda c, other: (other[0].replace("other", c), other[1])  # noqa: E731 (the selector spelled alike)
            exact = [(selector, branch) for selector, branch in branches if "=" in selector]
            branches = exact + [entry for _, entry in target_categories(keyword, categories, copied)]
    inner = "".join(f"{selector}{{{icu_text(branch, written, categories)}}}" for selector, branch in branches)
    return argument.head + inner + argument.tail


def _quoted(text: str, following: str, plural: bool) -> str:
    """Literal text as ICU reads it: braces (and `#` in a plural branch) quoted, an apostrophe doubled
    where ICU would take it as the start of a quotation."""
    special = "{}#|'" if plural else "{}|'"
    out = []
    for k, char in enumerate(text):
        after = text[k + 1] if k + 1 < len(text) else following
        if char in "{}" or char == "#" and plural:
            out.append(f"'{char}'")
        elif char == "'" and after and after in special:
            out.append("''")
        else:
            out.append(char)
    return "".join(out)


class ArbStrings(BuiltDocument):
    """Flutter's Application Resource Bundle: a JSON object of ICU messages and their `@` metadata."""

    def __init__(self, data: bytes, name: str, limits: FileLimits):
        text = decode_text(data, name)
        self.tree = read_json_tree(text, name)
        if not isinstance(self.tree, dict):
            raise MtkitError(f"{name}: not an ARB file (its top level is not an object)")
        indent = re.search(r"\n([ \t]+)\S", text)
        self.indent, self.newline = (indent.group(1) if indent else None), text.endswith("\n")
        self.messages = {
            key: IcuParser(value, f"{name}: {key}").parse()
            for key, value in self.tree.items()
            if not key.startswith("@") and isinstance(value, str)
        }
        self.units = [(part, icu_builder(part)) for m in self.messages.values() for part in icu_messages(m)]
        limits.check_segments(len(self.units), "messages")
        self.built = [builder for _, builder in self.units]

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        written = {}
        for (message, builder), translation in zip(self.units, translations):
            if builder.has_words():
                written[id(message)] = [
                    piece.text if piece.kept is None else builder.codes[piece.kept]
                    for piece in pieces(translation, builder.separators)
                ]
        categories = plural_categories(target_lang) if target_lang else None
        for key, message in self.messages.items():
            self.tree[key] = icu_text(message, written, categories)
        if target_lang and "@@locale" in self.tree:
            self.tree["@@locale"] = language_tag(target_lang).replace("-", "_")
        out = json.dumps(self.tree, ensure_ascii=False, indent=self.indent)
        return (out + "\n" * self.newline).encode("utf-8")


def read_arb(data: bytes, name: str, limits: FileLimits) -> Document:
    return ArbStrings(data, name, limits)
