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
from mtkit.data import MANIFEST, SentenceWriter, ids_dtype, sample_split
from mtkit.dedup import DigestSet, pair_digests
from mtkit.errors import MtkitError
from mtkit.langid import check_known, numbers, probability, require_langid, script_share
from mtkit.textio import atomic_directory, iter_lines, line_bytes, progress_size
from mtkit.tokenizer import Tokenizer

CHUNK_LINES = 20_000
DROP_REASONS = ("empty", "too_long", "ratio", "duplicate", "copy", "numbers", "script", "language")
BACK_TRANSLATION_TAG = "bt"  # the tokenizer's <bt> (train-tokenizer --tag bt) starts back-translated sources


@dataclass
class Corpus:
    """One of the corpora a training split joins: PREFIX.SRC/PREFIX.TGT, with the number of times an
    epoch takes each pair (a fraction: a random part, drawn per epoch), and whether its sources are
    back-translations, which then start with the <bt> tag (tagged back-translation)."""

    name: str
    prefix: Path
    weight: float = 1.0
    back_translated: bool = False


@dataclass
class CleaningRules:
    """What `preprocess` drops from the training split (valid and test keep every line)."""

    strip: bool = True
    drop_empty: bool = True
    max_len: int = 250  # subword tokens on either side; 0 = no limit
    max_ratio: float = 3.0  # longer side / shorter side in subword tokens; 0 = no limit
    dedup: bool = False
    # Noise filters (mtkit.langid), each off by default:
    langid: bool = False  # drop a pair where a side's language has probability below langid_min_prob
    langid_min_prob: float = 0.05
    min_script_share: float = 0.0  # drop a pair where a side has fewer of its letters in its language's scripts
    drop_copies: bool = False  # drop a pair whose target is its source (case and spaces aside)
    check_numbers: bool = False  # drop a pair whose sides both write numbers, and different ones

    def validate(self, src_lang: str, tgt_lang: str) -> None:
        if self.max_len < 0:
            raise MtkitError(f"--max-len {self.max_len}: must not be negative (0: no limit)")
        if self.max_ratio < 0:
            raise MtkitError(f"--max-ratio {self.max_ratio:g}: must not be negative (0: off)")
        if not 0 <= self.min_script_share <= 1:
            raise MtkitError(f"--min-script-share {self.min_script_share:g}: must be in [0, 1] (0: off)")
        if not 0 < self.langid_min_prob < 1:
            raise MtkitError(f"--langid-min-prob {self.langid_min_prob:g}: must be in (0, 1)")
        if self.langid:
            require_langid("--langid")
            for lang in (src_lang, tgt_lang):
                check_known(lang, f"--langid with language {lang}")


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


def _drop_reason(src: list[int], tgt: list[int], rules: CleaningRules) -> str | None:
    if not src or not tgt:
        return "empty" if rules.drop_empty else None
    if rules.max_len and max(len(src), len(tgt)) > rules.max_len:
        return "too_long"
    if rules.max_ratio and max(len(src), len(tgt)) / min(len(src), len(tgt)) > rules.max_ratio:
        return "ratio"
    return None


def _numbers_differ(src: str, tgt: str) -> bool:
    """Both sides write numbers (in digits), and not the same ones: "3 dogs" against "Drei Hunde" is
    a translation, "3 dogs" against "4 Hunde" is not."""
    src_numbers, tgt_numbers = numbers(src), numbers(tgt)
    return bool(src_numbers and tgt_numbers and src_numbers != tgt_numbers)


def _noise_reason(texts: tuple[str, str], langs: tuple[str, str], rules: CleaningRules) -> str | None:
    """Why the noise filters drop a pair of texts in languages `langs`, or None (cheapest test first)."""
    if rules.drop_copies and "".join(texts[0].split()).casefold() == "".join(texts[1].split()).casefold():
        return "copy"
    if rules.check_numbers and _numbers_differ(*texts):
        return "numbers"
    if rules.min_script_share and min(map(script_share, texts, langs)) < rules.min_script_share:
        return "script"
    if rules.langid and min(map(probability, texts, langs)) < rules.langid_min_prob:
        return "language"
    return None


