"""Terms in translation: a translator's glossary and per-line terms (mtkit.text.glossary) turned into
each piece's target phrases for the search (mtkit.decoding.lexical), and how many terms the
translations used."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from mtkit.core.errors import MtkitError
from mtkit.core.textio import iter_lines
from mtkit.text.glossary import Glossary, Term, constraint_terms, encode_terms, occurs, read_glossary

# `translator` below: a mtkit.translation.translate.TextTranslator (which calls piece_constraints).


def use_glossary(
    translator,
    path: Path,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    case_sensitive: bool = False,
) -> Glossary:
    """Read a glossary file into the translator: every line's translation uses its terms."""
    entries = read_glossary(path, src_lang, tgt_lang)
    for term in entries:
        phrase_ids(translator, [term], 0)  # a term the model cannot write: refused before any translation
    translator.glossary = Glossary(entries, translator.src_tokenizer.normalize, case_sensitive)
    return translator.glossary


def line_terms(translator, line: str, given: Sequence[Term] = ()) -> list[Term]:
    """A line's terms: the given ones, then its glossary's, each target once."""
    glossary = translator.glossary.terms(line) if translator.glossary else []
    return list({term.target: term for term in [*given, *glossary]}.values())


def phrase_ids(translator, terms: Sequence[Term], line: int) -> list[list[int]]:
    """The target terms one piece must contain, as ids; an error names a term the target vocabulary
    cannot write, or more terms than the beam can hold (`line`: the input line's number)."""
    beam = translator.cfg.beam
    if terms and (beam == 1 or translator.cfg.sample):
        raise MtkitError("terms and constraints need beam search: --beam 2 or more, without --sample")
    if len(terms) > beam:
        raise MtkitError(f"line {line}: {len(terms)} terms to place, more than --beam {beam} holds: raise --beam")
    if terms and not translator.takes_constraints:
        raise MtkitError("terms and constraints need mtkit's own beam search: not --engine ctranslate2 or --mbr")
    return encode_terms(translator.tgt_tokenizer, terms)


def piece_constraints(
    translator,
    lines: Sequence[str],
    wanted: Sequence[int],
    pieces: Sequence[list[list[int]]],
    terms: Sequence[Sequence[Term]] | None,
    number: Callable[[int], int],
) -> list[list[list[int]]] | None:
    """Each piece's target phrases (ids), for the lines `wanted` cut into `pieces` (number(i): line i's
    number in errors): its line's terms
    (line_terms); in a line of several pieces, each term in the pieces that hold its source term.
    None where no piece has any."""
    out = []
    for j, i in enumerate(wanted):
        found = line_terms(translator, lines[i], terms[i] if terms else ())
        if len(pieces[j]) == 1:
            out.append(phrase_ids(translator, found, number(i)))
            continue
        for term in found:
            if term.source is None:
                raise MtkitError(
                    f"line {number(i)}: translated in {len(pieces[j])} pieces, and {term.origin} gives "
                    "phrases for the whole line: give terms by --glossary"
                )
        for text in translator.src_tokenizer.decode_batch(pieces[j]):
            out.append(phrase_ids(translator, [term for term in found if occurs(term, text)], number(i)))
    return out if any(out) else None


def read_constraints(path: Path) -> Iterator[list[Term]]:
    """A constraints file's lines, read as they are needed: each line's terms (mtkit.text.glossary)."""
    for n, line in enumerate(iter_lines(path), 1):
        yield constraint_terms(line, f"{path} line {n}")


@dataclass
class TermUse:
    """How many of the lines' terms their translations hold, as written."""

    terms: int = 0
    used: int = 0

    def add(self, terms: Sequence[Term], translation: str) -> None:
        self.terms += len(terms)
        self.used += sum(term.target in translation for term in terms)

    @property
    def share(self) -> float:
        return self.used / self.terms if self.terms else 1.0
