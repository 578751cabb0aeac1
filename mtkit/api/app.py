"""`mtkit serve`: a model behind HTTP, with dynamic batching, back-pressure and Prometheus metrics.

Endpoints (JSON in and out; every error is {"error": "..."}):
  POST /v1/translate  {"text": "..." | ["...", ...], "beam"?, "nbest"?, "lenpen"?, "alignment"?, "confidence"?,
                      "split_sentences"?, "source"?, "target"?, "format"?, "glossary"?} -> {"translations": [...]}, one
                      item per text: the translation, or with nbest > 1 or alignment a list of
                      {"text", "score"[, "alignment"]}, best first (an empty list for a blank
                      text), as `mtkit translate` prints them; format: text, html or xml (the markup
                      kept around the aligned words: mtkit.text.markup); split_sentences: translate each text
                      sentence by sentence (default: serve --split-sentences); target: for a model
                      of several targets (default: serve --tgt-lang), 400 where it has no such one;
                      confidence (default: serve --confidence) adds "confidences": [...], one in [0, 1]
                      per text (mtkit.translation.confidence; a text in pieces: its lowest)
                      glossary: [[source term, target term], ...], used with serve --glossary's
                      (mtkit.serving.terms); "missed_terms": [...], the texts cut at the length limit
                      before their translation held every term, where there are any
  POST /translate     LibreTranslate's API: q (a string or a list), source, target, format "text" or "html",
                      alternatives; answers {"translatedText": ...} (JSON or form-encoded requests), and
                      "confidence" with serve --confidence
  POST /translate_file LibreTranslate's: a document (multipart file, source, target, api_key) translated
                      with its formatting (mtkit.documents; up to serve --max-file-bytes), answered
                      {"translatedFileUrl": ...}, downloadable there for serve --keep-files seconds
  /v2/...             DeepL's API v2 (mtkit.api.deepl): translate, languages, usage, glossaries,
                      documents, with DeepL-Auth-Key keys and character quotas; errors as {"message": "..."}
  POST /suggest       LibreTranslate's: a correction (q, s, source, target) kept in the key's translation
                      memory (serve --tm; 403 without), answering the same text from then on
  GET  /frontend/settings LibreTranslate's: limits, languages and the file types /translate_file takes
  GET  /languages     LibreTranslate's: the model's source with its targets, [{"code", "name",
                      "targets"}, ...]
  POST /detect        LibreTranslate's: q's likeliest language, [{"confidence", "language"}] (by
                      py3langid, offline; confidence in percent)
  GET  /health        alive;  GET /ready  200 once a warm-up translation went through, else 503
  GET  /v1/models     languages, engine, vocabulary sizes, the model file's sha256, defaults
  GET  /metrics       Prometheus: latency, requests by status, queue depth, batch sizes, sentences/s
  GET  /              the translation page (mtkit.api.files), unless serve --no-page

Sentences of concurrent requests are batched by mtkit.serving.dynamic_batching on one worker
thread (or on each of serve --replicas engine processes, mtkit.serving.replicas); with the PyTorch engine the batch is a running beam search that new sentences join between
decoding steps (continuous batching), with CTranslate2 whole batches. A full queue answers 503 with Retry-After; a request over --max-chars or --max-texts 413, and so does a
body over max_body_bytes; invalid JSON or options 422 (400 on the LibreTranslate endpoint, as
LibreTranslate does). With --api-keys the translating endpoints (and with --private-status /health,
/ready and /metrics) answer 403 without a valid key (`api_key` in the body, or `Authorization:
Bearer KEY`), and a key over its limit 429 with Retry-After; without keys, --req-limit limits each
client address (mtkit.api.access). A client that disconnects has its waiting sentences
dropped. Needs the optional extra: pip install 'mtkit[serve]'.
"""

import asyncio
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path

