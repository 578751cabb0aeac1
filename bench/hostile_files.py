"""Files from strangers: what mtkit's document readers do with bombs, deep nesting and paths posing as
content (each read in a child process: time and peak memory), whether every reader's time grows
linearly (1x, 4x, 16x inputs), how many mutated files a longer fuzz tried, and what hostile uploads do
to the other clients of a server.

    python bench/hostile_files.py [--fuzz 2000] [--scale 2000] [-m MODEL --seconds 20 --clients 8]

Cases: the files of tests/hostile.py (a .docx inflating to 1 GiB, one whose directory states a small
size, a million empty paragraphs deflated and 600,000 stored, a PO file naming a path on the machine,
nplurals=10000000, 500 levels of nesting in each format, 80,000 Markdown reference links, a zip with
two parts of one name). Scaling: a generated file of each format with --scale paragraphs (cues,
messages, cells...) and 4x and 16x as many, read and written again (copy translation), best of 3.
Fuzz: --fuzz hypothesis mutations of a small valid file per format (tests/test_hostile_files.py),
each giving a document that writes again or one MtkitError line, anything else counted as a failure.
Server (with -m): `mtkit serve` and --clients clients sending single sentences for --seconds, alone
and beside one client uploading the hostile files in a loop; the text requests' p50/p95, the hostile
uploads' statuses, and /health's slowest answer while a file of 400,000 empty paragraphs is read.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

from common import REPO, conditions, print_table, start_server

sys.path.insert(0, str(REPO / "tests"))  # the hostile files and the fuzz strategies live with the tests

CHILD = """
import re, sys, time
from mtkit.core.errors import MtkitError
from mtkit.documents.formats import document_format, read_document

def kib(field):
    return int(re.search(field + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1))

data, name = sys.stdin.buffer.read(), sys.argv[1]
open("/proc/self/clear_refs", "w").write("5")  # the peak resident size starts again from here
before, started = kib("VmRSS"), time.perf_counter()
try:
    said = f"read: {len(read_document(data, name, document_format(name)).segments()):,} segments"
except MtkitError as err:
    said = str(err)
