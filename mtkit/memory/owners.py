"""A server's translation memories (serve --tm FILE), each owned by an API key ("" without keys): the
owner's default memory, which corrections go into (LibreTranslate's /suggest), its named memories (DeepL's
translation memories, imported from TMX), and the server's own, which `mtkit tm import` fills and every
owner reads after its own. An owner's units and memories are bounded, so that no key fills the file."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path

from mtkit.core.database import Database
from mtkit.core.errors import MtkitError
from mtkit.memory.store import DEFAULT_MEMORY, Imported, Match, TranslationMemory
from mtkit.memory.tmx import Unit, Variant

MAX_UNITS_PER_OWNER = 200_000  # in all of an owner's memories
MAX_MEMORIES_PER_OWNER = 100


class MemoryLimit(MtkitError):
    """An owner's share of the file is full."""


class OwnedMemories:
    def __init__(self, where: Path | str):
        """where: a SQLite file, or a postgresql:// URL that several servers share."""
        self.db = Database(where)  # one connection for all the memories
        self._open: dict[tuple[str, str], TranslationMemory] = {}
        self._lock = threading.Lock()  # opened from several threads (asyncio.to_thread)

    def of(self, owner: str | None, name: str = DEFAULT_MEMORY) -> TranslationMemory:
        """The owner's memory of that name, made where missing."""
        with self._lock:
            if (owner or "", name) not in self._open:
                self._open[owner or "", name] = TranslationMemory(self.db, name, owner or "")
            return self._open[owner or "", name]

    def named(self, owner: str | None, name: str) -> TranslationMemory | None:
        """The owner's memory of that name where it has one (another owner's is None)."""
        if (owner or "", name) in self._open:
            return self._open[owner or "", name]
        found = TranslationMemory.existing(self.db, name, owner or "")
        if found is not None:
            with self._lock:
                self._open.setdefault((owner or "", name), found)
        return found

    def listing(self, owner: str | None) -> list[TranslationMemory]:
        """The owner's named memories (its default one, of corrections, when it holds any)."""
        names = self.of(owner).owner_memories()
        return [self.of(owner, name) for name in names if name != DEFAULT_MEMORY or len(self.of(owner))]

    def create(
        self, owner: str | None, display_name: str, source_lang: str, units: Iterable[Unit]
    ) -> tuple[str, Imported]:
        """A new memory of the units (one transaction), named by a fresh id: (its id, what was imported)."""
        if len(self.of(owner).owner_memories()) > MAX_MEMORIES_PER_OWNER:
            raise MemoryLimit(f"a key holds {MAX_MEMORIES_PER_OWNER} translation memories at most")
        name = str(uuid.uuid4())
        memory = self.of(owner, name)
        try:
            counts = memory.add(self._bounded(memory, units), source_lang)
        except BaseException:
            self.delete(owner, name)
            raise
        memory.describe(display_name, source_lang)
        return name, counts

    def delete(self, owner: str | None, name: str) -> bool:
        memory = self.named(owner, name)
        if memory is None:
            return False
        memory.delete()
        with self._lock:
            self._open.pop((owner or "", name), None)
        return True

    def suggest(self, owner: str | None, text: str, translation: str, source: str, target: str) -> None:
        """A correction kept in the owner's default memory (one transaction, on disk before the answer)."""
        memory = self.of(owner)
        unit = Unit([Variant(source, " ".join(text.split())), Variant(target, " ".join(translation.split()))])
        memory.add(self._bounded(memory, [unit]), source, origin="suggestion")

    def _bounded(self, memory: TranslationMemory, units: Iterable[Unit]) -> Iterable[Unit]:
        room = MAX_UNITS_PER_OWNER - memory.owner_units()
        for count, unit in enumerate(units):
            if count >= room:
                raise MemoryLimit(f"a key's translation memories hold {MAX_UNITS_PER_OWNER:,} units at most")
            yield unit

    def fuzzy(
        self, owner: str | None, texts: dict[int, str], source: str, target: str, threshold: int,
        memory: TranslationMemory | None = None, limit: int = 3,
    ) -> dict[int, list[Match]]:  # fmt: skip
        """The texts (by index) that have fuzzy matches of at least `threshold` in the memory given, or
        the owner's default one and then the server's own: each text's best, best first."""
        memories = [memory] if memory else [self.of(owner)] + ([self.of(None)] if owner is not None else [])
        found = {}
        for i, text in texts.items():
            if text.strip() and "\n" not in text.strip():
                for each in memories:
                    if matches := each.lookup(text, source, target, threshold, limit):
                        found[i] = matches
                        break
        return found

    def stored(
        self, owner: str | None, texts: Sequence[str], source: str, target: str, memory: TranslationMemory | None = None
    ) -> dict[int, str]:
        """The texts (by index) that a memory holds whole, spans aside, each with the stored translation:
        the memory given, or the owner's default one and then the server's own."""
        found = self.fuzzy(owner, dict(enumerate(texts)), source, target, 100, memory, limit=1)
        return {i: matches[0].target for i, matches in found.items()}
