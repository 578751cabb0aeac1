"""A server strangers share: what one key's attacks do to another key's requests, to /health, to the
server's memory and to the quotas.

    python bench/strangers.py -m MODEL [--seconds 20] [--clients 2] [--layout in-process|default]

`mtkit serve` with three keys: A attacks, Q has a quota of 100 characters, B sends single sentences
through /v1/translate from --clients connections for --seconds in each phase, while /health is asked
every 50 ms (B and the /health prober each in a process of their own) and the server's memory (its
process and its workers, resident) is sampled every 100 ms:
- quiet: B alone;
- stored glossary: A stores a DeepL glossary of 27,000 entries and sends four /v2/translate of
  19,981 characters with it at once, again and again;
- request glossary: A sends /v1/translate with a glossary of 1,000 entries, again and again;
- documents: A uploads crafted files to /translate_file, each once, in turn (YAML merge keys and an
  alias bomb, a PDF page of 800 blocks, 120,000 placeholders in one message, 320,000 .properties
  continuation lines, 200 KB of CSV for the sniffer, 19 MB of Markdown): each one's status and seconds.
Then Q tries to translate 4,500 characters through /v1/translate, 1,500 through /translate, 2,000
through /translate_file and 5 documents of 90 through /v2/document: its usage after them, against
its quota. --layout: the engine on a thread of the HTTP process (as other benches serve), or where
`mtkit serve` puts it by default on this machine (on a CPU, an engine process per decoding thread).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import multiprocessing
import os
import statistics
import string
import tempfile
import threading
import time
from pathlib import Path

import httpx
from common import conditions, print_table, start_server, tree_rss_mb

KEYS = {"A": "attacker-key-0000", "Q": "quota-key-0000", "B": "bystander-key-0000"}
SENTENCES = ["A dog runs in the park.", "Two men are talking.", "The girl reads a book.", "It is raining today."]


def b_clients(url: str, clients: int, ready, stop, out) -> None:
    """B's --clients connections, in a process of their own: (latencies, errors by status) to `out`."""
    latencies: list[float] = []
    errors: dict[int, int] = {}

    def client(offset: int) -> None:
        headers = {"Authorization": f"Bearer {KEYS['B']}"}
        with httpx.Client(timeout=300) as http:
            n = offset
            while not stop.is_set():
                started = time.perf_counter()
                body = {"text": SENTENCES[n % len(SENTENCES)], "source": "en", "target": "de"}
                response = http.post(f"{url}/v1/translate", json=body, headers=headers)
                if response.status_code == 200:
                    latencies.append(time.perf_counter() - started)
                else:
                    errors[response.status_code] = errors.get(response.status_code, 0) + 1
                n += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    ready.wait()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.put((latencies, errors))


def health_prober(url: str, ready, stop, out) -> None:
    """/health every 50 ms, in a process of its own (the attack's threads would hold the prober's
    interpreter otherwise): its slowest answer, ms, to `out`."""
    slowest = 0.0
    with httpx.Client(timeout=300) as http:
        ready.wait()
        while not stop.wait(0.05):
            started = time.perf_counter()
            http.get(f"{url}/health")
            slowest = max(slowest, (time.perf_counter() - started) * 1000)
    out.put(slowest)


class Watch:
    """B's latencies, /health's slowest answer and the server's peak memory while something runs. B and
    the /health prober each run in a process of their own, as clients elsewhere would."""

    def __init__(self, url: str, pid: int, clients: int):
        self.url, self.pid, self.clients = url, pid, clients
        self.latencies: list[float] = []
        self.errors: dict[int, int] = {}
        self.health_ms = self.peak_mb = 0.0

    def __enter__(self) -> Watch:
        spawn = multiprocessing.get_context("spawn")
        self.ready, self.stop = spawn.Barrier(3), spawn.Event()
        self.b_results, self.health_results = spawn.Queue(), spawn.Queue()
        self.processes = [
            spawn.Process(target=b_clients, args=(self.url, self.clients, self.ready, self.stop, self.b_results)),
            spawn.Process(target=health_prober, args=(self.url, self.ready, self.stop, self.health_results)),
        ]
        for process in self.processes:
            process.start()
        self.ready.wait()
        self.memory = threading.Thread(target=self._memory)
        self.memory.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop.set()
        self.latencies, self.errors = self.b_results.get(timeout=600)
        self.health_ms = self.health_results.get(timeout=600)
        for process in [*self.processes, self.memory]:
            process.join()

    def _memory(self) -> None:
        while not self.stop.wait(0.1):
            self.peak_mb = max(self.peak_mb, tree_rss_mb(self.pid))

    def row(self, phase: str, quiet_p50: float | None) -> list[object]:
        p50 = statistics.median(self.latencies) * 1000 if self.latencies else float("nan")
        p95 = statistics.quantiles(self.latencies, n=20)[-1] * 1000 if len(self.latencies) > 1 else float("nan")
        errors = ", ".join(f"{count}x{status}" for status, count in sorted(self.errors.items())) or "-"
        ratio = f"{p50 / quiet_p50:.2f}x" if quiet_p50 else "1x"
        return [phase, len(self.latencies), errors, f"{p50:.0f}", f"{p95:.0f}", ratio, f"{self.health_ms:.0f}",
                f"{self.peak_mb:,.0f}"]  # fmt: skip


