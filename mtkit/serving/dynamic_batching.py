"""Dynamic batching for a translation service: sentences of concurrent requests share batches.

Requests submit their sentences to one bounded queue. A worker thread takes the oldest sentence,
waits at most `max_wait_s` for company with the same decoding options, and translates up to
`max_batch_tokens` source subwords of them in one call; the engine sorts a batch by length itself.
Clients (a job's owner) take turns within a batch: one sentence of each, oldest first; and while
another client's sentences wait or search beside its own, a client's sentences hold at most
`max_client_tokens` source subwords of the batch or running search. A step's time grows with the
sentences searching (a tiny model on 2 CPU cores: 3.6 ms for one, 21 ms for 150 with terms), so a
client that fills the search slows every step of another's one sentence; capped, its own sentences
wait instead (docs/results/hostile-files.md).
A large request is spread over several batches. The wait counts from the oldest sentence's arrival
or, if the worker was busy then, from the end of its last batch: under steady load, the clients
answered by that batch get that long to send their next sentences and join the next batch, so
batches do not settle into alternating halves of the clients.
Engine-agnostic: the translate function does the work, on this one thread, so it owns its device.
It hands each sentence's result over as soon as that sentence is finished, so a request whose
sentences finish early is answered while the rest of its batch is still being translated.

Continuous batching, where the engine offers a stream (open_stream): the batch becomes a running
search, and between its decoding steps queued sentences with the same options join it, as long as
the sentences searching stay within `max_batch_tokens`. A sentence then waits for the next step,
not for a whole batch to finish, and the search keeps as many sentences as the load brings. So a
search starts as soon as a sentence comes, without waiting for company (a lone request would only
be held back: measured 69-72 ms against 50-55 ms median latency for one client, docs/results/design-choices.md).
Sentences that arrive during a step join after the next one, with those that arrive meanwhile
(unless max_wait_s is 0): a join encodes its sentences in one call, which costs little more for
several than for one. The search stops taking sentences while the oldest one waiting has other
options, so those wait for it to drain, not forever.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from mtkit.serving.waiting import Job, QueueFull, Waiting, check_room

_STOP = object()  # the worker's signal to end
# Sentences join a running search once they are this share of it (or have waited max_wait_s): each
# join runs the encoder once, and on a CPU a call for one sentence costs about half of one for four.
JOIN_SHARE = 1 / 8


class EngineStopped(Exception):
    """The engine translating a sentence stopped before its result (an engine process killed): try again."""


@dataclass
class BatchStats:
    """A batch, or with continuous batching one decoding step of the running search."""

    sentences: int  # translated together (searching in this step)
    tokens: int  # their source subwords
    seconds: float
    finished: int  # sentences answered


class Stream(Protocol):
    """A running search that sentences join between steps (an engine's, e.g. translate.LineStream):
    add(keys, sources), and step() calls the deliver function it was opened with, deliver(key, result),
    for each sentence it finished."""

    def add(self, keys: list[int], sources: list[Any]) -> None: ...

    def step(self) -> None: ...


@dataclass
class _Search:
    """A running search (continuous batching): the engine's stream, the sentences in it by key, and
    how many of them the current step finished."""

    active: dict[int, Job] = field(default_factory=dict)
    finished: int = 0
    stream: Stream = field(init=False)  # opened with deliver as its callback

    def deliver(self, key: int, result: Any) -> None:
        self.active.pop(key).future.set_result(result)
        self.finished += 1


class Batcher:
    """A queue of sentences and the worker thread that translates them in batches.

    translate(sources, options, deliver) calls deliver(i, result) once for each job's source, as
    soon as its result is known; its exceptions reach every request of the batch still waiting.
    open_stream(options, deliver), where given, opens a Stream for continuous batching, or returns
    None to translate in batches. on_batch(stats) is called after each batch or step (for
    metrics); setup() runs once on the worker thread before any batch, and if it fails, every
    request gets its error. max_client_tokens: the source subwords one owner's sentences hold at most
    while another owner's wait or search beside them (None: as many as max_batch_tokens).
    """

    def __init__(
        self,
        translate: Callable[[list[Any], Any, Callable[[int, Any], None]], None],
        max_batch_tokens: int,
        max_wait_s: float,
        max_queue: int,
        on_batch: Callable[[BatchStats], None] | None = None,
        setup: Callable[[], None] | None = None,
        open_stream: Callable[[Any, Callable[[int, Any], None]], Stream | None] | None = None,
        max_client_tokens: int | None = None,
    ):
        self._translate = translate
        self._open_stream = open_stream
        self.max_batch_tokens = max_batch_tokens
        self.max_client_tokens = max_client_tokens or max_batch_tokens
        self.max_wait_s = max_wait_s
        self.max_queue = max_queue
        self._on_batch = on_batch
        self._waiting = Waiting()
        self._cond = threading.Condition()
        self._stopping = False
        self._last_batch_end = 0.0
        self.setup = setup  # runs first on the worker thread (e.g. builds the model)
        self._thread = threading.Thread(target=self._run, name="mtkit-batcher", daemon=True)

    @property
    def depth(self) -> int:
        """Sentences waiting (not yet in a batch)."""
        return self._waiting.count

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Translate what is queued, then end the worker."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()

    def submit(self, jobs: list[Job]) -> list[Future]:
        """Queue all of a request's sentences, or none of them (QueueFull)."""
        with self._cond:
            if self._stopping:
                raise QueueFull("the server is shutting down")
            owned = self._waiting.owned_by(jobs[0].owner) if jobs else 0
            check_room(self._waiting.count, owned, len(jobs), self.max_queue)
            self._waiting.add(jobs)
            self._cond.notify()
        return [job.future for job in jobs]

    def _run(self) -> None:
        broken: Exception | None = None
        if self.setup:
            try:
                self.setup()
            except Exception as err:  # every request gets it (a 500), rather than waiting forever
                broken = err
        while True:
            options = self._oldest_options()
            if options is _STOP:
                return
            search = None if broken is not None else self._open_search(options)
            batch = self._next_batch(options, wait_for_company=search is None)
            if broken is not None:
                for job in batch:
                    if job.future.set_running_or_notify_cancel():
                        job.future.set_exception(broken)
            elif search is not None:
                self._stream(options, batch, search)
            else:
                self._process(batch)

    def _oldest_options(self) -> Hashable:
        """The options of the oldest sentence waiting, once there is one; _STOP when stopping and
        none is left."""
        with self._cond:
            while True:
                self._waiting.drop_cancelled()
                if (oldest := self._waiting.oldest()) is not None:
                    return oldest.options
                if self._stopping:
                    return _STOP
                self._cond.wait()

    def _next_batch(self, options: Hashable, wait_for_company: bool) -> list[Job]:
        """The oldest sentences with these options, within the token budget; with wait_for_company,
        after waiting up to max_wait_s for more of them (a running search needs no wait: later
        sentences join it)."""
        with self._cond:
            self._waiting.drop_cancelled()
            if (oldest := self._waiting.oldest()) is None:  # every sentence left meanwhile
                return []
            wait = self.max_wait_s if wait_for_company else 0.0
            deadline = max(oldest.arrival, self._last_batch_end) + wait
            while True:
                self._waiting.drop_cancelled()
                batch, full = self._select(options, self.max_batch_tokens)
                remaining = deadline - time.monotonic()
                if full or remaining <= 0 or self._stopping:
                    break
                self._cond.wait(remaining)
            self._waiting.take(batch)
            return batch

    def _select(
        self, options: Hashable, budget: int, first_always: bool = True, searching: Collection[Job] = ()
    ) -> tuple[list[Job], bool]:
        """The jobs with these options that fit the token budget, owners taking turns (one sentence of
        each, oldest first), the first always fitting unless not first_always; while more than one
        owner's jobs wait or search, none holding more than max_client_tokens with its jobs `searching`;
        and whether the budget is full (a further job with these options does not fit)."""
        batch: list[Job] = []
        tokens = 0
        held: Counter = Counter()
        for job in searching:
            held[job.owner] += job.tokens
        shared = len(held.keys() | self._waiting.owners()) > 1
        for job in self._waiting.in_turns(options, held, self.max_client_tokens if shared else math.inf):
            if (batch or not first_always) and tokens + job.tokens > budget:
                return batch, True
            batch.append(job)
            tokens += job.tokens
            held[job.owner] += job.tokens
        return batch, tokens >= budget

    def _open_search(self, options: Hashable) -> _Search | None:
        """A running search for continuous batching; None where the engine offers no stream."""
        search = _Search()
        stream = self._open_stream(options, search.deliver) if self._open_stream else None
        if stream is None:
            return None
        search.stream = stream
        return search

    def _stream(self, options: Hashable, batch: list[Job], search: _Search) -> None:
        """Continuous batching: run the batch as a search that queued sentences with these options
        join between steps, until it is empty."""
        active, stream = search.active, search.stream
        keys = itertools.count()
        joining = batch
        while True:
            joining = [job for job in joining if job.future.set_running_or_notify_cancel()]
            began, start, search.finished = time.monotonic(), time.perf_counter(), 0
            searching = len(active) + len(joining)
            tokens = sum(job.tokens for job in itertools.chain(active.values(), joining))
            try:
                if joining:
                    new_keys = [next(keys) for _ in joining]
                    active.update(zip(new_keys, joining))
                    stream.add(new_keys, [job.source for job in joining])
                if active:
                    stream.step()
            except Exception as err:  # the requests in the search get it as a 500; the worker carries on
                for job in active.values():
                    job.future.set_exception(err)
                break
            if self._on_batch and searching:
                self._on_batch(BatchStats(searching, tokens, time.perf_counter() - start, search.finished))
            if not active:
                break
            with self._cond:
                self._waiting.drop_cancelled()
                joining = self._joiners(options, active.values(), began)
        self._last_batch_end = time.monotonic()

    def _joiners(self, options: Hashable, searching: Collection[Job], step_began: float) -> list[Job]:
        """Take the queued sentences that join the running search now: the oldest with its options
        that fit beside the sentences `searching`, once the oldest of them has waited through a whole
        step (the one that began at `step_began`) and they are at least JOIN_SHARE of the search or the
        oldest has waited max_wait_s; at once if they fill the budget or max_wait_s is 0."""
        oldest = self._waiting.oldest()
        if oldest is None or oldest.options != options:
            return []
        budget = self.max_batch_tokens - sum(job.tokens for job in searching)
        joining, full = self._select(options, budget, first_always=False, searching=searching)
        if joining and not full and self.max_wait_s > 0:
            first_arrival = joining[0].arrival
            if first_arrival > step_began:
                return []  # none has waited a whole step yet
            if len(joining) < JOIN_SHARE * len(searching) and time.monotonic() - first_arrival < self.max_wait_s:
                return []  # a few more share the join's encoder call
        self._waiting.take(joining)
        return joining

    def _process(self, batch: list[Job]) -> None:
        batch = [job for job in batch if job.future.set_running_or_notify_cancel()]  # a client may have left
        if not batch:
            return
        start = time.perf_counter()

        def deliver(i: int, result: Any) -> None:
            batch[i].future.set_result(result)

        try:
            self._translate([job.source for job in batch], batch[0].options, deliver)
            missing: Exception = RuntimeError("the engine returned no result for this sentence")
        except Exception as err:  # the requests get it as a 500; the worker carries on
            missing = err
        for job in batch:
            if not job.future.done():
                job.future.set_exception(missing)
        self._last_batch_end = time.monotonic()
        if self._on_batch:
            tokens = sum(job.tokens for job in batch)
            self._on_batch(BatchStats(len(batch), tokens, time.perf_counter() - start, len(batch)))
