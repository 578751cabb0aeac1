"""Documents through `mtkit serve`: LibreTranslate's /translate_file and the download it points to,
with keys and limits, giving what `mtkit translate-file` gives offline."""

import asyncio
import io
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace

import docx
import httpx
import pymupdf
import pytest
from conftest import run_mtkit
from hostile import busy, deep, endless, hold_until, inflating_word_file, plural_po
from test_documents import RUNS, word_document, word_runs
from test_serve import Server, app_on_a_thread, wait_until

from mtkit.api.files import TranslatedFiles, content_disposition, safe_name
from mtkit.core.errors import MtkitError

KEY = "k" * 32


@pytest.fixture(scope="module")
def keyed_server(trained_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("serve_files")
    (root / "keys.txt").write_text(f"{KEY} 1000 office\n")
    # --max-chars 60: a document's sentences are queued in several chunks
    options = ("--api-keys", root / "keys.txt", "--max-file-bytes", "100000", "--max-chars", "60",
               "--max-file-chars", "2000")  # fmt: skip
    with Server(trained_run, root / "serve.log", *options) as served:
        yield served


def upload(server, name: str, data: bytes, **fields):
    return server.post("/translate_file", files={"file": (name, data)}, data={"target": "de", **fields})


def test_a_document_uploaded_with_a_key_downloads_as_translate_file_makes_it(keyed_server, trained_run, tmp_path):
    document = word_document(RUNS)
    answer = upload(keyed_server, "../report.docx", document, api_key=KEY)
    assert answer.status_code == 200, answer.text
    url = answer.json()["translatedFileUrl"]  # relative to the server's root (no --public-url)
    assert url.startswith("/download_file/") and url.endswith("/report.docx")
    downloaded = httpx.get(keyed_server.url + url)
    assert (
        downloaded.status_code == 200
        and downloaded.headers["content-disposition"] == 'attachment; filename="report.docx"'
    )
    assert downloaded.headers["content-type"].startswith("application/vnd.openxmlformats-officedocument")
    (tmp_path / "report.docx").write_bytes(document)
    offline = run_mtkit("translate-file", tmp_path / "report.docx", "-o", tmp_path / "out.docx", "-m", trained_run,
                        "--precision", "fp32")  # fmt: skip
    assert offline.returncode == 0, offline.stderr.decode()
    assert word_runs(downloaded.content) == word_runs((tmp_path / "out.docx").read_bytes())
    docx.Document(io.BytesIO(downloaded.content))  # python-docx opens it


def test_a_csv_column_and_a_pdf_go_through(keyed_server):
    answer = upload(keyed_server, "t.csv", b"key,en\ngreeting,A dog runs.\n", api_key=KEY, column="en:de")
    table = httpx.get(keyed_server.url + answer.json()["translatedFileUrl"]).text.splitlines()
    assert table[0] == "key,en,de" and table[1].startswith("greeting,A dog runs.,") and len(table[1]) > 22
    refused = upload(keyed_server, "t.csv", b"key,en\ngreeting,A dog runs.\n", api_key=KEY)
    assert refused.status_code == 400 and "the form field column" in refused.json()["error"]
    small = pymupdf.open()
    small.new_page().insert_text((72, 72), "A dog runs on the grass.")  # Helvetica, not embedded: a few KiB
    answer = upload(keyed_server, "doc.pdf", small.tobytes(), api_key=KEY)
    assert answer.status_code == 200, answer.text
    pdf = pymupdf.open(stream=httpx.get(keyed_server.url + answer.json()["translatedFileUrl"]).content)
    assert pdf.page_count == 1 and pdf.metadata["format"].startswith("PDF") and pdf[0].get_text().strip()


def test_plain_text_files_go_through_too(keyed_server):
    answer = upload(keyed_server, "notes.txt", b"A dog runs.\n\nA cat sleeps.\n", api_key=KEY)
    text = httpx.get(keyed_server.url + answer.json()["translatedFileUrl"]).text
    assert text.count("\n") == 3 and text.split("\n")[1] == "" and text.split("\n")[0]


@pytest.mark.parametrize(
    ("fields", "name", "data", "status", "message"),
    [
        ({}, "a.docx", b"x", 403, "a valid API key is needed"),
        ({"api_key": KEY}, "a.docx", b"not a zip", 400, "a.docx: not a .docx file (not a readable zip archive"),
        ({"api_key": KEY}, "a.rtf", b"{\\rtf1}", 400, "a.rtf: not a format mtkit translates"),
        ({"api_key": KEY, "target": "xx"}, "a.txt", b"A dog.", 400, "xx"),
        ({"api_key": KEY}, "big.txt", b"A dog runs. " * 20000, 413, "the request body is over"),
    ],
)
def test_what_is_refused_is_said(keyed_server, fields, name, data, status, message):
    answer = upload(keyed_server, name, data, **fields)
    assert answer.status_code == status and message in answer.json()["error"], answer.text


def test_an_unknown_download_is_404_and_the_settings_list_the_file_types(keyed_server):
    assert httpx.get(f"{keyed_server.url}/download_file/nothing/a.docx").status_code == 404
    settings = httpx.get(f"{keyed_server.url}/frontend/settings").json()
    offered = set(settings["supportedFilesFormat"])
    assert settings["filesTranslation"] and {".docx", ".srt", ".po", ".epub", ".pdf", ".arb", ".yml"} <= offered
    assert ".csv" not in offered  # a LibreTranslate client cannot name the column
    assert settings["keyRequired"] is True and settings["language"]["target"]["code"] == "de"


def test_translated_files_are_removed_after_their_time():
    now = [0.0]
    store = TranslatedFiles(keep_s=60, clock=lambda: now[0])
    first = store.put("a.txt", b"one")
    now[0] = 30.0
    second = store.put("b.txt", b"two")
    assert store.get(first) == ("a.txt", b"one")
    now[0] = 61.0
    assert store.get(first) is None and store.get(second) == ("b.txt", b"two")
    assert not (store.root / first).exists()
    store.close()
    assert not store.root.exists()


def test_the_oldest_translated_files_go_first_beyond_the_most_kept():
    store = TranslatedFiles(keep_s=60, clock=lambda: 0.0, most=2)
    first, second, third = (store.put(f"{n}.txt", b"x") for n in range(3))
    assert store.get(first) is None and store.get(second) and store.get(third)
    assert sorted(path.name for path in store.root.iterdir()) == sorted([second, third])
    store.close()


def test_the_oldest_translated_files_go_first_beyond_the_bytes_kept():
    store = TranslatedFiles(keep_s=60, clock=lambda: 0.0, max_bytes=10)
    first, second = store.put("a.txt", b"1234"), store.put("b.txt", b"5678")
    third = store.put("c.txt", b"abcde")  # 13 bytes with both: the oldest goes
    assert store.get(first) is None and store.get(second) and store.get(third) and store.stored_bytes == 9
    with pytest.raises(MtkitError, match="11 bytes: more than --max-stored-bytes"):
        store.put("d.txt", b"x" * 11)
    assert store.stored_bytes == 9 and len(list(store.root.iterdir())) == 2  # nothing half-written left
    store.close()


def test_a_flood_of_one_client_s_files_never_pushes_out_another_s():
    """Each owner holds a tenth of the store: its own oldest go first; a store full of many owners gives
    up the oldest file of the largest holder."""
    store = TranslatedFiles(keep_s=60, clock=lambda: 0.0, most=100, max_bytes=1000)
    theirs = store.put("theirs.srt", b"x" * 50, "address 10.0.0.2")
    flood = [store.put(f"{n}.srt", b"", "address 10.0.0.1") for n in range(1000)]
    assert store.get(theirs) == ("theirs.srt", b"x" * 50)
    assert [file_id for file_id in flood if store.get(file_id)] == flood[-10:]  # its share: 10 files
    with pytest.raises(MtkitError, match="101 bytes: more than a client's share of --max-stored-bytes \\(100\\)"):
        store.put("big.srt", b"x" * 101, "address 10.0.0.1")
    many = {f"key k{n}": store.put("m.srt", b"y" * (85 + n), f"key k{n}") for n in range(12)}  # 1,136 bytes in all
    kept = {owner for owner, file_id in many.items() if store.get(file_id)}
    assert store.stored_bytes <= 1000 and store.get(theirs) is not None  # the largest holders gave theirs up
    assert kept == {f"key k{n}" for n in range(12)} - {"key k9", "key k10"}  # each the largest when full
    store.close()


def test_one_client_s_waiting_documents_never_refuse_another_s():
    import asyncio

    from mtkit.api.documents import DocumentJobs
    from mtkit.api.edge import RequestError

    async def main():
        jobs, held = DocumentJobs(TranslatedFiles(keep_s=60), most=100), asyncio.Event()

        async def waiting():
            await held.wait()
            return b"done", 4

        for _ in range(10):
            jobs.start("k1", "a.srt", waiting, "key k1")
        with pytest.raises(RequestError, match="^10 of your documents are waiting already") as refused:
            jobs.start("k1", "a.srt", waiting, "key k1")
        assert refused.value.status == 429
        job_id, key = jobs.start("k2", "b.srt", waiting, "key k2")
        held.set()
        await jobs.settled(jobs.find(job_id, key, "k2"), 5)
        assert jobs.take(job_id, jobs.find(job_id, key, "k2")) == ("b.srt", b"done")

    asyncio.run(main())


def test_uploads_past_the_byte_budget_wait_for_room_and_then_are_refused():
    import asyncio

    from mtkit.api.edge import RequestError
    from mtkit.api.files import UploadBudget

    async def main():
        budget = UploadBudget(100, wait_s=60)
        first, second = await budget.acquire(40), await budget.acquire(40)
        third = asyncio.ensure_future(budget.acquire(40))  # 120 would be held: it waits
        await asyncio.sleep(0)
        assert not third.done() and budget.held == 80
        await budget.release(first)
        assert await third == 40 and budget.held == 80
        budget.wait_s = 0.01
        with pytest.raises(RequestError, match="reading other documents") as refused:
            await budget.acquire(40)
        assert refused.value.status == 503 and refused.value.headers == {"Retry-After": "5"}
        for taken in (second, 40):
            await budget.release(taken)
        async with budget.holding(10**9):  # a file larger than the budget takes all of it, never more
            assert budget.held == 100
        assert budget.held == 0

    asyncio.run(main())


def test_any_name_downloads_with_a_header_of_latin_1():
    assert content_disposition("report.docx") == 'attachment; filename="report.docx"'
    header = content_disposition(safe_name("日本語 の.docx"))
    assert header == "attachment; filename=\"___.docx\"; filename*=UTF-8''%E6%97%A5%E6%9C%AC%E8%AA%9E_%E3%81%AE.docx"
    header.encode("latin-1")


def test_a_file_uploaded_under_a_name_in_another_script_downloads(keyed_server):
    answer = upload(keyed_server, "日本語.docx", word_document(RUNS), api_key=KEY)
    url = answer.json()["translatedFileUrl"]
    assert url.endswith("/%E6%97%A5%E6%9C%AC%E8%AA%9E.docx"), url
    downloaded = httpx.get(keyed_server.url + url)
    assert downloaded.status_code == 200, downloaded.text
    assert downloaded.headers["content-disposition"].endswith("filename*=UTF-8''%E6%97%A5%E6%9C%AC%E8%AA%9E.docx")
    docx.Document(io.BytesIO(downloaded.content))


def test_an_uploaded_name_cannot_leave_its_folder():
    assert safe_name("../../etc/passwd") == "passwd"
    assert safe_name("C:\\docs\\my report.docx") == "my_report.docx"
    assert safe_name("") == safe_name("..") == "document"


# Files from strangers


def test_translated_file_urls_never_come_from_the_host_header(keyed_server):
    answer = keyed_server.post("/translate_file", files={"file": ("a.txt", b"A dog.")}, headers={"Host": "evil.example:666"},
                               data={"target": "de", "api_key": KEY})  # fmt: skip
    url = answer.json()["translatedFileUrl"]
    assert url.startswith("/download_file/") and "evil" not in url
    assert httpx.get(keyed_server.url + url).status_code == 200


def test_hostile_files_are_refused_while_other_clients_translate(keyed_server, tmp_path):
    """A bomb, a path posing as a catalogue, deep markup, plural forms by the million and too many
    characters each get their one line while text requests go on and /health answers."""
    real = tmp_path / "real.po"
    real.write_bytes(plural_po("2"))
    hostile = [
        ("bomb.docx", inflating_word_file(8 << 20), 413, "bomb.docx: word/document.xml inflates more than 500-fold"),
        ("path.po", str(real).encode(), 400, "path.po: not a PO file"),
        (*deep("html", 400), 400, "deep.html: elements nested more than 100 levels deep"),
        ("plurals.po", plural_po("10000000"), 400, "plurals.po: Plural-Forms nplurals=10000000: must be between 1"),
        ("long.txt", b"A dog runs. " * 200, 413, "long.txt: 2,400 characters to translate: the limit is 2,000"),
    ]
    bearer = {"Authorization": f"Bearer {KEY}"}

    def text(n: int) -> int:
        return keyed_server.post("/v1/translate", json={"text": f"A dog runs {n}."}, headers=bearer).status_code

    with ThreadPoolExecutor(4) as pool:
        texts = [pool.submit(text, n) for n in range(12)]
        for name, data, status, message in hostile:
            answer = upload(keyed_server, name, data, api_key=KEY)
            assert answer.status_code == status and answer.json()["error"].startswith(message), answer.text
            assert httpx.get(f"{keyed_server.url}/health").json() == {"status": "ok"}
        assert [future.result() for future in texts] == [200] * 12


@contextmanager
def in_process_server(trained_run, workers=None, **settings):
    """The app of `mtkit serve` (ServeConfig with these settings, these document workers) on a uvicorn
    thread of this process."""
    from mtkit.api.app import create_app
    from mtkit.decoding.search import SearchConfig
    from mtkit.model.files import load_model_file, resolve_model_path
    from mtkit.serving.service import Service
    from mtkit.serving.settings import ModelInfo, ServeConfig
    from mtkit.translation.translate import Translator

    path = resolve_model_path(trained_run)
    model_file = load_model_file(path)
    cfg = SearchConfig(beam=2)
    service = Service(lambda: Translator(model_file, cfg, device="cpu"), (model_file.src_tokenizer, model_file.tgt_tokenizer),
                      cfg, ModelInfo(path.name, path, "pytorch", "en", "de"), replace(ServeConfig(), **settings))  # fmt: skip
    with app_on_a_thread(create_app(service, workers=workers)) as url:
        yield url


def test_documents_are_read_in_a_worker_process_and_links_use_the_public_url(trained_run, tmp_path):
    """With the one document worker held (by a job that waits for a file the test writes), an upload
    waits for it while /health and text requests are answered; once the worker is free, the upload
    goes through, its link under --public-url."""
    from mtkit.documents.worker import Workers

    workers, go_on = Workers(processes=1, seconds=3600), tmp_path / "go-on"  # the held job's budget: ample
    with in_process_server(trained_run, workers, public_url="https://mt.example.org/api/") as url, \
            ThreadPoolExecutor(2) as pool:  # fmt: skip
        started = tmp_path / "started"
        held = pool.submit(asyncio.run, workers.run(hold_until, str(started), str(go_on)))
        wait_until(started.exists, "the held job started in the worker")
        upload_answer = pool.submit(httpx.post, f"{url}/translate_file", files={"file": ("a.txt", b"A dog runs.")},
                                    data={"target": "de"}, timeout=300)  # fmt: skip
        assert httpx.get(f"{url}/health", timeout=60).json() == {"status": "ok"}
        assert httpx.post(f"{url}/v1/translate", json={"text": "A dog."}, timeout=60).status_code == 200
        assert not upload_answer.done() and not held.done()
        go_on.touch()
        assert held.result() != os.getpid()  # the held job ran in a process of its own
        answer = upload_answer.result()
        link = answer.json()["translatedFileUrl"]
        assert answer.status_code == 200 and link.startswith("https://mt.example.org/api/download_file/")
        assert link.endswith("/a.txt")
        assert httpx.get(url + link.removeprefix("https://mt.example.org/api")).status_code == 200


@pytest.mark.parametrize("deaf", [False, True])
def test_a_document_job_past_its_time_budget_is_stopped_and_the_worker_serves_again(monkeypatch, deaf):
    """A job that never ends: stopped by the timer of the worker's CPU time, or (deaf to it) its worker
    ended by the kernel after the grace; either way one JobTimeout, and the next job runs in a worker
    again."""
    from mtkit.documents import worker
    from mtkit.documents.worker import JobTimeout, Workers

    monkeypatch.setattr(worker, "GRACE_SECONDS", 0.5)
    workers = Workers(processes=1, seconds=0.5)
    try:
        with pytest.raises(JobTimeout, match="took more than 0.5 s of a worker's time"):
            asyncio.run(workers.run(endless, deaf))
        assert asyncio.run(workers.run(os.getpid)) != os.getpid()
    finally:
        workers.close()


def test_a_documents_reading_and_writing_share_one_budget_of_cpu_time_and_waiting_is_not_charged(tmp_path):
    from mtkit.documents.worker import JobTimeout, Workers

    workers = Workers(processes=1, seconds=1.0)
    try:
        budget = workers.budget()
        spent = asyncio.run(workers.run(busy, 0.6, budget=budget))
        assert budget.left == pytest.approx(1.0 - spent, abs=0.05) and spent >= 0.6
        with pytest.raises(JobTimeout, match="took more than 1 s of a worker's time"):
            asyncio.run(workers.run(busy, 0.6, budget=budget))
        assert asyncio.run(workers.run(busy, 0.6)) >= 0.6  # another document: a budget of its own
        started, go_on, clock = tmp_path / "started", tmp_path / "go-on", time.monotonic()
        with ThreadPoolExecutor(1) as pool:  # a job that waits past its budget by the clock, using no CPU
            held = pool.submit(asyncio.run, workers.run(hold_until, str(started), str(go_on)))
            wait_until(lambda: started.exists() and time.monotonic() > clock + 1.5, "the clock past the budget")
            go_on.touch()
            assert held.result() != os.getpid()
    finally:
        workers.close()


def test_a_worker_writes_the_document_it_prepared_without_reading_it_again(monkeypatch):
    """finish() takes the parse its worker kept from prepare() (parsing a document's markup is most of
    its time: 120,000 placeholders took 4.9 s of 5.4); after another job's prepare() it reads again,
    and the file written is the same either way."""
    from mtkit.documents import worker
    from mtkit.documents.inline import FileLimits
    from mtkit.documents.worker import FileJob, finish, prepare

    reads, original = [], worker.read_document
    monkeypatch.setattr(worker, "read_document", lambda *a, **k: reads.append(a[1]) or original(*a, **k))

    def job(name: str, body: str) -> FileJob:
        return FileJob(data=body.encode(), name=name, fmt="html", target=None, limits=FileLimits(), aligned=True)

    page = job("page.html", "<p>A <b>dog</b> runs. It is <i>happy</i>.</p><p>Two men talk.</p>")
    other = job("other.html", "<p>A <b>cat</b> sleeps.</p>")
    mirrored = lambda texts: [(text, " ".join(f"{i}-{i}" for i in range(len(text.split())))) for text in texts]  # noqa: E731
    texts = prepare(page)
    written = finish(page, mirrored(texts))
    assert reads == ["page.html"]
    assert written == b"<p>A <b>dog</b> runs. It is <i>happy.</i></p><p>Two men talk.</p>"  # codes on whole words
    prepare(page)
    prepare(other)
    assert finish(page, mirrored(texts)) == written and reads == ["page.html", "page.html", "other.html", "page.html"]


def test_a_document_job_that_waits_on_nothing_is_killed_by_the_clock(monkeypatch, tmp_path):
    from mtkit.documents import worker
    from mtkit.documents.worker import JobTimeout, Workers

    monkeypatch.setattr(worker, "WALL_SLACK", 2)
    monkeypatch.setattr(worker, "GRACE_SECONDS", 0.5)
    workers = Workers(processes=1, seconds=0.5)
    try:
        with pytest.raises(JobTimeout, match=r"its worker did not get it done in 1.5 s"):
            asyncio.run(workers.run(hold_until, str(tmp_path / "started"), str(tmp_path / "never")))
        assert asyncio.run(workers.run(os.getpid)) != os.getpid()
    finally:
        workers.close()


@pytest.mark.parametrize(
    ("settings", "sizes"),
    [
        ({"max_queue": 8}, [2, 2, 2, 1]),  # a quarter of the queue: room beside other clients' sentences
        ({"max_queue": 8, "max_texts": 3}, [2, 2, 2, 1]),
        ({"max_queue": 40, "max_texts": 3}, [3, 3, 1]),
        ({"max_queue": 40, "max_chars": 9}, [3, 2, 2]),  # "abc"*3, then the characters of a request
        ({"max_queue": 2}, [1] * 7),
    ],
)
def test_a_documents_texts_go_in_chunks_a_request_and_a_quarter_of_the_queue_may_hold(settings, sizes):
    from mtkit.api.files import in_chunks
    from mtkit.serving.settings import ServeConfig

    texts = ["abc", "abc", "abc", "abcd", "abcd", "abcd", "a"]
    chunks = in_chunks(texts, replace(ServeConfig(), **settings))
    assert [len(chunk) for chunk in chunks] == sizes and sum(chunks, []) == texts