from mtkit.api.access import AccessRules, BodyLimit, Gate, Usage, bearer_key, max_body_bytes
from mtkit.api.deepl import add_deepl_routes
from mtkit.api.deepl_memories import UPLOAD_PATH
from mtkit.api.documents import DocumentJobs
from mtkit.api.edge import RequestError, answered, call_of, described, key_name, owner_of
from mtkit.api.files import TranslatedFiles, UploadBudget, add_file_routes, add_page, document_workers
from mtkit.api.glossaries import GlossaryStore
from mtkit.api.libretranslate import (
    detect_languages,
    frontend_settings,
    libretranslate,
    libretranslate_fields,
    libretranslate_languages,
    texts_of,
)
from mtkit.api.memory import translated
from mtkit.api.observed import ObservedApp
from mtkit.core.database import is_url, state_database
from mtkit.core.errors import MtkitError
from mtkit.memory.owners import MemoryLimit
from mtkit.serving.calls import Asked, Refused
from mtkit.serving.fleet import Fleet
from mtkit.serving.service import Service


def _require_extra():
    try:
        import fastapi
        import prometheus_client
        import python_multipart  # noqa: F401 - FastAPI reads /translate_file's form with it
        import uvicorn
    except ImportError:
        raise MtkitError(
            "mtkit serve needs FastAPI, uvicorn, prometheus-client and python-multipart: pip install 'mtkit[serve]'"
        ) from None
    return fastapi, prometheus_client, uvicorn


CONNECTIONS = 1024  # open connections at most
SWITCH_INTERVAL = 0.001  # seconds a thread holds the interpreter while another waits for it (serve's)
UPLOADS_HELD = 4  # uploaded documents of --max-file-bytes the server holds at once (more wait for room)


