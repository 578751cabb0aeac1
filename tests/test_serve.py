"""mtkit serve, against a real uvicorn server on 127.0.0.1 with a real HTTP client (httpx)."""

import asyncio
import hashlib
import json
import re
import signal
import socket
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
from conftest import run_mtkit, start_mtkit

from mtkit.decoding.search import SearchConfig
from mtkit.model.files import load_model_file, resolve_model_path
from mtkit.serving.calls import Asked, Call
from mtkit.serving.service import Service
from mtkit.serving.settings import ModelInfo, ServeConfig
from mtkit.text.langid import identify
from mtkit.translation.translate import Translator


def wait_until(condition, what: str, limit_s: float = 300) -> None:
    """Poll until `condition()` holds: the test waits for a state, never for a duration; the limit
    only turns a hang into a failure that says what never happened."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def in_fp32(options: tuple) -> tuple:
    """The options, in fp32 unless they name a precision: auto would choose bf16 on a CPU that has
    it, where a sentence's rounding depends on the batch it shares, so that a server's translations
    would not be comparable with offline ones."""
    return options if "--precision" in options else (*options, "--precision", "fp32")


def one_engine(options: tuple) -> tuple:
    """The options, with the engine in the HTTP process unless they say where it runs: the default
    layout depends on the machine's cores (test_replicas.py tests the engine processes)."""
    layouts = {"--replicas", "--engine-process", "--in-process"}
    return options if layouts & set(map(str, options)) else (*options, "--in-process")


