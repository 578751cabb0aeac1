"""`mtkit serve`: a model behind HTTP, with dynamic batching, back-pressure and Prometheus metrics.

Endpoints (JSON in and out; every error is {"error": "..."}):
  POST /v1/translate  {"text": "..." | ["...", ...], "beam"?, "nbest"?, "lenpen"?, "alignment"?}
                      -> {"translations": [...]}, one item per text: the translation, or with
                      nbest > 1 or alignment a list of {"text", "score"[, "alignment"]}, best first
                      (an empty list for a blank text), as `mtkit translate` prints them
  POST /translate     LibreTranslate's API: q (a string or a list), source, target, format "text",
                      alternatives; answers {"translatedText": ...} (JSON or form-encoded requests)
  GET  /health        alive;  GET /ready  200 once a warm-up translation went through, else 503
  GET  /v1/models     languages, engine, vocabulary sizes, the model file's sha256, defaults
  GET  /metrics       Prometheus: latency, requests by status, queue depth, batch sizes, sentences/s

Sentences of concurrent requests are batched by mtkit.batcher on one worker thread; with the
PyTorch engine the batch is a running beam search that new sentences join between decoding steps
(continuous batching), with CTranslate2 whole batches. A full
queue answers 503 with Retry-After; a request over --max-chars 413; invalid JSON or options 422
(400 on the LibreTranslate endpoint, as LibreTranslate does). A client that disconnects has its
waiting sentences dropped. Needs the optional extra: pip install 'mtkit[serve]'.
"""

import asyncio
import json
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from mtkit.batcher import Batcher, BatchStats, Job, QueueFull
from mtkit.console import warn
from mtkit.errors import MtkitError
from mtkit.search import MAX_SOURCE_TOKENS, SearchConfig
from mtkit.textio import sha256_file
from mtkit.tokenizer import Tokenizer
from mtkit.translate import LineStream, NbestList, TextTranslator

MAX_BEAM = 16
THROUGHPUT_WINDOW_S = 10.0


def _require_extra():
    try:
        import fastapi
        import prometheus_client
        import uvicorn
    except ImportError:
        raise MtkitError(
            "mtkit serve needs FastAPI, uvicorn and prometheus-client: pip install 'mtkit[serve]'"
        ) from None
    return fastapi, prometheus_client, uvicorn


@dataclass(frozen=True)
class Options:
    """The per-request decoding options; requests with equal options share batches."""

    beam: int
    nbest: int
    lenpen: float
    alignment: bool


@dataclass
class ServeConfig:
    max_batch_tokens: int = 4096
    max_wait_ms: float = 20.0
    max_queue: int = 2048
    max_chars: int = 20000

    def validate(self) -> None:
        for name in ("max_batch_tokens", "max_queue", "max_chars"):
            if getattr(self, name) < 1:
                raise MtkitError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be at least 1")
        if self.max_wait_ms < 0:
            raise MtkitError(f"--max-wait-ms {self.max_wait_ms}: must be at least 0")


@dataclass
class ModelInfo:
    name: str
    path: Path  # the file whose checksum /v1/models reports
    engine: str
    source_language: str | None
    target_language: str | None


class RequestError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


class Metrics:
    """The service's Prometheus metrics, in a registry of its own."""

    def __init__(self, depth):
        import prometheus_client as prom

        self.registry = prom.CollectorRegistry()
        self.latency = prom.Histogram(
            "mtkit_request_seconds", "Request latency, by endpoint.", ["path"], registry=self.registry
        )
        self.requests = prom.Counter(
            "mtkit_requests", "Requests answered, by endpoint and status code.", ["path", "status"],
            registry=self.registry,
        )  # fmt: skip
        self.queue = prom.Gauge("mtkit_queue_sentences", "Sentences waiting for a batch.", registry=self.registry)
        self.queue.set_function(depth)
        buckets = [2**i for i in range(15)]
        self.batch_sentences = prom.Histogram(
            "mtkit_batch_sentences",
            "Sentences per batch (continuous batching: per decoding step).",
            buckets=buckets,
            registry=self.registry,
        )
        self.batch_tokens = prom.Histogram(
            "mtkit_batch_tokens",
            "Source subwords per batch (continuous batching: per decoding step).",
            buckets=buckets,
            registry=self.registry,
        )
        self.batch_seconds = prom.Histogram(
            "mtkit_batch_seconds", "Time to translate a batch (continuous batching: a decoding step).",
            buckets=[0.01 * 2**i for i in range(12)], registry=self.registry,
        )  # fmt: skip
        self.sentences = prom.Counter("mtkit_sentences", "Sentences translated.", registry=self.registry)
        self.throughput = prom.Gauge(
            "mtkit_sentences_per_second", f"Sentences translated per second over the last {THROUGHPUT_WINDOW_S:g} s.",
            registry=self.registry,
        )  # fmt: skip
        self._recent: deque[tuple[float, int]] = deque()
        self.throughput.set_function(self._sentences_per_second)

    def observe_batch(self, stats: BatchStats) -> None:
        self.batch_sentences.observe(stats.sentences)
        self.batch_tokens.observe(stats.tokens)
        self.batch_seconds.observe(stats.seconds)
        self.sentences.inc(stats.finished)
        self._recent.append((time.monotonic(), stats.finished))

    def _sentences_per_second(self) -> float:
        horizon = time.monotonic() - THROUGHPUT_WINDOW_S
        while self._recent and self._recent[0][0] < horizon:
            self._recent.popleft()
        return sum(n for _, n in self._recent) / THROUGHPUT_WINDOW_S


