"""Files over HTTP: the translation page (plain HTML, CSS and JavaScript in static/, using the server's own API, with
no build step and nothing loaded from another host), and documents uploaded to LibreTranslate's /translate_file
(mtkit.documents), translated and kept for download at /download_file/ID/NAME for a bounded time and within a bounded
number of bytes. A document comes from a stranger: it is read within mtkit.documents.inline (--max-file-chars), read
and written in worker processes (mtkit.documents.worker) and stored on a worker thread, so that the event loop and the
engine go on answering while a large one is handled."""

import asyncio
import contextlib
import functools
import os
import re
import secrets
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated
from urllib.parse import quote

from mtkit.api.edge import RequestError, call_of, owner_of
from mtkit.core.errors import DOCUMENTS_EXTRA, MtkitError
from mtkit.serving.calls import Asked, Call
from mtkit.serving.service import Service

PAGE_DIR = Path(__file__).with_name("static")
FILES = {"page.css": "text/css; charset=utf-8", "page.js": "text/javascript; charset=utf-8"}
OWNER_SHARE = 10  # an owner holds at most a tenth of the stored files and bytes (and of the waiting documents)


def add_page(app) -> None:
    """GET / (the page) and GET /page/NAME (its style sheet and script) on a FastAPI app."""
    from fastapi.responses import HTMLResponse, Response

    page_html = (PAGE_DIR / "index.html").read_text(encoding="utf-8")  # read once, when the app is made
    files = {name: (PAGE_DIR / name).read_bytes() for name in FILES}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page():
        return HTMLResponse(page_html)

    @app.get("/page/{name}", include_in_schema=False)
    async def page_file(name: str):
        if name not in files:
            raise RequestError(404, f"/page/{name}: no such file")
        return Response(files[name], media_type=FILES[name])


def document_formats():
    """mtkit.documents.formats, or None where the documents extra is not installed."""
    try:
        from mtkit.documents import formats
    except ImportError:
        return None
    return formats


def document_workers(processes: int, seconds: float):
    """The processes that read and write uploaded documents (started on first use; `seconds` at most
    on one), or None where the documents extra is not installed."""
    try:
        from mtkit.documents.worker import Workers
    except ImportError:
        return None
    return Workers(processes, seconds=seconds)


class UploadBudget:
    """The bytes of uploaded documents held at once (read, waiting for a worker, translated): one that
    would pass the budget waits for room, and past wait_s is refused (503), so that uploads queued behind
    a busy worker cannot grow the server's memory without bound."""

    def __init__(self, max_bytes: int, wait_s: float = 30.0):
        self.max_bytes, self.wait_s, self.held = max_bytes, wait_s, 0
        self._changed = asyncio.Condition()

    async def acquire(self, size: int) -> int:
        """Room for `size` bytes (at most the whole budget): the bytes taken, to give back with release()."""
        size = min(max(size, 1), self.max_bytes)
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: self.held + size <= self.max_bytes), self.wait_s)
            except TimeoutError:
                raise RequestError(
                    503, "the server is reading other documents: retry later", {"Retry-After": "5"}
                ) from None
            self.held += size
        return size

    async def release(self, size: int) -> None:
        async with self._changed:
            self.held -= size
            self._changed.notify_all()

    @contextlib.asynccontextmanager
    async def holding(self, size: int):
        taken = await self.acquire(size)
        try:
            yield
        finally:
            await self.release(taken)