@contextmanager
def app_on_a_thread(app):
    """An ASGI app on a uvicorn thread of this process, ready to answer: its URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run)
    thread.start()
    try:
        wait_until(lambda: server.started, "the server started")
        url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        wait_until(lambda: httpx.get(f"{url}/ready").status_code == 200, "the server is ready")
        yield url
    finally:
        server.should_exit = True
        thread.join(60)


class Server:
    """`mtkit serve` in a subprocess on a port it chose (--port 0), ready to answer; its stderr (the
    request log) in a file. In fp32 unless the options say otherwise (see in_fp32)."""

    def __init__(self, model, log_path, *options, headers: dict | None = None):
        """headers: sent with every GET of /ready and /metrics (an API key, where they need one)."""
        self.log_path, self.headers = log_path, headers
        with open(log_path, "wb") as log:
            options = one_engine(in_fp32(options))
            if "--file-seconds" not in options:  # a document's time budget, ample on a machine under any load
                options = (*options, "--file-seconds", "600")
            self.process = start_mtkit("serve", "-m", model, "--port", "0", *options, stderr=log)

        def bound() -> bool:
            assert self.process.poll() is None, log_path.read_text()
            return re.search(r"on http://127\.0\.0\.1:(\d+)$", log_path.read_text(), re.M) is not None

        wait_until(bound, "the server bound its port")
        self.port = int(re.search(r"on http://127\.0\.0\.1:(\d+)$", log_path.read_text(), re.M).group(1))
        self.url = f"http://127.0.0.1:{self.port}"
        wait_until(lambda: httpx.get(f"{self.url}/ready", headers=headers).status_code == 200, "the server is ready")

    def post(self, path, timeout=60, **kwargs):
        return httpx.post(f"{self.url}{path}", timeout=timeout, **kwargs)

    def metrics(self) -> dict[str, float]:
        """Every sample of /metrics: {'name{labels}': value}."""
        text = httpx.get(f"{self.url}/metrics", headers=self.headers).text
        return {name: float(value) for name, value in re.findall(r"^([^#\s]\S*) (\S+)$", text, re.M)}

    def metric(self, name: str) -> float:
        return self.metrics().get(name, 0.0)

    def wait_for_steps_after(self, steps: float) -> None:
        """Until the worker has decoded a step after `steps` decoding steps (a search is running)."""
        wait_until(lambda: self.metric("mtkit_batch_sentences_count") > steps, "a decoding step")

    def settled(self) -> bool:
        """No translation request in flight: every answer sent, counted and logged."""
        return self.metric("mtkit_requests_in_flight") == 0

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(60)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc_info) -> None:
        """Stopped with SIGTERM, it exits 0 (kept from hiding a test's own failure)."""
        status = self.stop()
        if exc_info[0] is None:
            assert status == 0, self.log_path.read_text()[-2000:]


@pytest.fixture(scope="module")
def sentences(corpus):
    return (corpus / "test.en").read_text().splitlines() + (corpus / "valid.en").read_text().splitlines()


@pytest.fixture(scope="module")
def server(trained_run, tmp_path_factory):
    served = Server(trained_run, tmp_path_factory.mktemp("serve") / "serve.log", "--max-wait-ms", "200",
                    "--max-chars", "2000")  # fmt: skip
    yield served
    assert served.stop() == 0


def send_and_hold(port: int, payload: dict) -> socket.socket:
    """POST to /v1/translate over a raw socket, without reading the answer: close() leaves."""
    body = json.dumps(payload).encode()
    connection = socket.create_connection(("127.0.0.1", port))
    head = f"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    connection.sendall(head.encode() + body)
    return connection


def offline(trained_run, lines, *options) -> list[str]:
    """`mtkit translate`'s lines, in fp32 unless the options say otherwise (see in_fp32)."""
    result = run_mtkit(
        "translate", "-m", trained_run, *in_fp32(options), stdin="".join(f"{line}\n" for line in lines).encode()
    )
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode().splitlines()


def concurrent_translations(server: Server, sentences: list[str], clients: int) -> list[str]:
    """The translations that `clients` clients get, each sending two of the sentences, all at once; in order."""
    answers: dict[int, list[str]] = {}
    start = threading.Barrier(clients)

    def client(i: int) -> None:
        start.wait()
        response = server.post("/v1/translate", json={"text": sentences[2 * i : 2 * i + 2]})
        assert response.status_code == 200, response.text
        answers[i] = response.json()["translations"]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [t for i in range(clients) for t in answers.get(i, ["(no answer)"])]


def test_sixteen_concurrent_clients_get_exactly_the_offline_translations(server, trained_run, sentences):
    expected = offline(trained_run, sentences)
    before = server.metrics()
    assert concurrent_translations(server, sentences, 16) == expected[:32]
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


def test_concurrent_requests_with_their_own_glossaries_get_what_translate_gives(server, trained_run, tmp_path):
    """Two requests at once, each with its own glossary for the same word: each gets its own term, as
    `mtkit translate --glossary` gives it."""
    lines, terms = ["A dog runs at the beach.", "A dog sits on the grass."], ["Kater", "Wiese"]
    answers: dict[int, object] = {}
    start = threading.Barrier(2)

    def client(i: int) -> None:
        start.wait()
        response = server.post("/v1/translate", json={"text": lines, "glossary": [["dog", terms[i]]]})
        answers[i] = response.json()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, term in enumerate(terms):
        (tmp_path / f"{i}.tsv").write_text(f"dog\t{term}\n", encoding="utf-8")
        assert answers[i] == {"translations": offline(trained_run, lines, "--glossary", tmp_path / f"{i}.tsv")}
        assert all(term in text for text in answers[i]["translations"])
    bad = server.post("/v1/translate", json={"text": "A dog.", "glossary": [["dog"]]})
    assert bad.status_code == 422 and "glossary entry 0" in bad.json()["error"]
    greedy = server.post("/v1/translate", json={"text": "A dog.", "beam": 1, "glossary": [["dog", "Kater"]]})
    assert greedy.status_code == 422 and "terms need beam search" in greedy.json()["error"]


def test_a_text_cut_before_its_terms_is_named_in_the_answer(trained_run, tmp_path):
    """Two output tokens at most: a long term cannot fit, and the answer says which text lacks it."""
    with Server(trained_run, tmp_path / "serve.log", "--max-len-a", "0", "--max-len-b", "2") as server:
        response = server.post("/v1/translate", json={"text": ["A dog runs.", "A woman sits."],
                                                     "glossary": [["dog", "Riesenschnauzerhundehütte"]]})  # fmt: skip
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["missed_terms"] == [0] and "Riesenschnauzerhundehütte" not in answer["translations"][0]
        plain = server.post("/v1/translate", json={"text": ["A dog runs."]}).json()
        assert "missed_terms" not in plain
    assert "cut at the length limit" not in (tmp_path / "serve.log").read_text()  # answered, not logged


def test_libretranslate_clients_work_unchanged(server, trained_run, sentences):
    expected = offline(trained_run, sentences[:2])
    as_json = server.post("/translate", json={"q": sentences[:2], "source": "en", "target": "de", "format": "text"})
    assert as_json.json() == {"translatedText": expected}
    as_form = server.post("/translate", data={"q": sentences[0], "source": "auto", "target": "de"})
    lang, probability = identify(sentences[0])
    detected = {"language": lang, "confidence": round(100 * probability, 1)}
    assert lang == "en" and as_form.json() == {"translatedText": expected[0], "detectedLanguage": detected}
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
        ("/v1/translate", {"json": {"text": "A dog.", "lenpen": -1}}, 422, "lenpen -1.0: must be between 0 and 10"),
        (
            "/v1/translate",
            {"content": b'{"text": "A dog.", "lenpen": Infinity}', "headers": {"Content-Type": "application/json"}},
            422,
            "lenpen inf: must be between",
        ),
        (
            "/v1/translate",
            {"json": {"text": "A dog.", "beam": 2, "glossary": [["dog", "Hund"]] * 1001}},
            422,
            "glossary: 1,001 entries; a request may give 1,000 at most",
        ),
        (
            "/v1/translate",
            {"json": {"text": "A dog.", "beam": 2, "glossary": [["dog", "H" * 201]]}},
            422,
            "glossary entry 0: a term of more than 200 characters",
        ),
        (
            "/translate",
            {"json": {"q": "A dog.", "alternatives": 10**9}},
            422,
            "beam 1000000001: must be between 1 and 16",
        ),
        ("/v1/translate", {"json": {"text": []}}, 422, "give at least one"),
        ("/v1/translate", {"json": {"text": "x" * 2001}}, 413, "2,001 characters: the limit is 2,000"),
        ("/v1/translate", {"json": {"text": 5}}, 422, "text"),
        ("/translate", {"json": {"q": "A dog.", "source": "fr", "target": "de"}}, 400, "source fr"),
        ("/translate", {"json": {"q": "A dog.", "target": "es"}}, 400, "target es: this server translates into de"),
        (
            "/v1/translate",
            {"json": {"text": "A dog.", "target": "es"}},
            400,
            "target es: this server translates into de",
        ),
        (
            "/v1/translate",
            {"json": {"text": "A dog.", "source": "fr"}},
            400,
            "source fr: this server translates from en",
        ),
        ("/translate", {"json": {"q": "A dog.", "format": "xml"}}, 400, "format xml: must be text or html"),
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
        "state": "loaded",
        "directions": [["en", "de"]],
        "engine": "pytorch",
        "source_language": "en",
        "target_language": "de",
        "target_languages": ["de"],
        "source_vocab_size": model_file.src_tokenizer.vocab_size,
        "target_vocab_size": model_file.tgt_tokenizer.vocab_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "defaults": {"beam": 5, "lenpen": 0.6, "nbest": 1},
        "alignment": True,
        "confidence": False,
    }