def repeat(stop: threading.Event, threads: int, attack) -> list[threading.Thread]:
    def loop() -> None:
        while not stop.is_set():
            attack()

    started = [threading.Thread(target=loop) for _ in range(threads)]
    for thread in started:
        thread.start()
    return started


def short_terms(count: int) -> list[str]:
    """`count` distinct four-letter terms ("aaaa", "aaab", ...): 27,000 entries fit the body limit."""
    return [
        "".join(letters) for letters in itertools.islice(itertools.product(string.ascii_lowercase, repeat=4), count)
    ]


def stored_glossary_attack(url: str, stop: threading.Event, statuses: list[int]) -> list[threading.Thread]:
    headers = {"Authorization": f"DeepL-Auth-Key {KEYS['A']}"}
    terms = short_terms(27_000)
    entries = "".join(f"{term}\t{term[:2].upper()}\n" for term in terms)
    made = httpx.post(f"{url}/v2/glossaries", headers=headers, timeout=300,
                      json={"name": "big", "source_lang": "en", "target_lang": "de", "entries": entries,
                            "entries_format": "tsv"})  # fmt: skip
    made.raise_for_status()
    text = " ".join(f"The {terms[n * 37 % len(terms)]} is in the house." for n in range(1_000))[:19_981]
    body = {"text": [text], "source_lang": "EN", "target_lang": "DE", "glossary_id": made.json()["glossary_id"]}

    def attack() -> None:
        statuses.append(httpx.post(f"{url}/v2/translate", json=body, headers=headers, timeout=600).status_code)

    return repeat(stop, 4, attack)


def request_glossary_attack(url: str, stop: threading.Event, statuses: list[int]) -> list[threading.Thread]:
    glossary = [[f"term{n}", f"Begriff{n}"] for n in range(1_000)]
    body = {"text": "The term17 is in the house of term245.", "source": "en", "target": "de", "glossary": glossary}
    headers = {"Authorization": f"Bearer {KEYS['A']}"}

    def attack() -> None:
        statuses.append(httpx.post(f"{url}/v1/translate", json=body, headers=headers, timeout=600).status_code)

    return repeat(stop, 1, attack)


