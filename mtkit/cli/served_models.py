"""The models `mtkit serve` serves: a model file read (its tokenizers, languages and information), the
engine it translates with made, its service built (mtkit.serving.service); and for several models
(-m repeated, or --models FILE) the slots of mtkit.serving.fleet, each read now and loaded on first use."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtkit.core.console import warn
from mtkit.core.errors import MtkitError
from mtkit.core.textio import iter_lines


@dataclass
class Loading:
    """What each served model is loaded with: serve's options."""

    engine: str
    checkpoint: str
    cfg: Any  # SearchConfig
    device: str
    precision: str
    cuda_graphs: bool
    engine_processes: bool
    mbr: Any  # MbrConfig or None
    serve_cfg: Any  # ServeConfig
    calibration: Path | None = None
    glossary: Path | None = None
    case_sensitive_terms: bool = False
    each_beam: bool = False  # cfg's beam replaced by each model's default (no --beam with several models)


def service_for(loading: Loading, model: Path, src_lang: str | None, tgt_lang: str | None, metrics=None):
    """The Service of a model (metrics: the server's, where it serves several); bad models fail here."""
    from mtkit.serving.service import Service

    make, tokenizers, info, search = read_model(loading, model, src_lang, tgt_lang)
    calibrated = None
    if loading.engine == "pytorch":
        from mtkit.translation.confidence import calibration_for

        calibrated = calibration_for(loading.calibration, info.path)
    refused = loading.engine != "pytorch" or loading.mbr is not None
    terms = server_terms(tokenizers, info, loading.glossary, loading.case_sensitive_terms, refused)
    service = Service(make, tokenizers, search, info, loading.serve_cfg, calibrated, terms, metrics)
    if loading.serve_cfg.tm_steer:  # a copy of this version of the model, which fuzzy matches train
        from mtkit.model.files import load_model_file
        from mtkit.training.adaptation import Steering

        service.steering = Steering(load_model_file(model, loading.checkpoint), search)
    return service


def read_model(loading: Loading, model: Path, src_lang: str | None, tgt_lang: str | None):
    """load() with serve's options, and the model checked against them; and its search settings."""
    from mtkit.text.targets import LANGUAGE_TOKENS

    cfg = loading.cfg
    if loading.each_beam:
        from mtkit.cli.options import model_beam

        cfg = dataclasses.replace(cfg, beam=model_beam(None, loading.engine, [model], loading.checkpoint))
    make, tokenizers, info = load(
        loading.engine, model, loading.checkpoint, cfg, loading.device, loading.precision,
        loading.serve_cfg.max_batch_tokens, loading.cuda_graphs, tgt_lang, loading.engine_processes, src_lang,
        loading.mbr,
    )  # fmt: skip
    if loading.serve_cfg.confidence and info.meta.get(LANGUAGE_TOKENS):
        raise MtkitError("--confidence: not for a model with language tokens (NLLB, M2M100)")
    return make, tokenizers, info, cfg


def read_models_file(path: Path) -> list[tuple[Path, str | None, str | None]]:
    """--models FILE: a model a line, `PATH [SOURCE TARGET]` (its languages, where its file does not name
    them), a path relative to the file's folder; blank lines and # comments skipped."""
    models = []
    for number, line in enumerate(iter_lines(path), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) not in (1, 3):
            raise MtkitError(f"{path}:{number}: expected PATH or PATH SOURCE TARGET, got {len(fields)} fields")
        model = Path(fields[0]) if Path(fields[0]).is_absolute() else path.parent / fields[0]
        models.append((model, *fields[1:]) if len(fields) == 3 else (model, None, None))
    if not models:
        raise MtkitError(f"{path}: names no model")
    return models


def served_name(model: Path, taken: set[str]) -> str:
    """A model's name in /v1/models and the metrics: its file's stem, or its folder's name where the file
    is a run's generic model.pt or the model is a folder; -2, -3 ... after a name already taken."""
    if model.is_dir():
        name = model.name
    elif model.suffix == ".pt" and model.stem in ("model", "checkpoint_best"):
        name = model.parent.name
    else:
        name = model.stem
    unique, n = name, 1
    while unique in taken:
        n += 1
        unique = f"{name}-{n}"
    taken.add(unique)
    return unique


def slots(loading: Loading, models: list[tuple[Path, str | None, str | None]]) -> list:
    """A fleet's slots: each model's file read now (its languages; one that cannot be read is named and
    the others serve), its service built when it is first needed."""
    from mtkit.serving.fleet import Slot
    from mtkit.serving.settings import Languages

    out, taken = [], set()
    for model, src_lang, tgt_lang in models:
        name, build = served_name(model, taken), functools.partial(service_for, loading, model, src_lang, tgt_lang)
        try:
            _, tokenizers, info, _ = read_model(loading, model, src_lang, tgt_lang)
            languages = Languages(info.meta, info.source_language, info.target_language, tokenizers[0])
            if not [pair for pair in languages.directions() if all(pair)]:
                raise MtkitError(
                    "its file does not name its languages: give them in --models FILE (PATH SOURCE TARGET)"
                )
        except MtkitError as err:
            warn(f"model {name} ({model}) is not served: {err}")
            out.append(Slot(name, None, None, build, error=str(err), path=str(model)))
            continue
        out.append(Slot(name, info, languages, build, path=str(model)))
    return out


def server_terms(tokenizers, info, glossary: Path | None, case_sensitive: bool, refused: bool):
    """--glossary for every request, and whether requests may bring their own (mtkit.serving.terms)."""
    from mtkit.serving.terms import ServerTerms
    from mtkit.text.glossary import read_glossary

    why = "terms need mtkit's own beam search: not --engine ctranslate2 or --mbr" if refused else None
    if glossary is not None and why:
        raise MtkitError(f"--glossary: {why}")
    terms = read_glossary(glossary, info.source_language, info.target_language) if glossary else []
    return ServerTerms(*tokenizers, terms, case_sensitive, why)


def load(
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
        translator = make_translator(
            engine, [model], checkpoint, cfg, device, precision, 128, max_tokens, cuda_graphs, mbr=mbr, keep_spans=False
        )  # fmt: skip (the engine bans what serve masks)
        info = model_info(
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
    info = model_info(path.name, path, engine, model_file.meta, src_lang, tgt_lang)

    tokenizers = model_file.src_tokenizer, model_file.tgt_tokenizer
    if engine_processes:
        return EngineSpec(engine, path, cfg, device, precision, max_tokens, cuda_graphs, mbr), tokenizers, info

    def make() -> Translator:
        if mbr is not None:
            return MbrTranslator(model_file, cfg, mbr, device, precision, 128, max_tokens, cuda_graphs)
        return Translator(model_file, cfg, device, precision, 128, max_tokens, cuda_graphs)

    return make, tokenizers, info


def model_info(name: str, path: Path, engine: str, meta: dict, src_lang: str | None, tgt_lang: str | None):
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