def test_metrics_count_the_requests_made(server, sentences):
    before = server.metrics()
    for i in range(3):
        assert server.post("/v1/translate", json={"text": sentences[i : i + 2], "beam": 1}).status_code == 200
    for _ in range(2):
        assert server.post("/v1/translate", json={"text": "A dog.", "beam": 99}).status_code == 422
    wait_until(server.settled, "the five requests counted and logged")
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


# Searches of at least 400 steps per sentence, beam 12: 20 sentences keep the worker busy for
# seconds (about 9 s on 2 cores), long enough for the states the tests wait for to be seen (they take
# a few HTTP requests). Without the loop and spelling guards: banning the tiny model's loops for 400
# steps leaves its beams near ties that fp32's last bits, which differ with the batches a server
# forms, flip (the guards' own equivalence of served and offline translations is tested with ordinary
# searches).
LONG_SEARCH = ("--min-len", "400", "--max-len-b", "400", "--beam", "12", "--loop-ngram", "0")


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
        steps = server.metric("mtkit_batch_sentences_count")
        first = in_background({"text": sentences[:20]}, searching)
        server.wait_for_steps_after(steps)  # the search has begun
        second = in_background({"text": sentences[:10], "beam": 2}, waiting)  # other options: queued
        wait_until(lambda: server.metric("mtkit_queue_sentences") == 10, "the second request's 10 sentences queued")
        busy = server.post("/v1/translate", json={"text": sentences[:21]})
        assert busy.status_code == 503 and busy.headers["Retry-After"] == "1"
        assert "10 sentences are waiting; the queue holds 30" in busy.json()["error"]
        assert server.post("/v1/translate", json={"text": sentences[:31]}).status_code == 413  # could never fit
        first.join()
        second.join()
        assert searching["r"].status_code == 200 and len(searching["r"].json()["translations"]) == 20
        assert waiting["r"].status_code == 200 and len(waiting["r"].json()["translations"]) == 10

        before = server.metrics()["mtkit_sentences_total"]
        steps = server.metric("mtkit_batch_sentences_count")
        first = in_background({"text": sentences[:20]}, searching)
        server.wait_for_steps_after(steps)
        leaver = send_and_hold(server.port, {"text": sentences[:3], "beam": 2})  # queued behind the search
        wait_until(lambda: server.metric("mtkit_queue_sentences") == 3, "the leaver's 3 sentences queued")
        leaver.close()  # and the client leaves
        first.join()
        later = server.post("/v1/translate", json={"text": sentences[:1], "beam": 2})  # after the leaver's
        assert later.status_code == 200
        wait_until(server.settled, "every request counted and logged")
        assert server.metrics()["mtkit_sentences_total"] == before + 20 + 1  # none of the leaver's 3
        assert '"status": 499' in server.log_path.read_text()
    finally:
        assert server.stop() == 0


