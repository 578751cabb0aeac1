"""String files as trees of messages: JSON (i18next and the like: nested keys, `{{name}}`, `$t(key)`,
plural keys `_one`/`_other`) and YAML (Rails i18n: the root language key renamed to the target,
`%{name}`, plural groups `one:`/`other:`; comments, quoting and order kept by ruamel.yaml's round
trip). Every string is a segment; keys, order and what is not a string stay as they were."""

from __future__ import annotations

import io
import json
import math
import re
import sys
from collections.abc import Sequence
from typing import Any

from mtkit.core.errors import MtkitError
from mtkit.documents.inline import Document, FileLimits, FileTooLarge, decode_text, language_tag
from mtkit.documents.strings.common import (
    Message,
    MessageFile,
    category_groups,
    containers,
    plural_categories,
    plurals_for,
    suffixed_groups,
)


def message_places(tree: Any, limits: FileLimits) -> list[tuple[Any, Any]]:
    """Each string value's container and key, in the file's order (common.containers: an alias once)."""
    places: list[tuple[Any, Any]] = []
    for node in containers(tree):
        items = node.items() if isinstance(node, dict) else enumerate(node)
        places += [(node, key) for key, value in items if isinstance(value, str)]
        limits.check_segments(len(places), "strings")
    return places


class TreeStrings(MessageFile):
    """A tree of messages (mappings and lists of strings), each string a segment."""

    def __init__(self, tree: Any, limits: FileLimits):
        self.tree = tree
        self.places = message_places(tree, limits)
        self.built = [Message(container[key]) for container, key in self.places]

    def fill(self, translations: Sequence[str]) -> None:
        for (container, key), filled in zip(self.places, self.filled(translations)):
            if filled is not None:
                old = container[key]  # ruamel.yaml's quoted and block strings are str subclasses: kept
                container[key] = type(old)(filled)


class JsonStrings(TreeStrings):
    def __init__(self, data: bytes, name: str, limits: FileLimits):
        text = decode_text(data, name)
        super().__init__(read_json_tree(text, name), limits)
        indent = re.search(r"\n([ \t]+)\S", text)
        self.indent, self.newline = (indent.group(1) if indent else None), text.endswith("\n")

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        self.fill(translations)
        if target_lang:
            plurals_for(self.tree, plural_categories(target_lang), suffixed_groups)
        out = json.dumps(self.tree, ensure_ascii=False, indent=self.indent)
        return (out + "\n" * self.newline).encode("utf-8")


