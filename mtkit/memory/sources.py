"""What a memory is imported from: TMX, tab-separated pairs, a PO catalogue, or two aligned files,
each read once, as a stream of units."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

from mtkit.core.errors import MtkitError
from mtkit.core.textio import iter_lines, open_binary
from mtkit.memory.tmx import Unit, Variant, read_tmx


def units_of(path: Path, src_lang: str | None, tgt_lang: str | None) -> tuple[str | None, Iterator[Unit]]:
    """The source language the units are known by, and the units, from a file of any of the kinds."""
    suffix = Path(path.name.lower().removesuffix(".gz")).suffix
    if suffix == ".tmx":
        header_lang, units = read_tmx(open_binary(path), str(path))
        return src_lang or header_lang, units
    if not (src_lang and tgt_lang):
        raise MtkitError(f"{path}: give --src-lang and --tgt-lang (only a TMX file names its languages)")
    if suffix in (".po", ".pot"):
        return src_lang, _po_units(path, src_lang, tgt_lang)
    return src_lang, _tsv_units(path, src_lang, tgt_lang)


def aligned_units(src: Path, ref: Path, src_lang: str, tgt_lang: str) -> Iterator[Unit]:
    """Line n of src and line n of ref make a unit; files of different lengths are an error."""
    for lineno, (source, target) in enumerate(itertools.zip_longest(iter_lines(src), iter_lines(ref)), 1):
        if source is None or target is None:
            shorter = src if source is None else ref
            raise MtkitError(f"{src} and {ref}: different numbers of lines ({shorter} ends before line {lineno})")
        yield _pair(source, target, src_lang, tgt_lang)


def _tsv_units(path: Path, src_lang: str, tgt_lang: str) -> Iterator[Unit]:
    for lineno, line in enumerate(iter_lines(path), 1):
        if not line.strip():
            continue
        columns = line.split("\t")
        if len(columns) != 2:
            raise MtkitError(f"{path}, line {lineno}: {len(columns)} tab-separated columns (a source and a target)")
        yield _pair(*columns, src_lang, tgt_lang)


def _po_units(path: Path, src_lang: str, tgt_lang: str) -> Iterator[Unit]:
    try:
        import polib
    except ImportError:
        raise MtkitError("reading PO catalogues needs polib: pip install 'mtkit[documents]'") from None
    try:
        catalogue = polib.pofile(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise MtkitError(f"{path}: not a PO catalogue ({err})") from None
    for entry in catalogue:
        target = entry.msgstr or entry.msgstr_plural.get(0, "")
        if entry.msgid and target and not entry.obsolete and "fuzzy" not in entry.flags:
            yield _pair(entry.msgid, target, src_lang, tgt_lang)


def _pair(source: str, target: str, src_lang: str, tgt_lang: str) -> Unit:
    return Unit([Variant(src_lang, " ".join(source.split())), Variant(tgt_lang, " ".join(target.split()))])