@pytest.fixture(scope="module")
def searched_long(trained_run, sentences) -> list[str]:
    """The first 8 sentences' offline translations with LONG_SEARCH (400 steps each)."""
    return offline(trained_run, sentences[:8], *LONG_SEARCH)


@pytest.mark.parametrize("layout", [["--in-process"], ["--engine-process", "--replicas", "1"], ["--replicas", "2"]])
def test_sigterm_lets_requests_in_flight_finish(trained_run, sentences, searched_long, tmp_path, layout):
    server = Server(trained_run, tmp_path / "serve.log", *LONG_SEARCH, "--max-batch-tokens", "100000", *layout)
    answers = {}

    def client(i: int) -> None:
        answers[i] = server.post("/v1/translate", json={"text": sentences[2 * i : 2 * i + 2]})

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    steps = server.metric("mtkit_batch_sentences_count")
    for thread in threads:
        thread.start()

    def all_searching() -> bool:  # the four requests in flight, none of their sentences queued, a step since
        metrics = server.metrics()
        return metrics["mtkit_requests_in_flight"] == 4 and metrics["mtkit_queue_sentences"] == 0

    wait_until(all_searching, "the four requests' sentences searching")
    server.wait_for_steps_after(steps)
    server.process.send_signal(signal.SIGTERM)  # while they search (400 steps or more)
    for thread in threads:
        thread.join()
    assert server.process.wait(60) == 0
    assert [r.status_code for r in answers.values()] == [200] * 4
    assert [t for i in range(4) for t in answers[i].json()["translations"]] == searched_long
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
    assert not service.ready and service.engine.translator is None
    service.batcher.start()
    service.warm_up().result(60)
    service.batcher.stop()
    assert service.ready and built_on == ["mtkit-batcher"]


