"""The decoding engines: which translator `--engine` names, for one model or an ensemble."""

from __future__ import annotations

from pathlib import Path

from mtkit.core.config import default_beam
from mtkit.core.errors import MtkitError
from mtkit.decoding.search_rules import SearchConfig
from mtkit.text.sentence_splitter import require_splitter
from mtkit.translation.mbr import MbrConfig, MbrTranslator
from mtkit.translation.translate import TextTranslator, Translator

COMPUTE_TYPES = {"auto": "default", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def default_beam_of(engine: str, models: list[Path], checkpoint: str = "best") -> int:
    """The beam the (first) model decodes with unless told otherwise: 1 for a transformer-student,
    else 5 (mtkit.core.config.default_beam); an exported model keeps its model's."""
    if engine == "ctranslate2":
        from mtkit.interop.ct2 import exported_beam

        return exported_beam(models[0])
    from mtkit.model.files import model_preset, resolve_model_path

    return default_beam(model_preset(resolve_model_path(models[0], checkpoint)))


def make_translator(
    engine: str,
    models: list[Path],
    checkpoint: str,
    cfg: SearchConfig,
    device: str,
    precision: str,
    batch_size: int,
    max_tokens: int,
    cuda_graphs: bool = False,
    split_sentences: bool = True,
    max_source_len: int = 0,
    tgt_lang: str | None = None,
    src_lang: str | None = None,
    mbr: MbrConfig | None = None,
    keep_spans: bool = True,
    recase: bool = True,
) -> TextTranslator:
    """The engine's translator for one model, or (PyTorch) for an ensemble of several; lines cut into
    sentences with split_sentences, and lines longer than max_source_len subwords (0: the model's
    training limit) into pieces (mtkit.translation.sentences); tgt_lang: the target, for a model of several,
    and src_lang the source, for a model with language tokens (mtkit.text.targets); mbr: minimum Bayes
    risk decoding (mtkit.translation.mbr) instead of the search; keep_spans, recase: numbers, links, ...
    kept as written, and ALL CAPS or Title Case translated in sentence case (mtkit.translation.sentences)."""
    if split_sentences:
        require_splitter()  # before the model loads
    translator: TextTranslator
    if engine == "pytorch":
        from mtkit.decoding.ensemble import check_compatible
        from mtkit.model.files import load_model_file

        files = [load_model_file(model, checkpoint) for model in models]
        check_compatible(files, [str(model) for model in models])
        if mbr is not None:
            translator = MbrTranslator(files, cfg, mbr, device, precision, batch_size, max_tokens, cuda_graphs)
        else:
            translator = Translator(files, cfg, device, precision, batch_size, max_tokens, cuda_graphs)
    elif engine == "ctranslate2":
        from mtkit.interop.ct2 import CTranslate2Translator

        if mbr is not None:
            raise MtkitError("--mbr is for --engine pytorch (it runs mtkit's own searches for its candidates)")
        if len(models) > 1:
            raise MtkitError("--engine ctranslate2 takes one model: ensembles need --engine pytorch")
        if cuda_graphs:
            raise MtkitError("--cuda-graphs is for --engine pytorch (CTranslate2 has its own GPU decoding)")
        if precision not in COMPUTE_TYPES:
            raise MtkitError(f"--precision {precision}: must be one of {', '.join(COMPUTE_TYPES)}")
        translator = CTranslate2Translator(models[0], cfg, device, COMPUTE_TYPES[precision], batch_size)
    else:
        raise MtkitError(f"--engine {engine}: must be pytorch or ctranslate2")
    translator.set_target(tgt_lang, src_lang)
    translator.set_segmenter(split_sentences, max_source_len, keep_spans, recase)
    return translator
