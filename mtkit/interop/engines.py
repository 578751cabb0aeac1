"""The decoding engines: which translator `--engine` names, for one model or an ensemble, and a
chain of them through a pivot language (`--then`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mtkit.core.config import default_beam
from mtkit.core.errors import MtkitError
from mtkit.decoding.constraints import without_made_up_spans
from mtkit.decoding.search_rules import SearchConfig
from mtkit.text.markup_placement import parse_alignment
from mtkit.translation.alignment import composed as compose
from mtkit.translation.alignment import pharaoh
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


@dataclass(frozen=True)
class Decoding:
    """How a command decodes, built once from its options: the search, the engine that runs it and its
    settings, and how lines reach the model (cut into sentences; cut where longer than max_source_len
    subwords, 0: the model's training limit; numbers, links, ... kept as written; ALL CAPS and Title Case
    translated in sentence case: mtkit.translation.sentences). mbr: minimum Bayes risk decoding
    (mtkit.translation.mbr) instead of the search."""

    search: SearchConfig = field(default_factory=SearchConfig)
    engine: str = "pytorch"
    checkpoint: str = "best"
    device: str = "auto"
    precision: str = "auto"
    batch_size: int = 128
    max_tokens: int = 8192
    cuda_graphs: bool = False
    mbr: MbrConfig | None = None
    split_sentences: bool = True
    max_source_len: int = 0
    keep_spans: bool = True
    recase: bool = True


def build_translator(
    decoding: Decoding, models: Sequence, source: str | None = None, target: str | None = None, lines: bool = True
) -> TextTranslator:
    """The engine's translator for one model, or (PyTorch) for an ensemble of several (a model: its file,
    or run directory, or a ModelFile already loaded); target: the target,
    for a model of several, and source the source, for a model with language tokens (mtkit.text.targets).
    lines=False: a translator of sentences as given, which the caller cuts and frames itself (mtkit serve)."""
    cfg, device, precision = decoding.search, decoding.device, decoding.precision
    settings = (device, precision, decoding.batch_size, decoding.max_tokens, decoding.cuda_graphs)
    translator: TextTranslator
    if decoding.engine == "pytorch":
        from mtkit.decoding.ensemble import check_compatible
        from mtkit.model.files import ModelFile, load_model_file

        files = [m if isinstance(m, ModelFile) else load_model_file(m, decoding.checkpoint) for m in models]
        check_compatible(files, [str(model) for model in models])
        if decoding.mbr is not None:
            translator = MbrTranslator(files, cfg, decoding.mbr, *settings)
        else:
            translator = Translator(files, cfg, *settings)
    elif decoding.engine == "ctranslate2":
        from mtkit.interop.ct2 import CTranslate2Translator

        if decoding.mbr is not None:
            raise MtkitError("--mbr is for --engine pytorch (it runs mtkit's own searches for its candidates)")
        if len(models) > 1:
            raise MtkitError("--engine ctranslate2 takes one model: ensembles need --engine pytorch")
        if decoding.cuda_graphs:
            raise MtkitError("--cuda-graphs is for --engine pytorch (CTranslate2 has its own GPU decoding)")
        if precision not in COMPUTE_TYPES:
            raise MtkitError(f"--precision {precision}: must be one of {', '.join(COMPUTE_TYPES)}")
        translator = CTranslate2Translator(models[0], cfg, device, COMPUTE_TYPES[precision], decoding.batch_size)
    else:
        raise MtkitError(f"--engine {decoding.engine}: must be pytorch or ctranslate2")
    if not lines:
        return translator
    translator.set_target(target, source)
    translator.set_segmenter(decoding.split_sentences, decoding.max_source_len, decoding.keep_spans, decoding.recase)
    if decoding.keep_spans:  # spans reach the model as stand-ins: a character only a span holds is never needed
        translator.cfg = without_made_up_spans(translator.cfg, translator.tgt_tokenizer)
    return translator


class Chain(TextTranslator):
    """Translators one after another, each's best translation the next's source: a pivot (de -> en ->
    fr). The n-best are the last leg's; a word alignment is the legs' composed (source word i goes with
    target word k where i aligns to a pivot word j that aligns to k), so markup and documents keep
    their formatting through the pivot."""

    def __init__(self, legs: list[TextTranslator]):
        first, last = legs[0], legs[-1]
        self.legs, self.cfg = legs, last.cfg
        self.src_tokenizer, self.tgt_tokenizer = first.src_tokenizer, last.tgt_tokenizer
        self.model_meta = {**last.model_meta, "src_lang": first.model_meta.get("src_lang")}
        self.source_tag = next((leg.source_tag for leg in legs if leg.source_tag is not None), None)
        self._steps: dict[str, list] = {}  # a source line's (hypothesis, text) at each leg, for alignments

    @property
    def segmenter(self):
        return self.legs[0].segmenter

    @property
    def lines_in_pieces(self) -> int:  # type: ignore[override]
        return sum(leg.lines_in_pieces for leg in self.legs)

    def keep_attention(self) -> None:
        for leg in self.legs:
            leg.keep_attention()

    def translate_hypotheses(self, lines, first_line=1, prefixes=None, on_line=None, encoded=None, starts=None,
                             terms=None):  # fmt: skip
        """The last leg's n-best of each line (prefixes, starts and terms are the last leg's: they are in
        its target language); the legs before it give their best translation on."""
        texts, steps = list(lines), [[] for _ in lines]
        for leg in self.legs[:-1]:
            found = leg.translate_hypotheses(texts, first_line)
            for step, nbest in zip(steps, found):
                step.append(nbest[0] if nbest else None)
            texts = [nbest[0][1] if nbest else "" for nbest in found]
        out = self.legs[-1].translate_hypotheses(texts, first_line, prefixes, on_line, None, starts, terms)
        self._steps = {line: step for line, step in zip(lines, steps)}
        return out

    def alignments(self, lines: Sequence[str], hypotheses: Sequence) -> list[str]:
        """Each translation's word alignment to its source, through the pivots (translate_hypotheses
        must have translated the lines)."""
        whole = [i for i, line in enumerate(lines) if all(self._steps.get(line, [None]))]  # blank: no alignment
        sources = [lines[i] for i in whole]
        composed = [{(w, w) for w in range(len(line.split()))} for line in sources]
        for index, leg in enumerate(self.legs):
            if index < len(self.legs) - 1:
                hyps, texts = zip(*(self._steps[lines[i]][index] for i in whole)) if whole else ((), ())
            else:
                hyps, texts = [hypotheses[i] for i in whole], []
            found = [parse_alignment(a) for a in leg.alignments(sources, list(hyps))]
            composed = [compose(before, after) for before, after in zip(composed, found)]
            sources = list(texts)
        out = [""] * len(lines)
        for i, pairs in zip(whole, composed):
            out[i] = pharaoh(sorted(pairs))
        return out


def check_chain(translators: list[TextTranslator], names: list[str]) -> None:
    """Each leg's target must be the next leg's source, where both models say their languages."""
    for (before, name), (after, then) in zip(zip(translators, names), zip(translators[1:], names[1:])):
        out, into = before.model_meta.get("tgt_lang"), after.model_meta.get("src_lang")
        if out and into and out != into:
            raise MtkitError(f"--then {then}: translates from {into}, but {name} translates into {out}")
