"""Documents read and written in worker processes (the server's /translate_file). A large or hostile
file is parsed on another core, never holding the server's interpreter lock, which its event loop
and its engine thread need (a thread parsing would hold it, and every other client would wait).
Each step is a function of picklable values, so that no parsed document crosses between processes:
prepare() gives the texts to translate, finish() writes the file from their translations. A worker
keeps the parse of the last job it prepared for that job's finish(); a finish() that finds another
(another job prepared meanwhile, or another worker) reads the file again from its bytes (reading is
deterministic). A worker's address space is bounded (memory_bytes): a file that needs more is a
MemoryError, not a server out of memory."""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import os
import resource
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from mtkit.core.errors import MtkitError
from mtkit.documents.formats import read_document
from mtkit.documents.inline import Document, FileLimits, FileTooLarge
from mtkit.documents.translating import Sentences, is_plain, plain_lines, sentences, written, written_plain
from mtkit.text.markup_placement import parse_alignment
from mtkit.text.sentence_splitter import SentenceSplitter


class NeedsAlignment(MtkitError):
    """A file whose formatting needs word alignments, for a model that cannot give them (a 422)."""


@dataclass(frozen=True)
class FileJob:
    data: bytes
    name: str
    fmt: str  # mtkit.documents.formats.document_format's
    target: str | None  # the language the file is marked as written in
    limits: FileLimits
    aligned: bool  # translated with word alignments and the formatting placed by them; else plain texts
    split: bool = True  # aligned: segments cut into sentences (by source_language's rules)
    source_language: str | None = None
    column: str | None = None  # a CSV file's column (mtkit.documents.strings.tables.CsvColumn)


# The job this worker prepared last, and its parse: (job, document, sentences). One at most, dropped
# before the next job is read: a worker holds no more than the one document it had to parse anyway.
_kept: list[tuple[FileJob, Document, Sentences]] = []


def prepare(job: FileJob) -> list[str]:
    """The texts the engine translates: the sentences of the file's segments (aligned), or its
    segments as plain text (a file without formatting, for an engine without alignments)."""
    _kept.clear()
    document = _read(job)
    if job.aligned:
        parts = _sentences(job, document)
        _kept.append((job, document, parts))
        return parts.texts
    if not is_plain(document):
        raise NeedsAlignment(f"{job.name}: its formatting follows the word alignment, which this server's model "
                             "cannot give (--engine pytorch, a model without target tags or language tokens)")  # fmt: skip
    return plain_lines(document)


def finish(job: FileJob, translated: list) -> bytes:
    """The file written from the translations of prepare()'s texts (aligned: (text, Pharaoh pairs))."""
    if job.aligned:
        aligned = [(text, parse_alignment(alignment)) for text, alignment in translated]
        kept = _kept.pop() if _kept else None
        if kept is not None and kept[0] == job:  # parsing a large document's markup is most of its time
            _, document, parts = kept
        else:
            document = _read(job)
            parts = _sentences(job, document)
        return written(document, parts, aligned, job.target)
    return written_plain(_read(job), translated, job.target)


def _read(job: FileJob) -> Document:
    document = read_document(job.data, job.name, job.fmt, limits=job.limits, column=job.column)
    document.check_target(job.target)
    return document


def _sentences(job: FileJob, document: Document) -> Sentences:
    return sentences(document, _splitter(job.source_language).split if job.split else None, job.name)


@functools.lru_cache(maxsize=8)
def _splitter(lang: str | None) -> SentenceSplitter:
    return SentenceSplitter(lang)


def _over_budget(seconds: float) -> str:
    return f"reading and writing it took more than {seconds:g} s of a worker's time, the most a document may take"