def _encode_split(
    paths: list[Path],
    writers: tuple[SentenceWriter, SentenceWriter],
    tokenizers: tuple[Tokenizer, Tokenizer],
    rules: CleaningRules | None,
    description: str,
    raw: list[Path] | None = None,
    samples: list[tuple[tuple[SentenceWriter, SentenceWriter], tuple[Tokenizer, Tokenizer]]] | None = None,
    tag: int | None = None,
    langs: tuple[str, str] | None = None,
) -> SplitReport:
    """Encode one split; `rules` None keeps every line (valid/test). With `raw` (source and target
    paths), the lines are also kept there as plain UTF-8 text, from the same single read. With
    `samples` ((writers, dropout tokenizers) per sample, the first being `writers`), each kept pair
    is encoded again for every sample; the plain encoding only decides what is kept. With `tag`,
    every kept source starts with that id (the cleaning rules see the sentence without it). With
    `langs` (source and target language), the rules' noise filters apply too."""
    report = SplitReport()
    tagged = (lambda ids: [[tag, *s] for s in ids]) if tag is not None else (lambda ids: ids)
    seen = DigestSet()
    src_writer, tgt_writer = writers
    written = src_writer.sentences, src_writer.tokens, tgt_writer.tokens  # writers a corpus before used
    strip = rules.strip if rules else True
    total = progress_size(paths[0])  # progress by the source file's bytes: every input is read once
    with contextlib.ExitStack() as stack:
        raw_files = [stack.enter_context(open(p, "w", encoding="utf-8")) for p in raw or []]
        bar = stack.enter_context(console.progress(description, total=total, unit="bytes" if total else ""))
        for chunk in _chunks(_paired_lines(paths[0], paths[1]), CHUNK_LINES):
            for side, out in enumerate(raw_files):
                out.write("".join(pair[side] + "\n" for pair in chunk))
            srcs = [s.strip() if strip else s for s, _ in chunk]
            tgts = [t.strip() if strip else t for _, t in chunk]
            src_ids, tgt_ids = tokenizers[0].encode_batch(srcs), tokenizers[1].encode_batch(tgts)
            reasons = [_drop_reason(src, tgt, rules) if rules else None for src, tgt in zip(src_ids, tgt_ids)]
            if rules and langs:
                reasons = [
                    reason or _noise_reason(pair, langs, rules) for reason, pair in zip(reasons, zip(srcs, tgts))
                ]
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
) -> dict:
    """Build a binarized dataset from `splits` ({"train": PREFIX, "valid": PREFIX, ...}); returns the
    manifest. The training split may join several corpora ({"train": [Corpus, ...]})."""
    rules = rules or CleaningRules()
    named = isinstance(splits["train"], list)
    corpora = splits["train"] if named else [Corpus("train", splits["train"])]  # type: ignore[list-item, arg-type]
    sampling = sampling or Sampling()
    sampling.validate()
    rules.validate(src_lang, tgt_lang)
    if src_lang == tgt_lang:
        raise MtkitError(f"source and target language are both {src_lang!r}")
    _check_corpora(corpora)
    for prefix in [c.prefix for c in corpora] + [p for name, p in splits.items() if name != "train"]:
        for lang in (src_lang, tgt_lang):
            if not Path(f"{prefix}.{lang}").is_file() and not Path(f"{prefix}.{lang}.gz").is_file():
                raise MtkitError(f"{prefix}.{lang}: no such file (nor {prefix}.{lang}.gz)")
    src_tok = Tokenizer.load(tokenizer_path)
    tgt_tok = Tokenizer.load(tgt_tokenizer_path) if tgt_tokenizer_path else src_tok
    joint = src_tok.sha256 == tgt_tok.sha256 or src_tok.vocabulary() == tgt_tok.vocabulary()  # one id space
    tag = src_tok.tag_id(BACK_TRANSLATION_TAG)
    if tag is None and any(c.back_translated for c in corpora):
        raise MtkitError(
            f"--back-translated: the tokenizer has no <{BACK_TRANSLATION_TAG}> tag "
            f"(train it with mtkit train-tokenizer --tag {BACK_TRANSLATION_TAG})"
        )
    if sampling.bpe_dropout:
        dropout_toks = (src_tok.with_bpe_dropout(sampling.bpe_dropout), tgt_tok.with_bpe_dropout(sampling.bpe_dropout))
    dtype = ids_dtype(max(src_tok.vocab_size, tgt_tok.vocab_size))
    start = time.perf_counter()
    with atomic_directory(output, force) as tmp:
        src_file, tgt_file = (
            ("tokenizer.json", "tokenizer.json") if joint else ("tokenizer.src.json", "tokenizer.tgt.json")
        )
        src_tok.save(tmp / src_file)
        tgt_tok.save(tmp / tgt_file)
        reports, content, per_corpus = {}, {}, []
        for split, prefix in splits.items():
            writers = (
                SentenceWriter(tmp / f"{split}.{src_lang}", dtype),
                SentenceWriter(tmp / f"{split}.{tgt_lang}", dtype),
            )
            # valid/test keep every line, and their raw text too: BLEU is computed against it.
            raw = None if split == "train" else [tmp / f"{split}.{lang}.txt" for lang in (src_lang, tgt_lang)]
            samples = None
            if split == "train" and sampling.bpe_dropout:
                extra = [
                    tuple(SentenceWriter(tmp / f"{sample_split(k)}.{lang}", dtype) for lang in (src_lang, tgt_lang))
                    for k in range(1, sampling.samples)
                ]
                samples = [(w, dropout_toks) for w in [writers, *extra]]
            try:
                is_train = split == "train"
                encoded = []
                for corpus in corpora if is_train else [Corpus(split, prefix)]:  # type: ignore[arg-type]
                    paths = [_existing(corpus.prefix, lang) for lang in (src_lang, tgt_lang)]
                    description = f"train/{corpus.name}" if named and is_train else corpus.name
                    corpus_tag = tag if corpus.back_translated else None
                    cleaning = rules if is_train else None
                    encoded.append(_encode_split(paths, writers, (src_tok, tgt_tok), cleaning, description, raw,
                                                 samples, corpus_tag, (src_lang, tgt_lang)))  # fmt: skip
                reports[split] = _total(encoded)
                per_corpus = encoded if is_train else per_corpus
            finally:
                for sample_writers, _ in samples or [(writers, None)]:
                    for writer in sample_writers:
                        writer.close()
                        content[writer.name] = writer.digest
        if reports.get("train") is not None and reports["train"].read == 0:
            raise MtkitError(f"{corpora[0].prefix}.{src_lang}: no lines (the training files are empty)")
        if reports.get("train") is not None and reports["train"].kept == 0:
            raise MtkitError(f"the training set is empty after cleaning ({_dropped_summary(reports['train'])})")
        manifest = {
            "mtkit_version": __version__,
            "src_lang": src_lang,
            "tgt_lang": tgt_lang,
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
