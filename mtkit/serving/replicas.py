"""Engine processes (serve --replicas N; by default one per decoding thread on a CPU, one on a GPU): each
with its own copy of the model, its own batcher and its share of the CPU threads, behind the one
process that speaks HTTP.

The decoding loop runs the search and nothing else: HTTP, JSON, tokenizing, sentence splitting,
markup, glossaries, keys and limits stay in the HTTP process, which hands an engine encoded sentences
and gets their n-best back, and which starts an engine again if it dies. Several engines run side by
side: on a CPU, small batches keep the threads of one search waiting on each other, and one
process's Python runs on one core (docs/RESULTS.md, "Serving"). The HTTP process keeps
the queue limit, API keys, request limits and metrics, so they stay the server's, not a replica's.
It sends each request's sentences to the replica with the fewest in flight; each replica batches what
it gets as the in-process batcher would (continuous batching included) and sends each sentence's
result back as soon as it is finished. A replica that dies after its warm-up is started again (its
sentences in flight get EngineStopped); one that dies before it is not.
"""

from __future__ import annotations

import itertools
import multiprocessing
import queue
import signal
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtkit.core.console import warn
from mtkit.serving.dynamic_batching import BatchStats, EngineStopped
from mtkit.serving.engine import Engine
from mtkit.serving.waiting import Job, QueueFull, check_room
from mtkit.translation.confidence import Calibration
from mtkit.translation.translate import TextTranslator

if TYPE_CHECKING:
    from mtkit.interop.engines import Decoding


@dataclass(frozen=True)
class EngineSpec:
    """What a replica builds its translator from, as `mtkit serve` would: picklable, unlike a loaded
    model (each replica loads the file itself)."""

    model: Path  # the model file (PyTorch) or directory (CTranslate2)
    decoding: Decoding

    def __call__(self) -> TextTranslator:
        return self.build()

    def build(self, model_file=None) -> TextTranslator:
        """The translator of sentences as the service gives them (model_file: the model, already loaded)."""
        from mtkit.interop.engines import build_translator

        return build_translator(self.decoding, [model_file or self.model], lines=False)


@dataclass
class _Replica:
    number: int
    process: Any  # multiprocessing's Process
    outbox: Connection  # jobs, cancellations and the stop, to the replica
    inbox: Connection  # results, errors and batch statistics, from it
    waiting: dict[int, Future] = field(default_factory=dict)  # its sentences in flight, by key
    depth: int = 0  # sentences in its queue, as its last step reported
    alive: bool = True
    ready: bool = False  # its warm-up translation came back
    lock: threading.Lock = field(default_factory=threading.Lock)  # one message at a time on outbox
    reader: threading.Thread | None = None

    def send(self, message: tuple[str, Any]) -> None:
        with self.lock:
            self.outbox.send(message)


