"""Documents translated in the background (DeepL's /v2/document): each a job owned by a key, found
again by its id and secret, polled, and downloaded once from the server's store of translated files
(mtkit.api.files)."""

import asyncio
import secrets
import traceback
from dataclasses import dataclass

from mtkit.api.edge import RequestError
from mtkit.api.files import OWNER_SHARE, TranslatedFiles, UploadBudget
from mtkit.core.errors import MtkitError
from mtkit.serving.calls import Refused


@dataclass
class DocumentJob:
    """A document translated in the background (DeepL's /v2/document): its owner (a key's name),
    the secret its status and result ask for, and where it stands."""

    owner: str | None
    key: str
    name: str
    share: str | None = None  # whose share of the jobs and the file store it draws on (mtkit.api.edge.owner_of)
    characters: int = 0  # translated, once done
    status: str = "queued"  # translating, done, error
    error: str | None = None
    file_id: str | None = None
    task: asyncio.Task | None = None


class DocumentJobs:
    """Documents uploaded and translated in the background, polled, and downloaded once (then gone);
    most: jobs kept at once (a finished one waits --keep-files seconds for its download), a tenth of
    them one owner's at most, so that one client's waiting documents never refuse another's."""

    def __init__(self, store: TranslatedFiles, most: int = 100, uploads: UploadBudget | None = None):
        """uploads: the budget of uploaded bytes held at once, which a job holds from its upload to its end."""
        self.store, self.most, self.jobs = store, most, {}
        self.uploads = uploads or UploadBudget(1 << 30)

    def start(self, owner: str | None, name: str, work, share: str | None = None) -> tuple[str, str]:
        """A job running work() (a coroutine giving the translated file's bytes and characters); its id and key."""
        self._expire()
        mine, most_mine = sum(job.share == share for job in self.jobs.values()), max(1, self.most // OWNER_SHARE)
        if share is not None and mine >= most_mine:
            raise RequestError(429, f"{most_mine} of your documents are waiting already: fetch them, or retry later",
                               {"Retry-After": "5"})  # fmt: skip
        if len(self.jobs) >= self.most:
            raise RequestError(429, f"{self.most} documents are waiting already: retry later", {"Retry-After": "5"})
        job_id, job = secrets.token_hex(16).upper(), DocumentJob(owner, secrets.token_hex(32).upper(), name, share)
        job.task = asyncio.ensure_future(self._run(job, work))
        self.jobs[job_id] = job
        return job_id, job.key

    async def _run(self, job: DocumentJob, work) -> None:
        job.status = "translating"
        try:
            data, job.characters = await work()
            job.file_id = await asyncio.to_thread(self.store.put, job.name, data, job.share)
            job.status = "done"
        except (RequestError, Refused) as err:
            job.status, job.error = "error", err.message
        except MtkitError as err:
            job.status, job.error = "error", str(err)
        except Exception as err:  # a bug: the job says so, and the log has the traceback
            job.status, job.error = "error", f"internal error: {type(err).__name__}: {err}"
            traceback.print_exc()

    def find(self, job_id: str, key: str | None, owner: str | None) -> DocumentJob:
        """The job with this id, key and owner; 404 otherwise (no telling which was wrong)."""
        job = self.jobs.get(job_id)
        key = key if isinstance(key, str) else ""
        if job is None or job.owner != owner or not secrets.compare_digest(job.key.encode(), key.encode()):
            raise RequestError(404, "Document not found")
        return job

    async def settled(self, job: DocumentJob, up_to_s: float) -> None:
        """Until the job is done or failed, or up_to_s seconds have passed (a status request waits a little)."""
        if job.task is not None and not job.task.done():
            await asyncio.wait({job.task}, timeout=up_to_s)

    def take(self, job_id: str, job: DocumentJob) -> tuple[str, bytes]:
        """A finished job's file, once: the job and its file are gone after."""
        found = self.store.get(job.file_id) if job.file_id else None
        self.jobs.pop(job_id, None)
        if found is None:
            raise RequestError(404, "Document not found")
        return found

    def _expire(self) -> None:
        """Forget the jobs whose file expired, and where that is not room enough, the failed ones."""
        self.store.expire()
        for job_id, job in list(self.jobs.items()):
            if job.status == "done" and job.file_id not in self.store.written:
                self.jobs.pop(job_id)
        for job_id, job in list(self.jobs.items()):
            if job.status == "error" and len(self.jobs) >= self.most:
                self.jobs.pop(job_id)
