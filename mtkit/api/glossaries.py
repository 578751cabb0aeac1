"""Glossaries stored on the server (DeepL's /v2/glossaries and /v3/glossaries): their entries as DeepL
takes them (TSV or CSV), each owned by an API key and bounded, kept in the server's state database
(mtkit.core.database.state_database) and read when a request first names them."""

from __future__ import annotations

import csv
import dataclasses
import datetime
import io
import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtkit.core.database import Database
from mtkit.core.errors import MtkitError
from mtkit.serving.terms import MAX_TERM_CHARS, TermsError

MAX_STORED_ENTRIES = 100_000  # a stored glossary's entries at most (all its dictionaries')
MAX_DICTIONARIES = 100  # a multilingual glossary's language pairs at most
Dictionary = tuple[str, str, list[tuple[str, str]]]  # source, target, entries
MAX_GLOSSARIES = 1000  # stored glossaries at most (each key's and without keys, together)
MAX_GLOSSARIES_PER_KEY = 100  # a key's share of them: one key cannot fill the store for the others


@dataclass
class StoredGlossary:
    """A glossary kept on the server (DeepL's /v2/glossaries), its owner the key's name (None: no keys)."""

    glossary_id: str
    name: str
    source_lang: str
    target_lang: str
    creation_time: str
    entries: list[tuple[str, str]]
    owner: str | None = None
    more: list[Dictionary] = field(default_factory=list)  # a multilingual glossary's other dictionaries
    revision: int = 0  # one more at each change of its entries

    def dictionaries(self) -> list[Dictionary]:
        """Its dictionaries, each (source, target, entries); the first is source_lang to target_lang."""
        return [(self.source_lang, self.target_lang, self.entries), *(tuple(d) for d in self.more)]

    def entries_for(self, source: str, target: str) -> list[tuple[str, str]] | None:
        return next((e for s, t, e in self.dictionaries() if (s.lower(), t.lower()) == (source, target)), None)

    def v3_info(self) -> dict[str, Any]:
        """DeepL's multilingual glossary information."""
        dictionaries = [{"source_lang": s, "target_lang": t, "entry_count": len(e)} for s, t, e in self.dictionaries()]
        return {"glossary_id": self.glossary_id, "name": self.name, "dictionaries": dictionaries,
                "creation_time": self.creation_time}  # fmt: skip

    def info(self) -> dict[str, Any]:
        """DeepL's glossary information."""
        return {"glossary_id": self.glossary_id, "name": self.name, "ready": True, "source_lang": self.source_lang,
                "target_lang": self.target_lang, "creation_time": self.creation_time, "entry_count": len(self.entries)}  # fmt: skip


def parse_entries(text: str, entries_format: str) -> list[tuple[str, str]]:
    """Glossary entries, one a line: TSV (source TAB target) or CSV (source,target); a TermsError names the line."""
    if entries_format not in ("tsv", "csv"):
        raise TermsError(f"entries_format {entries_format}: must be tsv or csv")
    rows = (
        csv.reader(io.StringIO(text)) if entries_format == "csv" else (line.split("\t") for line in text.splitlines())
    )
    entries, seen = [], set()
    for n, row in enumerate(rows, 1):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != 2 or not all(cell.strip() for cell in row):
            raise TermsError(f"entries line {n}: expected a source term and a target term ({entries_format})")
        source, target = row[0].strip(), row[1].strip()
        if max(len(source), len(target)) > MAX_TERM_CHARS or source in seen:
            why = "given twice" if source in seen else f"a term of more than {MAX_TERM_CHARS} characters"
            raise TermsError(f"entries line {n}: {why}")
        entries.append((source, target))
        seen.add(source)
    if not entries or len(entries) > MAX_STORED_ENTRIES:
        raise TermsError(f"entries: {len(entries):,}; give between 1 and {MAX_STORED_ENTRIES:,}")
    return entries


GLOSSARY_SCHEMA = """CREATE TABLE IF NOT EXISTS glossaries (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, created TEXT NOT NULL, revision INTEGER NOT NULL, data TEXT NOT NULL)"""
CACHED_GLOSSARIES = 32  # glossaries kept read (the rest stay in the database until asked for)


