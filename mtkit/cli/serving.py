"""The serve command: a model behind HTTP (mtkit.api.app)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import typer

from mtkit.cli.app import app, handle_errors
from mtkit.cli.options import (
    CaseSensitiveTermsOption,
    CheckpointOption,
    CudaGraphsOption,
    DeviceOption,
    EngineOption,
    EpsilonOption,
    GlossaryOption,
    KeepSpansOption,
    LenpenOption,
    LoopNgramOption,
    LoopRepeatsOption,
    MaxLenAOption,
    MaxLenBOption,
    MaxSourceLenOption,
    MbrOption,
    MbrSourceOption,
    MbrUtilityOption,
    MinLenOption,
    ModelBeamOption,
    NoRepeatOption,
    PrecisionOption,
    RecaseOption,
    SrcLangOption,
    TgtLangOption,
    TmSteerOption,
    mbr_config,
    model_beam,
    search_config,
)
from mtkit.core import console
from mtkit.core.errors import MtkitError

MAX_AUTO_REPLICAS = 4  # serve's default engines on a CPU at most (measured on 2 cores only)


@app.command()
@handle_errors
def serve(
    model: Annotated[
        list[Path] | None,
        typer.Option(
            "--model",
            "-m",
            help="Model file or run directory; repeat it to serve several, each request routed by its languages.",
            show_default=False,
        ),
    ] = None,
    models_file: Annotated[
        Path | None,
        typer.Option(
            "--models",
            metavar="FILE",
            help="Models to serve, a line each: PATH [SOURCE TARGET] (languages where the file does not name them).",
            show_default=False,
        ),
    ] = None,
    pivot: Annotated[
        str, typer.Option(metavar="LANG", help="Several models: a pair no model translates goes through this language.")
    ] = "en",
    max_loaded: Annotated[
        int, typer.Option(help="Several models: most loaded at once, the least recently used unloaded (0: all).")
    ] = 0,
    load_timeout: Annotated[
        float, typer.Option(help="Seconds a request waits for its model to load; beyond, 503.")
    ] = 300.0,
    model_turn: Annotated[
        float,
        typer.Option(
            help="Several models: seconds a model, once loaded, is not unloaded and takes new requests while "
            "others wait for its room (then it gives way to requests that came first)."
        ),
    ] = 5.0,
    max_loads: Annotated[
        int,
        typer.Option(
            help="Several models: model loads one client (key or address) may cause a minute (0: any); beyond, 503."
        ),
    ] = 12,
    engine: EngineOption = "pytorch",
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0: every interface).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    max_batch_tokens: Annotated[
        int, typer.Option(help="Most source subwords translated together (a batch, or the running search).")
    ] = 4096,
    max_client_tokens: Annotated[
        int,
        typer.Option(
            help="Most of those subwords one client's sentences (a key's, or an address's without keys) hold "
            "while another client's wait or search beside them: one client's thousand sentences do not slow "
            "every step of another's one. --max-batch-tokens' value: no limit."
        ),
    ] = 128,
    max_wait_ms: Annotated[
        float, typer.Option(help="Longest wait for other requests' sentences to batch with (0: no batching wait).")
    ] = 20.0,
    max_queue: Annotated[int, typer.Option(help="Most sentences waiting; beyond, requests get 503.")] = 2048,
    max_chars: Annotated[int, typer.Option(help="Most characters per request; beyond, 413.")] = 20000,
    replicas: Annotated[
        int | None,
        typer.Option(
            help="Engine processes, each with its own copy of the model and a share of the CPU threads "
            f"(default: with the PyTorch engine on a CPU one per decoding thread, at most {MAX_AUTO_REPLICAS}, "
            "each on one thread; else one).",
            show_default=False,
        ),
    ] = None,
    engine_process: Annotated[
        bool | None,
        typer.Option(
            "--engine-process/--in-process",
            help="The engine in a process of its own, started again if it dies, or on a thread of the HTTP "
            "process (default: its own process on a GPU or with more than one replica).",
            show_default=False,
        ),
    ] = None,
    max_texts: Annotated[
        int, typer.Option(help="Most texts per request (0: as many as the queue holds); beyond, 413.")
    ] = 0,
    max_file_bytes: Annotated[
        int, typer.Option(help="Largest document /translate_file takes, in bytes; beyond, 413.")
    ] = 20 << 20,
    keep_files: Annotated[float, typer.Option(help="Seconds a translated document waits for its download.")] = 3600.0,
    max_file_chars: Annotated[
        int, typer.Option(help="Most characters of text in one document /translate_file takes; beyond, 413.")
    ] = 1_000_000,
    max_stored_bytes: Annotated[
        int, typer.Option(help="Most bytes of translated documents kept for download; beyond, the oldest go first.")
    ] = 1 << 30,
    file_processes: Annotated[
        int, typer.Option(help="Processes that read and write uploaded documents (off the server's own).")
    ] = 1,
    file_seconds: Annotated[
        float,
        typer.Option(help="Most CPU seconds a worker spends reading and writing one uploaded document; beyond, 413."),
    ] = 10.0,
    state_dir: Annotated[
        str | None,
        typer.Option(
            help="Where what outlives the server is kept: glossaries made through DeepL's API and the keys' "
            "character usage. A folder (its state.db), or a postgresql:// URL that several servers behind one "
            "address share (default: kept in memory).",
            show_default=False,
        ),
    ] = None,
    tm: Annotated[
        str | None,
        typer.Option(
            "--tm",
            help="A translation memory (SQLite file, made where missing, or a postgresql:// URL that several "
            "servers share): LibreTranslate's /suggest adds each key's corrections to it, and a text it holds "
            "whole is answered from it.",
            show_default=False,
        ),
    ] = None,
    tm_steer: TmSteerOption = 0,
    public_url: Annotated[
        str | None,
        typer.Option(
            help="The URL clients reach the server at (behind a proxy: its public one), for translatedFileUrl "
            "(default: a URL relative to the server's root; never the request's Host header).",
            show_default=False,
        ),
    ] = None,
    api_keys: Annotated[
        Path | None,
        typer.Option(
            help="File of API keys, one a line: KEY [REQUESTS_PER_MINUTE [NAME [CHARACTERS]]]; without one, 403."
        ),
    ] = None,
    req_limit: Annotated[
        int, typer.Option(help="Without --api-keys: requests per minute per client address (0: no limit); beyond, 429.")
    ] = 0,
    no_page: Annotated[bool, typer.Option("--no-page", help="No translation page at /: the JSON API alone.")] = False,
    private_status: Annotated[
        bool, typer.Option("--private-status", help="/health, /ready and /metrics need an API key too.")
    ] = False,
    checkpoint: CheckpointOption = "best",
    beam: ModelBeamOption = None,
    lenpen: LenpenOption = 0.6,
    max_len_a: MaxLenAOption = 1.0,
    max_len_b: MaxLenBOption = 50,
    min_len: MinLenOption = 1,
    no_repeat_ngram: NoRepeatOption = 0,
    loop_ngram: LoopNgramOption = 4,
    loop_repeats: LoopRepeatsOption = 2,
    mbr: MbrOption = 0,
    mbr_source: MbrSourceOption = "sample",
    epsilon: EpsilonOption = 0.02,
    mbr_utility: MbrUtilityOption = "chrf",
    glossary: GlossaryOption = None,
    case_sensitive_terms: CaseSensitiveTermsOption = False,
    confidence: Annotated[
        bool,
        typer.Option("--confidence", help="Answer each text with a confidence in [0, 1] unless a request says no."),
    ] = False,
    calibration: Annotated[
        Path | None, typer.Option(help="The confidences' calibration (default: MODEL.confidence.json where it exists).")
    ] = None,
    split_sentences: Annotated[
        bool,
        typer.Option(
            "--split-sentences/--no-split-sentences",
            help="Translate texts sentence by sentence unless a request says otherwise.",
        ),
    ] = True,
    keep_spans: KeepSpansOption = True,
    recase: RecaseOption = True,
    max_source_len: MaxSourceLenOption = 0,
    src_lang: SrcLangOption = None,
    tgt_lang: TgtLangOption = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    cuda_graphs: CudaGraphsOption = False,
) -> None:
    """Serve a model over HTTP: a translation page at /, /v1/translate, LibreTranslate's /translate and /translate_file, /health, /ready, /v1/models, /metrics.

    Sentences of concurrent requests are batched together (up to --max-batch-tokens, waiting at
    most --max-wait-ms); with the PyTorch engine, a search starts at once and sentences that
    arrive later join it between decoding steps. SIGTERM finishes the requests in flight, then
    exits. On the open network (--host 0.0.0.0), --api-keys asks every request for a key and limits
    each key's requests per minute, or --req-limit limits each client address. Needs pip install
    'mtkit\\[serve]'.

    Several models (-m A -m B ..., or --models FILE) are served as one: a request goes to a model that
    translates its languages (with source auto, the language its text is in), or through --pivot
    where none does; models load on first use, at most --max-loaded at once. A served model file written
    again (mtkit adapt -o FILE, or a new file renamed over it) is swapped in without dropping a request.

    Example: [bold]mtkit serve -m model.pt --port 8000[/bold], then
    [bold]curl -s localhost:8000/v1/translate -H 'Content-Type: application/json' -d '{"text": "A dog runs."}'[/bold]
    """
    from mtkit.api.access import AccessRules, Gate, KeyFile
    from mtkit.api.app import _require_extra
    from mtkit.api.app import serve as run_server
    from mtkit.cli.served_models import Loading, read_models_file, service_for, slots
    from mtkit.core.device import bound_kernel_caches
    from mtkit.interop.engines import Decoding
    from mtkit.serving.fleet import Fleet
    from mtkit.serving.settings import ServeConfig

    bound_kernel_caches()  # before any model runs here or in the engine processes started from here
    _require_extra()
    if not 0 <= port <= 65535:
        raise MtkitError(f"--port {port}: must be between 0 and 65535")
    models = [(path, src_lang, tgt_lang) for path in model or []] + (
        read_models_file(models_file) if models_file else []
    )
    if not models:
        raise MtkitError("give a model: -m MODEL (repeat it for several) or --models FILE")
    several = len(models) > 1
    replicas, engine_process = _layout(replicas, engine_process, engine, device, several)
    serve_cfg = ServeConfig(
        max_batch_tokens=max_batch_tokens, max_client_tokens=max_client_tokens, max_wait_ms=max_wait_ms,
        max_queue=max_queue, max_chars=max_chars, split_sentences=split_sentences, max_source_len=max_source_len,
        max_texts=max_texts, replicas=replicas,
        confidence=confidence, max_file_bytes=max_file_bytes, keep_files_s=keep_files, in_process=not engine_process,
        keep_spans=keep_spans, recase=recase, max_file_chars=max_file_chars, max_stored_bytes=max_stored_bytes,
        public_url=public_url, file_processes=file_processes, file_seconds=file_seconds, state_dir=state_dir, tm=tm,
        tm_steer=tm_steer,
    )  # fmt: skip
    serve_cfg.validate()
    if (confidence or calibration) and engine != "pytorch":
        raise MtkitError("--confidence needs --engine pytorch: its signals come from the model")
    rules = AccessRules(KeyFile(api_keys) if api_keys else None, req_limit, private_status)
    rules.validate()
    if load_timeout <= 0:
        raise MtkitError(f"--load-timeout {load_timeout:g}: must be more than 0 seconds")
    if model_turn < 0 or max_loads < 0:
        bad = f"--model-turn {model_turn:g}" if model_turn < 0 else f"--max-loads {max_loads}"
        raise MtkitError(f"{bad}: must be at least 0")
    if tm_steer and (not tm or several or engine != "pytorch"):
        raise MtkitError(
            "--tm-steer: give --tm, one model and --engine pytorch (a copy of the model trains on the matches)"
        )
    if several:
        _check_several(src_lang, tgt_lang, glossary, calibration, max_loaded)
    each_beam = several and beam is None  # each model's own default (a model that cannot be read fails alone)
    beam = 5 if each_beam else model_beam(beam, engine, [models[0][0]], checkpoint)
    cfg = search_config(beam=beam, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b, min_len=min_len,
                        no_repeat_ngram=no_repeat_ngram, loop_ngram=loop_ngram, loop_repeats=loop_repeats)  # fmt: skip
    if glossary is not None and cfg.beam == 1:
        raise MtkitError("--glossary needs beam search: --beam 2 or more")
    decoding = Decoding(search=cfg, engine=engine, checkpoint=checkpoint, device=device, precision=precision,
                        max_tokens=max_batch_tokens, cuda_graphs=cuda_graphs,
                        mbr=mbr_config(mbr, mbr_source, epsilon, mbr_utility))  # fmt: skip
    loading = Loading(decoding=decoding, engine_processes=engine_process, serve_cfg=serve_cfg, calibration=calibration,
                      glossary=glossary, case_sensitive_terms=case_sensitive_terms, each_beam=each_beam)  # fmt: skip
    if several:
        served = Fleet(slots(loading, models), serve_cfg, pivot, max_loaded, load_timeout, turn_s=model_turn,
                       max_loads=max_loads)  # fmt: skip
        names = ", ".join(slot.name for slot in served.slots if slot.error is None)
        what = f"{len(served.slots)} models ({names}; at most {served.max_loaded} loaded)"
    else:
        service = service_for(loading, *models[0])
        rebuild = functools.partial(service_for, loading, *models[0])  # (metrics): its file's new version
        served, info = Fleet.single(service, load_timeout, models[0][0], rebuild), service.info
        what = f"{info.name} ({info.source_language or '?'}->{info.target_language or '?'}, {engine})"
    run_server(served, host, port, lambda bound: console.info(f"serving {what} on http://{host}:{bound}"), Gate(rules),
               not no_page)  # fmt: skip
    console.info("stopped")


def _check_several(src_lang, tgt_lang, glossary, calibration, max_loaded: int) -> None:
    """Options that are of one model, or out of range, with several."""
    for option, value in (("--src-lang", src_lang), ("--tgt-lang", tgt_lang), ("--glossary", glossary),
                          ("--calibration", calibration)):  # fmt: skip
        if value is not None:
            where = "give languages in --models FILE" if "lang" in option else "each model's own is used"
            raise MtkitError(f"{option}: of one model, not of several ({where})")
    if max_loaded < 0:
        raise MtkitError(f"--max-loaded {max_loaded}: must be at least 0 (0: all)")


def _layout(
    replicas: int | None, engine_process: bool | None, engine: str, device: str, several: bool = False
) -> tuple[int, bool]:
    """How many engines, and whether in processes of their own: as asked; by default, with the PyTorch
    engine on a CPU, one per decoding thread (at most MAX_AUTO_REPLICAS; on 2 cores two single-threaded
    engines served beam 5 at 32 clients 1.3x as fast as one with both threads: docs/RESULTS.md), and
    in processes of their own where there are several or on a GPU. Several models on a CPU: each
    model's engine on a thread of the server (six quick models: a fifth of the memory of two engine
    processes each, a cold load in 0.5 s instead of 8 s, a mix of pairs at 0.83x: docs/results/serving.md)."""
    import torch

    from mtkit.core.device import resolve_device

    on_cpu = resolve_device(device).type == "cpu"
    if several and on_cpu and replicas is None and engine_process is None:
        engine_process = False
    if replicas is None:
        alone = engine_process is False or engine != "pytorch" or not on_cpu
        replicas = 1 if alone else max(1, min(torch.get_num_threads(), MAX_AUTO_REPLICAS))
    if engine_process is False and replicas > 1:
        raise MtkitError(f"--in-process runs one engine, in the server's process: not --replicas {replicas}")
    return replicas, engine_process if engine_process is not None else replicas > 1 or not on_cpu
