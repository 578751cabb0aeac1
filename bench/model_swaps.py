"""Two models in one room (`mtkit serve -m de-en -m en-fr --max-loaded 1`, each key its own client):
what a client that keeps swapping the models costs another, and whether a model kept busy leaves the
other pair any room.

    python bench/model_swaps.py -m MODEL [--seconds 40] [--work runs/model_swaps] [-- SERVE OPTIONS]

MODEL's weights serve both pairs (two copies of its file, relabelled de-en and en-fr: the same cost
to load and to run as two models of its size). Three runs, each a server of its own, requests through
/v1/translate (one short sentence each), for --seconds:
- quiet: key B alone asks for de-en, one request after another: its latency;
- swapping: key A alternates en-fr and de-en, one request after another, beside key B as above: the
  loads in all, A's requests refused (503, past --max-loads) and B's latency;
- busy: keys A and C keep en-fr busy (two connections each, back to back) while key B asks for de-en:
  B's answers and their latency (before fair turns: 503 at --load-timeout, here given 20 s).
Options after `--` go to serve (e.g. `-- --model-turn 0 --max-loads 0` for the server without turns).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import conditions, print_table, start_server  # noqa: E402
from serve_load import percentile  # noqa: E402

SENTENCE = {"de-en": ("de", "en", "Ein Hund rennt am Strand."), "en-fr": ("en", "fr", "A dog runs on the beach.")}
KEYS = {"A": "a" * 32, "B": "b" * 32, "C": "c" * 32}


def relabelled(model: Path, source: str, target: str, path: Path) -> str:
    from mtkit.model.files import load_model_file, resolve_model_path, save_model_file

    model_file = load_model_file(resolve_model_path(model))
    meta = {**model_file.meta, "src_lang": source, "tgt_lang": target}
    save_model_file(path, dataclasses.replace(model_file, meta=meta))
    return str(path)


def client(url: str, key: str, pairs: list[str], until: float, out: list) -> None:
    """Requests one after another, cycling through pairs, until the deadline: (pair, status, seconds)."""
    with httpx.Client(timeout=120) as http:
        for k in range(1_000_000):
            if time.monotonic() >= until:
                return
            source, target, text = SENTENCE[pairs[k % len(pairs)]]
            began = time.monotonic()
            answer = http.post(f"{url}/v1/translate", json={"text": text, "source": source, "target": target},
                               headers={"Authorization": f"Bearer {key}"})  # fmt: skip
            out.append((pairs[k % len(pairs)], answer.status_code, time.monotonic() - began))


def loads(url: str) -> int:
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {KEYS['B']}"}).text
    return int(
        sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("mtkit_model_loads_total{"))
    )


def scenario(models: list[str], work: Path, serve_options: list[str], clients: dict[str, list[list[str]]],
             seconds: float) -> tuple[dict[str, list], int]:  # fmt: skip
    """One server; each key's clients (a list of pairs each) for `seconds`: every key's answers, and the
    models loaded meanwhile (after the first)."""
    options = ["-m", models[1], "--max-loaded", "1", "--load-timeout", "20", "--api-keys", str(work / "keys.txt"),
               "--beam", "2", *serve_options]  # fmt: skip
    process, url = start_server(models[0], work / "serve.log", *options)
    try:
        before, until, answers, threads = loads(url), time.monotonic() + seconds, {}, []
        for name, each in clients.items():
            answers[name] = []
            for pairs in each:
                threads.append(threading.Thread(target=client, args=(url, KEYS[name], pairs, until, answers[name])))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return answers, loads(url) - before
    finally:
        process.terminate()
        process.wait(60)


def summary(name: str, answers: list, swaps: int | None) -> list[object]:
    ok = [seconds for _, status, seconds in answers if status == 200]
    refused = sorted({status for _, status, _ in answers if status != 200})
    p50, p95 = (f"{percentile(ok, q) * 1000:.0f}" if ok else "-" for q in (0.5, 0.95))
    return [name, len(ok), f"{len(answers) - len(ok)} ({', '.join(map(str, refused)) or '-'})", p50, p95,
            swaps if swaps is not None else ""]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--work", type=Path, default=Path("runs/model_swaps"))
    parser.add_argument("serve_options", nargs="*", help="after --: more options of mtkit serve")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    (args.work / "keys.txt").write_text("".join(f"{key} 0 {name}\n" for name, key in KEYS.items()))
    models = [relabelled(args.model, *pair.split("-"), args.work / f"{pair}.pt") for pair in SENTENCE]
    rows = []
    quiet, _ = scenario(models, args.work, args.serve_options, {"B": [["de-en"]]}, args.seconds)
    rows.append(summary("quiet: B on de-en", quiet["B"], None))
    swapping, swaps = scenario(models, args.work, args.serve_options,
                               {"A": [["en-fr", "de-en"]], "B": [["de-en"]]}, args.seconds)  # fmt: skip
    rows += [
        summary("swapping: A alternating", swapping["A"], swaps),
        summary("swapping: B on de-en", swapping["B"], None),
    ]
    busy, swaps = scenario(models, args.work, args.serve_options,
                           {"A": [["en-fr"]] * 2, "C": [["en-fr"]] * 2, "B": [["de-en"]]}, args.seconds)  # fmt: skip
    rows += [
        summary("busy: A and C on en-fr", busy["A"] + busy["C"], swaps),
        summary("busy: B on de-en", busy["B"], None),
    ]
    print(f"# {conditions()}; {args.seconds:g} s a run; serve options: {' '.join(args.serve_options) or '(defaults)'}")
    print_table(["run: client", "answered", "refused (status)", "p50 ms", "p95 ms", "loads"], rows)


if __name__ == "__main__":
    main()
