"""Raw parallel text -> cleaned, subword-encoded, binarized dataset (see mtkit.data.dataset for the format).

Everything streams in chunks of lines, so peak memory does not grow with the corpus
(except the set of pair hashes that --dedup keeps: 8 bytes per kept pair).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mtkit import __version__
from mtkit.core.errors import MtkitError
from mtkit.core.textio import atomic_directory
from mtkit.data.dataset import MANIFEST, SentenceWriter, ids_dtype, sample_split
from mtkit.data.encoding import dropped_summary, encode_split, total_report
from mtkit.text.augment import Augmentation
from mtkit.text.cleaning import CleaningRules
from mtkit.text.targets import TARGET_TAG_PREFIX, checked_directions, target_tag_ids
from mtkit.text.tokenizer import Tokenizer, tag_token

BACK_TRANSLATION_TAG = "bt"  # the tokenizer's <bt> (train-tokenizer --tag bt) starts back-translated sources
MULTILINGUAL_SIDES = ("src", "tgt")  # a multilingual dataset's file suffixes: train.src, train.tgt


@dataclass
class Corpus:
    """One of the corpora a training split joins: PREFIX.SRC/PREFIX.TGT, with the number of times an
    epoch takes each pair (a fraction: a random part, drawn per epoch), and whether its sources are
    back-translations, which then start with the <bt> tag (tagged back-translation)."""

    name: str
    prefix: Path
    weight: float = 1.0
    back_translated: bool = False
    pairs: list[tuple[str, str]] | None = None  # a multilingual dataset's directions it holds (None: all)


@dataclass
class Sampling:
    """Subword regularisation: the training split is stored `samples` times, each encoded with
    BPE-dropout `bpe_dropout` (the pairs to keep are chosen on the plain encoding, so every sample
    holds the same pairs in the same order). samples=1, bpe_dropout=0 is the plain dataset."""

    bpe_dropout: float = 0.0
    samples: int = 1

    def validate(self) -> None:
        if not 0.0 <= self.bpe_dropout < 1.0:
            raise MtkitError(f"--bpe-dropout {self.bpe_dropout:g}: must be in [0, 1)")
        if self.samples < 1:
            raise MtkitError(f"--samples {self.samples}: must be at least 1")
        if self.samples > 1 and self.bpe_dropout == 0:
            raise MtkitError(f"--samples {self.samples}: the samples would be identical without --bpe-dropout")


def _tokenizer_entry(tokenizer: Tokenizer, file: str) -> dict:
    return {"file": file, "sha256": tokenizer.sha256, "vocab_size": tokenizer.vocab_size}


def preprocess(
    src_lang: str,
    tgt_lang: str,
    splits: dict[str, Path | list[Corpus]],
    tokenizer_path: Path,
    output: Path,
    tgt_tokenizer_path: Path | None = None,
    rules: CleaningRules | None = None,
    force: bool = False,
    sampling: Sampling | None = None,
    directions: list[tuple[str, str]] | None = None,
    augmentation: Augmentation | None = None,
) -> dict:
    """Build a binarized dataset from `splits` ({"train": PREFIX, "valid": PREFIX, ...}); returns the
    manifest. The training split may join several corpora ({"train": [Corpus, ...]}).

    With `directions` ([(source, target), ...], in place of src_lang and tgt_lang) the dataset is
    multilingual: every split holds each direction S-T of each of its prefixes (PREFIX.S and
    PREFIX.T), one after the other, and every source starts with its target's tag <2T> (Johnson et
    al., 2017; `train-tokenizer --tag 2T`). Each training corpus becomes one per direction, named
    NAME.S-T (S-T for an unnamed one), so that weights and the sampling temperature apply to
    directions. `augmentation`: training pairs added again as people write them (mtkit.text.augment)."""
    rules = rules or CleaningRules()
    augmentation = augmentation or Augmentation()
    augmentation.validate()
    multilingual = directions is not None
    directions = checked_directions(directions) if multilingual else [(src_lang, tgt_lang)]
    file_sides = MULTILINGUAL_SIDES if multilingual else (src_lang, tgt_lang)
    named_corpora = isinstance(splits["train"], list)
    named = named_corpora or multilingual
    given = splits["train"] if named_corpora else [Corpus("train", splits["train"])]  # type: ignore[list-item, arg-type]
    sampling = sampling or Sampling()
    sampling.validate()
    for pair in directions:
        rules.validate(*pair)
    if not multilingual and src_lang == tgt_lang:
        raise MtkitError(f"source and target language are both {src_lang!r}")
    _check_corpora(given)
    for corpus in given:
        if corpus.pairs and (not multilingual or set(corpus.pairs) - set(directions)):
            raise MtkitError(f"--pairs {corpus.name}: give directions of --lang-pairs ({_pairs_text(directions)})")
        _check_inputs([corpus.prefix], corpus.pairs or directions)
    _check_inputs([p for name, p in splits.items() if name != "train"], directions)
    src_tok = Tokenizer.load(tokenizer_path)
    tgt_tok = Tokenizer.load(tgt_tokenizer_path) if tgt_tokenizer_path else src_tok
    joint = src_tok.sha256 == tgt_tok.sha256 or src_tok.vocabulary() == tgt_tok.vocabulary()  # one id space
    tag = src_tok.tag_id(BACK_TRANSLATION_TAG)
    if tag is None and any(c.back_translated for c in given):
        raise MtkitError(
            f"--back-translated: the tokenizer has no <{BACK_TRANSLATION_TAG}> tag "
            f"(train it with mtkit train-tokenizer --tag {BACK_TRANSLATION_TAG})"
        )
    target_tags = target_tag_ids(src_tok, [t for _, t in directions]) if multilingual else {}
    if sampling.bpe_dropout:
        dropout_toks = (src_tok.with_bpe_dropout(sampling.bpe_dropout), tgt_tok.with_bpe_dropout(sampling.bpe_dropout))
    dtype = ids_dtype(max(src_tok.vocab_size, tgt_tok.vocab_size))
    corpora = [  # one per direction of each given corpus
        Corpus(_corpus_name(c.name, (s, t), multilingual, named_corpora), c.prefix, c.weight, c.back_translated, [(s, t)])
        for c in given for s, t in (c.pairs or directions)
    ]  # fmt: skip
    start = time.perf_counter()
    with atomic_directory(output, force) as tmp:
        src_file, tgt_file = (
            ("tokenizer.json", "tokenizer.json") if joint else ("tokenizer.src.json", "tokenizer.tgt.json")
        )
        src_tok.save(tmp / src_file)
        tgt_tok.save(tmp / tgt_file)
        reports, content, per_corpus, split_directions = {}, {}, [], {}
        for split, prefix in splits.items():
            writers = (
                SentenceWriter(tmp / f"{split}.{file_sides[0]}", dtype),
                SentenceWriter(tmp / f"{split}.{file_sides[1]}", dtype),
            )
            # valid/test keep every line, and their raw text too: BLEU is computed against it.
            raw = None if split == "train" else [tmp / f"{split}.{side}.txt" for side in file_sides]
            samples = None
            if split == "train" and sampling.bpe_dropout:
                extra = [
                    tuple(SentenceWriter(tmp / f"{sample_split(k)}.{side}", dtype) for side in file_sides)
                    for k in range(1, sampling.samples)
                ]
                samples = [(w, dropout_toks) for w in [writers, *extra]]
            try:
                is_train = split == "train"
                units = (  # (corpus, its direction)
                    [(corpus, corpus.pairs[0]) for corpus in corpora]
                    if is_train else [(Corpus(split, prefix), pair) for pair in directions]
                )  # fmt: skip
                encoded = []
                for corpus, (s, t) in units:
                    paths = [_existing(corpus.prefix, lang) for lang in (s, t)]
                    description = f"train/{corpus.name}" if named and is_train else corpus.name
                    if multilingual and not is_train:
                        description = f"{split} {s}-{t}"
                    tags = ([target_tags[t]] if multilingual else []) + ([tag] if corpus.back_translated else [])
                    cleaning = rules if is_train else None
                    encoded.append(encode_split(paths, writers, (src_tok, tgt_tok), cleaning, description, raw,
                                                 samples, tags, (s, t), augmentation if is_train else None))  # fmt: skip
                reports[split] = total_report(encoded)
                per_corpus = encoded if is_train else per_corpus
                if multilingual:
                    split_directions[split] = [[s, t, report.kept] for (_, (s, t)), report in zip(units, encoded)]
            finally:
                for sample_writers, _ in samples or [(writers, None)]:
                    for writer in sample_writers:
                        writer.close()
                        content[writer.name] = writer.digest
        if reports.get("train") is not None and reports["train"].read == 0:
            raise MtkitError(f"{given[0].prefix}.{directions[0][0]}: no lines (the training files are empty)")
        if reports.get("train") is not None and reports["train"].kept == 0:
            raise MtkitError(f"the training set is empty after cleaning ({dropped_summary(reports['train'])})")
        manifest = {
            "mtkit_version": __version__,
            "src_lang": file_sides[0],
            "tgt_lang": file_sides[1],
            **(
                {
                    "directions": [list(pair) for pair in directions],
                    "target_tags": {t: tag_token(f"{TARGET_TAG_PREFIX}{t}") for _, t in directions},
                    "split_directions": split_directions,
                }
                if multilingual
                else {}
            ),  # fmt: skip
            "joint_vocab": joint,
            "dtype": dtype.name,
            "src_tokenizer": _tokenizer_entry(src_tok, src_file),
            "tgt_tokenizer": _tokenizer_entry(tgt_tok, tgt_file),
            "cleaning": asdict(rules),
            "sampling": asdict(sampling),
            "augmentation": augmentation.as_dict(),
            "splits": {name: asdict(report) for name, report in reports.items()},
            **(
                {
                    "corpora": [
                        {"name": c.name, "weight": c.weight, "back_translated": c.back_translated, **asdict(r)}
                        for c, r in zip(corpora, per_corpus)
                    ]
                }
                if named
                else {}
            ),  # fmt: skip
            "content_blake2b": content,  # of each file's sentences: ranks compare datasets by it
            "seconds": round(time.perf_counter() - start, 2),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def _pairs_text(directions: list[tuple[str, str]]) -> str:
    return ",".join(f"{s}-{t}" for s, t in directions)


def _check_inputs(prefixes: list, directions: list[tuple[str, str]]) -> None:
    """Every prefix has a file (plain or .gz) for every language of the directions."""
    for prefix in prefixes:
        for lang in dict.fromkeys(lang for pair in directions for lang in pair):
            if not Path(f"{prefix}.{lang}").is_file() and not Path(f"{prefix}.{lang}.gz").is_file():
                raise MtkitError(f"{prefix}.{lang}: no such file (nor {prefix}.{lang}.gz)")


def _corpus_name(name: str, direction: tuple[str, str], multilingual: bool, named: bool) -> str:
    """A training corpus's name: its own; in a multilingual dataset, per direction (NAME.en-de, or en-de)."""
    if not multilingual:
        return name
    pair = "-".join(direction)
    return f"{name}.{pair}" if named else pair


def _check_corpora(corpora: list[Corpus]) -> None:
    names = [c.name for c in corpora]
    if len(set(names)) != len(names):
        raise MtkitError(f"--train: corpus names must differ ({', '.join(names)})")
    for corpus in corpora:
        if not corpus.weight >= 0:
            raise MtkitError(f"--weight {corpus.name}={corpus.weight:g}: must not be negative")
    if not any(c.weight > 0 for c in corpora):
        raise MtkitError("--weight: every corpus has weight 0, so no epoch would have a pair")


def _existing(prefix: Path, lang: str) -> Path:
    plain = Path(f"{prefix}.{lang}")
    return plain if plain.is_file() else Path(f"{prefix}.{lang}.gz")