def test_ready_answers_503_over_http_until_the_warm_up_translation_is_back(trained_run):
    """While the translator is still being built, /ready says 503 with Retry-After and /health says
    alive; once the warm-up translation is back, /ready says 200. The build waits on an event the
    test sets, so the 503 is certain, not a race with a fast warm-up."""
    import uvicorn

    from mtkit.api.app import create_app

    path = resolve_model_path(trained_run)
    model_file = load_model_file(path)
    cfg = SearchConfig(beam=2)
    release = threading.Event()

    def make():
        assert release.wait(300), "the test never let the translator be built"
        return Translator(model_file, cfg, device="cpu")

    tokenizers = model_file.src_tokenizer, model_file.tgt_tokenizer
    service = Service(make, tokenizers, cfg, ModelInfo(path.name, path, "pytorch", "en", "de"), ServeConfig())
    server = uvicorn.Server(uvicorn.Config(create_app(service), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run)
    thread.start()
    try:
        wait_until(lambda: server.started, "the server started")
        url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        warming = httpx.get(f"{url}/ready")
        assert (warming.status_code, warming.json(), warming.headers["retry-after"]) == (
            503,
            {"error": "warming up"},
            "1",
        )
        assert httpx.get(f"{url}/health").json() == {"status": "ok"}
        release.set()
        wait_until(lambda: httpx.get(f"{url}/ready").status_code == 200, "ready once the warm-up is back")
        assert httpx.get(f"{url}/ready").json() == {"status": "ready"}
    finally:
        release.set()
        server.should_exit = True
        thread.join(60)
    assert not thread.is_alive()


def test_a_port_in_use_is_one_clear_error(trained_run):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_mtkit("serve", "-m", trained_run, "--port", port)
    assert result.returncode == 1
    assert (
        result.stderr.decode().strip().splitlines()[-1]
        == f"error: could not serve on 127.0.0.1:{port} (is the port in use?)"
    )


@pytest.mark.parametrize("continuous", [True, False])
def test_each_text_is_encoded_once_and_translated_as_offline(trained_run, sentences, continuous):
    """The service encodes a request's texts to cost them, and the engine translates those ids."""
    path = resolve_model_path(trained_run)
    model_file = load_model_file(path)
    cfg = SearchConfig(beam=2)
    expected = Translator(model_file, cfg, device="cpu").translate(sentences[:6])
    tokenizer = model_file.src_tokenizer
    encode, encoded = tokenizer.encode_batch, []
    tokenizer.encode_batch = lambda lines: (encoded.extend(lines), encode(lines))[1]

    def make():
        translator = Translator(model_file, cfg, device="cpu")
        if not continuous:  # batch after batch, as with CTranslate2
            translator.open_stream = lambda deliver: None
        return translator

    tokenizers = tokenizer, model_file.tgt_tokenizer
    service = Service(make, tokenizers, cfg, ModelInfo(path.name, path, "pytorch", "en", "de"), ServeConfig())
    service.batcher.start()
    try:
        jobs, counts, _ = service.jobs(Asked(Call(), sentences[:6], service.defaults(), split=False))
        pieces = [future.result(600) for future in service.batcher.submit(jobs)]
        answer = service._joined(pieces, counts, service.defaults())
    finally:
        service.batcher.stop()
    assert (answer.texts, answer.confidences) == (expected, None)
    assert encoded == [line.strip() for line in sentences[:6]]  # once each, by the service


@pytest.mark.parametrize("continuous", [True, False])
def test_aligned_and_plain_requests_share_a_search_and_each_gets_what_it_gets_alone(trained_run, sentences, continuous):
    """An alignment is read after the search: a document's aligned sentences and a plain request's are
    one batch (the plain request waits for no aligned search to end), and each answer is the one its
    request gets alone, alignments only where asked."""
    path = resolve_model_path(trained_run)
    model_file = load_model_file(path)
    cfg = SearchConfig(beam=2)

    def make():
        translator = Translator(model_file, cfg, device="cpu")
        if not continuous:
            translator.open_stream = lambda deliver: None
        return translator

    tokenizers = model_file.src_tokenizer, model_file.tgt_tokenizer
    service = Service(make, tokenizers, cfg, ModelInfo(path.name, path, "pytorch", "en", "de"), ServeConfig())
    aligned = service.options(None, None, None, alignment=True)
    asked = [Asked(Call(), sentences[:3], aligned, split=False), Asked(Call(), sentences[3:6], service.defaults())]
    batches = []
    service.batcher._on_batch = lambda stats: batches.append(stats.sentences)

    def submitted(request: Asked) -> list:
        return service.batcher.submit(service.jobs(request)[0])

    queued = [submitted(request) for request in asked]  # both queued before the worker starts
    service.batcher.start()
    try:
        together = [[future.result(600) for future in futures] for futures in queued]
        alone = [[future.result(600) for future in submitted(request)] for request in asked]
    finally:
        service.batcher.stop()
    assert batches[0] == 6
    # what the answers carry (a score's last digits follow the batch's padding)
    assert [[(nbest[0][1], alignments) for nbest, alignments, _ in r] for r in together] == [
        [(nbest[0][1], alignments) for nbest, alignments, _ in r] for r in alone
    ]
    assert all(alignments is None for _, alignments, _ in together[1])
    assert all(
        len(alignments) == 1 and re.fullmatch(r"\d+-\d+( \d+-\d+)*", alignments[0]) for _, alignments, _ in together[0]
    )


def test_a_long_request_is_joined_off_the_event_loop_and_a_short_one_on_it(trained_run, sentences, monkeypatch):
    """A request of more pieces than JOINED_ON_LOOP (a document's chunk) has its answer joined on a
    thread, so that the event loop stays free for other clients; a short one is joined on the loop,
    without the hop. Both answers are the offline translations."""
    from mtkit.serving import service as service_module

    path = resolve_model_path(trained_run)
    model_file = load_model_file(path)
    cfg = SearchConfig(beam=2)
    texts = sentences[: service_module.JOINED_ON_LOOP + 1]
    expected = Translator(model_file, cfg, device="cpu").translate(texts)
    tokenizers = model_file.src_tokenizer, model_file.tgt_tokenizer
    make = lambda: Translator(model_file, cfg, device="cpu")  # noqa: E731
    service = Service(make, tokenizers, cfg, ModelInfo(path.name, path, "pytorch", "en", "de"), ServeConfig())
    joined_on, join = [], Service._joined
    monkeypatch.setattr(Service, "_joined", lambda *args: (joined_on.append(threading.get_ident()), join(*args))[1])

    async def answers() -> tuple[int, list[list[str]]]:
        asked = [Asked(Call(), texts, service.defaults(), split=False), Asked(Call(), texts[:1], service.defaults())]
        return threading.get_ident(), [(await service.run(request)).texts for request in asked]

    service.batcher.start()
    try:
        loop_thread, (long, short) = asyncio.run(answers())
    finally:
        service.batcher.stop()
    assert (long, short) == (expected, expected[:1])
    assert joined_on[0] != loop_thread and joined_on[1] == loop_thread


def test_the_ctranslate2_engine_serves_what_it_translates_offline(trained_run, sentences, tmp_path):
    pytest.importorskip("ctranslate2")
    assert run_mtkit("export", "-m", trained_run, "-o", tmp_path / "ct2").returncode == 0
    expected = offline(tmp_path / "ct2", sentences[:6], "--engine", "ctranslate2", "--beam", "1")
    server = Server(tmp_path / "ct2", tmp_path / "serve.log", "--engine", "ctranslate2", "--beam", "1")
    try:
        answer = server.post("/v1/translate", json={"text": sentences[:6]})
        (model,) = httpx.get(f"{server.url}/v1/models").json()["models"]
        refused = server.post("/v1/translate", json={"text": sentences[0], "alignment": True})
    finally:
        assert server.stop() == 0
    assert answer.json() == {"translations": expected}
    assert model["engine"] == "ctranslate2"
    assert refused.status_code == 422 and "alignment needs" in refused.json()["error"]


FRENCH = "Un chien court sur la plage avec une balle rouge."


def test_a_libretranslate_client_library_works_unchanged(server, trained_run, sentences):
    """libretranslatepy, as front-ends use it: languages first, then detect and translate."""
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server.url)
    assert client.languages() == [
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": []},
    ]
    guesses = [identify(text) for text in [sentences[0], sentences[1], FRENCH]]
    expected_guesses = [[{"confidence": round(100 * p, 1), "language": lang}] for lang, p in guesses]
    assert [lang for lang, _ in guesses] == ["en", "en", "fr"]
    assert client.detect(sentences[0]) == expected_guesses[0]
    assert client.detect(FRENCH) == expected_guesses[2]
    expected = offline(trained_run, sentences[:3])
    assert [client.translate(line, "en", "de") for line in sentences[:3]] == expected
    assert server.post("/detect", json={"q": sentences[:2]}).json() == expected_guesses[:2]
    assert server.post("/detect", json={}).status_code == 400