class Replicas:
    """The batcher's interface (start, submit, depth, stop) over `count` replica processes, each
    decoding on `threads` threads. max_queue counts the sentences in flight: waiting or being translated."""

    def __init__(
        self,
        make_translator: Callable[[], TextTranslator],
        count: int,
        threads: int,
        max_batch_tokens: int,
        max_wait_s: float,
        max_queue: int,
        on_batch: Callable[[BatchStats], None],
        calibration: Calibration | None = None,
        max_client_tokens: int | None = None,
    ):
        self._make_translator, self.count, self.threads = make_translator, count, threads
        self._calibration = calibration
        self._batching = {"max_batch_tokens": max_batch_tokens, "max_wait_s": max_wait_s,
                          "max_client_tokens": max_client_tokens}  # fmt: skip
        self.max_queue = max_queue
        self._on_batch = on_batch
        self._replicas: list[_Replica] = []
        self._keys = itertools.count()
        self._lock = threading.Lock()
        self._owned: Counter = Counter()  # each owner's sentences in flight
        self._owned_lock = threading.Lock()  # not _lock: futures land on the replicas' reader threads
        self._stopping = False
        self._warm_up_job: Callable[[], Job] | None = None  # a replica started again translates it first

    @property
    def alive(self) -> int:
        """Replicas running."""
        return sum(replica.alive for replica in self._replicas)

    @property
    def ready(self) -> int:
        """Replicas running whose warm-up translation came back."""
        return sum(replica.alive and replica.ready for replica in self._replicas)

    @property
    def depth(self) -> int:
        """Sentences waiting in the replicas' queues (not yet searching)."""
        return sum(replica.depth for replica in self._replicas)

    def start(self) -> None:
        self._replicas = [self._launch(number) for number in range(self.count)]

    def _launch(self, number: int) -> _Replica:
        context = multiprocessing.get_context("spawn")  # not fork: the parent has threads, and maybe CUDA
        their_inbox, outbox = context.Pipe(duplex=False)
        inbox, their_outbox = context.Pipe(duplex=False)
        process = context.Process(
            target=_serve_replica,
            args=(self._make_translator, self.threads, self._batching, their_inbox, their_outbox, self._calibration),
            name=f"mtkit-replica-{number}",
            daemon=True,
        )
        process.start()
        their_inbox.close(), their_outbox.close()
        replica = _Replica(number, process, outbox, inbox)
        replica.reader = threading.Thread(target=self._read, args=(replica,), name=f"mtkit-replica-{number}-reader")
        replica.reader.start()
        return replica

    def warm_up(self, make_job: Callable[[], Job]) -> list[Future]:
        """A warm-up translation through each replica, and through each one started again later: a
        replica is ready once its warm-up is back."""
        self._warm_up_job = make_job
        return [self._warm(replica) for replica in self._replicas]

    def _warm(self, replica: _Replica) -> Future:
        with self._lock:
            (future,) = self._send(replica, [self._warm_up_job()])

        def back(future: Future) -> None:
            replica.ready = not future.cancelled() and future.exception() is None

        future.add_done_callback(back)
        return future

    def submit(self, jobs: list[Job]) -> list[Future]:
        """Send all of a request's sentences to the ready replica with the fewest in flight, or none (QueueFull)."""
        with self._lock:
            if self._stopping:
                raise QueueFull("the server is shutting down")
            in_flight = sum(len(replica.waiting) for replica in self._replicas)
            owned = self._owned[jobs[0].owner] if jobs else 0
            check_room(in_flight, owned, len(jobs), self.max_queue, "in flight")
            alive = [replica for replica in self._replicas if replica.alive]
            if not alive:
                raise EngineStopped("every engine replica has stopped (the server's log says why)")
            return self._send(min(alive, key=lambda r: (not r.ready, len(r.waiting))), jobs)

    def _send(self, replica: _Replica, jobs: list[Job]) -> list[Future]:
        keys = [next(self._keys) for _ in jobs]
        replica.waiting.update(zip(keys, (job.future for job in jobs)))
        replica.send(("jobs", [(key, job.source, job.tokens, job.options, job.owner) for key, job in zip(keys, jobs)]))
        with self._owned_lock:
            self._owned.update(job.owner for job in jobs)
        for key, job in zip(keys, jobs):
            job.future.add_done_callback(partial(self._cancelled, replica, key))
            job.future.add_done_callback(partial(self._landed, job.owner))
        return [job.future for job in jobs]

    def _landed(self, owner, _: Future) -> None:
        with self._owned_lock:
            self._owned[owner] -= 1
            if not self._owned[owner]:
                del self._owned[owner]

    def _cancelled(self, replica: _Replica, key: int, future: Future) -> None:
        """A client went away: the replica drops the sentence if it has not started it."""
        if future.cancelled() and replica.waiting.pop(key, None) is not None and replica.alive:
            try:
                replica.send(("cancel", [key]))
            except OSError:  # the replica has just stopped
                pass

    def stop(self) -> None:
        """The replicas translate what they have, then end."""
        with self._lock:
            self._stopping = True
        for replica in self._replicas:
            if replica.alive:
                try:
                    replica.send(("stop", None))
                except OSError:
                    pass
        for replica in self._replicas:
            replica.reader.join()
            replica.process.join()

    def _read(self, replica: _Replica) -> None:
        """The replica's messages until it stops; then its sentences still in flight get EngineStopped,
        and unless the server is stopping, a replica that was ready is started again."""
        while self._take(replica):
            pass
        was_ready = replica.ready
        replica.alive, replica.ready, replica.depth = False, False, 0
        replica.process.join()
        error = EngineStopped(f"engine replica {replica.number} stopped (exit code {replica.process.exitcode})")
        with self._lock:
            again = not self._stopping and was_ready
            if again:
                self._replicas[replica.number] = self._launch(replica.number)
        if not self._stopping:
            then = "it starts again" if again else f"{self.alive} replicas remain"
            warn(f"{error}: its {len(replica.waiting)} sentences in flight get an error; {then}")
        for key in list(replica.waiting):
            _settle(replica.waiting.pop(key, None), error=error)
        if again:
            self._warm(self._replicas[replica.number])

    def _take(self, replica: _Replica) -> bool:
        """One send's messages from the replica; False once it has stopped."""
        try:
            messages = replica.inbox.recv()
        except (EOFError, OSError):  # the process ended
            return False
        for kind, payload in messages:
            if kind == "result":
                key, result = payload
                _settle(replica.waiting.pop(key, None), result=result)
            elif kind == "error":
                key, message = payload
                _settle(replica.waiting.pop(key, None), error=RuntimeError(message))
            elif kind == "batch":
                stats, replica.depth = payload
                self._on_batch(stats)
            else:  # "stopped"
                return False
        return True