class GlossaryStore:
    """Stored glossaries by id, in the server's state database (mtkit.core.database.state_database: in
    memory, a folder's SQLite file, or PostgreSQL shared by servers), each read when first asked for and
    read again when another server changed it: a server starts without reading any."""

    def __init__(self, db: Database | None = None):
        self.db = db or Database(":memory:", "--state-dir", "mtkit's server state")
        self.db.script(GLOSSARY_SCHEMA)
        self._read: OrderedDict[str, StoredGlossary] = OrderedDict()
        self._lock = threading.Lock()

    def create(self, owner: str | None, name: str, source: str, target: str, entries: list,
               more: Sequence[Dictionary] = ()) -> StoredGlossary:  # fmt: skip
        created = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        glossary = StoredGlossary(str(uuid.uuid4()), name, source, target, created, entries, owner, list(more))
        with self.db.transaction():
            self.db.exclusive("glossaries")
            if self.db.value("SELECT count(*) FROM glossaries") >= MAX_GLOSSARIES:
                raise TermsError(f"this server keeps {MAX_GLOSSARIES:,} glossaries at most: delete one first")
            if owner is not None and self._count(owner) >= MAX_GLOSSARIES_PER_KEY:
                raise TermsError(f"a key keeps {MAX_GLOSSARIES_PER_KEY:,} glossaries at most: delete one first")
            self.db.run("INSERT INTO glossaries (id, owner, created, revision, data) VALUES (?, ?, ?, 0, ?)",
                        (glossary.glossary_id, owner or "", created, _stored(glossary)))  # fmt: skip
        return glossary

    def create_multilingual(self, owner: str | None, name: str, dictionaries: list[Dictionary]) -> StoredGlossary:
        """A glossary of several language pairs (DeepL's /v3/glossaries)."""
        _check_dictionaries(dictionaries)
        (source, target, entries), *more = dictionaries
        return self.create(owner, name, source, target, entries, more)

    def change(
        self,
        owner: str | None,
        glossary_id: str,
        name: str | None = None,
        dictionaries: list[Dictionary] = (),
        merge: bool = True,
        drop: tuple[str, str] | None = None,
    ) -> StoredGlossary | None:
        """The glossary renamed, each given dictionary merged into its pair's (merge: entries of the same
        source term replaced) or put in its place, or one pair's dropped; None where the owner has no such glossary."""  # fmt: skip
        with self.db.transaction():
            self.db.exclusive("glossaries")
            glossary = self.get(owner, glossary_id)
            if glossary is None:
                return None
            current = {(s.lower(), t.lower()): (s, t, e) for s, t, e in glossary.dictionaries()}
            for source, target, entries in dictionaries:
                pair = (source.lower(), target.lower())
                kept = dict(current[pair][2]) if merge and pair in current else {}
                current[pair] = (source, target, list({**kept, **dict(entries)}.items()))
            if drop is not None:
                current.pop(drop, None)
            if not current:
                raise TermsError("a glossary keeps one dictionary at least: delete the glossary instead")
            _check_dictionaries(list(current.values()))
            (source, target, entries), *more = current.values()
            changed = dataclasses.replace(
                glossary, name=name or glossary.name, source_lang=source, target_lang=target, entries=entries,
                more=more, revision=glossary.revision + 1,
            )  # fmt: skip
            self.db.run("UPDATE glossaries SET revision = ?, data = ? WHERE id = ?",
                        (changed.revision, _stored(changed), glossary_id))  # fmt: skip
        return changed

    def get(self, owner: str | None, glossary_id: str) -> StoredGlossary | None:
        row = self.db.one("SELECT revision FROM glossaries WHERE id = ? AND owner = ?", (glossary_id, owner or ""))
        if row is None:
            return None
        with self._lock:
            glossary = self._read.get(glossary_id)
            if glossary is not None and glossary.revision == row[0]:
                self._read.move_to_end(glossary_id)
                return glossary
        data = self.db.value("SELECT data FROM glossaries WHERE id = ?", (glossary_id,))
        if data is None:  # deleted meanwhile
            return None
        glossary = _read(data)
        with self._lock:
            self._read[glossary_id] = glossary
            while len(self._read) > CACHED_GLOSSARIES:
                self._read.popitem(last=False)
        return glossary

    def owned(self, owner: str | None) -> list[StoredGlossary]:
        ids = self.db.rows("SELECT id FROM glossaries WHERE owner = ? ORDER BY created, id", (owner or "",))
        return [glossary for (glossary_id,) in ids if (glossary := self.get(owner, glossary_id)) is not None]

    def delete(self, owner: str | None, glossary_id: str) -> bool:
        deleted = self.db.run("DELETE FROM glossaries WHERE id = ? AND owner = ?", (glossary_id, owner or ""))
        with self._lock:
            self._read.pop(glossary_id, None)
        return deleted > 0

    def _count(self, owner: str | None) -> int:
        return self.db.value("SELECT count(*) FROM glossaries WHERE owner = ?", (owner or "",))

    def take_folder(self, folder: Path) -> int:
        """Glossaries an earlier version kept as JSON files in `folder` moved into the database (one
        transaction; the files removed after it): how many."""
        files = sorted(folder.glob("*.json")) if folder.is_dir() else []
        glossaries = []
        for path in files:
            try:
                glossaries.append(_read(path.read_text(encoding="utf-8")))
            except (ValueError, KeyError, TypeError) as err:
                raise MtkitError(f"{path}: not a glossary mtkit stored ({type(err).__name__}: {err})") from None
        with self.db.transaction():
            for glossary in glossaries:
                self.db.run("INSERT INTO glossaries (id, owner, created, revision, data) VALUES (?, ?, ?, ?, ?)"
                            " ON CONFLICT (id) DO NOTHING", (glossary.glossary_id, glossary.owner or "",
                            glossary.creation_time, glossary.revision, _stored(glossary)))  # fmt: skip
        for path in files:
            path.unlink()
        return len(files)


def _stored(glossary: StoredGlossary) -> str:
    return json.dumps(dataclasses.asdict(glossary), ensure_ascii=False)


def _read(data: str) -> StoredGlossary:
    fields = json.loads(data)
    fields["entries"] = [tuple(pair) for pair in fields["entries"]]
    fields["more"] = [(s, t, [tuple(pair) for pair in e]) for s, t, e in fields.get("more", [])]
    return StoredGlossary(**fields)


def _check_dictionaries(dictionaries: list[Dictionary]) -> None:
    if not dictionaries or len(dictionaries) > MAX_DICTIONARIES:
        raise TermsError(f"dictionaries: {len(dictionaries):,}; give between 1 and {MAX_DICTIONARIES}")
    if len({(s.lower(), t.lower()) for s, t, _ in dictionaries}) < len(dictionaries):
        raise TermsError("dictionaries: each language pair once")
    if (total := sum(len(e) for _, _, e in dictionaries)) > MAX_STORED_ENTRIES:
        raise TermsError(f"entries: {total:,} in all; give at most {MAX_STORED_ENTRIES:,}")
