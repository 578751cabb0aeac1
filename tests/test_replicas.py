"""serve --replicas: engine processes behind the HTTP process (mtkit.serving.replicas)."""

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from conftest import run_mtkit
from test_serve import Server, concurrent_translations, offline, wait_until

from mtkit.decoding.search import SearchConfig
from mtkit.interop.engines import Decoding
from mtkit.model.files import load_model_file, resolve_model_path
from mtkit.serving.dynamic_batching import EngineStopped
from mtkit.serving.engine import Options, Sentence
from mtkit.serving.replicas import EngineSpec, Replicas
from mtkit.serving.waiting import Job, QueueFull
from mtkit.translation.translate import Translator

OPTIONS = Options(beam=2, nbest=1, lenpen=0.6, alignment=False)


@pytest.fixture(scope="module")
def sentences(corpus):
    return (corpus / "test.en").read_text().splitlines()


@pytest.fixture
def replicas(trained_run):
    """Two replicas of the test model (fp32, beam 2), started; stopped after the test."""
    path = resolve_model_path(trained_run)
    spec = EngineSpec(path, Decoding(search=SearchConfig(beam=2), device="cpu", precision="fp32", max_tokens=4096))
    pool = Replicas(spec, 2, 1, 4096, 0.0, 6, lambda stats: None)
    pool.start()
    yield pool
    pool.stop()


def jobs(trained_run, lines: list[str], owner=None) -> list[Job]:
    tokenizer = load_model_file(resolve_model_path(trained_run)).src_tokenizer
    encoded = tokenizer.encode_batch(lines)
    return [Job(Sentence(line, ids), len(ids) + 1, OPTIONS, owner=owner) for line, ids in zip(lines, encoded)]


def texts(futures) -> list[str]:
    return [future.result(300)[0][0][1] for future in futures]


def expected(trained_run, lines: list[str]) -> list[str]:
    model_file = load_model_file(resolve_model_path(trained_run))
    return Translator(model_file, SearchConfig(beam=2), device="cpu", precision="fp32").translate(lines)


def paused(pool: Replicas):
    """The replica processes stopped (SIGSTOP), so that what is sent to them stays in flight."""
    for replica in pool._replicas:
        os.kill(replica.process.pid, signal.SIGSTOP)


def resumed(pool: Replicas):
    for replica in pool._replicas:
        if replica.alive:
            os.kill(replica.process.pid, signal.SIGCONT)


def test_requests_go_to_the_replica_with_fewest_in_flight_and_get_the_offline_translations(
    replicas, trained_run, sentences
):
    paused(replicas)
    first = replicas.submit(jobs(trained_run, sentences[:3]))
    second = replicas.submit(jobs(trained_run, sentences[3:5]))  # replica 1 has none in flight
    third = replicas.submit(jobs(trained_run, sentences[5:6]))  # replica 1 has 2, replica 0 has 3
    assert [set(r.waiting.values()) for r in replicas._replicas] == [{*first}, {*second, *third}]
    resumed(replicas)
    assert texts(first + second + third) == expected(trained_run, sentences[:6])
    assert [r.waiting for r in replicas._replicas] == [{}, {}]


def test_the_queue_limit_counts_the_sentences_in_flight(replicas, trained_run, sentences):
    paused(replicas)
    held = replicas.submit(jobs(trained_run, sentences[:4]))
    with pytest.raises(QueueFull, match="^4 sentences are in flight; the queue holds 6$"):
        replicas.submit(jobs(trained_run, sentences[4:7]))
    fits = replicas.submit(jobs(trained_run, sentences[4:6]))
    resumed(replicas)
    assert texts(held + fits) == expected(trained_run, sentences[:6])


def test_a_client_that_filled_the_flight_leaves_room_for_another_s_sentence(replicas, trained_run, sentences):
    paused(replicas)
    held = replicas.submit(jobs(trained_run, sentences[:6], owner="a"))
    with pytest.raises(QueueFull, match="^6 sentences are in flight; the queue holds 6$"):
        replicas.submit(jobs(trained_run, sentences[6:7], owner="a"))
    other = replicas.submit(jobs(trained_run, sentences[6:7], owner="b"))  # the reserve: a quarter, 1 sentence
    with pytest.raises(QueueFull):
        replicas.submit(jobs(trained_run, sentences[7:8], owner="c"))
    resumed(replicas)
    assert texts(held + other) == expected(trained_run, sentences[:7])
    assert replicas._owned == {}  # each sentence counted out as it came back


