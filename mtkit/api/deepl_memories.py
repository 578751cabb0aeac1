"""DeepL's translation memories (/v3/translation_memories) on the server's memory file (serve --tm), as
DeepL's clients call them: a TMX file imported in three steps (an import job, the file PUT to the upload
URL the job names, the job's status), listed, described, paged through segment by segment, exported to
TMX (an export job and its download URL) and deleted; /v2/translate takes a memory's id as
`translation_memory_id` with a `translation_memory_threshold` (mtkit.api.deepl). Each API key
sees only its own memories; the upload and download URLs, which DeepL's clients call without the key,
hold a random token instead. Jobs finish while their request is answered (an import when its file
arrives), so that a client's first status request finds them done."""

import asyncio
import datetime
import io
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from mtkit.api.edge import RequestError
from mtkit.core.errors import MtkitError
from mtkit.memory.owners import MemoryLimit, OwnedMemories
from mtkit.memory.store import DEFAULT_MEMORY, TranslationMemory
from mtkit.memory.tmx import read_tmx, write_tmx

UPLOAD_PATH = "/v3/translation_memories/upload"  # ?token=...: the upload URL of an import job
DOWNLOAD_PATH = "/v3/translation_memories/download"
JOB_SECONDS = 3600.0  # how long a job and its URL stay valid
MAX_JOBS_PER_KEY = 20
PAGE_SIZE = 100  # segments a page at most (DeepL's bound)
DEFAULT_THRESHOLD = 75  # translation_memory_threshold's default (DeepL's)


@dataclass
class Job:
    owner: str | None
    operation: str  # import or export
    token: str
    status: str = "awaiting_input"
    created: float = field(default_factory=time.time)
    memory_id: str | None = None
    display_name: str | None = None
    content_length: int = 0
    content_type: str = "application/xml"
    skipped: int | None = None
    error: str | None = None

    def as_json(self, job_id: str, base: str) -> dict[str, Any]:
        result: dict[str, Any] = {"status": self.status}
        if self.status == "awaiting_input":
            result["status_metadata"] = {"required_action": f"upload the TMX file to {base}{UPLOAD_PATH}"}
        if self.error:
            result["error"] = {"message": self.error}
        if self.operation == "import" and self.status == "completed":
            result.update(translation_memory_id=self.memory_id, skipped_segment_count=self.skipped)
        if self.operation == "export" and self.status == "completed":
            result.update(download_url=f"{base}{DOWNLOAD_PATH}?token={self.token}", expires_at=_when(self.expires))
        return {"job_id": job_id, "operation": self.operation, "product": "translation_memory",
                "results": [result], "creation_time": _when(self.created), "updated_time": _when(time.time()),
                "parameters": {"translation_memory_id": self.memory_id, "display_name": self.display_name},
                "source_file": {"content_type": self.content_type, "content_length": self.content_length}}  # fmt: skip

    @property
    def expires(self) -> float:
        return self.created + JOB_SECONDS


def _when(seconds: float | str | None) -> str | None:
    if isinstance(seconds, str) or seconds is None:
        return seconds or None
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def memory_info(memory: TranslationMemory) -> dict[str, Any]:
    about = memory.info()
    return {"translation_memory_id": about.name, "name": about.display_name, "source_language": about.source_lang,
            "target_languages": about.target_langs, "segment_count": about.units,
            "creation_time": about.created or None, "updated_time": about.changed or None}  # fmt: skip


def threshold_of(fields: dict[str, Any]) -> int:
    value = fields.get("translation_memory_threshold", DEFAULT_THRESHOLD)
    try:
        threshold = int(value) if not isinstance(value, bool) and str(value).strip().isdigit() else -1
    except ValueError:
        threshold = -1
    if not 0 <= threshold <= 100:
        raise RequestError(400, "Value for 'translation_memory_threshold' not supported.")
    return threshold


def memory_named(memories: OwnedMemories, owner: str | None, memory_id: Any) -> TranslationMemory:
    """The key's memory of that id; 404 where it has none (another key's included)."""
    memory = memories.named(owner, memory_id) if isinstance(memory_id, str) and _is_id(memory_id) else None
    if memory is None:
        raise RequestError(404, "Translation memory not found")
    return memory


