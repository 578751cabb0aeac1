"""One split of a parallel corpus, read once in chunks of lines: cleaned, deduplicated, encoded
into subwords and written, with a report of what was kept and dropped and why."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mtkit.core import console
from mtkit.core.errors import MtkitError
from mtkit.core.textio import iter_lines, line_bytes, progress_size
from mtkit.data.dataset import SentenceWriter
from mtkit.text.augment import KINDS, MIN_DICE, Augmentation, word_translations
from mtkit.text.cleaning import DROP_REASONS, CleaningRules, DigestSet, drop_reason, noise_reason, pair_digests
from mtkit.text.tokenizer import Tokenizer

CHUNK_LINES = 20_000


@dataclass
class SplitReport:
    read: int = 0
    kept: int = 0
    src_tokens: int = 0
    tgt_tokens: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    augmented: dict[str, int] = field(default_factory=dict)  # of the kept, copies added by kind (mtkit.text.augment)


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


def encode_split(
    paths: list[Path],
    writers: tuple[SentenceWriter, SentenceWriter],
    tokenizers: tuple[Tokenizer, Tokenizer],
    rules: CleaningRules | None,
    description: str,
    raw: list[Path] | None = None,
    samples: list[tuple[tuple[SentenceWriter, SentenceWriter], tuple[Tokenizer, Tokenizer]]] | None = None,
    tags: list[int] | None = None,
    langs: tuple[str, str] | None = None,
    augmentation: Augmentation | None = None,
) -> SplitReport:
    """Encode one split; `rules` None keeps every line (valid/test). With `raw` (source and target
    paths), the lines are also kept there as plain UTF-8 text, from the same single read. With
    `samples` ((writers, dropout tokenizers) per sample, the first being `writers`), each kept pair
    is encoded again for every sample; the plain encoding only decides what is kept. With `tags`,
    every kept source starts with those ids (the cleaning rules see the sentence without them). With
    `langs` (source and target language), the rules' noise filters apply too. With `augmentation`, each
    chunk's kept pairs are followed by their augmented copies (mtkit.text.augment) that the length
    rules keep. Raw text is appended to what the files hold (a split of several directions writes them
    one after the other)."""
    report = SplitReport()
    augmenting = augmentation is not None and augmentation.active and rules is not None
    if augmenting:  # every kind asked for counted, in KINDS' order
        report.augmented = {kind: 0 for kind in KINDS if getattr(augmentation, kind)}
    tagged = (lambda ids: [[*tags, *s] for s in ids]) if tags else (lambda ids: ids)
    seen = DigestSet()
    lexicon = None  # word translations, for augmentation's short copies
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
            kept_srcs, kept_tgts = [srcs[i] for i in kept], [tgts[i] for i in kept]
            if augmenting:
                if augmentation.short and lexicon is None:  # the first chunk's word translations serve every later one
                    lexicon = word_translations(zip(kept_srcs, kept_tgts), min_dice=MIN_DICE)
                extra = _augmented(augmentation, rules, tokenizers, kept_srcs, kept_tgts, report, lexicon)
                kept_srcs, kept_tgts = kept_srcs + extra[0], kept_tgts + extra[1]
                kept_src, kept_tgt = kept_src + extra[2], kept_tgt + extra[3]
            if samples:
                for (sample_src, sample_tgt), (sample_src_tok, sample_tgt_tok) in samples:
                    sample_src.add_many(tagged(sample_src_tok.encode_batch(kept_srcs)))
                    sample_tgt.add_many(sample_tgt_tok.encode_batch(kept_tgts))
            else:
                src_writer.add_many(tagged(kept_src))
                tgt_writer.add_many(kept_tgt)
            report.read += len(chunk)
            bar.advance(sum(line_bytes(src) for src, _ in chunk) if total else len(chunk))
    report.kept = src_writer.sentences - written[0]  # augmented copies included: the pairs written
    report.src_tokens, report.tgt_tokens = src_writer.tokens - written[1], tgt_writer.tokens - written[2]
    return report


def _augmented(
    augmentation: Augmentation,
    rules: CleaningRules,
    tokenizers: tuple[Tokenizer, Tokenizer],
    srcs: list[str],
    tgts: list[str],
    report: SplitReport,
    lexicon: dict[str, str] | None,
) -> tuple[list[str], list[str], list[list[int]], list[list[int]]]:
    """The augmented copies of a chunk's kept pairs that the length rules keep: their texts and ids,
    counted by kind in the report (their pairs numbered from the pairs read before the chunk);
    `lexicon`: the word translations "short" takes them from."""
    copies = augmentation.copies(list(zip(srcs, tgts)), report.read, lexicon)
    src_ids = tokenizers[0].encode_batch([src for _, _, src, _ in copies])
    tgt_ids = tokenizers[1].encode_batch([tgt for _, _, _, tgt in copies])
    out: tuple[list, list, list, list] = ([], [], [], [])
    for (_, kind, src, tgt), src_row, tgt_row in zip(copies, src_ids, tgt_ids):
        if drop_reason(src_row, tgt_row, rules) is None:
            for column, value in zip(out, (src, tgt, src_row, tgt_row)):
                column.append(value)
            report.augmented[kind] += 1
    return out


def total_report(reports: list[SplitReport]) -> SplitReport:
    total = SplitReport()
    for report in reports:
        total.read, total.kept = total.read + report.read, total.kept + report.kept
        total.src_tokens, total.tgt_tokens = total.src_tokens + report.src_tokens, total.tgt_tokens + report.tgt_tokens
        total.dropped = {rule: total.dropped[rule] + count for rule, count in report.dropped.items()}
        for kind, count in report.augmented.items():
            total.augmented[kind] = total.augmented.get(kind, 0) + count
    return total


def dropped_summary(report: SplitReport) -> str:
    return ", ".join(f"{rule}: {count}" for rule, count in report.dropped.items())