def test_a_cancelled_sentence_leaves_the_flight(replicas, trained_run, sentences):
    paused(replicas)
    (leaving,) = replicas.submit(jobs(trained_run, sentences[:1]))
    assert leaving.cancel()
    assert [r.waiting for r in replicas._replicas] == [{}, {}]
    resumed(replicas)
    assert texts(replicas.submit(jobs(trained_run, sentences[1:3]))) == expected(trained_run, sentences[1:3])


def test_a_replica_that_dies_fails_its_sentences_and_the_others_serve_on(replicas, trained_run, sentences):
    paused(replicas)
    survivor, victim = replicas._replicas
    kept = replicas.submit(jobs(trained_run, sentences[:1]))  # replica 0
    (lost,) = replicas.submit(jobs(trained_run, sentences[1:2]))  # replica 1
    os.kill(victim.process.pid, signal.SIGKILL)
    wait_until(lambda: not victim.alive, "the reader saw replica 1 end")
    with pytest.raises(EngineStopped, match=r"^engine replica 1 stopped \(exit code -9\)$"):
        lost.result(300)
    assert replicas.alive == 1
    resumed(replicas)
    later = replicas.submit(jobs(trained_run, sentences[2:4]))
    assert set(survivor.waiting.values()) >= set(later) or all(f.done() for f in later)
    assert texts(kept + later) == expected(trained_run, [sentences[0], *sentences[2:4]])


def engine_processes(pid: int) -> list[int]:
    """The server's child processes that run an engine (not multiprocessing's resource tracker)."""
    children = [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]
    return [child for child in children if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()]


def test_a_server_with_two_replicas_answers_as_offline_and_stops_them(trained_run, sentences, tmp_path):
    expected_lines = offline(trained_run, sentences[:16])
    with Server(trained_run, tmp_path / "serve.log", "--replicas", "2") as server:
        assert server.metric("mtkit_engine_replicas") == 2
        assert server.metric("mtkit_engine_replicas_ready") == 2
        engines = engine_processes(server.process.pid)
        assert len(engines) == 2
        assert concurrent_translations(server, sentences, 8) == expected_lines
        rows = [row.split("\t") for row in offline(trained_run, sentences[:2], "--nbest", "2", "--alignment")]
        response = server.post("/v1/translate", json={"text": sentences[:2], "nbest": 2, "alignment": True})
        got = [[str(i), f"{h['score']:.4f}", h["text"], h["alignment"]]
               for i, hyps in enumerate(response.json()["translations"]) for h in hyps]  # fmt: skip
        assert got == rows
        os.kill(engines[1], signal.SIGKILL)
        wait_until(lambda: engines[1] not in engine_processes(server.process.pid), "the server saw a replica end")
        assert server.post("/v1/translate", json={"text": sentences[:2]}).json()["translations"] == expected_lines[:2]
        assert httpx.get(f"{server.url}/ready").status_code == 200  # the other replica serves meanwhile
        wait_until(lambda: server.metric("mtkit_engine_replicas_ready") == 2, "the replica started again")
        again = engine_processes(server.process.pid)
        assert len(again) == 2 and engines[0] in again
    log = server.log_path.read_text()
    assert re.search(
        r"engine replica [01] stopped \(exit code -9\): its 0 sentences in flight get an error; it starts again", log
    )
    assert not any(Path(f"/proc/{pid}").exists() for pid in engines + again)


def test_replicas_below_one_is_a_clear_error(trained_run):
    result = run_mtkit("serve", "-m", trained_run, "--replicas", "0")
    assert result.returncode == 1
    assert result.stderr.decode().strip().splitlines() == ["error: --replicas 0: must be at least 1"]


MIXED = [  # requests of every kind: lengths, n-best with alignments, greedy with alignments, markup
    {"text": ["A dog.", "A man in a red shirt is sitting on a bench next to a woman with a small dog."]},
    {"text": ["Two children play.", "A woman reads."], "nbest": 2, "alignment": True},
    {"text": ["Two children play.", "A woman reads."], "beam": 1, "alignment": True},
    {"text": ["<p>A <b>small</b> dog runs <i>fast</i>.</p>"], "format": "html"},
    {"text": ["A dog runs. A cat sleeps."], "split_sentences": False},
]