def pdf_of_blocks(count: int) -> bytes:
    import pymupdf

    document = pymupdf.open()
    page = document.new_page(width=2000, height=2000)
    for n in range(count):
        page.insert_text((20 + (n % 20) * 95, 20 + (n // 20) * 45), f"Block {n} reads here.", fontsize=6)
    return document.tobytes()


@functools.cache
def crafted_files() -> list[tuple[str, bytes, dict[str, str]]]:
    """(name, bytes, extra form fields) of each crafted document."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from hostile import yaml_alias_bomb, yaml_merge_chain

    placeholders = 'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\nmsgid "' + "%s " * 120_000
    csv = "".join(f'"{n}",",;|\t{n}",\'x{n}\'\n' for n in range(160_000 // 20)).encode()
    return [
        ("merges.yaml", yaml_merge_chain(1_000), {}),
        ("aliases.yaml", yaml_alias_bomb(10), {}),
        ("blocks.pdf", pdf_of_blocks(800), {}),
        ("placeholders.po", (placeholders + '"\nmsgstr ""\n').encode(), {}),
        ("continued.properties", ("key = a \\\n" + " b \\\n" * 320_000 + " end\n").encode(), {}),
        ("sniffed.csv", csv, {"column": "2"}),
        ("long.md", b"A dog runs in the park with two men.\n\n" * (19 * 2**20 // 38), {}),
    ]


def documents_attack(url: str, stop: threading.Event, results: list) -> list[threading.Thread]:
    """Each crafted file once, in turn (the phase lasts until the last is answered): (name, status,
    seconds, error) in results."""

    def run() -> None:
        with httpx.Client(timeout=600) as http:
            for name, data, fields in crafted_files():
                started = time.perf_counter()
                response = http.post(f"{url}/translate_file", files={"file": (name, data)},
                                     data={"source": "en", "target": "de", "api_key": KEYS["A"], **fields})  # fmt: skip
                error = response.json().get("error", "") if response.status_code != 200 else ""
                results.append((name, response.status_code, time.perf_counter() - started, error))

    thread = threading.Thread(target=run)
    thread.start()
    return [thread]


def quota_attack(url: str) -> list[list[object]]:
    """Q's tries on each route and its usage after them (quota: 100 characters)."""
    bearer, deepl = {"Authorization": f"Bearer {KEYS['Q']}"}, {"Authorization": f"DeepL-Auth-Key {KEYS['Q']}"}
    text = "A dog runs in the park and two men are talking about it in the sun here at noon today"[:90]
    tries = {
        "/v1/translate": (45, lambda: httpx.post(f"{url}/v1/translate", headers=bearer, timeout=300,
                                                 json={"text": text + "1234567890", "source": "en", "target": "de"})),
        "/translate": (15, lambda: httpx.post(f"{url}/translate", timeout=300, json={
            "q": text + "1234567890", "source": "en", "target": "de", "api_key": KEYS["Q"]})),
        "/translate_file": (20, lambda: httpx.post(f"{url}/translate_file", timeout=300,
                                                   files={"file": ("a.txt", (text + "1234567890").encode())},
                                                   data={"source": "en", "target": "de", "api_key": KEYS["Q"]})),
        "/v2/document": (5, lambda: httpx.post(f"{url}/v2/document", headers=deepl, timeout=300,
                                               files={"file": ("a.txt", text.encode())}, data={"target_lang": "DE"})),
    }  # fmt: skip
    rows = []
    for route, (count, send) in tries.items():
        statuses: dict[int, int] = {}
        for _ in range(count):
            status = send().status_code
            statuses[status] = statuses.get(status, 0) + 1
        time.sleep(2)  # let /v2/document's jobs run
        used = httpx.get(f"{url}/v2/usage", headers=deepl).json()["character_count"]
        rows.append([route, count, ", ".join(f"{n}x{s}" for s, n in sorted(statuses.items())), used, 100])
    return rows


PHASES = [
    ("quiet: B alone", None),
    ("stored glossary (27,000 entries), 4 at once", stored_glossary_attack),
    ("request glossary (1,000 entries)", request_glossary_attack),
    ("crafted documents to /translate_file", documents_attack),
]


def file_rows(results: list) -> list[list[object]]:
    rows = []
    for name, data, _ in crafted_files():
        tries = [(status, seconds, error) for file, status, seconds, error in results if file == name]
        statuses = ", ".join(sorted({str(status) for status, _, _ in tries}))
        slowest = max((seconds for _, seconds, _ in tries), default=0)
        last_error = tries[-1][2][:70] if tries else ""
        rows.append([name, f"{len(data) / 1024:,.0f}", len(tries), statuses, f"{slowest:.1f}", last_error])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", required=True)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--layout", choices=["in-process", "default"], default="in-process")
    args = parser.parse_args()
    rows, quiet, results = [], None, {}
    crafted_files()  # made before the phases: the bench's own work is not the server's
    with tempfile.TemporaryDirectory() as work:
        keys = Path(work) / "keys.txt"
        keys.write_text(f"{KEYS['A']} 0 attacker\n{KEYS['Q']} 0 quota 100\n{KEYS['B']} 0 bystander\n")
        os.mkdir(Path(work) / "state")
        state = ("--api-keys", str(keys), "--state-dir", str(Path(work) / "state"))
        layout = ("--in-process",) if args.layout == "in-process" else ()
        process, url = start_server(args.model, Path(work) / "serve.log", *state, layout=layout)
        try:
            for phase, attack in PHASES:
                stop, results[phase] = threading.Event(), []
                threads = attack(url, stop, results[phase]) if attack else []
                with Watch(url, process.pid, args.clients) as watch:
                    time.sleep(args.seconds)
                    stop.set()
                    for thread in threads:
                        thread.join()
                rows.append(watch.row(phase, quiet))
                quiet = quiet or statistics.median(watch.latencies) * 1000
            quota_rows = quota_attack(url)
        finally:
            process.terminate()
            process.wait()
    print(conditions())
    b = f"B: {args.clients} clients of single sentences, {args.seconds:.0f} s a phase"
    print(f"{b}; /health asked every 50 ms; the engine {args.layout}")
    print_table(["phase", "B answered", "B refused", "B p50 ms", "B p95 ms", "B p50 / quiet", "/health max ms",
                 "server peak MB"], rows)  # fmt: skip
    glossaries = [[phase, len(found), ", ".join(f"{found.count(s)}x{s}" for s in sorted(set(found)))]
                  for phase, found in results.items() if found and "glossary" in phase]  # fmt: skip
    print_table(["attack", "requests", "statuses"], glossaries)
    print_table(["file", "KB", "tries", "status", "seconds (max)", "error"], file_rows(results[PHASES[-1][0]]))
    print_table(["quota attack (Q, quota 100)", "requests", "statuses", "usage after", "quota"], quota_rows)


if __name__ == "__main__":
    main()