def test_texts_are_translated_in_pieces_as_translate_translates_them(trained_run, sentences, tmp_path):
    """split_sentences per request (default: serve's, on unless --no-split-sentences), and texts longer than
    --max-source-len in pieces: the answers are `mtkit translate`'s lines with the same options;
    the request log counts the long texts; an alignment of a text in pieces is refused."""
    paragraphs = [" ".join(sentences[i : i + 3]) for i in range(0, 9, 3)] + ["", sentences[9]]
    long = " ".join(sentences[:30])
    split = offline(trained_run, paragraphs, "--split-sentences", "--max-source-len", "80")
    whole = offline(trained_run, paragraphs + [long], "--no-split-sentences", "--max-source-len", "80")
    server = Server(trained_run, tmp_path / "serve.log", "--split-sentences", "--max-source-len", "80")
    try:
        assert server.post("/v1/translate", json={"text": paragraphs}).json() == {"translations": split}
        answer = server.post("/v1/translate", json={"text": paragraphs + [long], "split_sentences": False})
        assert answer.json() == {"translations": whole}
        answer = server.post("/translate", json={"q": paragraphs, "source": "en", "target": "de"})
        assert answer.json() == {"translatedText": split}
        refused = server.post("/v1/translate", json={"text": [sentences[0], long], "alignment": True})
        assert refused.status_code == 422 and "text 1 is translated in" in refused.json()["error"]
        wait_until(server.settled, "the requests logged")
    finally:
        assert server.stop() == 0
    log = [json.loads(line) for line in (tmp_path / "serve.log").read_text().splitlines() if line.startswith("{")]
    translated = [record for record in log if record["path"] == "/v1/translate" and record["status"] == 200]
    assert [record.get("long", 0) for record in translated] == [0, 1]
    assert translated[0]["sentences"] == 9 + 1 + 1  # three paragraphs of three sentences, a blank, one sentence


