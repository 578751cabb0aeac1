"""The serve command: a model behind HTTP (mtkit.serving.http)."""

from __future__ import annotations

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
    ModelOption,
    NoRepeatOption,
    PrecisionOption,
    RecaseOption,
    SrcLangOption,
    TgtLangOption,
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
    model: ModelOption,
    engine: EngineOption = "pytorch",
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0: every interface).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    max_batch_tokens: Annotated[
        int, typer.Option(help="Most source subwords translated together (a batch, or the running search).")
    ] = 4096,
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
    state_dir: Annotated[
        Path | None,
        typer.Option(
            help="A folder for what outlives the server: glossaries made through DeepL's API "
            "(default: kept in memory).",
            show_default=False,
        ),
    ] = None,
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

    Example: [bold]mtkit serve -m model.pt --port 8000[/bold], then
    [bold]curl -s localhost:8000/v1/translate -H 'Content-Type: application/json' -d '{"text": "A dog runs."}'[/bold]
    """
    from mtkit.serving.access import AccessRules, Gate, KeyFile
    from mtkit.serving.http import _require_extra
    from mtkit.serving.http import serve as run_server
    from mtkit.serving.service import Service
    from mtkit.serving.settings import ServeConfig

    _require_extra()
    if not 0 <= port <= 65535:
        raise MtkitError(f"--port {port}: must be between 0 and 65535")
    replicas, engine_process = _layout(replicas, engine_process, engine, device)
    serve_cfg = ServeConfig(
        max_batch_tokens, max_wait_ms, max_queue, max_chars, split_sentences, max_source_len, max_texts, replicas,
        confidence, max_file_bytes, keep_files, not engine_process, keep_spans, recase, max_file_chars,
        max_stored_bytes, public_url, file_processes, state_dir,
    )  # fmt: skip
    serve_cfg.validate()
    if (confidence or calibration) and engine != "pytorch":
        raise MtkitError("--confidence needs --engine pytorch: its signals come from the model")
    rules = AccessRules(KeyFile(api_keys) if api_keys else None, req_limit, private_status)
    rules.validate()
    beam = model_beam(beam, engine, [model], checkpoint)
    cfg = search_config(beam, lenpen, max_len_a, max_len_b, min_len, 1, no_repeat_ngram, loop_ngram, loop_repeats)
    mbr_cfg = mbr_config(mbr, mbr_source, epsilon, mbr_utility)
    if glossary is not None and cfg.beam == 1:
        raise MtkitError("--glossary needs beam search: --beam 2 or more")
    make, tokenizers, info = _load(
        engine, model, checkpoint, cfg, device, precision, serve_cfg.max_batch_tokens, cuda_graphs, tgt_lang,
        engine_process, src_lang, mbr_cfg,
    )  # fmt: skip
    from mtkit.text.targets import LANGUAGE_TOKENS

    calibrated = None
    if engine == "pytorch":
        from mtkit.translation.confidence import calibration_for

        calibrated = calibration_for(calibration, info.path)
    if confidence and info.meta.get(LANGUAGE_TOKENS):
        raise MtkitError("--confidence: not for a model with language tokens (NLLB, M2M100)")
    service = Service(make, tokenizers, cfg, info, serve_cfg, calibrated,
                      _server_terms(tokenizers, info, glossary, case_sensitive_terms, engine != "pytorch" or mbr_cfg))  # fmt: skip
    languages = f"{info.source_language or '?'}->{info.target_language or '?'}"
    run_server(
        service,
        host,
        port,
        lambda bound: console.info(f"serving {info.name} ({languages}, {engine}) on http://{host}:{bound}"),
        Gate(rules),
        not no_page,
    )
    console.info("stopped")


def _layout(replicas: int | None, engine_process: bool | None, engine: str, device: str) -> tuple[int, bool]:
    """How many engines, and whether in processes of their own: as asked; by default, with the PyTorch
    engine on a CPU, one per decoding thread (at most MAX_AUTO_REPLICAS; on 2 cores two single-threaded
    engines served beam 5 at 32 clients 1.3x as fast as one with both threads: docs/RESULTS.md), and
    in processes of their own where there are several or on a GPU."""
    import torch

    from mtkit.core.device import resolve_device

    on_cpu = resolve_device(device).type == "cpu"
    if replicas is None:
        alone = engine_process is False or engine != "pytorch" or not on_cpu
        replicas = 1 if alone else max(1, min(torch.get_num_threads(), MAX_AUTO_REPLICAS))
    if engine_process is False and replicas > 1:
        raise MtkitError(f"--in-process runs one engine, in the server's process: not --replicas {replicas}")
    return replicas, engine_process if engine_process is not None else replicas > 1 or not on_cpu


def _server_terms(tokenizers, info, glossary: Path | None, case_sensitive: bool, refused: bool):
    """--glossary for every request, and whether requests may bring their own (mtkit.serving.terms)."""
    from mtkit.serving.terms import ServerTerms
    from mtkit.text.glossary import read_glossary

    why = "terms need mtkit's own beam search: not --engine ctranslate2 or --mbr" if refused else None
    if glossary is not None and why:
        raise MtkitError(f"--glossary: {why}")
    terms = read_glossary(glossary, info.source_language, info.target_language) if glossary else []
    return ServerTerms(*tokenizers, terms, case_sensitive, why)


def _load(
    engine: str,
    model: Path,
    checkpoint: str,
    cfg,
    device: str,
    precision: str,
    max_tokens: int,
    cuda_graphs: bool,
    tgt_lang: str | None,
    engine_processes: bool = False,
    src_lang: str | None = None,
    mbr=None,
):
    """What makes the engine's translator (on the server's worker thread, or in each replica's process:
    then an EngineSpec that loads the model there), the tokenizers, and the model's name, languages
    and the file /v1/models checksums. Bad models and options fail here."""
    from mtkit.interop.engines import make_translator
    from mtkit.serving.replicas import EngineSpec

    if engine == "ctranslate2":
        translator = make_translator(engine, [model], checkpoint, cfg, device, precision, 128, max_tokens, cuda_graphs,
                                     mbr=mbr)  # fmt: skip
        info = _model_info(
            model.name, model / "model.bin", engine, translator.meta.get("source", {}), src_lang, tgt_lang
        )
        tokenizers = translator.src_tokenizer, translator.tgt_tokenizer
        if engine_processes:
            return EngineSpec(engine, model, cfg, device, precision, max_tokens, cuda_graphs), tokenizers, info
        return (lambda: translator), tokenizers, info
    if engine != "pytorch":
        raise MtkitError(f"--engine {engine}: must be pytorch or ctranslate2")
    from mtkit.core.device import resolve_device, resolve_precision
    from mtkit.decoding.cuda_graphs import check_device
    from mtkit.model.files import load_model_file, resolve_model_path
    from mtkit.translation.mbr import MbrTranslator
    from mtkit.translation.translate import Translator

    resolved = resolve_device(device)
    resolve_precision(precision, resolved)  # refuse bad values now, not on the worker
    if cuda_graphs:
        check_device(resolved)
    path = resolve_model_path(model, checkpoint)
    model_file = load_model_file(path)
    info = _model_info(path.name, path, engine, model_file.meta, src_lang, tgt_lang)

    tokenizers = model_file.src_tokenizer, model_file.tgt_tokenizer
    if engine_processes:
        return EngineSpec(engine, path, cfg, device, precision, max_tokens, cuda_graphs, mbr), tokenizers, info

    def make() -> Translator:
        if mbr is not None:
            return MbrTranslator(model_file, cfg, mbr, device, precision, 128, max_tokens, cuda_graphs)
        return Translator(model_file, cfg, device, precision, 128, max_tokens, cuda_graphs)

    return make, tokenizers, info


def _model_info(name: str, path: Path, engine: str, meta: dict, src_lang: str | None, tgt_lang: str | None):
    """The served model's information, with --src-lang and --tgt-lang as its default languages; wrong
    ones fail now (the service frames each request's pieces itself: mtkit.serving.settings)."""
    from mtkit.serving.settings import ModelInfo
    from mtkit.text.targets import LANGUAGE_TOKENS, model_language, target_tag

    source, target = src_lang or meta.get("src_lang"), tgt_lang or meta.get("tgt_lang")
    if meta.get(LANGUAGE_TOKENS):
        codes = list(meta[LANGUAGE_TOKENS])
        source = model_language(codes, source, "--src-lang") if source else None
        target = model_language(codes, target, "--tgt-lang") if target else None
    else:
        if tgt_lang is not None:
            target_tag(meta, tgt_lang)
        if src_lang is not None and meta.get("src_lang") not in (None, src_lang):
            raise MtkitError(f"--src-lang {src_lang}: this model translates from {meta['src_lang']} only")
    return ModelInfo(name, path, engine, source, target, meta)
