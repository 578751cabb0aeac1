"""Six models in one `mtkit serve` (en<->de, en<->fr, en<->cs): memory with every model loaded against
--max-loaded 2, the time of a request whose model must load first, and throughput at --clients
clients over a mix of the six pairs against one pair alone.

    python bench/many_models.py [--dir runs/pivot] [--data ../shared/data/multi30k] [--train]
        [--max-loaded 2] [--clients 32] [--seconds 30] [--cold 8] [--layout default|engine-processes]

DIR/S-T/model.pt for each pair (--train trains what is missing with the Multi30k recipe's quick mode,
as bench/pivot.py does). Each request is one test2016 sentence of its source language through
LibreTranslate's /translate, beam 5. Runs, one after the other, each a server of its own:
- all six loaded (--max-loaded 0): one pair (en->de) for --seconds, one pair through the pivot (de->fr:
  de-en, then en-fr), then the mix of six;
- --max-loaded N: the mix of six (requests wait while their model loads, and push others out), then
  --cold requests in turn for models that are not loaded (each loads its model; the least recently
  used goes), against warm requests of the model just loaded, and the requests one client sends
  meanwhile, one after another, to the model that stays loaded (what a load costs the others).
Memory: the proportional set size (PSS: shared pages split among the processes that share them) of the
server and its engine processes, sampled every 0.2 s: at rest once ready, and the peak over the run.
--layout engine-processes gives each model serve's engine processes (--engine-process: one per decoding
thread, at most 4); default is serve's default for several models on a CPU, each model's engine on a
thread of the server. Needs pip install 'mtkit[serve]'.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_MULTI30K, conditions, mtkit_command, print_table  # noqa: E402
from pivot import models_of  # noqa: E402
from serve_load import free_port, percentile  # noqa: E402

PAIRS = [("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "en"), ("en", "cs"), ("cs", "en")]


def pss_mib(pid: int) -> float:
    """The process's and its descendants' proportional set size, MiB (Linux's smaps_rollup)."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        total = next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")) / 1024
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                total += pss_mib(int(child))
    except (FileNotFoundError, ProcessLookupError):  # a process that ended while it was read
        return 0.0
    return total


class Server:
    """`mtkit serve` over the six models, ready, with its memory sampled until stopped."""

    def __init__(self, models: list[Path], options: list[str]):
        self.port = free_port()
        command = mtkit_command("serve", *[a for m in models for a in ("-m", m)], "--port", self.port, "--beam", 5,
                                "--no-page", *options)  # fmt: skip
        self.process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
        self.peak, self.stopped = 0.0, threading.Event()
        while self.get("/ready")[0] != 200:
            if self.process.poll() is not None:
                sys.exit("the server stopped before it was ready")
            time.sleep(0.2)
        self.at_rest = pss_mib(self.process.pid)
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self.stopped.wait(0.2):
            self.peak = max(self.peak, pss_mib(self.process.pid))

    def get(self, path: str) -> tuple[int, dict]:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, json.loads(response.read() or b"{}")
        except OSError:
            return 0, {}

    def states(self) -> dict[str, str]:
        return {model["id"]: model["state"] for model in self.get("/v1/models")[1]["models"]}

    def stop(self) -> None:
        self.stopped.set()
        self.process.terminate()
        self.process.wait(120)


def translate(connection: http.client.HTTPConnection, source: str, target: str, text: str) -> float:
    """One request's seconds."""
    started = time.perf_counter()
    body = json.dumps({"q": text, "source": source, "target": target})
    connection.request("POST", "/translate", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    answer = response.read()
    if response.status != 200:
        sys.exit(f"the server answered {response.status}: {answer[:200]!r}")
    return time.perf_counter() - started


def load(port: int, pairs: list[tuple[str, str]], texts: dict[str, list[str]], clients: int, seconds: float):
    """Requests answered per second and the latencies, with `clients` threads sending in turn the pairs."""
    latencies: list[float] = []
    turn = itertools.count()
    deadline = time.monotonic() + seconds

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        while time.monotonic() < deadline:
            n = next(turn)
            source, target = pairs[n % len(pairs)]
            latencies.append(translate(connection, source, target, texts[source][n % len(texts[source])]))
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(latencies) / (time.monotonic() - started), latencies


def cold_requests(server: Server, texts: dict[str, list[str]], count: int):
    """Seconds of `count` requests each for a model not loaded (the pairs in turn), of as many requests
    for the model just loaded (warm), and of the requests a client sent meanwhile, one after another,
    to a model that stayed loaded (beside the loads)."""
    cold, warm, beside = [], [], []
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    names = list(server.states())
    for pair in itertools.islice(itertools.cycle(PAIRS), len(PAIRS) * 4):
        states = server.states()
        if len(cold) == count:
            break
        if states[names[PAIRS.index(pair)]] != "unloaded":
            continue
        loaded = sorted(states, key=lambda name: states[name] != "loaded")[0]
        done, answered = threading.Event(), threading.Event()
        neighbour = threading.Thread(target=steady, args=(server.port, PAIRS[names.index(loaded)], texts, done,
                                                          answered, beside))  # fmt: skip
        neighbour.start()
        answered.wait()  # its model the most recently used: the other one goes
        cold.append(translate(connection, *pair, texts[pair[0]][len(cold)]))
        done.set()
        neighbour.join()
        warm.append(translate(connection, *pair, texts[pair[0]][len(cold) + 1]))
    connection.close()
    return cold, warm, beside


def steady(
    port: int, pair, texts: dict[str, list[str]], done: threading.Event, answered: threading.Event, seconds: list
):
    """The seconds of each request one client sends for the pair, one after another, until done (the
    first not counted: it says the model is in use)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    translate(connection, *pair, texts[pair[0]][0])
    answered.set()
    while not done.is_set():
        seconds.append(translate(connection, *pair, texts[pair[0]][1 + len(seconds) % 100]))
    connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path("runs/pivot"))
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--train", action="store_true", help="train the models that are missing first")
    parser.add_argument("--max-loaded", type=int, default=2)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--cold", type=int, default=8, help="requests that load their model")
    parser.add_argument("--layout", choices=["default", "engine-processes"], default="default")
    args = parser.parse_args()
    models = list(models_of(args.dir, PAIRS, args.data, args.train).values())
    texts = {lang: (args.data / f"test2016.{lang}").read_text(encoding="utf-8").splitlines() for lang in
             ("en", "de", "fr", "cs")}  # fmt: skip
    layout = ["--engine-process"] if args.layout == "engine-processes" else []
    print(f"conditions: {conditions()}")
    print(f"six models ({args.dir}/S-T/model.pt), one test2016 sentence a request (/translate), beam 5, "
          f"{args.clients} clients x {args.seconds:g} s, layout: {args.layout}, OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', 'unset')}\n")  # fmt: skip
    rows = []
    for loaded in (0, args.max_loaded):
        server = Server(models, ["--max-loaded", str(loaded), *layout])
        try:
            label = "all six loaded" if loaded == 0 else f"--max-loaded {loaded}"
            workloads = [("mix of six", PAIRS)]
            if loaded == 0:
                workloads = [("en->de alone", PAIRS[:1]), ("de->fr through en", [("de", "fr")]), *workloads]
            for name, pairs in workloads:
                rate, latencies = load(server.port, pairs, texts, args.clients, args.seconds)
                rows.append([label, name, f"{rate:.2f}", f"{percentile(latencies, 0.5):.2f}",
                             f"{percentile(latencies, 0.95):.2f}", f"{server.at_rest:,.0f}", f"{server.peak:,.0f}"])  # fmt: skip
            if loaded:
                cold, warm, beside = cold_requests(server, texts, args.cold)
                rows.append([label, f"{len(cold)} cold requests", "", f"{percentile(cold, 0.5):.2f}",
                             f"{max(cold):.2f}", "", f"{server.peak:,.0f}"])  # fmt: skip
                rows.append([label, "the same, warm", "", f"{percentile(warm, 0.5):.2f}", f"{max(warm):.2f}", "", ""])
                rows.append([label, f"{len(beside)} to a loaded model beside the loads", "",
                             f"{percentile(beside, 0.5):.2f}", f"{max(beside):.2f}", "", ""])  # fmt: skip
        finally:
            server.stop()
    print_table(["server", "requests", "requests/s", "p50 s", "p95 s (cold: max)", "PSS at rest MiB",
                 "PSS peak MiB"], rows)  # fmt: skip


if __name__ == "__main__":
    main()
