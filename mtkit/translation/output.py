"""What `mtkit translate` writes: the output lines of each input line (plain, n-best, with
alignments), from the input (with target prefixes and terms, where given), in input order."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from itertools import zip_longest
from pathlib import Path
from typing import TextIO

from mtkit.core import console
from mtkit.core.errors import MtkitError
from mtkit.core.textio import check_input_file, iter_lines, line_bytes
from mtkit.decoding.search_rules import Hypothesis
from mtkit.text.glossary import Term
from mtkit.translation.terminology import read_constraints
from mtkit.translation.translate import NbestList, TextTranslator


def output_lines(
    index: int,
    line: str,
    nbest_list: NbestList,
    nbest: int,
    alignment: Callable[[str, Hypothesis], str] | None = None,
    confidence: float | None = None,
) -> list[str]:
    """What `mtkit translate` prints for one input line, without line endings.

    The best translation ("" for a blank line), after `confidence<TAB>` where one is given, or with
    nbest > 1 one `index<TAB>score<TAB>translation` row per hypothesis (`index<TAB>-inf<TAB>` for a
    blank line); `alignment(line, hypothesis)` appends `<TAB>` and the word alignment to each row.
    """
    if nbest > 1:
        rows = [f"{index}\t{h.score:.4f}\t{text}" for h, text in nbest_list] or [f"{index}\t-inf\t"]
    else:
        rows = [nbest_list[0][1] if nbest_list else ""]
    if confidence is not None:
        rows = [f"{confidence:.4f}\t{row}" for row in rows]
    if alignment:
        links = [alignment(line, h) for h, _ in nbest_list] or [""]
        rows = [f"{row}\t{link}" for row, link in zip(rows, links)]
    return rows


def json_line(nbest_list: NbestList) -> str:
    """One line's best translation and where it came from (Hypothesis.origin; "" for a blank line)."""
    hypothesis, text = nbest_list[0] if nbest_list else (None, "")
    return json.dumps({"translation": text, "origin": hypothesis.origin if hypothesis else ""}, ensure_ascii=False)


def paired_inputs(
    lines: Iterable[str],
    source: str,
    prefix_file: Path | None,
    prefix_in_input: bool,
    constraints_file: Path | None = None,
) -> Iterable[str] | Iterable[tuple[str, str, list[Term]]]:
    """The input lines as they are, or (line, target prefix, terms) triples: prefixes from
    `source<TAB>prefix` lines (prefix_in_input) or line by line from prefix_file, terms line by line from
    constraints_file (mtkit.text.glossary); each file must have as many lines as the input (`source`
    names the input in the error)."""
    if not (prefix_file or prefix_in_input or constraints_file):
        return lines
    if prefix_in_input:
        pairs = (tuple(line.split("\t", 1)) if "\t" in line else (line, "") for line in lines)
    elif prefix_file:
        pairs = side_by_side(lines, iter_lines(prefix_file), source, f"--prefix-file {prefix_file}")
    else:
        pairs = ((line, "") for line in lines)
    if constraints_file is None:
        return ((line, prefix, []) for line, prefix in pairs)
    check_input_file(constraints_file)
    given = side_by_side(pairs, read_constraints(constraints_file), source, f"--constraints {constraints_file}")
    return ((line, prefix, terms) for (line, prefix), terms in given)


def side_by_side(lines: Iterable, others: Iterable, source: str, option: str) -> Iterator[tuple]:
    """Pairs of the input's lines and another file's (`option` names it), which must be as many."""
    missing = object()
    for number, (line, other) in enumerate(zip_longest(lines, others, fillvalue=missing), 1):
        if line is missing:
            raise MtkitError(f"{option}: more lines than the input ({source}: {number - 1})")
        if other is missing:
            raise MtkitError(f"{option}: {number - 1} lines, fewer than the input ({source})")
        yield line, other


def write_translations(
    translator: TextTranslator,
    lines: Iterable[str] | Iterable[tuple[str, str, list[Term]]],
    paired: bool,
    out: TextIO,
    nbest: int,
    alignment: Callable[[str, Hypothesis], str] | None,
    chunk: int,
    interactive: bool,
    total_bytes: int | None,
    confidence: Callable[[list[str], list[NbestList]], list[float]] | None = None,
    as_json: bool = False,
) -> int:
    """Translate `lines` in chunks and write each one's output_lines to `out` in input order, with a
    progress bar (by bytes when total_bytes is known); flushed after every line when interactive,
    else after every chunk of a pipe; `confidence(lines, n-best lists)` gives each line's confidence,
    a chunk at a time; as_json: each line a JSON object of its translation and where it came from.
    Returns the number of input lines."""
    written, pending = 0, []
    with console.progress("translating", total=total_bytes, unit="bytes" if total_bytes else "") as bar:

        def write_pending() -> None:
            scores = confidence([line for line, _ in pending], [n for _, n in pending]) if confidence else None
            for k, (line, nbest_list) in enumerate(pending):
                if as_json:
                    rows = [json_line(nbest_list)]
                else:
                    rows = output_lines(written - len(pending) + k, line, nbest_list, nbest, alignment,
                                        scores[k] if scores else None)  # fmt: skip
                out.write("".join(row + "\n" for row in rows))
                bar.advance(line_bytes(line) if total_bytes else 1)
            pending.clear()
            if interactive or total_bytes is None:
                out.flush()

        for line, nbest_list in translator.translate_stream(lines, chunk, paired):
            pending.append((line, nbest_list))
            written += 1
            if len(pending) == chunk:
                write_pending()
        write_pending()
    out.flush()
    return written
