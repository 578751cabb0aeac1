"""Files over HTTP: the translation page (plain HTML, CSS and JavaScript in static/, using the
server's own API, with no build step and nothing loaded from another host), and documents uploaded
to LibreTranslate's /translate_file (mtkit.documents), translated and kept for download at
/download_file/ID/NAME for a bounded time."""

import asyncio
import html
import os
import re
import secrets
import tempfile
import time
from pathlib import Path
from typing import Annotated

from mtkit.core.errors import MtkitError
from mtkit.serving.languages import LanguageError
from mtkit.serving.service import RequestError, Service

PAGE_DIR = Path(__file__).with_name("static")
FILES = {"page.css": "text/css; charset=utf-8", "page.js": "text/javascript; charset=utf-8"}
DOCUMENTS_EXTRA = "pip install 'mtkit[documents]'"


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


class TranslatedFiles:
    """Translated files on disk (a private temporary directory), each under a random id, removed
    keep_s seconds after it was written, or when the server stops; of more than most files, the
    oldest go first (the disk a flood of uploads may take is bounded)."""

    def __init__(self, keep_s: float, clock=time.monotonic, most: int = 1000):
        self.keep_s, self.clock, self.most = keep_s, clock, most
        self._directory = tempfile.TemporaryDirectory(prefix="mtkit-files-")
        self.root = Path(self._directory.name)
        self.written: dict[str, tuple[float, str]] = {}  # id: (when, file name)

    def put(self, name: str, data: bytes) -> str:
        self.expire(room=1)
        file_id = secrets.token_urlsafe(16)
        path = self.root / file_id
        with open(path.with_suffix(".tmp"), "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(path.with_suffix(".tmp"), path)
        self.written[file_id] = (self.clock(), name)
        return file_id

    def get(self, file_id: str) -> tuple[str, bytes] | None:
        self.expire()
        if file_id not in self.written:
            return None
        return self.written[file_id][1], (self.root / file_id).read_bytes()

    def expire(self, room: int = 0) -> None:
        """Remove the files past their time, and the oldest beyond most (less room for new ones)."""
        now = self.clock()
        for file_id, (when, _) in list(self.written.items()):  # oldest first
            if now - when > self.keep_s or len(self.written) + room > self.most:
                (self.root / file_id).unlink(missing_ok=True)
                del self.written[file_id]

    def close(self) -> None:
        self._directory.cleanup()


def safe_name(name: str) -> str:
    """An uploaded file's name as a download's: its last path part, of safe characters."""
    base = re.split(r"[\\/]", name or "")[-1]
    return re.sub(r"[^\w.\-]+", "_", base).strip("._") or "document"


async def translate_upload(service: Service, request, data: bytes, name: str, target: str | None) -> bytes:
    """An uploaded document translated: its segments through the service (run_markup), the file
    written again; what the file is not is a 400 naming it."""
    formats = document_formats()
    if formats is None:
        raise RequestError(501, f"translating files needs the documents extra on the server: {DOCUMENTS_EXTRA}")
    from mtkit.documents.inline import without_codes

    try:
        fmt = formats.document_format(name)
        document = await asyncio.to_thread(formats.read_document, data, name, fmt)
        document.check_target(target or service.info.target_language)
    except MtkitError as err:
        raise RequestError(400, str(err)) from None
    texts, options = document.segments(), service.defaults()
    if service.can_align:
        texts = await service.run_markup(request, texts, options, document.markup, target, True, whole_file=True)
    elif without_codes(document.markup, texts):  # plain text: any engine
        plain, translated = [html.unescape(text) for text in texts], []
        for chunk in service.chunks(plain):
            translated += (await service.run(request, chunk, options, True, target))[0]
        texts = [html.escape(t, quote=False) if p.strip() else p for t, p in zip(translated, plain)]
    else:
        raise RequestError(422, f"{name}: its formatting follows the word alignment, which this server's model "
                                "cannot give (--engine pytorch, a model without target tags or language tokens)")  # fmt: skip
    lang = target or service.info.target_language
    return await asyncio.to_thread(document.write, texts, lang)


def add_file_routes(app, service: Service, admit, store: TranslatedFiles) -> None:
    """POST /translate_file (multipart: file, source, target, api_key), GET /download_file/ID/NAME."""
    from fastapi import File, Form, Request, UploadFile
    from fastapi.responses import Response

    @app.post("/translate_file")
    async def translate_file(
        request: Request,
        file: Annotated[UploadFile, File()],
        source: Annotated[str, Form()] = "auto",
        target: Annotated[str | None, Form()] = None,
        api_key: Annotated[str | None, Form()] = None,
    ):
        admit(request, api_key)
        source = None if source == "auto" else source
        try:
            service.languages.check_source(source)
        except LanguageError as err:
            raise RequestError(400, str(err)) from None
        service.framing(source, target)
        name = safe_name(file.filename or "")
        data = await file.read()
        translated = await translate_upload(service, request, data, name, target)
        file_id = store.put(name, translated)
        base = str(request.base_url).rstrip("/")
        return {"translatedFileUrl": f"{base}/download_file/{file_id}/{name}"}

    @app.get("/download_file/{file_id}/{name}")
    async def download_file(file_id: str, name: str):
        found = store.get(file_id)
        if found is None or found[0] != name:
            raise RequestError(404, "no such file (translated files are kept for a while, then removed)")
        formats = document_formats()
        media = formats.MEDIA_TYPES.get(formats.document_format(name), "application/octet-stream")
        headers = {"Content-Disposition": f'attachment; filename="{name}"'}
        return Response(found[1], media_type=media, headers=headers)
