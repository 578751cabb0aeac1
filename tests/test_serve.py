"""mtkit serve, against a real uvicorn server on 127.0.0.1 with a real HTTP client (httpx)."""

import hashlib
import re
import signal
import socket
import threading
import time

import httpx
import pytest
from conftest import run_mtkit, start_mtkit

from mtkit.checkpoint import load_model_file, resolve_model_path
from mtkit.search import SearchConfig
from mtkit.serve import ModelInfo, ServeConfig, Service
from mtkit.translate import Translator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`mtkit serve` in a subprocess, ready to answer; its stderr (the request log) in a file."""

    def __init__(self, model, log_path, *options):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.process = start_mtkit("serve", "-m", model, "--port", self.port, *options, stderr=log)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.process.poll() is None, log_path.read_text()
            try:
                if httpx.get(f"{self.url}/ready").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the server did not get ready: {log_path.read_text()}")

    def post(self, path, timeout=60, **kwargs):
        return httpx.post(f"{self.url}{path}", timeout=timeout, **kwargs)

    def metrics(self) -> dict[str, float]:
        """Every sample of /metrics: {'name{labels}': value}."""
        text = httpx.get(f"{self.url}/metrics").text
        return {name: float(value) for name, value in re.findall(r"^([^#\s]\S*) (\S+)$", text, re.M)}

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(60)


@pytest.fixture(scope="module")
def sentences(corpus):
    return (corpus / "test.en").read_text().splitlines() + (corpus / "valid.en").read_text().splitlines()


@pytest.fixture(scope="module")
def server(trained_run, tmp_path_factory):
    served = Server(trained_run, tmp_path_factory.mktemp("serve") / "serve.log", "--max-wait-ms", "200",
                    "--max-chars", "2000")  # fmt: skip
    yield served
    assert served.stop() == 0


def offline(trained_run, lines, *options) -> list[str]:
    result = run_mtkit("translate", "-m", trained_run, *options, stdin="".join(f"{line}\n" for line in lines).encode())
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode().splitlines()


def test_sixteen_concurrent_clients_get_exactly_the_offline_translations(server, trained_run, sentences):
    expected = offline(trained_run, sentences)
    before = server.metrics()
    answers: dict[int, list[str]] = {}
    start = threading.Barrier(16)

    def client(i: int) -> None:
        start.wait()
        response = server.post("/v1/translate", json={"text": sentences[2 * i : 2 * i + 2]})
        assert response.status_code == 200, response.text
        answers[i] = response.json()["translations"]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [t for i in range(16) for t in answers[i]] == expected[:32]
    after = server.metrics()
    assert after["mtkit_sentences_total"] - before["mtkit_sentences_total"] == 32
    steps = after["mtkit_batch_sentences_count"] - before["mtkit_batch_sentences_count"]
    searched = after["mtkit_batch_sentences_sum"] - before["mtkit_batch_sentences_sum"]
    assert searched / steps > 2  # requests shared decoding steps (continuous batching: a step is a batch)


def test_nbest_and_alignment_have_the_offline_values(server, trained_run, sentences):
    rows = [row.split("\t") for row in offline(trained_run, sentences[:3], "--nbest", "2", "--alignment")]
    response = server.post("/v1/translate", json={"text": sentences[:3], "nbest": 2, "alignment": True})
    assert response.status_code == 200, response.text
    got = [
        [str(i), f"{h['score']:.4f}", h["text"], h["alignment"]]
        for i, hyps in enumerate(response.json()["translations"])
        for h in hyps
    ]
    assert got == rows


def test_options_change_the_search(server, trained_run, sentences):
    expected = offline(trained_run, sentences[:4], "--beam", "1")
    response = server.post("/v1/translate", json={"text": sentences[:4] + [""], "beam": 1})
    assert response.json() == {"translations": expected + [""]}
    single = server.post("/v1/translate", json={"text": sentences[0], "beam": 1})
    assert single.json() == {"translations": expected[:1]}


def test_libretranslate_clients_work_unchanged(server, trained_run, sentences):
    expected = offline(trained_run, sentences[:2])
    as_json = server.post("/translate", json={"q": sentences[:2], "source": "en", "target": "de", "format": "text"})
    assert as_json.json() == {"translatedText": expected}
    as_form = server.post("/translate", data={"q": sentences[0], "source": "auto", "target": "de"})
    assert as_form.json() == {"translatedText": expected[0], "detectedLanguage": {"language": "en", "confidence": 100}}
    nbest = offline(trained_run, sentences[:1], "--nbest", "3")
    alternatives = server.post(
        "/translate", json={"q": sentences[0], "source": "en", "target": "de", "alternatives": 2}
    )
    assert alternatives.json() == {
        "translatedText": nbest[0].split("\t")[2],
        "alternatives": [row.split("\t")[2] for row in nbest[1:]],
    }


@pytest.mark.parametrize(
    "path, request_args, status, message",
    [
        ("/v1/translate", {"content": b"{bad", "headers": {"Content-Type": "application/json"}}, 422, "not valid JSON"),
        ("/v1/translate", {"json": {"txt": "A dog."}}, 422, "text: Field required"),
        ("/v1/translate", {"json": {"text": "A dog.", "beam": 0}}, 422, "beam 0: must be between 1 and 16"),
        (
            "/v1/translate",
            {"json": {"text": "A dog.", "beam": 2, "nbest": 3}},
            422,
            "nbest 3: must be between 1 and beam (2)",
        ),
        ("/v1/translate", {"json": {"text": "A dog.", "lenpen": -1}}, 422, "lenpen -1.0: must be at least 0"),
        ("/v1/translate", {"json": {"text": []}}, 422, "give at least one"),
        ("/v1/translate", {"json": {"text": "x" * 2001}}, 413, "2,001 characters: the limit is 2,000"),
        ("/v1/translate", {"json": {"text": 5}}, 422, "text"),
        ("/translate", {"json": {"q": "A dog.", "source": "fr", "target": "de"}}, 400, "source fr"),
        ("/translate", {"json": {"q": "A dog.", "target": "es"}}, 400, "target es"),
        ("/translate", {"json": {"q": "A dog.", "format": "html"}}, 400, "format html"),
        ("/translate", {"json": {"source": "en"}}, 400, "q: Field required"),
        ("/translate", {"content": b"[1]", "headers": {"Content-Type": "application/json"}}, 400, "JSON object"),
    ],
)
def test_bad_requests_get_a_json_error_that_says_why(server, path, request_args, status, message):
    response = server.post(path, **request_args)
    assert response.status_code == status
    assert message in response.json()["error"]


def test_unknown_paths_and_service_endpoints(server, trained_run):
    assert httpx.get(f"{server.url}/nowhere").json() == {"error": "Not Found"}
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}
    assert httpx.get(f"{server.url}/ready").json() == {"status": "ready"}
    (model,) = httpx.get(f"{server.url}/v1/models").json()["models"]
    path = resolve_model_path(trained_run)
    model_file = load_model_file(trained_run)
    assert model == {
        "id": path.name,
        "engine": "pytorch",
        "source_language": "en",
        "target_language": "de",
        "source_vocab_size": model_file.src_tokenizer.vocab_size,
        "target_vocab_size": model_file.tgt_tokenizer.vocab_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "defaults": {"beam": 5, "lenpen": 0.6, "nbest": 1},
    }


def test_metrics_count_the_requests_made(server, sentences):
    before = server.metrics()
    for i in range(3):
        assert server.post("/v1/translate", json={"text": sentences[i : i + 2], "beam": 1}).status_code == 200
    for _ in range(2):
        assert server.post("/v1/translate", json={"text": "A dog.", "beam": 99}).status_code == 422
    after = server.metrics()

    def delta(name):
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert delta('mtkit_requests_total{path="/v1/translate",status="200"}') == 3
    assert delta('mtkit_requests_total{path="/v1/translate",status="422"}') == 2
    assert delta('mtkit_request_seconds_count{path="/v1/translate"}') == 5
    assert delta("mtkit_sentences_total") == 6
    assert after["mtkit_queue_sentences"] == 0
    log = [line for line in server.log_path.read_text().splitlines() if '"path": "/v1/translate"' in line]
    assert '"status": 200' in log[-3] and '"sentences": 2' in log[-3] and '"status": 422' in log[-1]


# Searches of at least 1,000 steps per sentence, beam 12: 20 sentences keep the worker busy for
# seconds (about 4 s here).
LONG_SEARCH = ("--min-len", "1000", "--max-len-b", "1000", "--beam", "12")


def test_a_full_queue_answers_503_and_a_client_that_leaves_is_dropped(trained_run, sentences, tmp_path):
    """A long search runs; sentences with other options wait in the queue (30 sentences) until it
    drains, so the queue stays full meanwhile."""
    server = Server(trained_run, tmp_path / "serve.log", *LONG_SEARCH, "--max-queue", "30",
                    "--max-batch-tokens", "100000")  # fmt: skip

    def in_background(payload: dict, answers: dict) -> threading.Thread:
        thread = threading.Thread(target=lambda: answers.update(r=server.post("/v1/translate", json=payload)))
        thread.start()
        return thread

    try:
        searching, waiting = {}, {}
        first = in_background({"text": sentences[:20]}, searching)
        time.sleep(0.5)  # the search has begun
        second = in_background({"text": sentences[:10], "beam": 2}, waiting)  # other options: queued
        time.sleep(0.5)
        busy = server.post("/v1/translate", json={"text": sentences[:21]})
        assert busy.status_code == 503 and busy.headers["Retry-After"] == "1"
        assert "10 sentences are waiting; the queue holds 30" in busy.json()["error"]
        assert server.post("/v1/translate", json={"text": sentences[:31]}).status_code == 413  # could never fit
        first.join()
        second.join()
        assert searching["r"].status_code == 200 and len(searching["r"].json()["translations"]) == 20
        assert waiting["r"].status_code == 200 and len(waiting["r"].json()["translations"]) == 10

        before = server.metrics()["mtkit_sentences_total"]
        first = in_background({"text": sentences[:20]}, searching)
        time.sleep(0.5)
        with pytest.raises(httpx.ReadTimeout):  # queued behind the search, and the client leaves
            server.post("/v1/translate", json={"text": sentences[:3], "beam": 2}, timeout=0.5)
        first.join()
        later = server.post("/v1/translate", json={"text": sentences[:1], "beam": 2})  # after the leaver's
        assert later.status_code == 200
        assert server.metrics()["mtkit_sentences_total"] == before + 20 + 1  # none of the leaver's 3
        assert '"status": 499' in server.log_path.read_text()
    finally:
        assert server.stop() == 0


def test_sigterm_lets_requests_in_flight_finish(trained_run, sentences, tmp_path):
    expected = offline(trained_run, sentences[:8], *LONG_SEARCH)
    server = Server(trained_run, tmp_path / "serve.log", *LONG_SEARCH, "--max-batch-tokens", "100000")
    answers = {}

    def client(i: int) -> None:
        answers[i] = server.post("/v1/translate", json={"text": sentences[2 * i : 2 * i + 2]})

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)  # the requests are searching (1,000 steps or more) when the signal comes
    server.process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join()
    assert server.process.wait(60) == 0
    assert [r.status_code for r in answers.values()] == [200] * 4
    assert [t for i in range(4) for t in answers[i].json()["translations"]] == expected
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/health")
    assert "stopped" in server.log_path.read_text()


def test_ready_only_after_the_warm_up(trained_run):
    """The translator is built on the worker thread, and /ready waits for the warm-up translation."""
    path = resolve_model_path(trained_run)
    model_file = load_model_file(path)
    cfg = SearchConfig(beam=2)
    built_on = []

    def make():
        built_on.append(threading.current_thread().name)
        return Translator(model_file, cfg, device="cpu")

    tokenizers = model_file.src_tokenizer, model_file.tgt_tokenizer
    service = Service(make, tokenizers, cfg, ModelInfo(path.name, path, "pytorch", "en", "de"), ServeConfig())
    assert not service.ready and service.translator is None
    service.batcher.start()
    service.warm_up().result(60)
    service.batcher.stop()
    assert service.ready and built_on == ["mtkit-batcher"]