def test_a_multilingual_model_serves_each_request_in_its_target(corpus, tmp_path):
    """A MarianMT model of three targets (>>fra<< ...): concurrent requests for different targets
    get `translate --tgt-lang`'s lines; a request without a target, or for one the model lacks, 400."""
    from concurrent.futures import ThreadPoolExecutor

    marian = pytest.importorskip("test_marian")
    directory = marian.build_marian(tmp_path, corpus, "opus-mt-en-ROMANCE", marian.MULTILINGUAL_TAGS)
    assert run_mtkit("import", directory, "-o", tmp_path / "mul.pt").returncode == 0
    lines = (corpus / "test.en").read_text().splitlines()[:6]
    languages = ["fra", "spa", "por"]
    expected = {lang: offline(tmp_path / "mul.pt", lines, "--tgt-lang", lang, "--beam", "1") for lang in languages}
    server = Server(tmp_path / "mul.pt", tmp_path / "serve.log", "--beam", "1")
    try:
        with ThreadPoolExecutor(3) as pool:
            answers = list(
                pool.map(
                    lambda lang: server.post("/v1/translate", json={"text": lines, "target": lang}).json(), languages
                )
            )
        assert answers == [{"translations": expected[lang]} for lang in languages]
        answer = server.post("/translate", json={"q": lines[0], "source": "en", "target": "es"})
        assert answer.json() == {"translatedText": expected["spa"][0]}
        missing = server.post("/v1/translate", json={"text": lines[0]})
        assert missing.status_code == 400 and missing.json()["error"] == "target: give one of fra, por, spa"
        wrong = server.post("/translate", json={"q": lines[0], "target": "deu"})
        assert (
            wrong.status_code == 400
            and wrong.json()["error"] == "target deu: this server translates into fra, por, spa"
        )
        (model,) = httpx.get(f"{server.url}/v1/models").json()["models"]
        assert model["target_languages"] == ["fra", "por", "spa"] and model["alignment"] is False  # by tags
    finally:
        assert server.stop() == 0


def test_the_throughput_gauge_reads_its_window_while_the_engine_writes_it(monkeypatch):
    """/metrics sums the last 10 s of batches on the server's thread while the engine's thread appends
    them: never an error (a scrape once failed with "deque mutated during iteration"), and batches
    older than the window are forgotten without a scrape."""
    pytest.importorskip("prometheus_client")
    from types import SimpleNamespace

    import mtkit.serving.metrics as metrics_module
    from mtkit.serving.dynamic_batching import BatchStats

    metrics, stop, errors = metrics_module.Metrics(lambda: 0), threading.Event(), []

    def scrape() -> None:
        while not stop.is_set():
            try:
                metrics._sentences_per_second()
            except RuntimeError as err:
                errors.append(err)
            time.sleep(0)  # (the engine's thread gets its turn)

    reader = threading.Thread(target=scrape)
    reader.start()
    for _ in range(5_000):
        metrics.observe_batch(BatchStats(1, 5, 0.001, 1))
    stop.set()
    reader.join()
    assert errors == []

    now = [1000.0]
    monkeypatch.setattr(metrics_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    metrics = metrics_module.Metrics(lambda: 0)
    for finished in (4, 6):
        metrics.observe_batch(BatchStats(8, 40, 0.01, finished))
    now[0] += 11  # past the 10 s window
    metrics.observe_batch(BatchStats(8, 40, 0.01, 3))
    assert len(metrics._recent) == 1 and metrics._sentences_per_second() == 0.3
