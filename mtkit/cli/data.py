"""Commands that prepare data: train-tokenizer, preprocess, distill."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from mtkit.cli.app import app, handle_errors
from mtkit.cli.options import (
    BatchSizeOption,
    BeamOption,
    CaseSensitiveTermsOption,
    CheckpointOption,
    DeviceOption,
    EngineOption,
    EpsilonOption,
    GlossaryOption,
    LangPairsOption,
    LenpenOption,
    MaxLenAOption,
    MaxLenBOption,
    MaxTokensOption,
    MbrOption,
    MbrSourceOption,
    MbrUtilityOption,
    ModelsOption,
    PrecisionOption,
    SrcLangOption,
    TgtLangOption,
    load_glossary,
    mbr_config,
    parse_lang_pairs,
    search_config,
)
from mtkit.core import console
from mtkit.core.errors import MtkitError

# --- train-tokenizer -----------------------------------------------------------------------------


@app.command("train-tokenizer")
@handle_errors
def train_tokenizer_command(
    inputs: Annotated[
        list[Path], typer.Option("--input", "-i", help="Raw text file (plain or .gz); repeat for several.")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write tokenizer.json.")],
    vocab_size: Annotated[
        int, typer.Option("--vocab-size", help="Vocabulary size, special and byte tokens included.")
    ] = 8000,
    kind: Annotated[str, typer.Option("--type", help="Subword model: bpe or unigram.")] = "bpe",
    min_frequency: Annotated[int, typer.Option("--min-frequency", help="BPE: least count for a merge.")] = 2,
    split_punctuation: Annotated[
        bool,
        typer.Option(
            "--split-punctuation/--no-split-punctuation",
            help="Keep each punctuation character a subword of its own (no 'Straße.' beside 'Straße').",
        ),
    ] = False,
    split_scripts: Annotated[
        bool,
        typer.Option(
            "--split-scripts/--no-split-scripts",
            help="Cut text in scripts without spaces (Chinese, Japanese, Thai, ...) into short pieces before subwords.",
        ),
    ] = True,
    normalization: Annotated[
        str, typer.Option("--normalization", help="Unicode normalization of all text: nfkc, nfc or none.")
    ] = "nfkc",
    split_digits: Annotated[
        bool,
        typer.Option(
            "--split-digits/--no-split-digits",
            help="Keep each digit a subword of its own (numbers copied digit by digit).",
        ),
    ] = True,
    max_lines: Annotated[
        int,
        typer.Option(
            "--max-lines", help="Learn from a uniform sample of this many lines when there are more (0: all lines)."
        ),
    ] = 2_000_000,
    tags: Annotated[
        list[str] | None,
        typer.Option("--tag", help="Add tag token <NAME> that text never produces, e.g. bt for back-translation."),
    ] = None,
) -> None:
    """Train a subword tokenizer (BPE or Unigram with byte fallback) on raw text.

    One tokenizer over source and target text gives a joint vocabulary.

    Example: [bold]mtkit train-tokenizer -i train.en -i train.de -o tokenizer.json --vocab-size 8000[/bold]
    """
    from mtkit.text.tokenizer import train_tokenizer

    report = train_tokenizer(
        inputs, output, vocab_size, kind, min_frequency, split_punctuation, max_lines, tags or [], split_scripts,
        normalization, split_digits,
    )  # fmt: skip
    lines = (
        f"{report.lines:,}"
        if report.trained_on == report.lines
        else f"a sample of {report.trained_on:,} of {report.lines:,}"
    )
    console.info(
        f"wrote {output}: {kind} vocabulary of {report.vocab_size:,} from {lines} lines in {report.seconds:.1f}s"
    )


# --- preprocess ----------------------------------------------------------------------------------


@app.command()
@handle_errors
def preprocess(
    train: Annotated[
        list[str],
        typer.Option(help="Training prefix: reads PREFIX.SRC and PREFIX.TGT; repeat as NAME=PREFIX to join corpora."),
    ],
    tokenizer: Annotated[Path, typer.Option(help="tokenizer.json (the source one when vocabularies are separate).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Dataset directory to create.")],
    src_lang: Annotated[str | None, typer.Option("--src-lang", "-s", help="Source language suffix, e.g. en.")] = None,
    tgt_lang: Annotated[str | None, typer.Option("--tgt-lang", "-t", help="Target language suffix, e.g. de.")] = None,
    lang_pairs: LangPairsOption = None,
    valid: Annotated[Path | None, typer.Option(help="Validation prefix.")] = None,
    test: Annotated[Path | None, typer.Option(help="Test prefix.")] = None,
    tgt_tokenizer: Annotated[Path | None, typer.Option(help="Target tokenizer.json for separate vocabularies.")] = None,
    strip: Annotated[bool, typer.Option(help="Strip whitespace around each line.")] = True,
    drop_empty: Annotated[bool, typer.Option(help="Drop training pairs with an empty side.")] = True,
    max_len: Annotated[
        int, typer.Option(help="Drop training pairs with more subwords on either side (0: no limit).")
    ] = 250,
    max_ratio: Annotated[
        float, typer.Option(help="Drop training pairs whose subword length ratio exceeds this (0: off).")
    ] = 3.0,
    dedup: Annotated[bool, typer.Option(help="Drop exact duplicate training pairs.")] = False,
    langid: Annotated[
        bool,
        typer.Option(help="Drop training pairs not in their languages, by py3langid (pip install 'mtkit[langid]')."),
    ] = False,
    langid_min_prob: Annotated[
        float, typer.Option(help="With --langid: the least probability of a side's language that keeps a pair.")
    ] = 0.05,
    min_script_share: Annotated[
        float,
        typer.Option(help="Drop training pairs with a smaller share of letters in their language's script (0: off)."),
    ] = 0.0,
    drop_copies: Annotated[bool, typer.Option(help="Drop training pairs whose target is their source.")] = False,
    check_numbers: Annotated[
        bool, typer.Option(help="Drop training pairs whose sides both write numbers, and different ones.")
    ] = False,
    bpe_dropout: Annotated[
        float, typer.Option(help="Subword regularisation: encode training pairs with BPE-dropout P (0: off).")
    ] = 0.0,
    samples: Annotated[
        int, typer.Option(help="With --bpe-dropout: store K encodings of the training set; epoch e trains on e mod K.")
    ] = 1,
    weight: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME=W: each epoch takes corpus NAME's pairs W times (a fraction: a random part, drawn anew "
            "each epoch; 0: none)."
        ),
    ] = None,
    pairs: Annotated[
        list[str] | None,
        typer.Option(help="NAME=en-cs,...: with --lang-pairs, corpus NAME holds only these directions (default: all)."),
    ] = None,
    back_translated: Annotated[
        list[str] | None,
        typer.Option(help="NAME: corpus NAME's sources are back-translations; they start with the tokenizer's <bt>."),
    ] = None,
    augment: Annotated[
        str,
        typer.Option(
            help="Add training pairs again as people write: shares of upper, title, typos, spans, short, e.g. "
            "spans=0.03,short=0.02,typos=0.01 (default: none)."
        ),
    ] = "",
    force: Annotated[bool, typer.Option(help="Replace an existing dataset directory.")] = False,
) -> None:
    """Clean, encode and binarize parallel text into a memory-mapped dataset.

    Several training corpora (--train NAME=PREFIX, repeated) are joined, each with a sampling
    weight (--weight NAME=W) and, for back-translated ones (--back-translated NAME), a <bt> tag on
    every source (tagged back-translation; train-tokenizer --tag bt adds the token).

    With --bpe-dropout P --samples K the training pairs are stored K times, each segmented with
    BPE-dropout P (random, unseeded); valid and test stay deterministic.

    Noisy (web-crawled) training corpora: --langid drops pairs a side of which is in another language
    (offline, py3langid), --min-script-share pairs with letters in another script, --drop-copies
    targets that copy their source, --check-numbers pairs whose digits differ; the report counts each.

    --augment adds a share of the training pairs again in ALL CAPS, in Title Case, with typos in
    the source, with a number, link or placeholder the target copies, or as one word alone with its
    translation (mtkit/text/augment.py).

    Example: [bold]mtkit preprocess -s en -t de --train data/train --valid data/val --tokenizer tokenizer.json -o data-bin[/bold]
    """
    from mtkit.data.preprocess import CleaningRules, Sampling
    from mtkit.data.preprocess import preprocess as run_preprocess
    from mtkit.text.augment import Augmentation

    training = _training_corpora(train, weight or [], back_translated or [], pairs or [])
    splits = {"train": training} | ({"valid": valid} if valid else {}) | ({"test": test} if test else {})
    rules = CleaningRules(
        strip, drop_empty, max_len, max_ratio, dedup, langid, langid_min_prob, min_script_share, drop_copies,
        check_numbers,
    )  # fmt: skip
    sampling = Sampling(bpe_dropout, samples)
    augmentation = Augmentation.parse(augment)
    directions = parse_lang_pairs(lang_pairs) if lang_pairs is not None else None
    bilingual = src_lang is not None and tgt_lang is not None
    if (directions is None and not bilingual) or (directions is not None and (src_lang or tgt_lang)):
        raise MtkitError("give --src-lang and --tgt-lang, or --lang-pairs for a multilingual dataset")
    manifest = run_preprocess(
        src_lang or "", tgt_lang or "", splits, tokenizer, output, tgt_tokenizer, rules, force, sampling, directions,
        augmentation,
    )  # fmt: skip
    for corpus in manifest.get("corpora", []):
        what = f"weight {corpus['weight']:g}" + (", back-translated" if corpus["back_translated"] else "")
        console.info(f"train/{corpus['name']} ({what}): {_kept(corpus)}")
    for name, split in manifest["splits"].items():
        console.info(f"{name}: {_kept(split)}")
    console.info(f"wrote {output} in {manifest['seconds']:.1f}s")


def _kept(report: dict) -> str:
    dropped = ", ".join(f"{rule} {n}" for rule, n in report["dropped"].items() if n) or "none"
    augmented = report.get("augmented") or {}
    copies = ", ".join(f"{kind} {n:,}" for kind, n in augmented.items())
    kept = report["kept"] - sum(augmented.values())
    return (
        f"kept {kept:,} of {report['read']:,} pairs (dropped: {dropped}); "
        + (f"added {sum(augmented.values()):,} augmented copies ({copies}); " if augmented else "")
        + f"{report['src_tokens']:,} source and {report['tgt_tokens']:,} target subwords"
    )


def _training_corpora(
    train: list[str], weights: list[str], back_translated: list[str], pairs: list[str]
) -> Path | list:
    """--train PREFIX alone, or the named corpora of --train NAME=PREFIX with their --weight,
    --back-translated and --pairs."""
    from mtkit.data.preprocess import Corpus

    if len(train) == 1 and "=" not in train[0] and not weights and not back_translated and not pairs:
        return Path(train[0])
    corpora = {}
    for value in train:
        name, named, prefix = value.partition("=")
        name, prefix = (name, prefix) if named else (Path(value).name, value)
        corpora[name] = Corpus(name, Path(prefix))
    for value in weights:
        name, _, number = value.partition("=")
        try:
            corpora[name].weight = float(number)
        except (KeyError, ValueError):
            raise MtkitError(f"--weight {value}: give NAME=W for a corpus of --train ({', '.join(corpora)})") from None
    for value in pairs:
        name, _, directions = value.partition("=")
        if name not in corpora or not directions:
            raise MtkitError(f"--pairs {value}: give NAME=SRC-TGT,... for a corpus of --train ({', '.join(corpora)})")
        corpora[name].pairs = parse_lang_pairs(directions)
    for name in back_translated:
        if name not in corpora:
            raise MtkitError(f"--back-translated {name}: not a corpus of --train ({', '.join(corpora)})")
        corpora[name].back_translated = True
    if len(corpora) < len(train):
        raise MtkitError(f"--train: corpus names must differ ({', '.join(train)})")
    return list(corpora.values())


# --- distill ---------------------------------------------------------------------------------------


@app.command()
@handle_errors
def distill(
    model: ModelsOption,
    src: Annotated[Path, typer.Option("--src", help="The training sources to translate, one a line.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where the teacher's translations go.")],
    shard_lines: Annotated[int, typer.Option(help="Lines a shard: the work a killed run can lose.")] = 10_000,
    checkpoint: CheckpointOption = "best",
    beam: BeamOption = 5,
    lenpen: LenpenOption = 0.6,
    max_len_a: MaxLenAOption = 1.0,
    max_len_b: MaxLenBOption = 50,
    batch_size: BatchSizeOption = 128,
    max_tokens: MaxTokensOption = 8192,
    src_lang: SrcLangOption = None,
    tgt_lang: TgtLangOption = None,
    mbr: MbrOption = 0,
    mbr_source: MbrSourceOption = "sample",
    epsilon: EpsilonOption = 0.02,
    mbr_utility: MbrUtilityOption = "chrf",
    glossary: GlossaryOption = None,
    case_sensitive_terms: CaseSensitiveTermsOption = False,
    engine: EngineOption = "pytorch",
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    force: Annotated[bool, typer.Option("--force", help="Replace an OUTPUT that exists.")] = False,
) -> None:
    """Translate a training corpus with a teacher, in shards that survive an interruption.

    The teacher is a model, or an ensemble (-m repeated); a student then trains on the sources and
    these translations (sequence-level distillation; `mtkit score --drop-worst` filters the pairs).

    The corpus goes in shards of --shard-lines lines, each written whole or not at all: run the same
    command again after an interruption and it goes on from the first missing shard (other settings
    are refused). Use the teacher's best search settings (beam and lenpen chosen on val). With
    --glossary the teacher's translations use its terms (see translate), and so learns the student.

    Example: [bold]mtkit distill -m teacher1.pt -m teacher2.pt --src train.en -o train.distilled.de --lenpen 1.8[/bold]
    """
    from mtkit.core.textio import check_input_file, check_output_file, sha256_file
    from mtkit.interop.engines import Decoding, build_translator
    from mtkit.model.files import resolve_model_path
    from mtkit.translation.distill import distill as distill_corpus

    check_input_file(src)
    if glossary:
        check_input_file(glossary)
    check_output_file(output)
    if output.exists() and not force:
        raise MtkitError(f"{output}: already exists (use --force to replace it)")
    cfg = search_config(beam=beam, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b)
    mbr_cfg = mbr_config(mbr, mbr_source, epsilon, mbr_utility)
    paths = [resolve_model_path(m, checkpoint) if engine == "pytorch" else m for m in model]
    teacher = [sha256_file(p if p.is_file() else p / "model.bin") for p in paths]  # a CTranslate2 export: its weights
    settings = {"teacher": teacher, "engine": engine, "precision": precision, "tgt_lang": tgt_lang,
                "beam": beam, "lenpen": lenpen, "max_len_a": max_len_a, "max_len_b": max_len_b,
                **({"src_lang": src_lang} if src_lang else {}),
                **({"glossary": sha256_file(glossary), "case_sensitive_terms": case_sensitive_terms} if glossary else {}),
                **({"mbr": dataclasses.asdict(mbr_cfg)} if mbr_cfg else {})}  # fmt: skip
    decoding = Decoding(search=cfg, engine=engine, checkpoint=checkpoint, device=device, precision=precision,
                        batch_size=batch_size, max_tokens=max_tokens, mbr=mbr_cfg, split_sentences=False)  # fmt: skip
    translator = build_translator(decoding, model, src_lang, tgt_lang)
    load_glossary(translator, glossary, src_lang, tgt_lang, case_sensitive_terms)
    lines, shards, done = distill_corpus(translator.translate, src, output, settings, shard_lines)
    resumed = f" (resumed after {done:,} of {shards:,} shards)" if done else ""
    console.info(f"wrote {output}: {lines:,} translations by {len(model)} teacher model(s){resumed}")