def request_memory(
    memories: OwnedMemories | None, owner: str | None, fields: dict[str, Any]
) -> tuple[TranslationMemory | None, int | None]:
    """/v2/translate's translation_memory_id and its threshold, checked ((None, None): the request names
    none). A text the memory holds whole (spans aside) is answered from it; one with a match of at least
    the threshold is translated steered by its matches where the server steers (serve --tm-steer), else
    by the model alone."""
    memory_id = fields.get("translation_memory_id")
    if not memory_id:
        if "translation_memory_threshold" in fields:
            raise RequestError(400, "Parameter 'translation_memory_threshold' requires 'translation_memory_id'.")
        return None, None
    threshold = threshold_of(fields)
    if memories is None:
        raise RequestError(403, "Translation memories are disabled on this server (serve --tm FILE).")
    return memory_named(memories, owner, memory_id), threshold


def add_memory_routes(app, memories: OwnedMemories | None, authorized, fields_of, max_file_bytes: int):
    """DeepL's translation memory routes on a FastAPI app; without serve --tm they answer 403."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, Response

    jobs: dict[str, Job] = {}

    def enabled(request, fields) -> tuple[OwnedMemories, str | None]:
        key = authorized(request, fields)
        if memories is None:
            raise RequestError(403, "Translation memories are disabled on this server (serve --tm FILE).")
        return memories, key and key.name

    def new_job(owner: str | None, operation: str, **about) -> tuple[str, Job]:
        now = time.time()
        for job_id in [i for i, job in jobs.items() if job.expires < now]:
            del jobs[job_id]
        if sum(job.owner == owner for job in jobs.values()) >= MAX_JOBS_PER_KEY:
            raise RequestError(429, f"a key has {MAX_JOBS_PER_KEY} translation memory jobs at most at once")
        job_id, job = secrets.token_hex(16), Job(owner, operation, secrets.token_urlsafe(32), **about)
        jobs[job_id] = job
        return job_id, job

    def job_of_token(token: str, operation: str) -> Job:
        job = next((job for job in jobs.values() if secrets.compare_digest(job.token, token)), None)
        if job is None or job.operation != operation or job.expires < time.time():
            raise RequestError(404, "no such upload or download (it expired, or its URL is wrong)")
        return job

    def base(request) -> str:
        return str(request.base_url).rstrip("/")

    @app.get("/v3/translation_memories")
    async def listed(request: Request):
        owned, owner = enabled(request, await fields_of(request))
        found_memories = await asyncio.to_thread(lambda: [memory_info(m) for m in owned.listing(owner)])
        return {"translation_memories": found_memories, "total_count": len(found_memories)}

    @app.post("/v3/translation_memories/import")
    async def create_import(request: Request):
        fields = await fields_of(request)
        _, owner = enabled(request, fields)
        source_file = fields.get("source_file")
        if not isinstance(source_file, dict) or not isinstance(source_file.get("file_name"), str):
            raise RequestError(400, "Parameter 'source_file' not specified.")
        length = source_file.get("content_length")
        if not isinstance(length, int) or isinstance(length, bool) or not 0 < length <= max_file_bytes:
            raise RequestError(413 if isinstance(length, int) and length > 0 else 400,
                               f"content_length: a TMX file of 1 to {max_file_bytes:,} bytes")  # fmt: skip
        parameters = fields.get("parameters") if isinstance(fields.get("parameters"), dict) else {}
        name = parameters.get("display_name") or source_file["file_name"]
        if not isinstance(name, str) or len(name) > 1000:
            raise RequestError(400, "Value for 'display_name' not supported.")
        job_id, job = new_job(owner, "import", display_name=name, content_length=length,
                              content_type=str(source_file.get("content_type") or "application/xml"))  # fmt: skip
        return JSONResponse({"job_id": job_id, "upload_url": f"{base(request)}{UPLOAD_PATH}?token={job.token}",
                             "expires_at": _when(job.expires)}, status_code=202)  # fmt: skip

    @app.put(UPLOAD_PATH)
    async def upload(request: Request, token: str = ""):
        job = job_of_token(token, "import")
        if job.status != "awaiting_input":
            raise RequestError(409, "this import has its file already")
        data = await request.body()
        if len(data) != job.content_length:
            raise RequestError(400, f"the file is {len(data):,} bytes; the import said {job.content_length:,}")
        job.status = "processing"
        try:
            job.memory_id, job.skipped = await asyncio.to_thread(_imported, memories, job, data)
            job.status = "completed"
        except (MtkitError, MemoryLimit) as err:
            job.status, job.error = "failed", str(err)
        return Response(status_code=200)

    @app.get("/v3/translation_memories/jobs/{job_id}")
    async def job_status(job_id: str, request: Request):
        _, owner = enabled(request, await fields_of(request))
        job = jobs.get(job_id)
        if job is None or job.owner != owner:
            raise RequestError(404, "Job not found")
        return job.as_json(job_id, base(request))

    @app.get(DOWNLOAD_PATH)  # before /{memory_id}, which its path would match
    async def download(token: str = ""):
        job = job_of_token(token, "export")
        memory = memories.named(job.owner, job.memory_id) if memories else None
        if memory is None:
            raise RequestError(404, "Translation memory not found")
        text = await asyncio.to_thread(_exported, memory)
        job.status = "downloaded"
        return Response(text.encode("utf-8"), media_type="application/x-tmx+xml")

    @app.get("/v3/translation_memories/{memory_id}")
    async def described(memory_id: str, request: Request):
        owned, owner = enabled(request, await fields_of(request))
        return await asyncio.to_thread(memory_info, memory_named(owned, owner, memory_id))

    @app.get("/v3/translation_memories/{memory_id}/segments")
    async def segments(memory_id: str, request: Request):
        fields = await fields_of(request)
        owned, owner = enabled(request, fields)
        memory = memory_named(owned, owner, memory_id)
        size, after = _page_size(fields.get("page_size")), _cursor(fields.get("page_cursor"))
        contains = str(fields.get("filter_text") or "")
        case_sensitive = str(fields.get("filter_case_sensitive", "false")).lower() == "true"
        about = await asyncio.to_thread(memory.info)
        rows = await asyncio.to_thread(memory.page, about.source_lang, after, size + 1, contains, case_sensitive)
        return {"segments": [_segment(row) for row in rows[:size]], "segment_count": about.units,
                "next_page_cursor": str(rows[size - 1][0]) if len(rows) > size else None}  # fmt: skip

    @app.post("/v3/translation_memories/{memory_id}/export")
    async def export(memory_id: str, request: Request):
        owned, owner = enabled(request, await fields_of(request))
        memory_named(owned, owner, memory_id)
        job_id, job = new_job(owner, "export", memory_id=memory_id)
        job.status = "completed"  # the file is written when it is downloaded
        return JSONResponse({"job_id": job_id, "parameters": {"translation_memory_id": memory_id}}, status_code=202)

    @app.delete("/v3/translation_memories/{memory_id}")
    async def delete(memory_id: str, request: Request):
        owned, owner = enabled(request, await fields_of(request))
        memory_named(owned, owner, memory_id)
        await asyncio.to_thread(owned.delete, owner, memory_id)
        return Response(status_code=204)


def _imported(memories: OwnedMemories, job: Job, data: bytes) -> tuple[str, int]:
    if b"<!ENTITY" in data:
        raise MtkitError(f"{job.display_name}: a TMX file with entity declarations is refused")
    source_lang, units = read_tmx(io.BytesIO(data), str(job.display_name))
    units = list(units)
    source_lang = source_lang or next((u.variants[0].locale for u in units if u.variants), "")
    if not source_lang:
        raise MtkitError(f"{job.display_name}: no units in two languages")
    memory_id, counts = memories.create(job.owner, str(job.display_name), source_lang, units)
    return memory_id, counts.skipped


def _exported(memory: TranslationMemory) -> str:
    handle = io.StringIO()
    write_tmx(memory.units(), handle, memory.info().source_lang or "*all*")
    return handle.getvalue()


def _segment(row: tuple) -> dict[str, Any]:
    unit, text, targets = row
    return {"source_segment_id": str(unit), "source_text": text,
            "targets": [{"target_segment_id": f"{unit}-{lang}", "target_language": lang, "target_text": target}
                        for lang, target in targets]}  # fmt: skip


def _page_size(value: Any) -> int:
    if value is None:
        return PAGE_SIZE
    if not str(value).isdigit() or not 1 <= int(value) <= PAGE_SIZE:
        raise RequestError(400, f"Value for 'page_size' not supported (1 to {PAGE_SIZE}).")
    return int(value)


def _cursor(value: Any) -> int:
    if value in (None, ""):
        return 0
    if not str(value).isdigit() or len(str(value)) > 18:
        raise RequestError(400, "Value for 'page_cursor' not supported.")
    return int(value)


def _is_id(value: str) -> bool:
    """A memory's id: a UUID, or "default" (the key's corrections, through LibreTranslate's /suggest)."""
    return value == DEFAULT_MEMORY or (len(value) == 36 and all(c in "0123456789abcdef-" for c in value))
