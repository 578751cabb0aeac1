"""Load test of `mtkit serve`: concurrent clients sending single sentences, batching on and off.

For each server setting (dynamic batching with the default 20 ms wait, --max-wait-ms 0, and no
batching at all: --max-batch-tokens 1, one sentence per batch; on a GPU also `--settings graphs`:
batching with --cuda-graphs) and each number of clients, the clients send single test2016
sentences as fast as answers come, for a fixed time. The table gives
requests/s, sentences/s, latency percentiles and the mean batch size (from the server's /metrics: sentences
per decoding step with the PyTorch engine's continuous batching, sentences per batch otherwise),
and compares with offline translation (the same engine and options, in one process) of the same
sentences. "server CPU" and "clients CPU": the cores that the server process and the load generator
kept busy (CPU seconds per second); a server near 1.0 is held by one Python thread.

  python bench/serve_load.py -m runs/multi30k/model.pt [--src en] [--seconds 30] [--clients 1,8,32]
      [--apis v1,deepl --tgt de]
      [--threads N] [--replicas N] [--in-process | --engine-process]

--apis v1,deepl sends the same load through /v1/translate and through DeepL's /v2/translate
(mtkit.api.deepl; one sentence a request, target_lang --tgt), in turn, on the same server.

Needs pip install 'mtkit[serve]' httpx. The load generator runs on the same machine: a thread per
client, in --client-processes processes (default: one per 32 clients, at most half the cores), so
that Python's lock on one process does not limit hundreds of clients; it takes some CPU from the
server. The offline rate is measured with the same options (--cuda-graphs for the graphs setting).
--threads N decodes on N threads, offline and in the server (OMP_NUM_THREADS), e.g. to leave cores
to HTTP and the clients; default: torch's choice. --replicas N: serve --replicas, engine processes
sharing those threads ("server CPU" counts them); --in-process: the engine in the HTTP process;
--engine-process: engines in processes of their own; neither: serve's default. With 1 client among --clients, the 1-client p50 is compared with
translating one sentence alone offline (p50 over 200 sentences).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import itertools
import json
import multiprocessing
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_MULTI30K, conditions, mtkit_command, print_table  # noqa: E402

SETTINGS = {  # --settings name: (label, server options)
    "wait20": ("batching, wait 20 ms (default)", ["--max-wait-ms", "20"]),
    "wait0": ("batching, wait 0 ms", ["--max-wait-ms", "0"]),
    "none": ("no batching", ["--max-wait-ms", "0", "--max-batch-tokens", "1"]),
    "graphs": ("batching, wait 20 ms, CUDA graphs", ["--max-wait-ms", "20", "--cuda-graphs"]),  # a GPU only
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def offline_translator(model: Path, sentences: list[str], beam: int, engine: str, cuda_graphs: bool):
    """The engine with the model loaded, warmed up on the first 20 sentences."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from mtkit.decoding.search import SearchConfig
    from mtkit.interop.engines import Decoding, build_translator

    decoding = Decoding(search=SearchConfig(beam=beam, lenpen=0.6), engine=engine, cuda_graphs=cuda_graphs)
    translator = build_translator(decoding, [model])
    translator.translate(sentences[:20])  # warm-up
    return translator


def offline_rate(model: Path, sentences: list[str], beam: int, engine: str, cuda_graphs: bool) -> float:
    """Sentences/s of `mtkit translate` on these sentences, the model already loaded."""
    translator = offline_translator(model, sentences, beam, engine, cuda_graphs)
    start = time.perf_counter()
    translator.translate(sentences)
    return len(sentences) / (time.perf_counter() - start)


def offline_latency(model: Path, sentences: list[str], beam: int, engine: str) -> float:
    """The median seconds to translate one sentence alone, the model already loaded (what a lone
    client's request costs the engine)."""
    translator = offline_translator(model, sentences, beam, engine, False)
    seconds = []
    for sentence in sentences:
        start = time.perf_counter()
        translator.translate([sentence])
        seconds.append(time.perf_counter() - start)
    return percentile(seconds, 0.5)