print(time.perf_counter() - started, (kib("VmHWM") - before) // 1024, said)
"""


def hostile_cases() -> list[tuple[str, str, bytes]]:
    from hostile import (
        DOCUMENT_XML,
        deep,
        duplicate_part,
        empty_paragraphs,
        inflating_word_file,
        lying_sizes,
        plural_po,
        po_file,
        reference_links,
        word_file,
    )

    target = Path(tempfile.gettempdir()) / "mtkit-bench-real.po"
    target.write_bytes(po_file())
    cases = [
        ("inflates to 1 GiB", "bomb.docx", inflating_word_file(1 << 30)),
        ("directory says 1,000 bytes (64 MiB)", "lying.docx", lying_sizes(inflating_word_file(64 << 20), DOCUMENT_XML, 1000)),
        ("1,000,000 empty paragraphs", "empty.docx", empty_paragraphs(1_000_000)),
        ("600,000 empty paragraphs, stored", "stored.docx", empty_paragraphs(600_000, zipfile.ZIP_STORED)),
        ("a PO file naming a path", "path.po", str(target).encode()),
        ("nplurals=10000000", "plurals.po", plural_po("10000000")),
        ("80,000 reference links", "links.md", reference_links(80_000)),
        ("two parts of one name", "twice.docx", duplicate_part(word_file(), DOCUMENT_XML)),
    ]  # fmt: skip
    for fmt in ("html", "srt", "md", "xliff", "docx"):
        name, data = deep(fmt, 500)
        cases.append((f"500 levels deep ({fmt})", name, data))
    return cases


def read_in_child(name: str, data: bytes) -> tuple[float, int, str]:
    """(seconds reading, MiB the child's resident size grew by at its peak while reading, what it said)."""
    out = subprocess.run([sys.executable, "-c", CHILD, name], input=data, capture_output=True, check=True)
    seconds, peak, said = out.stdout.decode().strip().split(" ", 2)
    return float(seconds), int(peak), said


# Scaling


def scaled(fmt: str, n: int) -> tuple[str, bytes]:
    """A file of format fmt with n paragraphs (cues, messages, cells, lines) of a few formatted words."""
    from hostile import package, word_file

    words = "A man in a <b>blue</b> shirt rides a bike."
    if fmt == "docx":
        run = '<w:r><w:t xml:space="preserve">A man {} in a </w:t></w:r><w:r><w:rPr><w:b/></w:rPr><w:t>blue</w:t></w:r>'
        return "s.docx", word_file("".join(f"<w:p>{run.format(i)}</w:p>" for i in range(n)))
    if fmt == "xlsx":
        from test_documents import spreadsheet

        strings = "".join(f"<si><t>{words.replace('<b>', '').replace('</b>', '')} {i}</t></si>" for i in range(n))
        shared = f'<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">{strings}</sst>'
        return "s.xlsx", package({"xl/sharedStrings.xml": shared.encode()}, spreadsheet())
    if fmt == "odt":
        from test_documents import open_document

        data = open_document("odt")
        body = "".join(f'<text:p>A man {i} in a <text:span text:style-name="T1">blue</text:span> shirt.</text:p>'
                       for i in range(n))  # fmt: skip
        content = zipfile.ZipFile(io.BytesIO(data)).read("content.xml").decode()
        return "s.odt", package(
            {"content.xml": content.replace("<office:text>", f"<office:text>{body}").encode()}, data
        )
    if fmt in ("srt", "vtt"):
        stamp = "00:00:01,000 --> 00:00:02,000" if fmt == "srt" else "00:00:01.000 --> 00:00:02.000"
        cues = "".join(f"{i + 1}\n{stamp}\n{words.replace('b>', 'i>')}\n\n" for i in range(n))
        return f"s.{fmt}", (("WEBVTT\n\n" if fmt == "vtt" else "") + cues).encode()
    if fmt == "po":
        return "s.po", "".join(f'msgid "{i}: %s rides a {{bike}}."\nmsgstr ""\n\n' for i in range(n)).encode()
    if fmt == "xliff":
        units = "".join(f'<trans-unit id="{i}"><source>A man in a <g id="1">blue</g> shirt.</source></trans-unit>'
                        for i in range(n))  # fmt: skip
        return "s.xliff", (f'<xliff xmlns="urn:oasis:names:tc:xliff:document:1.2" version="1.2"><file source-language="en" '
                           f'datatype="plaintext" original="a"><body>{units}</body></file></xliff>').encode()  # fmt: skip
    if fmt == "md":
        return "s.md", "".join(f"A man in a **blue** [shirt](/s{i}) rides [a bike][b].\n\n" for i in range(n)).encode()
    if fmt in ("html", "epub"):
        page = "<html><body>" + "".join(f"<p>{i}: {words}</p>" for i in range(n)) + "</body></html>"
        if fmt == "html":
            return "s.html", page.encode()
        from test_documents import epub_book

        return "s.epub", package({"EPUB/one.xhtml": page.encode()}, epub_book())
    if fmt == "txt":
        return "s.txt", "\n".join(words for _ in range(n)).encode()
    if fmt == "json":
        screens: dict[str, dict[str, str]] = {}
        for i in range(n):
            screens.setdefault(f"screen{i // 10}", {})[f"m{i}"] = f"Open {{{{name}}}}'s %s file {i}."
        return "s.json", json.dumps(screens, indent=2).encode()
    if fmt == "android":
        items = "".join(f'<string name="m{i}">Hello <b>%1$s</b>, you don\\\'t have %2$d messages {i}.</string>'
                        for i in range(n))  # fmt: skip
        return "strings.xml", f"<resources>{items}</resources>".encode()
    raise ValueError(fmt)


def read_and_write_time(name: str, data: bytes) -> float:
    from test_documents import copy_engine

    from mtkit.documents.formats import document_format, read_document
    from mtkit.text.markup_placement import translate_markup

    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        document = read_document(data, name, document_format(name))
        document.write(translate_markup(document.segments(), document.markup, copy_engine), "de")
        best = min(best, time.perf_counter() - started)
    return best


# Fuzz


def fuzz(examples: int) -> list[list[object]]:
    from hypothesis import HealthCheck, given, settings
    from test_hostile_files import SEEDS, mutated, read_and_write

    def one(name: str) -> list[object]:
        tried, failures, started = [0], [], time.perf_counter()

        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(mutated(name))
        def check(data):
            tried[0] += 1
            try:
                read_and_write(name, data)
            except Exception as err:  # counted, not raised: the fuzz goes on
                failures.append(f"{type(err).__name__}: {str(err)[:80]}")

        check()
        return [name, tried[0], len(failures), time.perf_counter() - started, failures[0] if failures else ""]

    return [one(name) for name in sorted(SEEDS)]


# Server


def text_load(url: str, clients: int, seconds: float, sentences: list[str], beside=None) -> list[float]:
    """Latencies of single-sentence requests from `clients` threads for `seconds` (beside(stop) runs too)."""
    import httpx

    stop, latencies = threading.Event(), []

    def client(offset: int) -> None:
        with httpx.Client(timeout=120) as http:
            for i in range(offset, 10**9, clients):
                if stop.is_set():
                    return
                started = time.perf_counter()
                assert http.post(f"{url}/v1/translate", json={"text": sentences[i % len(sentences)]}).status_code == 200
                latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    threads += [threading.Thread(target=beside, args=(stop,))] if beside else []
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return sorted(latencies)


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p * len(values)))] * 1000


