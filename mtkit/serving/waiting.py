"""Sentences waiting for a batch (mtkit.serving.dynamic_batching): each a Job, kept by client (its
owner: a key, or an address without keys), the clients taking turns, and the queue's bound with a
reserve beyond it for clients with few sentences waiting."""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Hashable, Iterable, Iterator, KeysView
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

# Room beyond the queue's bound, as a share of it, for the clients with fewer sentences queued than
# that room: one client that fills the queue (its sentences wait longer, capped in the search) does
# not shut out another's single sentence.
RESERVE = 1 / 4


class QueueFull(Exception):
    """The queue has no room for the request's sentences: try again later."""


def check_room(queued: int, owned: int, adding: int, max_queue: int, state: str = "waiting") -> None:
    """QueueFull where `adding` sentences would pass the queue's bound, unless their client, with `owned`
    of the `queued`, stays within the reserve beyond it (RESERVE)."""
    reserve = int(max_queue * RESERVE)
    if queued + adding <= max_queue or (owned + adding <= reserve and queued + adding <= max_queue + reserve):
        return
    raise QueueFull(f"{queued} sentences are {state}; the queue holds {max_queue}")


@dataclass
class Job:
    source: Any  # the sentence as the translate function and the stream take it
    tokens: int  # source subwords with </s>: what the batch budget counts
    options: Hashable  # only jobs with equal options share a batch
    future: Future = field(default_factory=Future)
    arrival: float = field(default_factory=time.monotonic)
    owner: Hashable = None  # whose request (a key, an address): owners take turns in a batch


class Waiting:
    """The jobs waiting for a batch: each owner's, oldest first. A batch looks at the jobs it takes
    (and one more of each owner), not at all that wait: a client with thousands of sentences queued
    once cost every step of the running search a pass over them."""

    def __init__(self):
        self._by_owner: dict[Hashable, deque[Job]] = {}
        self.count = 0
        self._cancelled = False  # a job was cancelled since the last drop_cancelled

    def add(self, jobs: Iterable[Job]) -> None:
        for job in jobs:
            self._by_owner.setdefault(job.owner, deque()).append(job)
            self.count += 1
            job.future.add_done_callback(self._note)

    def _note(self, future: Future) -> None:
        if future.cancelled():
            self._cancelled = True

    def drop_cancelled(self) -> None:
        """Forget the jobs whose clients went away."""
        if not self._cancelled:
            return
        self._cancelled = False
        for owner, jobs in list(self._by_owner.items()):
            kept = deque(job for job in jobs if not job.future.cancelled())
            self.count -= len(jobs) - len(kept)
            if kept:
                self._by_owner[owner] = kept
            else:
                del self._by_owner[owner]

    def owned_by(self, owner: Hashable) -> int:
        """How many of this owner's jobs wait."""
        return len(self._by_owner.get(owner, ()))

    def owners(self) -> KeysView[Hashable]:
        """The owners with jobs waiting (a view: a batch's choice reads it at every step)."""
        return self._by_owner.keys()

    def oldest(self) -> Job | None:
        return min((jobs[0] for jobs in self._by_owner.values()), key=lambda job: job.arrival, default=None)

    def in_turns(self, options: Hashable, held: Counter, share: float) -> Iterator[Job]:
        """The jobs with these options, owners taking turns (take_turns; owners in the order of their
        oldest job), each owner's turns ending at its first job past its `share` of tokens with those it
        `held` (which the caller counts up as it takes jobs); an owner that holds none may take one larger."""

        def owned(owner: Hashable, jobs: deque[Job]) -> Iterator[Job]:
            for job in jobs:
                if job.options != options:
                    continue
                if held[owner] and held[owner] + job.tokens > share:
                    return
                yield job

        owners = sorted(self._by_owner.items(), key=lambda item: item[1][0].arrival)
        return take_turns(owned(owner, jobs) for owner, jobs in owners)

    def take(self, jobs: list[Job]) -> None:
        """Remove these jobs (chosen from those waiting)."""
        chosen: dict[Hashable, set[int]] = {}
        for job in jobs:
            chosen.setdefault(job.owner, set()).add(id(job))
        for owner, ids in chosen.items():
            queued = self._by_owner[owner]
            while queued and id(queued[0]) in ids:  # usually the owner's oldest
                ids.discard(id(queued.popleft()))
            if ids:
                queued = self._by_owner[owner] = deque(job for job in queued if id(job) not in ids)
            if not queued:
                del self._by_owner[owner]
        self.count -= len(jobs)


def take_turns(owners: Iterable[Iterable[Job]]) -> Iterator[Job]:
    """Each owner's jobs (oldest first; the owners in the order of their oldest) taking turns: the first
    of each, then the second of each, ...; so that a client that sends a thousand sentences does not
    hold back one that sends one. Lazily: a batch draws only the jobs it looks at."""
    turns = [iter(jobs) for jobs in owners]
    while turns:
        still = []
        for jobs in turns:
            job = next(jobs, None)
            if job is not None:
                yield job
                still.append(jobs)
        turns = still