def _settle(future: Future | None, result: Any = None, error: Exception | None = None) -> None:
    try:
        if future is None:
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:  # cancelled meanwhile: its client has gone
        pass


def _serve_replica(
    make_translator: Callable[[], TextTranslator],
    threads: int,
    batching: dict[str, Any],
    inbox: Connection,
    outbox: Connection,
    calibration: Calibration | None = None,
) -> None:
    """A replica process: jobs and cancellations come in on inbox; results, errors and each step's
    statistics go out on outbox, then "stopped" once it has been told to stop and has finished."""
    import torch

    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # the HTTP process decides when to stop
        signal.signal(number, signal.SIG_IGN)
    torch.set_num_threads(threads)
    outgoing: queue.SimpleQueue = queue.SimpleQueue()
    sender = threading.Thread(target=_send_all, args=(outgoing, outbox), name="mtkit-replica-sender")
    sender.start()
    engine = Engine(make_translator, calibration)
    batcher = engine.batcher(
        **batching, max_queue=1 << 62, on_batch=lambda stats: outgoing.put(("batch", (stats, batcher.depth)))
    )
    batcher.start()
    futures: dict[int, Future] = {}
    while True:
        try:
            kind, payload = inbox.recv()
        except EOFError:  # the HTTP process has gone
            break
        if kind == "stop":
            break
        if kind == "cancel":
            for key in payload:
                if (future := futures.pop(key, None)) is not None:
                    future.cancel()
            continue
        jobs = []
        for key, source, tokens, options, owner in payload:
            job = Job(source, tokens, options, owner=owner)
            futures[key] = job.future
            job.future.add_done_callback(partial(_report, outgoing, futures, key))
            jobs.append(job)
        batcher.submit(jobs)
    batcher.stop()
    outgoing.put(("stopped", None))
    sender.join()


def _send_all(outgoing: queue.SimpleQueue, outbox: Connection) -> None:
    """A replica's messages to the HTTP process, as many at a time as have come (a step's results
    in one send rather than one each), until "stopped"."""
    while True:
        messages = [outgoing.get()]
        while not outgoing.empty():
            messages.append(outgoing.get())
        try:
            outbox.send(messages)
        except OSError:  # the HTTP process has gone
            return
        if messages[-1][0] == "stopped":
            return


def _report(outgoing: queue.SimpleQueue, futures: dict[int, Future], key: int, future: Future) -> None:
    """On the replica's batcher thread: a sentence's result or error, for the HTTP process."""
    futures.pop(key, None)
    if future.cancelled():
        return
    error = future.exception()
    if error is not None:
        outgoing.put(("error", (key, f"{type(error).__name__}: {error}")))
    else:
        outgoing.put(("result", (key, future.result())))