def server_rows(model: str, clients: int, seconds: float, sentences: list[str]) -> tuple[list, list, float]:
    import httpx
    from hostile import empty_paragraphs

    hostile = [(name, data) for _, name, data in hostile_cases() if len(data) < 20 << 20]
    statuses: dict[str, set[int]] = {}

    def uploader(stop: threading.Event) -> None:
        with httpx.Client(timeout=120) as http:
            while not stop.is_set():
                for name, data in hostile:
                    answer = http.post(f"{url}/translate_file", files={"file": (name, data)}, data={"target": "de"})
                    statuses.setdefault(name, set()).add(answer.status_code)

    process, url = start_server(model, Path(tempfile.mkdtemp()) / "serve.log")
    try:
        alone = text_load(url, clients, seconds, sentences)
        beside = text_load(url, clients, seconds, sentences, uploader)
        slowest = health_while_reading(url, empty_paragraphs(400_000, zipfile.ZIP_STORED))
    finally:
        process.terminate()
        process.wait(60)
    rows = [[label, len(lat), percentile(lat, 0.5), percentile(lat, 0.95)]
            for label, lat in (("text alone", alone), ("beside hostile uploads", beside))]  # fmt: skip
    return rows, [[name, ", ".join(map(str, sorted(codes)))] for name, codes in statuses.items()], slowest


def health_while_reading(url: str, data: bytes) -> float:
    """The slowest /health answer (ms) while the server reads, translates and writes `data`."""
    import httpx

    done, slowest = threading.Event(), 0.0
    upload = threading.Thread(target=lambda: (httpx.post(f"{url}/translate_file", files={"file": ("big.docx", data)},
                                                         data={"target": "de"}, timeout=600), done.set()))  # fmt: skip
    upload.start()
    with httpx.Client() as http:
        while not done.is_set():
            started = time.perf_counter()
            http.get(f"{url}/health")
            slowest = max(slowest, time.perf_counter() - started)
    upload.join()
    return slowest * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fuzz", type=int, default=2000, help="mutated files per format")
    parser.add_argument("--scale", type=int, default=2000, help="paragraphs of the 1x file of each format")
    parser.add_argument("-m", "--model", help="a model to serve (the server measurements need one)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "multi30k")
    args = parser.parse_args()
    print(conditions())
    print("\nHostile files, each read in a child process (peak MiB: how far its resident size grew while reading):")
    rows = []
    for label, name, data in hostile_cases():
        seconds, peak, said = read_in_child(name, data)
        rows.append([label, f"{len(data):,}", seconds, peak, said[:90]])
    print_table(["input", "bytes", "seconds", "peak MiB", "what mtkit said"], rows)

    if args.scale:
        print(f"\nReading and writing (copy translation), best of 3, at {args.scale:,}, 4x and 16x paragraphs:")
        rows = []
        for fmt in ("docx", "xlsx", "odt", "epub", "html", "md", "srt", "vtt", "po", "xliff", "txt", "json", "android"):
            times = [read_and_write_time(*scaled(fmt, args.scale * k)) for k in (1, 4, 16)]
            rows.append([fmt, times[0], times[1], times[2], times[2] / times[1]])
        print_table(["format", "1x s", "4x s", "16x s", "16x / 4x (linear: 4)"], rows)

    if args.fuzz:
        print(f"\nFuzz: {args.fuzz:,} hypothesis mutations per format asked for:")
        print_table(["seed", "tried", "failures", "seconds", "first failure"], fuzz(args.fuzz))

    if args.model:
        sentences = (args.data / "test2016.en").read_text().splitlines()
        rows, statuses, slowest = server_rows(args.model, args.clients, args.seconds, sentences)
        print(f"\nServer ({args.clients} text clients, {args.seconds:g} s each, serve --in-process, defaults):")
        print_table(["text requests", "answered", "p50 ms", "p95 ms"], rows)
        print_table(["hostile upload", "statuses"], statuses)
        print(f"/health's slowest answer while 400,000 stored empty paragraphs were read and written: {slowest:.0f} ms")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