def answers(server: Server) -> list:
    responses = [server.post("/v1/translate", json=request) for request in MIXED]
    assert [r.status_code for r in responses] == [200] * len(MIXED), [r.text for r in responses]
    return [r.json() for r in responses]


def test_an_engine_process_answers_every_kind_of_request_as_the_engine_in_the_http_process(
    trained_run, sentences, tmp_path
):
    with Server(trained_run, tmp_path / "in.log", "--in-process") as server:
        assert server.metric("mtkit_engine_replicas") == 1
        assert engine_processes(server.process.pid) == []
        reference = answers(server)
    with Server(trained_run, tmp_path / "own.log", "--engine-process", "--replicas", "1") as server:
        assert len(engine_processes(server.process.pid)) == 1
        assert answers(server) == reference
        assert concurrent_translations(server, sentences, 8) == offline(trained_run, sentences[:16])


def test_an_engine_killed_under_load_fails_its_requests_with_503_and_is_started_again(trained_run, sentences, tmp_path):
    long_search = ("--min-len", "1000", "--max-len-b", "1000")  # a thousand steps and more
    expected = offline(trained_run, sentences[:1], *long_search, "--beam", "2")
    options = ("--engine-process", "--replicas", "1", *long_search)
    with Server(trained_run, tmp_path / "serve.log", *options) as server:
        (engine,) = engine_processes(server.process.pid)
        answers: dict[int, httpx.Response] = {}

        def client(i: int) -> None:
            answers[i] = server.post("/v1/translate", json={"text": sentences[2 * i : 2 * i + 2], "beam": 2})

        steps = server.metric("mtkit_batch_sentences_count")
        threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        wait_until(lambda: server.metric("mtkit_requests_in_flight") == 3, "three requests in flight")
        server.wait_for_steps_after(steps)
        os.kill(engine, signal.SIGKILL)
        for thread in threads:
            thread.join()
        for response in answers.values():
            assert response.status_code == 503
            assert response.headers["retry-after"] == "1"
            assert response.json() == {"error": "engine replica 0 stopped (exit code -9); retry"}

        def ready_again() -> bool:
            response = httpx.get(f"{server.url}/ready")
            assert response.status_code == 200 or response.json() == {"error": "no engine is ready: 1 starting"}
            return response.status_code == 200

        wait_until(ready_again, "the engine started again and warmed up")
        (restarted,) = engine_processes(server.process.pid)
        assert restarted != engine
        again = server.post("/v1/translate", json={"text": sentences[:1], "beam": 2})
        assert again.json()["translations"] == expected
    log = server.log_path.read_text()
    assert "engine replica 0 stopped (exit code -9): its 6 sentences in flight get an error; it starts again" in log


def test_in_process_with_several_replicas_is_a_clear_error(trained_run):
    result = run_mtkit("serve", "-m", trained_run, "--in-process", "--replicas", "2")
    assert result.returncode == 1
    assert result.stderr.decode().strip().splitlines() == [
        "error: --in-process runs one engine, in the server's process: not --replicas 2"
    ]


@pytest.mark.parametrize(("threads", "engines"), [(1, 0), (2, 2)])
def test_the_default_layout_on_a_cpu_is_an_engine_process_per_decoding_thread(trained_run, tmp_path, threads, engines):
    """One single-threaded engine process per thread torch decodes on; one thread: the engine in the
    HTTP process."""
    log = tmp_path / "serve.log"
    with open(log, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "mtkit", "serve", "-m", str(trained_run), "--port", "0", "--precision", "fp32"],
            stdout=subprocess.DEVNULL, stderr=stderr, env={**os.environ, "OMP_NUM_THREADS": str(threads)},
        )  # fmt: skip
    try:
        wait_until(lambda: "on http://" in log.read_text(), "the server bound its port")
        port = re.search(r"on http://127\.0\.0\.1:(\d+)$", log.read_text(), re.M).group(1)
        wait_until(lambda: httpx.get(f"http://127.0.0.1:{port}/ready").status_code == 200, "the server is ready")
        assert len(engine_processes(process.pid)) == engines
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert f"mtkit_engine_replicas_ready {max(engines, 1)}.0" in metrics
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
