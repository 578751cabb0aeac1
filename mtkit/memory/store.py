"""A translation memory in SQLite: named memories of units, each unit one sentence in several languages.

SQLite, because a memory is read far more often than written, by one process or a few on one machine,
and must survive a crash mid-import (each import is one transaction) without a server to run; the same
tables in PostgreSQL (a `postgresql://` URL) where several servers share one memory. Units
are found again two ways: a 100% match by the sentence's key (its text with spans as placeholders:
mtkit.memory.matching) through an index of the file; a fuzzy match among the CANDIDATES units that a
word index in memory (mtkit.memory.index, built from the file on first use) proposes, rescored
exactly, word by word, as CAT tools score."""

from __future__ import annotations

import datetime
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from mtkit.core.database import Database
from mtkit.memory.index import WordIndex
from mtkit.memory.matching import keyed, score, with_spans, words
from mtkit.memory.tmx import Unit, Variant, language

DEFAULT_MEMORY = "default"
IMPORT_CHUNK = 1000  # units written together
CANDIDATES = 300  # units the word index proposes for exact rescoring (docs/results/memory.md)
SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, owner TEXT NOT NULL DEFAULT '', UNIQUE (name, owner));
CREATE TABLE IF NOT EXISTS units (
    id INTEGER PRIMARY KEY, memory INTEGER NOT NULL REFERENCES memories (id), origin TEXT NOT NULL,
    changed TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS variants (
    id INTEGER PRIMARY KEY, unit INTEGER NOT NULL REFERENCES units (id), memory INTEGER NOT NULL,
    lang TEXT NOT NULL, locale TEXT NOT NULL, text TEXT NOT NULL, key TEXT NOT NULL, spans TEXT NOT NULL,
    segment TEXT, UNIQUE (unit, lang));
CREATE INDEX IF NOT EXISTS variants_by_key ON variants (memory, lang, key);
CREATE TABLE IF NOT EXISTS details (
    memory INTEGER PRIMARY KEY REFERENCES memories (id), display_name TEXT NOT NULL, source_lang TEXT NOT NULL,
    created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS versions (memory INTEGER PRIMARY KEY, version INTEGER NOT NULL);
"""


@dataclass(frozen=True)
class Match:
    """A unit found for a sentence: its score (100: exact, spans aside), its source and its target,
    the target with the query's spans where the unit's source differs only in them."""

    score: int
    source: str
    target: str
    unit: int


@dataclass(frozen=True)
class MemoryInfo:
    """What a memory is (as DeepL's API describes one): its name, the name shown, its source language,
    the languages it translates into, its units, and when it was made and last changed."""

    name: str
    display_name: str
    source_lang: str
    target_langs: list[str]
    units: int
    created: str
    changed: str


@dataclass
class Imported:
    added: int = 0
    updated: int = 0
    skipped: int = 0  # units without a variant in the source language and another


class TranslationMemory:
    """One named memory (of one owner: an API key, or "" for the command line) in a SQLite file."""

    def __init__(self, where: Path | str | Database, name: str = DEFAULT_MEMORY, owner: str = ""):
        """where: a SQLite file, a postgresql:// URL, or a Database open already (shared by memories)."""
        self.db = where if isinstance(where, Database) else Database(where)
        self.db.script(SCHEMA)
        self.db.run("INSERT INTO memories (name, owner) VALUES (?, ?) ON CONFLICT (name, owner) DO NOTHING",
                    (name, owner))  # fmt: skip
        self.id = self.db.value("SELECT id FROM memories WHERE name = ? AND owner = ?", (name, owner))
        self.path, self.name, self.owner = self.db.where, name, owner
        self._indexes: dict[str, WordIndex] = {}
        self._indexed_at: int | None = None

    @classmethod
    def existing(cls, where: Path | str | Database, name: str, owner: str = "") -> TranslationMemory | None:
        """The memory of that name and owner, where the database holds it (None: it does not)."""
        db = where if isinstance(where, Database) else Database(where)
        db.script(SCHEMA)
        found = db.value("SELECT 1 FROM memories WHERE name = ? AND owner = ?", (name, owner))
        return cls(db, name, owner) if found else None

    def close(self) -> None:
        self.db.close()

    def _changed(self) -> None:
        """One more change to the memory (in the writer's transaction): word indexes built before are stale."""
        self.db.run("INSERT INTO versions (memory, version) VALUES (?, 1)"
                    " ON CONFLICT (memory) DO UPDATE SET version = versions.version + 1", (self.id,))  # fmt: skip

    def describe(self, display_name: str, source_lang: str) -> None:
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        self.db.run("INSERT INTO details (memory, display_name, source_lang, created) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (memory) DO UPDATE SET display_name = excluded.display_name,"
                    " source_lang = excluded.source_lang, created = excluded.created",
                    (self.id, display_name, language(source_lang), now))  # fmt: skip

    def info(self) -> MemoryInfo:
        row = self.db.one("SELECT display_name, source_lang, created FROM details WHERE memory = ?", (self.id,))
        display_name, source_lang, created = row or (self.name, "", "")
        langs = [lang for (lang,) in self.db.rows("SELECT DISTINCT lang FROM variants WHERE memory = ?", (self.id,))]
        changed = self.db.value("SELECT max(changed) FROM units WHERE memory = ?", (self.id,))
        targets = sorted(lang for lang in langs if lang != source_lang)
        return MemoryInfo(self.name, display_name, source_lang, targets, len(self), created, changed or created)

    def delete(self) -> None:
        """The memory, its units and their texts removed from the file (one transaction)."""
        with self.db.transaction():
            for table, column in (
                ("variants", "memory"),
                ("units", "memory"),
                ("details", "memory"),
                ("versions", "memory"),
                ("memories", "id"),
            ):
                self.db.run(f"DELETE FROM {table} WHERE {column} = ?", (self.id,))

    def page(self, src: str, after: int, size: int, contains: str = "", case_sensitive: bool = False) -> list[tuple]:
        """Up to `size` units after unit id `after`, in order, whose source (src) or a translation holds
        `contains`: (unit id, source text, [(language, text), ...])."""
        like = "instr(v.text, ?) > 0" if case_sensitive else "instr(lower(v.text), lower(?)) > 0"
        where = f" AND EXISTS (SELECT 1 FROM variants v WHERE v.unit = s.unit AND {like})" if contains else ""
        rows = self.db.rows(
            f"SELECT s.unit, s.text FROM variants s WHERE s.memory = ? AND s.lang = ? AND s.unit > ?{where}"
            " ORDER BY s.unit LIMIT ?", (self.id, language(src), after, *([contains] if contains else []), size),
        )  # fmt: skip
        out = []
        for unit, text in rows:
            targets = self.db.rows("SELECT lang, text FROM variants WHERE unit = ? AND lang != ? ORDER BY lang",
                                   (unit, language(src)))  # fmt: skip
            out.append((unit, text, targets))
        return out

    def __len__(self) -> int:
        return self.db.value("SELECT count(*) FROM units WHERE memory = ?", (self.id,))

    def add(self, units: Iterable[Unit], source_lang: str | None = None, origin: str = "import") -> Imported:
        """Add units in one transaction; a unit whose source-language text the memory holds already
        updates that unit (its other languages replaced or added). source_lang: the language a unit
        is known by (default: its first variant's). Written IMPORT_CHUNK units a statement batch, so
        that a database server is not waited for unit by unit."""
        counts = Imported()
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        with self.db.transaction():
            self._changed()
            stream = iter(units)
            while chunk := list(itertools.islice(stream, IMPORT_CHUNK)):
                self._add_chunk(chunk, source_lang, origin, now, counts)
        return counts

    def _add_chunk(self, chunk: Sequence[Unit], source_lang: str | None, origin: str, now: str, counts: Imported):
        wanted = []  # (unit, the language it is known by, its text in it)
        for unit in chunk:
            by = language(source_lang) if source_lang else language(unit.variants[0].locale)
            source = next((v for v in unit.variants if language(v.locale) == by), None)
            if source is None or len({language(v.locale) for v in unit.variants}) < 2 or not source.text:
                counts.skipped += 1
                continue
            wanted.append((unit, by, source.text))
        known = self._units_of({(by, text) for _, by, text in wanted})
        plan, new = [], 0  # (unit id, or -n for the chunk's n-th new unit; the unit)
        for unit, by, text in wanted:
            if (by, text) in known:
                counts.updated += 1  # a unit of the memory, or one this chunk adds twice
            else:
                new += 1
                known[by, text] = -new
                counts.added += 1
            plan.append((known[by, text], unit))
        added = self.db.rows_many("INSERT INTO units (memory, origin, changed) VALUES (?, ?, ?) RETURNING id",
                                  [(self.id, origin, now)] * new)  # fmt: skip
        ids = [rows[0][0] for rows in added]
        self.db.run_many("UPDATE units SET origin = ?, changed = ? WHERE id = ?",
                         [(origin, now, unit_id) for unit_id in {u for u, _ in plan if u > 0}])  # fmt: skip
        rows = {}  # the last of each unit's language, as adding them one by one would leave it
        for unit_id, unit in plan:
            for variant in unit.variants:
                row = self._variant_row(ids[-unit_id - 1] if unit_id < 0 else unit_id, variant)
                rows[row[0], row[2]] = row
        self.db.insert_values(
            "INSERT INTO variants (unit, memory, lang, locale, text, key, spans, segment)",
            list(rows.values()),
            "ON CONFLICT (unit, lang) DO UPDATE SET locale = excluded.locale, text = excluded.text,"
            " key = excluded.key, spans = excluded.spans, segment = excluded.segment",
        )

    def _units_of(self, sources: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The units the memory holds of these (language, text) sources (one indexed lookup each: a
        long IN list would have PostgreSQL scan the table)."""
        asked = sorted({(lang, keyed(text).key) for lang, text in sources})
        found = self.db.rows_many("SELECT lang, text, unit FROM variants WHERE memory = ? AND lang = ? AND key = ?",
                                  [(self.id, lang, key) for lang, key in asked])  # fmt: skip
        return {(lang, text): unit for rows in found for lang, text, unit in rows if (lang, text) in sources}

    def _variant_row(self, unit_id: int, variant: Variant) -> tuple:
        key = keyed(variant.text)
        return (unit_id, self.id, language(variant.locale), variant.locale, variant.text, key.key,
                json.dumps(key.spans), variant.segment)  # fmt: skip

    def lookup(self, text: str, src: str, tgt: str, threshold: int = 75, limit: int = 5) -> list[Match]:
        """The best units for a sentence from src to tgt, at least `threshold` percent, best first."""
        query, src, tgt = keyed(text), language(src), language(tgt)
        exact = self.db.rows(
            "SELECT s.unit, s.text, s.spans, t.text FROM variants s JOIN variants t ON t.unit = s.unit AND t.lang = ?"
            " JOIN units u ON u.id = s.unit WHERE s.memory = ? AND s.lang = ? AND s.key = ?"
            " ORDER BY s.text = ? DESC, u.changed DESC LIMIT ?",
            (tgt, self.id, src, query.key, " ".join(text.split()), limit),
        )
        found = [
            Match(100, source, with_spans(target, tuple(json.loads(spans)), query.spans), unit)
            for unit, source, spans, target in exact
        ]
        if len(found) < limit and threshold < 100:
            seen = {match.unit for match in found}
            found += [match for match in self._fuzzy(query.key, src, tgt, threshold) if match.unit not in seen]
        return sorted(found, key=lambda match: -match.score)[:limit]

    def _fuzzy(self, key: str, src: str, tgt: str, threshold: int) -> list[Match]:
        chosen = self._index(src).candidates(key, threshold, CANDIDATES)
        if not chosen:
            return []
        rows = self.db.rows(
            f"SELECT s.unit, s.text, s.key, t.text FROM variants s JOIN variants t ON t.unit = s.unit AND t.lang = ?"
            f" WHERE s.id IN ({','.join('?' * len(chosen))})",
            (tgt, *chosen),
        )
        query = words(key)
        scored = [(score(query, words(candidate)), unit, source, target) for unit, source, candidate, target in rows]
        return [Match(value, source, target, unit) for value, unit, source, target in scored if value >= threshold]

    def _index(self, lang: str) -> WordIndex:
        """The word index of the memory's sentences in `lang`, built on first use and again after any
        change to the memory (from this process or another: its version)."""
        version = self.db.value("SELECT version FROM versions WHERE memory = ?", (self.id,)) or 0
        if version != self._indexed_at:
            self._indexes, self._indexed_at = {}, version
        if lang not in self._indexes:
            rows = self.db.rows("SELECT id, key FROM variants WHERE memory = ? AND lang = ?", (self.id, lang))
            self._indexes[lang] = WordIndex(rows)
        return self._indexes[lang]

    def owner_units(self) -> int:
        """The units of every memory of this memory's owner."""
        return self.db.value(
            "SELECT count(*) FROM units u JOIN memories m ON m.id = u.memory WHERE m.owner = ?", (self.owner,)
        )

    def owner_memories(self) -> list[str]:
        """The names of the owner's memories."""
        rows = self.db.rows("SELECT name FROM memories WHERE owner = ? ORDER BY id", (self.owner,))
        return [name for (name,) in rows]

    def units(self, page: int = 5000) -> Iterator[Unit]:
        """Every unit of the memory, oldest first, each with all its languages (read `page` units at a time)."""
        after = 0
        while rows := self.db.rows(
            "SELECT v.unit, v.locale, v.text, v.segment FROM variants v WHERE v.unit IN (SELECT id FROM units"
            " WHERE memory = ? AND id > ? ORDER BY id LIMIT ?) ORDER BY v.unit, v.id", (self.id, after, page),
        ):  # fmt: skip
            for _, group in itertools.groupby(rows, key=lambda row: row[0]):
                yield Unit([Variant(locale, text, segment) for _, locale, text, segment in group])
            after = rows[-1][0]