def batch_totals(httpx, url: str) -> tuple[float, float]:
    text = httpx.get(f"{url}/metrics").text
    values = dict(re.findall(r"^(mtkit_batch_sentences_(?:sum|count)) (\S+)$", text, re.M))
    return float(values["mtkit_batch_sentences_sum"]), float(values["mtkit_batch_sentences_count"])


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process and its descendants (engine replicas) have used so far,
    their threads included (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    seconds = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            seconds += cpu_seconds(int(child))
    return seconds


APIS = {  # the path a client posts a sentence to, and its body (target: the model's target language)
    "v1": ("/v1/translate", lambda sentence, target: {"text": sentence}),
    "deepl": ("/v2/translate", lambda sentence, target: {"text": [sentence], "target_lang": target.upper()}),
}


def load(
    port: int, sentences: list[str], clients: int, seconds: float, processes: int, api: str = "v1", target: str = "de"
) -> tuple[list[float], float]:
    """Latencies (s) of the requests answered within `seconds`, the clients spread over `processes`
    that start together, and the CPU seconds the clients used meanwhile."""
    start_at = time.time() + 1.0 + 0.2 * processes  # every process started and its threads ready
    shares = [clients // processes + (i < clients % processes) for i in range(processes)]
    with concurrent.futures.ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        parts = list(pool.map(client_threads, [port] * processes, [sentences[i::processes] for i in range(processes)],
                              shares, [start_at] * processes, [seconds] * processes, [api] * processes,
                              [target] * processes))  # fmt: skip
    return [latency for part, _ in parts for latency in part], sum(cpu for _, cpu in parts)


def client_threads(
    port: int, sentences: list[str], clients: int, start_at: float, seconds: float, api: str = "v1", target: str = "de"
) -> tuple[list[float], float]:
    """Latencies (s) of the requests answered between start_at and start_at + seconds (wall clock),
    and this process's CPU seconds over that time: one thread per client, each with its own
    keep-alive connection (the standard library's client, lighter on the CPU than httpx)."""
    latencies: list[float] = []
    counter = itertools.count()
    time.sleep(max(0.0, start_at - time.time()))
    cpu_before = time.process_time()
    deadline = time.monotonic() + seconds

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        headers = {"Content-Type": "application/json"}
        path, make_body = APIS[api]
        while time.monotonic() < deadline:
            body = json.dumps(make_body(sentences[next(counter) % len(sentences)], target))
            start = time.perf_counter()
            connection.request("POST", path, body, headers)
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                sys.exit(f"the server answered {response.status}")
            latencies.append(time.perf_counter() - start)
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, time.process_time() - cpu_before


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    import httpx

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--src", default="en", help="source language of the model: test2016.SRC is sent")
    parser.add_argument("--engine", default="pytorch")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument(
        "--settings", default="wait20,wait0,none", help="server settings to run: wait20, wait0, none, graphs (a GPU's)"
    )
    parser.add_argument("--threads", type=int, default=0, help="decoding threads, offline and served (0: torch's)")
    parser.add_argument("--replicas", type=int, help="serve --replicas: engine processes (default: serve's)")
    layout = parser.add_mutually_exclusive_group()
    layout.add_argument("--in-process", action="store_true", help="serve --in-process: the engine in the HTTP process")
    layout.add_argument("--engine-process", action="store_true", help="serve --engine-process: engines in processes")
    parser.add_argument(
        "--client-processes", type=int, default=0, help="load generator processes (0: one per 32 clients)"
    )
    parser.add_argument("--apis", default="v1", help="the APIs the clients speak, in turn: v1 (/v1/translate), "
                        "deepl (/v2/translate)")  # fmt: skip
    parser.add_argument("--tgt", default="de", help="the model's target language (DeepL's target_lang)")
    args = parser.parse_args()
    if args.threads:
        import torch

        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # the servers inherit it
        torch.set_num_threads(args.threads)
    sentences = (args.data / f"test2016.{args.src}").read_text(encoding="utf-8").splitlines()
    client_counts = [int(c) for c in args.clients.split(",")]

    graphs = [False, True] if "graphs" in args.settings.split(",") else [False]
    offline_before = {g: offline_rate(args.model, sentences, args.beam, args.engine, g) for g in graphs}
    rows, rates, medians = [], {}, {}  # rates and p50 latencies by (setting, clients)
    for setting in args.settings.split(","):
        name, options = SETTINGS[setting]
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = mtkit_command("serve", "-m", args.model, "--engine", args.engine, "--port", port, "--beam", args.beam,
                                *(["--replicas", args.replicas] if args.replicas else []),
                                *["--in-process"] * args.in_process, *["--engine-process"] * args.engine_process)  # fmt: skip
        server = subprocess.Popen(command + options, stderr=subprocess.DEVNULL)
        try:
            while True:
                try:
                    if httpx.get(f"{url}/ready").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None:
                    sys.exit(f"the server did not start: {' '.join(command + options)}")
                time.sleep(0.2)
            for clients, api in itertools.product(client_counts, args.apis.split(",")):
                before, server_cpu = batch_totals(httpx, url), cpu_seconds(server.pid)
                processes = args.client_processes or min(max(1, (os.cpu_count() or 2) // 2), -(-clients // 32))
                latencies, clients_cpu = load(port, sentences, clients, args.seconds, processes, api, args.tgt)
                name = SETTINGS[setting][0] + (f", {APIS[api][0]}" if "," in args.apis else "")
                after, server_cpu = batch_totals(httpx, url), cpu_seconds(server.pid) - server_cpu
                rate = len(latencies) / args.seconds
                rates[name, clients] = rate
                medians[name, clients] = percentile(latencies, 0.5)
                mean_batch = (after[0] - before[0]) / max(1.0, after[1] - before[1])
                rows.append(
                    [name, clients, rate, rate, 1000 * percentile(latencies, 0.5), 1000 * percentile(latencies, 0.95),
                     1000 * percentile(latencies, 0.99), mean_batch, server_cpu / args.seconds,
                     clients_cpu / args.seconds, "--cuda-graphs" in options]
                )  # fmt: skip
                print(f"{name}, {clients} clients: {rate:.1f} sentences/s", file=sys.stderr)
        finally:
            server.terminate()
            server.wait(60)

    offline_after = {g: offline_rate(args.model, sentences, args.beam, args.engine, g) for g in graphs}
    # this machine drifts: measured before and after the servers
    offline = {g: (offline_before[g] + offline_after[g]) / 2 for g in graphs}
    alone = offline_latency(args.model, sentences[:200], args.beam, args.engine) if 1 in client_counts else None
    layout = " ".join(
        [f"--replicas {args.replicas or 'by default'}", *["--in-process"] * args.in_process,
         *["--engine-process"] * args.engine_process]
    )  # fmt: skip
    print(f"mtkit serve under load: {args.model}, engine {args.engine}, {layout}, beam {args.beam}, "
          "lenpen 0.6, single test2016")  # fmt: skip
    print(f"sentences per request, {args.seconds:g} s per row; {conditions()}")
    print()
    for row in rows:  # the share of offline translation with the same options
        row[-1] = f"{row[2] / offline[row[-1]]:.0%}"
    headers = ["server", "clients", "requests/s", "sentences/s", "p50 ms", "p95 ms", "p99 ms", "mean batch",
               "server CPU", "clients CPU", "of offline"]  # fmt: skip
    print_table(headers, rows)
    print()
    for graphed in graphs:
        print(
            f"offline translation of the same {len(sentences):,} sentences{' with --cuda-graphs' if graphed else ''}: "
            f"{offline[graphed]:.1f} sentences/s (mean of {offline_before[graphed]:.1f} before and "
            f"{offline_after[graphed]:.1f} after the servers)"
        )
    lone = medians.get((SETTINGS["wait20"][0], 1))
    if alone is not None and lone is not None:
        print(f"1 client: p50 {1000 * lone:.1f} ms, {lone / alone:.2f}x translating one sentence alone offline "
              f"(p50 {1000 * alone:.1f} ms over 200 sentences; target <= 1.5x)")  # fmt: skip
    most = max(client_counts)
    best = rates.get((SETTINGS["wait20"][0], most))
    if best is not None:
        print(f"at {most} clients: {best / offline[False]:.0%} of offline (target >= 70%)", end="")
        unbatched = rates.get(("no batching", most))
        if unbatched:
            print(f", {best / unbatched:.1f}x the server without batching (target >= 3x)", end="")
        print()


if __name__ == "__main__":
    main()
