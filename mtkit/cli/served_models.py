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

    decoding: Any  # Decoding (mtkit.interop.engines): its max_tokens serve's --max-batch-tokens
    engine_processes: bool
    serve_cfg: Any  # ServeConfig
    calibration: Path | None = None
    glossary: Path | None = None
    case_sensitive_terms: bool = False
    each_beam: bool = False  # cfg's beam replaced by each model's default (no --beam with several models)


def service_for(loading: Loading, model: Path, src_lang: str | None, tgt_lang: str | None, metrics=None):
    """The Service of a model (metrics: the server's, where it serves several); bad models fail here."""
    from mtkit.serving.service import Service

    make, tokenizers, info, search = read_model(loading, model, src_lang, tgt_lang)
    engine, calibrated = loading.decoding.engine, None
    if engine == "pytorch":
        from mtkit.translation.confidence import calibration_for

        calibrated = calibration_for(loading.calibration, info.path)
    refused = engine != "pytorch" or loading.decoding.mbr is not None
    terms = server_terms(tokenizers, info, loading.glossary, loading.case_sensitive_terms, refused)
    service = Service(make, tokenizers, search, info, loading.serve_cfg, calibrated, terms, metrics)
    if loading.serve_cfg.tm_steer:  # a copy of this version of the model, which fuzzy matches train
        from mtkit.model.files import load_model_file
        from mtkit.training.adaptation import Steering

        service.steering = Steering(load_model_file(model, loading.decoding.checkpoint), search)
    return service


def read_model(loading: Loading, model: Path, src_lang: str | None, tgt_lang: str | None):
    """load() with serve's options, and the model checked against them; and its search settings."""
    from mtkit.text.targets import LANGUAGE_TOKENS

    decoding = loading.decoding
    if loading.each_beam:
        from mtkit.cli.options import model_beam

        beam = model_beam(None, decoding.engine, [model], decoding.checkpoint)
        decoding = dataclasses.replace(decoding, search=dataclasses.replace(decoding.search, beam=beam))
    make, tokenizers, info = load(model, decoding, src_lang, tgt_lang, loading.engine_processes)
    if loading.serve_cfg.confidence and info.meta.get(LANGUAGE_TOKENS):
        raise MtkitError("--confidence: not for a model with language tokens (NLLB, M2M100)")
    return make, tokenizers, info, decoding.search


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


def load(model: Path, decoding, src_lang: str | None, tgt_lang: str | None, engine_processes: bool = False):
    """What makes the engine's translator (on the server's worker thread, or in each replica's process:
    then an EngineSpec that loads the model there), the tokenizers, and the model's name, languages
    and the file /v1/models checksums. Bad models and options fail here."""
    from mtkit.interop.engines import build_translator
    from mtkit.serving.replicas import EngineSpec

    if decoding.engine == "ctranslate2":
        translator = build_translator(decoding, [model], lines=False)
        info = model_info(
            model.name, model / "model.bin", decoding.engine, translator.meta.get("source", {}), src_lang, tgt_lang
        )
        tokenizers = translator.src_tokenizer, translator.tgt_tokenizer
        if engine_processes:
            return EngineSpec(model, decoding), tokenizers, info
        return (lambda: translator), tokenizers, info
    if decoding.engine != "pytorch":
        raise MtkitError(f"--engine {decoding.engine}: must be pytorch or ctranslate2")
    from mtkit.core.device import resolve_device, resolve_precision
    from mtkit.decoding.cuda_graphs import check_device
    from mtkit.model.files import load_model_file, resolve_model_path

    resolved = resolve_device(decoding.device)
    resolve_precision(decoding.precision, resolved)  # refuse bad values now, not on the worker
    if decoding.cuda_graphs:
        check_device(resolved)
    path = resolve_model_path(model, decoding.checkpoint)
    model_file = load_model_file(path)
    info = model_info(path.name, path, decoding.engine, model_file.meta, src_lang, tgt_lang)
    tokenizers = model_file.src_tokenizer, model_file.tgt_tokenizer
    spec = EngineSpec(path, dataclasses.replace(decoding, checkpoint="best"))  # (the file itself, resolved)
    if engine_processes:
        return spec, tokenizers, info
    return functools.partial(spec.build, model_file), tokenizers, info


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