def read_json_tree(text: str, name: str) -> Any:
    """The file's JSON, refusing what could not be written back as the same JSON: a number a double
    cannot hold (1e999 would come back as Infinity), NaN and Infinity (not JSON), a key twice in one
    object (one of them would be lost), and integers of more than Python's 4,300 digits."""

    def finite(number: str) -> float:
        value = float(number)
        if not math.isfinite(value):
            raise MtkitError(f"{name}: the number {number[:40]} is out of a double's range")
        return value

    def refuse(constant: str) -> None:
        raise MtkitError(f"{name}: {constant} is not JSON")

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        tree = dict(pairs)
        if len(tree) < len(pairs):
            twice = next(key for i, (key, _) in enumerate(pairs) if key in dict(pairs[:i]))
            raise MtkitError(f"{name}: the key {json.dumps(twice)[:80]} twice in one object")
        return tree

    try:
        return json.loads(text, parse_float=finite, parse_constant=refuse, object_pairs_hook=unique)
    except json.JSONDecodeError as err:
        raise MtkitError(f"{name}: not JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
    except RecursionError:
        raise MtkitError(f"{name}: nested too deep to read") from None
    except ValueError:  # an integer past Python's digit limit
        raise MtkitError(f"{name}: an integer of more than {sys.get_int_max_str_digits():,} digits") from None


def check_expansion(events, name: str) -> None:
    """Refuse a YAML document whose merge keys (`<<: *defaults`) would make it much larger than its
    text: a merge copies the merged mapping's entries (and their merges), where an alias elsewhere is
    one node shared (read once: TreeStrings). Counted on the parser's events, in linear time, before
    anything is built: a node counts 1 and its children, an alias merged what its anchor's node counted."""
    from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, MappingStartEvent

    anchors: dict[str, int] = {}
    # Each open collection: [anchor, size, is a mapping, children so far, its aliases merged, merging next]
    frames: list[list] = [[None, 0, False, 0, False, False]]
    seen = 0

    def add(size: int) -> None:
        parent = frames[-1]
        parent[1] += size
        parent[3] += 1
        if parent[2] and parent[3] % 2 == 0:  # a mapping's value: the next key starts afresh
            parent[5] = False

    for event in events:
        seen += 1
        parent = frames[-1]
        merging = parent[4] or (parent[2] and parent[5])
        if isinstance(event, AliasEvent):
            add(anchors.get(event.anchor, 1) if merging else 1)
        elif isinstance(event, CollectionStartEvent):
            frames.append([event.anchor, 1, isinstance(event, MappingStartEvent), 0, merging, False])
        elif isinstance(event, CollectionEndEvent):
            anchor, size, *_ = frames.pop()
            if anchor:
                anchors[anchor] = size
            add(size)
        elif hasattr(event, "value"):  # a scalar
            if event.anchor:
                anchors[event.anchor] = 1
            if parent[2] and parent[3] % 2 == 0 and event.value == "<<":
                parent[5] = True
            add(1)
        if frames[0][1] + sum(frame[1] for frame in frames[1:]) > 4 * seen + MAX_ALIASED_NODES:
            raise FileTooLarge(f"{name}: its merge keys expand it past {MAX_ALIASED_NODES:,} nodes more than it writes")


MAX_ALIASED_NODES = 100_000  # nodes that merge keys may add to a YAML document, beyond four times its own


class YamlStrings(TreeStrings):
    def __init__(self, data: bytes, name: str, limits: FileLimits):
        from ruamel.yaml import YAML
        from ruamel.yaml.error import YAMLError

        self.yaml = YAML()  # round trip: comments, order, quoting and block styles kept
        self.yaml.preserve_quotes, self.yaml.width = True, 1 << 16
        try:
            text = decode_text(data, name)
            check_expansion(self.yaml.parse(text), name)
            tree = self.yaml.load(text)
        except YAMLError as err:
            raise MtkitError(f"{name}: not YAML ({' '.join(str(err).split())})") from None
        except RecursionError:
            raise MtkitError(f"{name}: nested too deep to read") from None
        self.yaml.indent(**yaml_indents(text))
        super().__init__(tree, limits)

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        self.fill(translations)
        if target_lang:
            plurals_for(self.tree, plural_categories(target_lang), category_groups)
            self._rename_root(target_lang)
        out = io.StringIO()
        self.yaml.dump(self.tree, out)
        return out.getvalue().encode("utf-8")

    def _rename_root(self, target_lang: str) -> None:
        """Rails' locale files hold one root key, the language (`en:`): it becomes the target's."""
        if isinstance(self.tree, dict) and len(self.tree) == 1:
            (root,) = self.tree
            if isinstance(root, str) and re.fullmatch(r"[a-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*", root):
                self.tree.insert(0, language_tag(target_lang), self.tree.pop(root))


def yaml_indents(text: str) -> dict[str, int]:
    """How a YAML file indents: its mappings' step, and how far its list dashes stand in from the key
    above them (read from its first lines with keys and its first list)."""
    lines = [line for line in text[:65536].splitlines() if line.strip() and not line.lstrip().startswith("#")]
    steps = [len(line) - len(line.lstrip(" ")) for line in lines if not line.lstrip(" ").startswith("-")]
    offset = 0
    for above, line in zip(lines, lines[1:]):
        if line.lstrip(" ").startswith("- "):
            offset = max(0, (len(line) - len(line.lstrip(" "))) - (len(above) - len(above.lstrip(" "))))
            break
    return {"mapping": min([step for step in steps if step] or [2]), "sequence": offset + 2, "offset": offset}


def read_json(data: bytes, name: str, limits: FileLimits) -> Document:
    return JsonStrings(data, name, limits)


def read_yaml(data: bytes, name: str, limits: FileLimits) -> Document:
    return YamlStrings(data, name, limits)