class TranslatedFiles:
    """Translated files on disk (a private temporary directory), each under a random id, removed
    keep_s seconds after it was written, or when the server stops; beyond most files or max_bytes
    bytes, the oldest go first (the disk a flood of uploads may take is bounded). Each owner (a key,
    or a client address) holds a share of both at most, its own oldest going first beyond it, and
    a full store gives up the oldest file of whoever holds the most: a flood of one client's uploads
    never pushes out another's translation. Safe to use from several threads."""

    def __init__(self, keep_s: float, clock=time.monotonic, most: int = 1000, max_bytes: int = 1 << 30):
        self.keep_s, self.clock, self.most, self.max_bytes = keep_s, clock, most, max_bytes
        self._directory = tempfile.TemporaryDirectory(prefix="mtkit-files-")
        self.root = Path(self._directory.name)
        self.written: dict[str, tuple[float, str, int, str | None]] = {}  # id: (when, file name, bytes, owner)
        self.lock = threading.Lock()

    @property
    def stored_bytes(self) -> int:
        return sum(size for _, _, size, _ in self.written.values())

    def share(self) -> tuple[int, int]:
        """What one owner may hold: files, bytes."""
        return max(1, self.most // OWNER_SHARE), max(1, self.max_bytes // OWNER_SHARE)

    def put(self, name: str, data: bytes, owner: str | None = None) -> str:
        """Store a file (written, synced and renamed into place); an MtkitError where it alone is over
        what its owner may hold (owner None: the whole store's bounds alone)."""
        most_bytes = self.max_bytes if owner is None else self.share()[1]
        if len(data) > most_bytes:
            what = "--max-stored-bytes" if owner is None else f"a client's share of --max-stored-bytes ({most_bytes:,})"
            raise MtkitError(f"the translated file is {len(data):,} bytes: more than {what}")
        file_id = secrets.token_urlsafe(16)
        path = self.root / file_id
        with open(path.with_suffix(".tmp"), "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        with self.lock:
            self._expire(room=(1, len(data)), owner=owner)
            os.replace(path.with_suffix(".tmp"), path)
            self.written[file_id] = (self.clock(), name, len(data), owner)
        return file_id

    def get(self, file_id: str) -> tuple[str, bytes] | None:
        with self.lock:
            self._expire()
            if file_id not in self.written:
                return None
            return self.written[file_id][1], (self.root / file_id).read_bytes()

    def expire(self) -> None:
        with self.lock:
            self._expire()

    def _expire(self, room: tuple[int, int] = (0, 0), owner: str | None = None) -> None:
        """Remove the files past their time; then, making room for a new one (files, bytes), the
        owner's oldest beyond its share, and the oldest of the largest holder beyond the store's bounds."""
        now = self.clock()
        for file_id in [i for i, (when, *_) in self.written.items() if now - when > self.keep_s]:
            self._remove(file_id)
        if owner is not None:
            files, size = self.share()
            while (mine := [i for i, w in self.written.items() if w[3] == owner]) and (
                len(mine) + room[0] > files or sum(self.written[i][2] for i in mine) + room[1] > size
            ):
                self._remove(mine[0])
        while self.written and (
            len(self.written) + room[0] > self.most or self.stored_bytes + room[1] > self.max_bytes
        ):
            held: dict[str | None, int] = {}
            for _, _, size, holder in self.written.values():
                held[holder] = held.get(holder, 0) + size
            largest = max(held, key=held.get)
            self._remove(next(i for i, w in self.written.items() if w[3] == largest))

    def _remove(self, file_id: str) -> None:
        (self.root / file_id).unlink(missing_ok=True)
        del self.written[file_id]

    def close(self) -> None:
        self._directory.cleanup()


def safe_name(name: str) -> str:
    """An uploaded file's name as a download's: its last path part, of safe characters (letters of any script)."""
    base = re.split(r"[\\/]", name or "")[-1]
    return re.sub(r"[^\w.\-]+", "_", base).strip("._")[:200] or "document"


def content_disposition(name: str) -> str:
    """A download's header for a safe_name: RFC 6266's filename* (UTF-8) beside an ASCII filename."""
    fallback = re.sub(r"[^\x21-\x7e]+", "_", name).replace('"', "_")
    if fallback == name:
        return f'attachment; filename="{name}"'
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"


def file_response(name: str, data: bytes):
    """A translated file as a download: its format's media type, and its name (content_disposition)."""
    from fastapi.responses import Response

    formats = document_formats()
    media = formats.MEDIA_TYPES.get(formats.document_format(name), "application/octet-stream")
    return Response(data, media_type=media, headers={"Content-Disposition": content_disposition(name)})


def download_url(request, public_url: str | None, file_id: str, name: str) -> str:
    """Where a translated file is downloaded: under --public-url, or relative to the server's root
    (never from the request's Host header, which the client writes)."""
    base = public_url.rstrip("/") if public_url else request.scope.get("root_path", "").rstrip("/")
    return f"{base}/download_file/{file_id}/{quote(name, safe='')}"


async def translate_upload(
    service: Service, call: Call, data: bytes, name: str, target: str | None, workers, glossary=None,
    column: str | None = None, source: str | None = None, charged=contextlib.nullcontext,
) -> tuple[bytes, int]:  # fmt: skip
    """An uploaded document translated: read and written again in a worker process (mtkit.documents.worker), its texts
    through the service (with a request's glossary), paid for by charged(characters) once they are read and before
    they are translated (Gate.charged); the file and the characters translated. What the file is not is a 400 naming
    it, a file past a bound 413."""
    formats = document_formats()
    if formats is None:
        raise RequestError(501, f"translating files needs the documents extra on the server: {DOCUMENTS_EXTRA}")
    from mtkit.documents.inline import FileLimits
    from mtkit.documents.worker import FileJob, finish, prepare

    try:
        fmt = formats.document_format(name)
    except MtkitError as err:
        raise RequestError(400, str(err)) from None
    limits = FileLimits(max_chars=service.cfg.max_file_chars)
    job = FileJob(data, name, fmt, target or service.info.target_language, limits, service.can_align, True,
                  service.info.source_language, column)  # fmt: skip
    budget = workers.budget()  # its reading and its writing share one
    texts, translated = await _in_worker(workers, prepare, job, budget=budget), []
    asked = Asked(call=call, texts=[], options=service.defaults(), source=source, target=target, split=True,
                  glossary=glossary)  # fmt: skip
    with charged(sum(map(len, texts))):
        for chunk in in_chunks(texts, service.cfg):  # a long document shares the engine with other requests
            if service.can_align:
                translated += await service.run_aligned(replace(asked, texts=chunk))
            else:  # plain text: any engine
                translated += (await service.run(replace(asked, texts=chunk))).texts
        return await _in_worker(workers, finish, job, translated, budget=budget), sum(map(len, texts))


def in_chunks(texts: list[str], cfg) -> list[list[str]]:
    """A document's texts in consecutive chunks, each as large as a request may be (--max-chars,
    --max-texts) and at most a quarter of the queue (a chunk the size of the queue would be refused
    whenever another client's sentence waits); a text longer than a request may be is a 413."""
    if (longest := max(map(len, texts), default=0)) > cfg.max_chars:
        raise RequestError(413, f"a sentence of {longest:,} characters: the limit is {cfg.max_chars:,} (--max-chars)")
    most, out, size = min(cfg.max_texts or cfg.max_queue, max(cfg.max_queue // 4, 1)), [], 0
    for text in texts:
        if not out or len(out[-1]) >= most or size + len(text) > cfg.max_chars:
            out.append([])
            size = 0
        out[-1].append(text)
        size += len(text)
    return out


async def _in_worker(workers, work, *args, budget):
    """work(*args) in a document worker, its errors as the requests': a bound 413, formatting that
    needs alignments 422, any other MtkitError 400."""
    from mtkit.documents.inline import FileTooLarge
    from mtkit.documents.worker import NeedsAlignment

    try:
        return await workers.run(work, *args, budget=budget)
    except FileTooLarge as err:
        raise RequestError(413, str(err)) from None
    except NeedsAlignment as err:
        raise RequestError(422, str(err)) from None
    except MtkitError as err:
        raise RequestError(400, str(err)) from None


def add_file_routes(app, fleet, admit, gate, store: TranslatedFiles, workers, uploads: UploadBudget) -> None:
    """POST /translate_file (multipart: file, source, target, api_key; column for a CSV file), GET
    /download_file/ID/NAME, on the server's models (mtkit.serving.fleet); documents are read and written by workers
    (mtkit.documents.worker.Workers)."""
    from fastapi import File, Form, Request, UploadFile

    @app.post("/translate_file")
    async def translate_file(
        request: Request,
        file: Annotated[UploadFile, File()],
        source: Annotated[str, Form()] = "auto",
        target: Annotated[str | None, Form()] = None,
        api_key: Annotated[str | None, Form()] = None,
        column: Annotated[str | None, Form(max_length=200)] = None,
    ):
        key = admit(request, api_key)
        gate.charge(key, 1, count=False, status=429)  # a key whose quota is used up: refused before the upload is read
        given = None if source == "auto" else source
        async with fleet.route(given, target, (), owner_of(request, key)) as (service, source, target):
            service.check_source(source)
            service.framing(source, target)
            name = safe_name(file.filename or "")
            async with uploads.holding(file.size or fleet.cfg.max_file_bytes):
                data = await file.read()
                translated, _ = await translate_upload(service, call_of(request), data, name, target, workers,
                                                       column=column, source=source,
                                                       charged=functools.partial(gate.charged, key))  # fmt: skip
        try:
            file_id = await asyncio.to_thread(store.put, name, translated, owner_of(request, key))
        except MtkitError as err:
            raise RequestError(413, str(err)) from None
        return {"translatedFileUrl": download_url(request, fleet.cfg.public_url, file_id, name)}

    @app.get("/download_file/{file_id}/{name}")
    async def download_file(file_id: str, name: str):
        found = await asyncio.to_thread(store.get, file_id)
        if found is None or found[0] != name:
            raise RequestError(404, "no such file (translated files are kept for a while, then removed)")
        return file_response(*found)
