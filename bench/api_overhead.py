"""What each HTTP API of `mtkit serve` costs a request beyond the translation: the app in this
process (httpx's ASGI transport, no sockets), the engine replaced by an echo that prepares the texts
as the service does (tokenizing, sentence splitting, spans) and translates nothing; the mean time
of --requests single-sentence requests per API, each API measured --rounds times in turn.

    python bench/api_overhead.py -m runs/demo/model.pt [--requests 2000] [--rounds 3]

/v1/translate (mtkit's own, JSON through pydantic) against /v2/translate (DeepL's, fields parsed
by hand, mtkit.api.deepl) and /translate (LibreTranslate's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from pathlib import Path

from common import conditions, print_table

SENTENCE = "A man in a blue shirt rides a bike down the street."
APIS = {
    "/v1/translate": {"text": SENTENCE},
    "/v2/translate": {"text": [SENTENCE], "target_lang": "DE"},
    "/translate": {"q": SENTENCE, "source": "en", "target": "de"},
}


def echo_app(model: Path):
    from mtkit.api.app import create_app
    from mtkit.decoding.search import SearchConfig
    from mtkit.model.files import load_model_file, resolve_model_path
    from mtkit.serving.calls import Asked, Call
    from mtkit.serving.service import Service
    from mtkit.serving.settings import ModelInfo, ServeConfig
    from mtkit.translation.translate import Translator

    path = resolve_model_path(model)
    model_file, cfg = load_model_file(path), SearchConfig(beam=5)
    info = ModelInfo(path.name, path, "pytorch", model_file.meta.get("src_lang"), model_file.meta.get("tgt_lang"))
    tokenizers = model_file.src_tokenizer, model_file.tgt_tokenizer
    service = Service(lambda: Translator(model_file, cfg, device="cpu"), tokenizers, cfg, info, ServeConfig())

    async def echo(request, texts, options, split_sentences=None, target=None, source=None, glossary=None):
        service.jobs(
            Asked(Call(), texts, options, source, target, split=bool(split_sentences), glossary=glossary)
        )  # prepared, not translated
        return list(texts), None

    service.run = echo
    return create_app(service)


async def measure(app, requests: int, rounds: int) -> dict[str, list[float]]:
    import httpx

    times: dict[str, list[float]] = {path: [] for path in APIS}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") as client:
        for _ in range(rounds):
            for path, body in APIS.items():
                assert (await client.post(path, json=body)).status_code == 200
                started = time.perf_counter()
                for _ in range(requests):
                    await client.post(path, json=body)
                times[path].append((time.perf_counter() - started) / requests * 1e6)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with open(os.devnull, "w") as quiet, contextlib.redirect_stderr(quiet):  # the request log: a line a request
        times = asyncio.run(measure(echo_app(args.model), args.requests, args.rounds))
    print(
        f"the HTTP layer of mtkit serve, per request, {args.requests:,} requests x {args.rounds} rounds; {conditions()}"
    )
    print_table(["API", "mean us", "best round us"], [[p, sum(t) / len(t), min(t)] for p, t in times.items()])


if __name__ == "__main__":
    main()