class Service:
    """The translator, its batcher and what the endpoints share."""

    def __init__(
        self,
        make_translator: Callable[[], TextTranslator],
        tokenizers: tuple[Tokenizer, Tokenizer],
        base_cfg: SearchConfig,
        info: ModelInfo,
        cfg: ServeConfig,
    ):
        """make_translator runs on the worker thread, which then does all the translating: torch's
        OpenMP threads are per calling thread, and a model built on the main thread and run on
        another decodes about 1.5x slower on 2 cores (measured) as the two thread teams compete."""
        self._make_translator = make_translator
        self.translator: TextTranslator | None = None
        self.src_tokenizer, self.tgt_tokenizer = tokenizers
        self.base_cfg = base_cfg
        self.info = info
        self.cfg = cfg
        self.metrics = Metrics(lambda: self.batcher.depth)
        self.batcher = Batcher(
            self._translate, cfg.max_batch_tokens, cfg.max_wait_ms / 1000, cfg.max_queue, self.metrics.observe_batch,
            setup=self._build, open_stream=self._open_stream,
        )  # fmt: skip
        self.ready = False
        self.checksum = sha256_file(info.path)

    def defaults(self) -> Options:
        return Options(self.base_cfg.beam, 1, self.base_cfg.lenpen, False)

    def options(self, beam: int | None, nbest: int | None, lenpen: float | None, alignment: bool) -> Options:
        default = self.defaults()
        beam = default.beam if beam is None else beam
        nbest = 1 if nbest is None else nbest
        lenpen = default.lenpen if lenpen is None else lenpen
        if not 1 <= beam <= MAX_BEAM:
            raise RequestError(422, f"beam {beam}: must be between 1 and {MAX_BEAM}")
        if not 1 <= nbest <= beam:
            raise RequestError(422, f"nbest {nbest}: must be between 1 and beam ({beam})")
        if lenpen < 0:
            raise RequestError(422, f"lenpen {lenpen}: must be at least 0")
        if alignment and self.info.engine != "pytorch":
            raise RequestError(422, "alignment needs a server started with --engine pytorch")
        return Options(beam, nbest, lenpen, alignment)

    def _build(self) -> None:
        self.translator = self._make_translator()
        self.translator.warn_long_lines = False  # a server's "line N" would mean nothing; requests log cuts

    def _translate(self, texts: list[str], options: Options, deliver: Callable[[int, Any], None]) -> None:
        """On the worker thread: one batch, with its options; each text's result is delivered as
        soon as its translation is finished."""
        translator = self._translator_for(options)
        translator.translate_hypotheses(
            texts, on_line=lambda i, nbest_list: deliver(i, self._answer(texts[i], options, nbest_list))
        )

    def _open_stream(self, options: Options, deliver: Callable[[int, Any], None]) -> LineStream | None:
        """On the worker thread: a running search for continuous batching, where the engine has one."""
        return self._translator_for(options).open_stream(
            lambda key, line, nbest_list: deliver(key, self._answer(line, options, nbest_list))
        )

    def _translator_for(self, options: Options) -> TextTranslator:
        assert self.translator is not None
        # The translator's own cfg: it holds what the engine added (the banned line breaks).
        self.translator.cfg = replace(
            self.translator.cfg, beam=options.beam, nbest=options.nbest, lenpen=options.lenpen
        )
        return self.translator

    def _answer(self, line: str, options: Options, nbest_list: NbestList) -> Any:
        """One text's entry in "translations": the text, or its n-best (with alignments)."""
        if options.nbest == 1 and not options.alignment:
            return nbest_list[0][1] if nbest_list else ""
        hyps = [{"text": t, "score": h.score} for h, t in nbest_list]
        if options.alignment:
            for entry, (h, _) in zip(hyps, nbest_list):
                entry["alignment"] = self.translator.alignment(line, h)
        return hyps

    def jobs(self, texts: Sequence[str], options: Options) -> tuple[list[Job], int]:
        """A job per text, and how many texts are longer than MAX_SOURCE_TOKENS (translated cut)."""
        chars = sum(len(t) for t in texts)
        if chars > self.cfg.max_chars:
            raise RequestError(
                413, f"{chars:,} characters: the limit is {self.cfg.max_chars:,} per request (--max-chars)"
            )
        if not texts:
            raise RequestError(422, "text: give at least one")
        if len(texts) > self.cfg.max_queue:
            raise RequestError(413, f"{len(texts):,} texts: the queue holds {self.cfg.max_queue:,} (--max-queue)")
        lengths = [len(ids) for ids in self.src_tokenizer.encode_batch([t.strip() for t in texts])]
        jobs = [Job(text, min(n, MAX_SOURCE_TOKENS) + 1, options) for text, n in zip(texts, lengths)]
        return jobs, sum(n > MAX_SOURCE_TOKENS for n in lengths)

    async def run(self, request, texts: Sequence[str], options: Options) -> list[Any]:
        """Queue the texts and wait for their translations; drop them if the client goes away."""
        jobs, cut = self.jobs(texts, options)
        request.state.sentences, request.state.cut = len(jobs), cut
        try:
            futures = self.batcher.submit(jobs)
        except QueueFull as err:
            raise RequestError(503, f"busy: {err}; retry later", {"Retry-After": "1"}) from None
        waiting = asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        gone = asyncio.ensure_future(_disconnect(request))
        try:
            done, _ = await asyncio.wait({waiting, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if waiting in done:
            return waiting.result()
        for future in futures:
            future.cancel()
        waiting.cancel()
        raise RequestError(499, "the client closed the connection")

    def warm_up(self) -> Future:
        """Translate one sentence through the batcher; /ready says yes once it is back."""
        (job,) = self.jobs(["Hello."], self.defaults())[0]
        (future,) = self.batcher.submit([job])
        future.add_done_callback(self._warmed_up)
        return future

    def _warmed_up(self, future: Future) -> None:
        error = future.exception()
        self.ready = error is None
        if error is not None:
            warn(f"the warm-up translation failed, so /ready stays 503: {type(error).__name__}: {error}")


async def _disconnect(request) -> None:
    """Returns when the client has gone: once the body is read, the server's next message is that."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _texts(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


def create_app(service: Service):
    """The FastAPI application around a Service."""
    fastapi, prom, _ = _require_extra()
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse
    from pydantic import BaseModel, ConfigDict, ValidationError
    from starlette.exceptions import HTTPException

    class TranslateRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        text: str | list[str]
        beam: int | None = None
        nbest: int | None = None
        lenpen: float | None = None
        alignment: bool = False

    class LibreTranslateRequest(BaseModel):
        q: str | list[str]
        source: str = "auto"
        target: str | None = None
        format: str = "text"
        alternatives: int = 0
        api_key: str | None = None

    @asynccontextmanager
    async def lifespan(app):
        service.batcher.start()
        service.warm_up()
        yield
        service.batcher.stop()

    app = fastapi.FastAPI(title="mtkit", lifespan=lifespan)
    routes = {"/v1/translate", "/translate", "/health", "/ready", "/v1/models", "/metrics"}

    def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    @app.exception_handler(RequestError)
    async def request_error(request: Request, err: RequestError):
        return error(err.status, err.message, err.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, err: RequestValidationError):
        return error(422, _describe(err.errors()))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, err: Exception):  # a bug: the common shape, and uvicorn logs it
        return error(500, f"internal error: {type(err).__name__}: {err}")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException):
        return error(err.status_code, str(err.detail), getattr(err, "headers", None))

    @app.post("/v1/translate")
    async def translate(body: TranslateRequest, request: Request):
        options = service.options(body.beam, body.nbest, body.lenpen, body.alignment)
        return {"translations": await service.run(request, _texts(body.text), options)}

    @app.post("/translate")
    async def libretranslate(request: Request):
        try:
            body = LibreTranslateRequest.model_validate(await _libretranslate_fields(request))
        except ValidationError as err:
            raise RequestError(400, _describe(err.errors())) from None
        info = service.info
        if body.source not in ("auto", info.source_language):
            raise RequestError(400, f"source {body.source}: this server translates from {info.source_language}")
        if body.target is not None and body.target != info.target_language:
            raise RequestError(400, f"target {body.target}: this server translates into {info.target_language}")
        if body.format != "text":
            raise RequestError(400, f"format {body.format}: only text is supported")
        if body.alternatives < 0:
            raise RequestError(400, f"alternatives {body.alternatives}: must be at least 0")
        default = service.defaults()
        beam = max(default.beam, body.alternatives + 1)
        if body.alternatives:
            options = service.options(beam, body.alternatives + 1, None, False)
        else:
            options = default
        results = await service.run(request, _texts(body.q), options)
        if body.alternatives:
            best = [[h["text"] for h in hyps] or [""] for hyps in results]
            texts, alternatives = [b[0] for b in best], [b[1:] for b in best]
        else:
            texts, alternatives = results, None
        answer: dict[str, Any] = {"translatedText": texts[0] if isinstance(body.q, str) else texts}
        if alternatives is not None:
            answer["alternatives"] = alternatives[0] if isinstance(body.q, str) else alternatives
        if body.source == "auto":
            answer["detectedLanguage"] = {"language": info.source_language, "confidence": 100}
        return answer

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/ready")
    async def ready():
        if not service.ready:
            raise RequestError(503, "warming up", {"Retry-After": "1"})
        return {"status": "ready"}

    @app.get("/v1/models")
    async def models():
        info, tokenizers = service.info, service
        default = service.defaults()
        return {
            "models": [
                {
                    "id": info.name,
                    "engine": info.engine,
                    "source_language": info.source_language,
                    "target_language": info.target_language,
                    "source_vocab_size": tokenizers.src_tokenizer.vocab_size,
                    "target_vocab_size": tokenizers.tgt_tokenizer.vocab_size,
                    "sha256": service.checksum,
                    "defaults": {"beam": default.beam, "lenpen": default.lenpen, "nbest": 1},
                }
            ]
        }

    @app.get("/metrics")
    async def metrics():
        return PlainTextResponse(prom.generate_latest(service.metrics.registry), media_type=prom.CONTENT_TYPE_LATEST)

    return ObservedApp(app, service.metrics, routes)


class ObservedApp:
    """ASGI middleware: per request, the latency and status metrics and one JSON log line on stderr.

    (Plain ASGI rather than Starlette's BaseHTTPMiddleware, which hides a client's disconnect
    from the endpoint.)"""

    def __init__(self, app, metrics: Metrics, routes: set[str]):
        self.app, self.metrics, self.routes = app, metrics, routes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 500  # unless the app answers
        scope.setdefault("state", {})

        async def observed_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            seconds = time.perf_counter() - start
            path = scope["path"] if scope["path"] in self.routes else "other"
            self.metrics.latency.labels(path).observe(seconds)
            self.metrics.requests.labels(path, str(status)).inc()
            state, client = scope["state"], scope.get("client")
            record = {
                "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                "client": client[0] if client else None,
                "method": scope["method"],
                "path": scope["path"],
                "status": status,
                "ms": round(1000 * seconds, 1),
                "sentences": state.get("sentences", 0),
            }
            if state.get("cut"):
                record["cut"] = state["cut"]  # texts translated from their first MAX_SOURCE_TOKENS subwords
            sys.stderr.write(json.dumps(record) + "\n")
            sys.stderr.flush()


async def _libretranslate_fields(request) -> dict[str, Any]:
    """LibreTranslate clients send JSON or an HTML form (application/x-www-form-urlencoded)."""
    body = await request.body()
    if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
        return {key: values[0] if len(values) == 1 else values for key, values in fields.items()}
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RequestError(400, "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise RequestError(400, "the body must be a JSON object")
    return data


def _describe(errors: Sequence[dict]) -> str:
    """Pydantic's validation errors as one line: `field: problem; ...`."""
    parts = []
    for err in errors:
        if err.get("type") == "json_invalid":
            return "the body is not valid JSON"
        location = ".".join(str(part) for part in err.get("loc", ()) if part != "body") or "body"
        parts.append(f"{location}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def serve(service: Service, host: str, port: int) -> None:
    """Run the service until SIGTERM or Ctrl-C; SIGTERM finishes the requests in flight and returns."""
    import signal

    _, _, uvicorn = _require_extra()
    app = create_app(service)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    # uvicorn re-raises the signal it stopped for once it is done: let SIGTERM then end us normally (exit 0).
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run()
    except SystemExit:  # uvicorn exits when it cannot bind (and has logged why)
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not server.started:
        raise MtkitError(f"could not serve on {host}:{port} (is the port in use?)")