def create_app(served: Service | Fleet, gate: Gate | None = None, page: bool = True, workers=None):
    """The FastAPI application around a Service (one model) or a Fleet (several: mtkit.serving.fleet),
    behind a Gate (API keys and request limits), with the translation page at / unless page is False;
    workers: the processes that read and write documents (default: serve --file-processes of them,
    mtkit.documents.worker)."""
    fleet = served if isinstance(served, Fleet) else Fleet.single(served)
    gate = gate or Gate(AccessRules())
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
        confidence: bool | None = None
        split_sentences: bool | None = None
        source: str | None = None
        target: str | None = None
        format: str = "text"
        glossary: list[list[str]] | None = None
        api_key: str | None = None

    class LibreTranslateRequest(BaseModel):
        q: str | list[str]
        source: str = "auto"
        target: str | None = None
        format: str = "text"
        alternatives: int = 0
        api_key: str | None = None

    store = TranslatedFiles(fleet.cfg.keep_files_s, max_bytes=fleet.cfg.max_stored_bytes)
    workers = workers or document_workers(fleet.cfg.file_processes, fleet.cfg.file_seconds)

    @asynccontextmanager
    async def lifespan(app):
        fleet.start()
        yield
        fleet.stop()
        store.close()
        if workers is not None:
            workers.close()

    app = fastapi.FastAPI(title="mtkit", lifespan=lifespan)
    routes = {"/v1/translate", "/translate", "/translate_file", "/suggest", "/frontend/settings", "/languages", "/detect",
              "/health", "/ready", "/v1/models", "/metrics", "/v2/translate", "/v2/languages", "/v2/usage",
              "/v2/glossaries", "/v2/glossary-language-pairs", "/v2/document", "/v3/languages",
              "/v3/glossaries", "/v3/translation_memories"}  # fmt: skip

    def admit(request: Request, body_key: str | None = None):
        """The request's key (None without --api-keys): 403 without a valid one, 429 over its limit."""
        key = gate.identify(body_key or bearer_key(request.headers.get("authorization")))
        request.scope["state"]["key"] = key and key.name  # for the request log and /metrics, never the key
        client = request.scope.get("client")
        gate.limit(key, client[0] if client else None)
        return key

    def admit_status(request: Request) -> None:
        if gate.rules.protect_status:
            admit(request)

    def error(request: Request, status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        deepl = request.url.path.startswith(("/v2/", "/v3/"))
        field = "message" if deepl else "error"  # DeepL's shape on its routes
        return JSONResponse({field: message}, status_code=status, headers=headers)

    @app.exception_handler(RequestError)
    async def request_error(request: Request, err: RequestError):
        return error(request, err.status, err.message, err.headers)

    @app.exception_handler(Refused)
    async def refused(request: Request, err: Refused):  # the engine's: its status at the edge
        return await request_error(request, answered(err))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, err: RequestValidationError):
        return error(request, 422, described(err.errors()))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, err: Exception):  # a bug: the common shape, and uvicorn logs it
        return error(request, 500, f"internal error: {type(err).__name__}: {err}")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException):
        return error(request, err.status_code, str(err.detail), getattr(err, "headers", None))

    if page:
        add_page(app)

    @app.post("/v1/translate")
    async def translate(body: TranslateRequest, request: Request):
        key = admit(request, body.api_key)
        texts = texts_of(body.text)
        with gate.charged(key, sum(map(len, texts))):
            return await translate_v1(body, request, texts)

    async def translate_v1(body: TranslateRequest, request: Request, texts: list[str]):
        async with fleet.route(body.source, body.target, texts, owner_of(request)) as (service, source, target):
            service.check_source(source)
            options = service.options(body.beam, body.nbest, body.lenpen, body.alignment, body.confidence)
            if body.format != "text" and body.confidence:
                raise RequestError(422, f"format {body.format}: confidence is for plain text")
            call = call_of(request)
            asked = Asked(call=call, texts=texts, options=options, source=source, target=target, format=body.format,
                          split=body.split_sentences, glossary=body.glossary)  # fmt: skip
            answer = await translated(fleet.memory, service, asked, key_name(request))
        if body.format != "text":
            return {"translations": answer.texts}
        return {
            "translations": answer.texts,
            **({"confidences": answer.confidences} if answer.confidences is not None else {}),
            **({"missed_terms": call.missed_terms} if call.missed_terms else {}),
            **({"origins": answer.origins} if answer.origins is not None else {}),
        }

    @app.post("/translate")
    async def translate_libretranslate(request: Request):
        try:
            body = LibreTranslateRequest.model_validate(await libretranslate_fields(request))
        except ValidationError as err:
            raise RequestError(400, described(err.errors())) from None
        key = admit(request, body.api_key)
        with gate.charged(key, sum(map(len, texts_of(body.q)))):
            return await libretranslate(fleet, request, body)

    uploads = UploadBudget(UPLOADS_HELD * fleet.cfg.max_file_bytes)  # documents in memory at once, in bytes
    add_file_routes(app, fleet, admit, gate, store, workers, uploads)
    state = state_database(fleet.cfg.state_dir)  # DeepL's glossaries and the keys' usage
    gate.usage, glossaries = Usage(state), GlossaryStore(state)
    if fleet.cfg.state_dir and not is_url(fleet.cfg.state_dir):
        glossaries.take_folder(Path(fleet.cfg.state_dir) / "glossaries")  # an earlier version's files
    add_deepl_routes(app, fleet, admit, gate, DocumentJobs(store, uploads=uploads), glossaries, workers)

    @app.post("/suggest")
    async def suggest(request: Request):
        """LibreTranslate's: a correction (q, its translation s, source, target) kept in the key's memory."""
        fields = await libretranslate_fields(request)
        key = admit(request, fields.get("api_key") if isinstance(fields.get("api_key"), str) else None)
        if fleet.memory is None:
            raise RequestError(403, "Suggestions are disabled on this server.")
        given = {name: fields.get(name) for name in ("q", "s", "source", "target")}
        if missing := [name for name, value in given.items() if not (isinstance(value, str) and value.strip())]:
            raise RequestError(400, f"{missing[0]}: give a non-empty string")
        if max(len(given["q"]), len(given["s"])) > fleet.cfg.max_chars:
            raise RequestError(413, f"a suggestion of more than {fleet.cfg.max_chars:,} characters (--max-chars)")
        try:
            await asyncio.to_thread(fleet.memory.suggest, key and key.name, *given.values())
        except MemoryLimit as err:
            raise RequestError(413, str(err)) from None
        return {"success": True}

    @app.get("/frontend/settings")
    async def settings():
        return frontend_settings(fleet, gate.rules.keys is not None)

    @app.get("/languages")
    async def languages():
        return libretranslate_languages(fleet.languages)

    @app.post("/detect")
    async def detect(request: Request):
        fields = await libretranslate_fields(request)
        admit(request, fields.get("api_key") if isinstance(fields.get("api_key"), str) else None)
        if "q" not in fields:
            raise RequestError(400, "q: Field required")
        guesses = [[guess] for guess in detect_languages(texts_of(fields["q"]))]
        return guesses[0] if isinstance(fields["q"], str) else guesses

    @app.get("/health")
    async def health(request: Request):
        admit_status(request)
        return {"status": "ok"}

    @app.get("/ready")
    async def ready(request: Request):
        admit_status(request)
        if (why := fleet.unready()) is not None:
            raise RequestError(503, why, {"Retry-After": "1"})
        return {"status": "ready", **({"models": fleet.states()} if fleet.several else {})}

    @app.get("/v1/models")
    async def models():
        return {"models": fleet.models()}

    @app.get("/metrics")
    async def metrics(request: Request):
        admit_status(request)
        return PlainTextResponse(prom.generate_latest(fleet.metrics.registry), media_type=prom.CONTENT_TYPE_LATEST)

    file_limit = fleet.cfg.max_file_bytes + (64 << 10)  # the file, and room for the form's other fields
    limited = BodyLimit(app, max_body_bytes(fleet.cfg.max_chars), {"/translate_file": file_limit,
                        "/v2/document": file_limit, UPLOAD_PATH: fleet.cfg.max_file_bytes})  # fmt: skip
    translating = {"/v1/translate", "/translate", "/translate_file", "/v2/translate", "/v2/document"}
    return ObservedApp(limited, fleet.metrics, routes, translating=translating)