def _within_budget(left: float, seconds: float, grace: float, work: Callable, *args) -> tuple[Any, float]:
    """work(*args) in a worker, and the CPU seconds it took; stopped past `left` seconds of the worker's
    CPU time (a timer of the process's CPU time, seen at its next Python instruction), and ended by the
    kernel `grace` seconds of CPU later (a second timer, whose signal ends the process: a job held in a
    call into C never sees the first). CPU time, not the clock's: a worker at a low priority waits while
    the engine is busy, and that is not the document's doing."""

    def stop(signum, frame) -> None:
        raise JobTimeout(_over_budget(seconds))

    previous, started = signal.signal(signal.SIGPROF, stop), time.process_time()
    signal.signal(signal.SIGVTALRM, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_PROF, max(left, 1e-3))
    signal.setitimer(signal.ITIMER_VIRTUAL, max(left, 1e-3) + grace)
    try:
        return work(*args), time.process_time() - started
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def _start_worker(memory_bytes: int) -> None:
    """A worker's address space bounded, and its priority low: documents take little of the CPU the
    engine needs (on a machine of few cores, a busy reader at normal priority slows the engine), and
    yet go on while it is busy (the lowest, nice 19, gets a seventh of what nice 10 does: 1.5% of a core)."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    os.nice(10)


class JobTimeout(FileTooLarge):
    """A document past its budget of its worker's time (or, waiting on nothing, of the clock's)."""


WORK_SECONDS = 10.0  # the CPU seconds a worker spends at most reading and writing one document
GRACE_SECONDS = 5.0  # CPU seconds past the budget before the kernel ends a worker that does not stop
WALL_SLACK = 30  # a job's budget times this (and the grace) by the clock: for one that waits on nothing


@dataclass
class Budget:
    """The CPU seconds left to one document's job: its reading and its writing share them."""

    left: float


async def _ended_by_timer(processes: list, wait_s: float = 1.0) -> bool:
    """Whether a worker was ended by the timer of its CPU time. The executor's own thread reaps a dead
    worker, and until it has, a process's exit code reads None: it is waited for a moment."""
    deadline = time.monotonic() + wait_s
    while any(process.exitcode is None for process in processes) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return any(process.exitcode == -signal.SIGVTALRM for process in processes)


class Workers:
    """A pool of worker processes, started on first use by spawning (nothing of the server's threads
    or model is copied into them), started again if one dies. Each document has a budget of `seconds`
    of a worker's CPU time for its reading and writing together: the worker stops it past that, a job
    that does not stop (held in a C call) ends its worker, one that is not done by the clock (WALL_SLACK
    times its budget) is killed, and the pool is started again."""

    def __init__(self, processes: int = 1, memory_bytes: int = 4 << 30, seconds: float = WORK_SECONDS):
        self.processes, self.memory_bytes, self.seconds = processes, memory_bytes, seconds
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                context = multiprocessing.get_context("spawn")
                self._pool = ProcessPoolExecutor(self.processes, context, _start_worker, (self.memory_bytes,))
            return self._pool

    def budget(self) -> Budget:
        """One document's CPU seconds, for each of its runs."""
        return Budget(self.seconds)

    async def run(self, work: Callable, *args, budget: Budget | None = None) -> Any:
        """work(*args) in a worker, within the budget (a fresh one if none), which it is charged; its
        MtkitError comes back as it is, running out of memory as a FileTooLarge."""
        budget = budget or self.budget()
        pool, by_clock = self._executor(), budget.left * WALL_SLACK + GRACE_SECONDS
        submitted = pool.submit(_within_budget, budget.left, self.seconds, GRACE_SECONDS, work, *args)
        processes = list(getattr(pool, "_processes", {}).values())  # the executor has no public list
        running = asyncio.wrap_future(submitted)
        try:
            result, spent = await asyncio.wait_for(running, by_clock)
            budget.left -= spent
            return result
        except MemoryError:
            raise FileTooLarge(f"reading it needs more than {self.memory_bytes >> 20:,} MiB of memory") from None
        except TimeoutError:  # the job waits on something, using no CPU
            self._restart(pool, kill=True)
            raise JobTimeout(f"its worker did not get it done in {by_clock:g} s") from None
        except BrokenProcessPool:  # a worker died: the pool is broken for good, the next call starts another
            self._restart(pool)
            if await _ended_by_timer(processes):
                raise JobTimeout(_over_budget(self.seconds)) from None
            raise FileTooLarge("reading it ended its worker process") from None

    def _restart(self, pool: ProcessPoolExecutor, kill: bool = False) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        if kill:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
