"""Raw parallel text -> cleaned, subword-encoded, binarized dataset (see mtkit.data for the format).

Everything streams in chunks of lines, so peak memory does not grow with the corpus
(except the set of pair hashes that --dedup keeps: 8 bytes per kept pair).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mtkit import __version__, console
from mtkit.cleaning import DROP_REASONS, CleaningRules, drop_reason, noise_reason
from mtkit.data import MANIFEST, SentenceWriter, ids_dtype, sample_split
from mtkit.dedup import DigestSet, pair_digests
from mtkit.errors import MtkitError
from mtkit.targets import TARGET_TAG_PREFIX, checked_directions, target_tag_ids
from mtkit.textio import atomic_directory, iter_lines, line_bytes, progress_size
from mtkit.tokenizer import Tokenizer, tag_token

CHUNK_LINES = 20_000
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


@dataclass
class SplitReport:
    read: int = 0
    kept: int = 0
    src_tokens: int = 0
    tgt_tokens: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))


def _paired_lines(src_path: Path, tgt_path: Path) -> Iterator[tuple[str, str]]:
    """Yield aligned (source, target) lines; a length mismatch names both files and both counts."""
    missing = object()
    counts = [0, 0]
    for src, tgt in itertools.zip_longest(iter_lines(src_path), iter_lines(tgt_path), fillvalue=missing):
        counts[0] += src is not missing
        counts[1] += tgt is not missing
        if src is not missing and tgt is not missing:
            yield src, tgt  # type: ignore[misc]
    if counts[0] != counts[1]:  # the longer file was read to its end to count its lines: each is read once
        raise MtkitError(
            f"{src_path} has {counts[0]} lines but {tgt_path} has {counts[1]}: source and target must be line-aligned"
        )


def _chunks(pairs: Iterator[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    while chunk := list(itertools.islice(pairs, size)):
        yield chunk


def _encode_split(
    paths: list[Path],
    writers: tuple[SentenceWriter, SentenceWriter],
    tokenizers: tuple[Tokenizer, Tokenizer],
    rules: CleaningRules | None,
    description: str,
    raw: list[Path] | None = None,
    samples: list[tuple[tuple[SentenceWriter, SentenceWriter], tuple[Tokenizer, Tokenizer]]] | None = None,
    tags: list[int] | None = None,
    langs: tuple[str, str] | None = None,
) -> SplitReport:
    """Encode one split; `rules` None keeps every line (valid/test). With `raw` (source and target
    paths), the lines are also kept there as plain UTF-8 text, from the same single read. With
    `samples` ((writers, dropout tokenizers) per sample, the first being `writers`), each kept pair
    is encoded again for every sample; the plain encoding only decides what is kept. With `tags`,
    every kept source starts with those ids (the cleaning rules see the sentence without them). With
    `langs` (source and target language), the rules' noise filters apply too. Raw text is appended
    to what the files hold (a split of several directions writes them one after the other)."""
    report = SplitReport()
    tagged = (lambda ids: [[*tags, *s] for s in ids]) if tags else (lambda ids: ids)
    seen = DigestSet()
    src_writer, tgt_writer = writers
    written = src_writer.sentences, src_writer.tokens, tgt_writer.tokens  # writers a corpus before used
    strip = rules.strip if rules else True
    total = progress_size(paths[0])  # progress by the source file's bytes: every input is read once
    with contextlib.ExitStack() as stack:
        raw_files = [stack.enter_context(open(p, "a", encoding="utf-8")) for p in raw or []]
        bar = stack.enter_context(console.progress(description, total=total, unit="bytes" if total else ""))
        for chunk in _chunks(_paired_lines(paths[0], paths[1]), CHUNK_LINES):
            for side, out in enumerate(raw_files):
                out.write("".join(pair[side] + "\n" for pair in chunk))
            srcs = [s.strip() if strip else s for s, _ in chunk]
            tgts = [t.strip() if strip else t for _, t in chunk]
            src_ids, tgt_ids = tokenizers[0].encode_batch(srcs), tokenizers[1].encode_batch(tgts)
            reasons = [drop_reason(src, tgt, rules) if rules else None for src, tgt in zip(src_ids, tgt_ids)]
            if rules and langs:
                reasons = [reason or noise_reason(pair, langs, rules) for reason, pair in zip(reasons, zip(srcs, tgts))]
            if rules and rules.dedup:
                candidates = [i for i, reason in enumerate(reasons) if reason is None]
                new = seen.add_new(pair_digests([src_ids[i] for i in candidates], [tgt_ids[i] for i in candidates]))
                for i, is_new in zip(candidates, new.tolist()):
                    reasons[i] = None if is_new else "duplicate"
            kept = [i for i, reason in enumerate(reasons) if reason is None]
            for reason in filter(None, reasons):
                report.dropped[reason] += 1
            kept_src, kept_tgt = [src_ids[i] for i in kept], [tgt_ids[i] for i in kept]
            if samples:
                for (sample_src, sample_tgt), (sample_src_tok, sample_tgt_tok) in samples:
                    sample_src.add_many(tagged(sample_src_tok.encode_batch([srcs[i] for i in kept])))
                    sample_tgt.add_many(sample_tgt_tok.encode_batch([tgts[i] for i in kept]))
            else:
                src_writer.add_many(tagged(kept_src))
                tgt_writer.add_many(kept_tgt)
            report.read += len(chunk)
            bar.advance(sum(line_bytes(src) for src, _ in chunk) if total else len(chunk))
    report.kept = src_writer.sentences - written[0]
    report.src_tokens, report.tgt_tokens = src_writer.tokens - written[1], tgt_writer.tokens - written[2]
    return report


def _total(reports: list[SplitReport]) -> SplitReport:
    total = SplitReport()
    for report in reports:
        total.read, total.kept = total.read + report.read, total.kept + report.kept
        total.src_tokens, total.tgt_tokens = total.src_tokens + report.src_tokens, total.tgt_tokens + report.tgt_tokens
        total.dropped = {rule: total.dropped[rule] + count for rule, count in report.dropped.items()}
    return total


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
) -> dict:
    """Build a binarized dataset from `splits` ({"train": PREFIX, "valid": PREFIX, ...}); returns the
    manifest. The training split may join several corpora ({"train": [Corpus, ...]}).

    With `directions` ([(source, target), ...], in place of src_lang and tgt_lang) the dataset is
    multilingual: every split holds each direction S-T of each of its prefixes (PREFIX.S and
    PREFIX.T), one after the other, and every source starts with its target's tag <2T> (Johnson et
    al., 2017; `train-tokenizer --tag 2T`). Each training corpus becomes one per direction, named
    NAME.S-T (S-T for an unnamed one), so that weights and the sampling temperature apply to
    directions."""
    rules = rules or CleaningRules()
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
                    encoded.append(_encode_split(paths, writers, (src_tok, tgt_tok), cleaning, description, raw,
                                                 samples, tags, (s, t)))  # fmt: skip
                reports[split] = _total(encoded)
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
            raise MtkitError(f"the training set is empty after cleaning ({_dropped_summary(reports['train'])})")
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


def _dropped_summary(report: SplitReport) -> str:
    return ", ".join(f"{rule}: {count}" for rule, count in report.dropped.items())
