"""Options and helpers shared by the commands that decode (translate, evaluate, attention)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from mtkit.core import console
from mtkit.core.errors import MtkitError

ModelOption = Annotated[
    Path, typer.Option("--model", "-m", help="Model file, or a run directory (its best checkpoint).")
]
ModelsOption = Annotated[
    list[Path],
    typer.Option("--model", "-m", help="Model file or run directory; repeat it for an ensemble (PyTorch engine)."),
]
CheckpointOption = Annotated[str, typer.Option(help="With a run directory: best or last checkpoint.")]
BeamOption = Annotated[int, typer.Option(help="Beam size (1 = greedy).")]
ModelBeamOption = Annotated[
    int | None, typer.Option(help="Beam size (1 = greedy); default: the model's, 1 for a transformer-student, else 5.")
]
LenpenOption = Annotated[float, typer.Option(help="Length penalty alpha: scores / ((5+len)/6)^alpha.")]
MaxLenAOption = Annotated[float, typer.Option(help="Output length <= a * source length + b: a.")]
MaxLenBOption = Annotated[int, typer.Option(help="Output length <= a * source length + b: b.")]
MinLenOption = Annotated[int, typer.Option(help="Least output tokens before end of sentence.")]
NoRepeatOption = Annotated[int, typer.Option(help="Forbid repeating any n-gram of this size (0: off).")]
LoopNgramOption = Annotated[
    int,
    typer.Option(
        help="Loop guard: no n-gram of this many subwords occurs more than --loop-repeats times (0: off; PyTorch engine)."
    ),
]
LoopRepeatsOption = Annotated[int, typer.Option(help="Loop guard: the most times one n-gram may occur.")]
SplitSentencesOption = Annotated[
    bool,
    typer.Option(
        "--split-sentences/--no-split-sentences",
        help="Translate each line sentence by sentence, the sentences' translations joined on one line.",
    ),
]
KeepSpansOption = Annotated[
    bool,
    typer.Option(
        "--keep-spans/--no-keep-spans",
        help="Keep numbers, dates, times, prices, phone numbers, URLs, e-mail addresses, paths, `code`, "
        "placeholders and emoji exactly as written.",
    ),
]
RecaseOption = Annotated[
    bool,
    typer.Option(
        "--recase/--no-recase",
        help="Translate a sentence in ALL CAPS or Title Case in sentence case, and case its translation as it was.",
    ),
]
MaxSourceLenOption = Annotated[
    int,
    typer.Option(help="Translate lines of more subwords in pieces, at sentence ends (0: the model's training limit)."),
]
LangPairsOption = Annotated[
    str | None,
    typer.Option(help="SRC-TGT pairs, e.g. en-de,en-fr: a multilingual dataset's directions (tags <2de> ...)."),
]
TgtLangOption = Annotated[
    str | None,
    typer.Option("--tgt-lang", help="The language to translate into: needed by a model of several targets."),
]
SrcLangOption = Annotated[
    str | None,
    typer.Option("--src-lang", help="The source's language: needed by a model that names both (NLLB, M2M100)."),
]
BatchSizeOption = Annotated[int, typer.Option(help="Most sentences per batch.")]
MaxTokensOption = Annotated[int, typer.Option(help="Most source tokens x beam per batch.")]
DeviceOption = Annotated[str, typer.Option(help="auto, cpu or cuda.")]
PrecisionOption = Annotated[str, typer.Option(help="auto, fp32, bf16 or fp16.")]
CudaGraphsOption = Annotated[
    bool, typer.Option("--cuda-graphs", help="Replay each decoding step as a CUDA graph (GPU, --engine pytorch).")
]
MbrOption = Annotated[
    int,
    typer.Option(
        "--mbr", help="Minimum Bayes risk decoding: choose among N candidates (0: off; pip install 'mtkit[mbr]')."
    ),
]
MbrSourceOption = Annotated[
    str, typer.Option(help="--mbr's candidates: beam (its N-best), sample (N epsilon samples) or both.")
]
EpsilonOption = Annotated[float, typer.Option(help="--mbr's samples: no token below this probability.")]
MbrUtilityOption = Annotated[str, typer.Option(help="--mbr's utility: chrf or bleu (sentence scores).")]
GlossaryOption = Annotated[
    Path | None,
    typer.Option(help="source term<TAB>target term lines: a sentence holding a source term gets its target term."),
]
TmOption = Annotated[
    str | None,
    typer.Option(
        "--tm",
        help="A translation memory (mtkit tm import; a SQLite file or a postgresql:// URL): each sentence it "
        "holds is its stored translation.",
    ),
]
TmNameOption = Annotated[str, typer.Option("--tm-name", help="Which memory of the --tm file.")]
TmSteerOption = Annotated[
    int,
    typer.Option(
        "--tm-steer", min=0, max=100,
        help="Fuzzy matches of at least this score (75, say) steer the model: a copy takes a few updates on a "
        "sentence's matches before translating it (request-time adaptation; about 0.6 s a sentence on 2 cores). 0: off.",
    ),
]  # fmt: skip
ThenOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--then",
        metavar="MODEL",
        help="Translate -m's output again with this model (repeat for more): a pivot, e.g. "
        "-m de-en.pt --then en-fr.pt translates German into French through English.",
    ),
]
PivotOption = Annotated[
    str | None,
    typer.Option(metavar="LANG", help="--then: the language between the models, where a model of several needs it."),
]
CaseSensitiveTermsOption = Annotated[
    bool, typer.Option("--case-sensitive-terms", help="--glossary's source terms match only as written.")
]


def load_glossary(translator, glossary: Path | None, src_lang: str | None, tgt_lang: str | None, case_sensitive: bool):
    """--glossary into the translator (mtkit.translation.terminology), where given."""
    if glossary is not None:
        from mtkit.translation.terminology import use_glossary

        use_glossary(translator, glossary, src_lang, tgt_lang, case_sensitive)


def chained(first, then: list[Path] | None, pivot: str | None, tgt_lang: str | None, models: list[Path], make):
    """The translator, or (--then) a chain of it (made with --pivot as its target) and a translator of
    each --then model: make(model, src_lang, tgt_lang) makes one, the last into tgt_lang."""
    if not then:
        return first
    from mtkit.interop.engines import Chain, check_chain

    legs = [first] + [make(model, pivot, pivot if k < len(then) else tgt_lang) for k, model in enumerate(then, 1)]
    check_chain(legs, [", ".join(map(str, models))] + [str(model) for model in then])
    return Chain(legs)


def mbr_config(candidates: int, source: str, epsilon: float, utility: str, sample: bool = False):
    """The --mbr options as an MbrConfig, checked; None with --mbr 0."""
    if not candidates:
        return None
    from mtkit.translation.mbr import MbrConfig

    if sample:
        raise MtkitError("--mbr draws its own samples (--mbr-source): leave out --sample")
    cfg = MbrConfig(candidates, source, epsilon, utility)
    cfg.validate()
    return cfg


EngineOption = Annotated[
    str, typer.Option(help="pytorch (mtkit's own search) or ctranslate2 (a model from mtkit export).")
]


FormatOption = Annotated[
    str,
    typer.Option(
        "--format",
        help="text, html or xml: with markup, each element is kept around the words aligned to its own "
        "(one model, --engine pytorch).",
    ),
]


def check_markup_options(fmt: str, **given: bool) -> None:
    """--format html|xml gives one translation per line, its markup kept: refuse what does not fit."""
    from mtkit.text.markup import check_format

    check_format(fmt)
    clashing = [name for name, on in given.items() if on]
    if fmt != "text" and clashing:
        raise MtkitError(
            f"--format {fmt} gives one translation per line with its markup: not with {', '.join(clashing)}"
        )


def model_beam(beam: int | None, engine: str, models: list[Path], checkpoint: str = "best") -> int:
    """--beam, or where not given the model's own default (mtkit.interop.engines.default_beam_of)."""
    if beam is not None:
        return beam
    from mtkit.interop.engines import default_beam_of

    return default_beam_of(engine, models, checkpoint)


def search_config(**given):
    """The search options given (by name; the rest SearchConfig's defaults), checked."""
    from mtkit.decoding.search_rules import SearchConfig

    cfg = SearchConfig(**given)
    cfg.validate()
    return cfg


def input_lines(path: Path | None) -> Iterator[str]:
    from mtkit.core.textio import decode_stream, iter_lines

    if path is None:
        return decode_stream(sys.stdin.buffer, "<stdin>")
    return iter_lines(path)


def parse_lang_pairs(value: str) -> list[tuple[str, str]]:
    """--lang-pairs en-de,en-fr as [("en", "de"), ("en", "fr")]."""
    pairs = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        source, dash, target = item.partition("-")
        if not (dash and source and target) or "-" in target:
            raise MtkitError(f"--lang-pairs {value}: {item!r} is not SRC-TGT (e.g. en-de)")
        pairs.append((source, target))
    return pairs


def report_pieces(translator) -> None:
    """The count of lines translated in pieces for being long, on stderr."""
    if translator.lines_in_pieces:
        console.warn(
            f"{translator.lines_in_pieces:,} lines longer than {translator.segmenter.max_len:,} subwords "
            "(--max-source-len) were translated in pieces"
        )
