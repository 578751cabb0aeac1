"""Documents read and written in worker processes (the server's /translate_file). A large or hostile
file is parsed on another core, never holding the server's interpreter lock, which its event loop
and its engine thread need (a thread parsing would hold it, and every other client would wait).
Each step is a function of picklable values
that reads the file again from its bytes (reading is deterministic), so that no parsed document
crosses between processes: prepare() gives the texts to translate, finish() writes the file from
their translations. A worker's address space is bounded (memory_bytes): a file that needs more is a
MemoryError, not a server out of memory."""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import os
import resource
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from mtkit.core.errors import MtkitError
from mtkit.documents.formats import read_document
from mtkit.documents.inline import Document, FileLimits, FileTooLarge
from mtkit.documents.translating import Sentences, is_plain, plain_lines, sentences, written, written_plain
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


def prepare(job: FileJob) -> list[str]:
    """The texts the engine translates: the sentences of the file's segments (aligned), or its
    segments as plain text (a file without formatting, for an engine without alignments)."""
    document = _read(job)
    if job.aligned:
        return _sentences(job, document).texts
    if not is_plain(document):
        raise NeedsAlignment(f"{job.name}: its formatting follows the word alignment, which this server's model "
                             "cannot give (--engine pytorch, a model without target tags or language tokens)")  # fmt: skip
    return plain_lines(document)


def finish(job: FileJob, translated: list) -> bytes:
    """The file written from the translations of prepare()'s texts (aligned: (text, alignment) pairs)."""
    document = _read(job)
    if job.aligned:
        return written(document, _sentences(job, document), translated, job.target)
    return written_plain(document, translated, job.target)


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
    return f"reading or writing it took more than {seconds:g} s, the time a document may take"


def _within_budget(seconds: float, work: Callable, *args) -> Any:
    """work(*args) in a worker, stopped by an alarm past `seconds` (at its next Python instruction)."""

    def stop(signum, frame) -> None:
        raise JobTimeout(_over_budget(seconds))

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return work(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _start_worker(memory_bytes: int) -> None:
    """A worker's address space bounded, and its priority the lowest: documents take the CPU the
    engine leaves (on a machine of few cores, a busy reader at normal priority slows the engine)."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    os.nice(19)


class JobTimeout(FileTooLarge):
    """A document that took its worker longer than the time budget to read or write."""


WORK_SECONDS = 20.0  # the most a worker spends reading, or writing, one document
GRACE_SECONDS = 5.0  # past the budget, the time a worker has to stop before it is killed


class Workers:
    """A pool of worker processes, started on first use by spawning (nothing of the server's threads
    or model is copied into them), started again if one dies. Each job has a time budget: the worker
    stops it past `seconds` (an alarm in the worker), and one that does not stop (held in a C call)
    is killed, and the pool started again, `GRACE_SECONDS` later."""

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

    async def run(self, work: Callable, *args) -> Any:
        """work(*args) in a worker; its MtkitError comes back as it is, running out of memory as a FileTooLarge."""
        pool = self._executor()
        running = asyncio.wrap_future(pool.submit(_within_budget, self.seconds, work, *args))
        try:
            return await asyncio.wait_for(running, self.seconds + GRACE_SECONDS)
        except MemoryError:
            raise FileTooLarge(f"reading it needs more than {self.memory_bytes >> 20:,} MiB of memory") from None
        except TimeoutError:  # the worker did not stop by itself
            self._restart(pool, kill=True)
            raise JobTimeout(_over_budget(self.seconds)) from None
        except BrokenProcessPool:  # a worker died: the pool is broken for good, the next call starts another
            self._restart(pool)
            raise FileTooLarge("reading it ended its worker process") from None

    def _restart(self, pool: ProcessPoolExecutor, kill: bool = False) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        if kill:
            for process in list(getattr(pool, "_processes", {}).values()):  # the executor has no public kill
                process.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