def serve(
    served: Service | Fleet,
    host: str,
    port: int,
    listening: Callable[[int], None] = lambda port: None,
    gate: Gate | None = None,
    page: bool = True,
) -> None:
    """Run the service until SIGTERM or Ctrl-C; SIGTERM finishes the requests in flight and returns,
    SIGHUP reads the key file again. listening(port) is called once the socket is bound (port 0
    binds a free one: this says which)."""
    import gc
    import signal
    import sys

    _, _, uvicorn = _require_extra()

    class Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if self.started:
                listening(self.servers[0].sockets[0].getsockname()[1])

    gate = gate or Gate(AccessRules())
    # Many slow or idle connections cost a coroutine each, not a thread; beyond CONNECTIONS uvicorn answers 503.
    config = uvicorn.Config(create_app(served, gate, page), host=host, port=port, log_level="warning", access_log=False,
                            limit_concurrency=CONNECTIONS, timeout_keep_alive=5)  # fmt: skip
    server = Server(config)
    # uvicorn re-raises the signal it stopped for once it is done: let SIGTERM then end us normally (exit 0).
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    previous_hup = signal.signal(signal.SIGHUP, lambda *_: gate.reload_soon())
    # What was imported and built so far (torch's modules, the app) lives as long as the server: kept
    # out of the collector's full passes, which had walked it all, holding the interpreter 100-200 ms
    # while requests made many objects. The models load later, unfrozen: one unloaded is freed.
    gc.collect()
    gc.freeze()
    # The event loop takes the interpreter back after each wait for sockets; a thread busy in Python
    # (a glossary's terms matched, a request prepared) hands it over only when asked and this long
    # has passed: Python's 5 ms, many times over before one request is answered, held `/health`
    # 130-210 ms under the glossary attack (1 ms: 70-90 ms, with the same throughput).
    previous_interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        server.run()
    except SystemExit:  # uvicorn exits when it cannot bind (and has logged why)
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGHUP, previous_hup)
        sys.setswitchinterval(previous_interval)
    if not server.started:
        raise MtkitError(f"could not serve on {host}:{port} (is the port in use?)")
