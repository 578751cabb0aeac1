"""Terminology on the server: `serve --glossary` for every request, and a request's own glossary (a list
of [source term, target term] pairs, which come before the server's), matched in each piece of each
text (mtkit.text.glossary) and checked before anything is queued: a term the model cannot write, or
more of them in a piece than the beam holds, is the request's error, not the engine's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mtkit.core.errors import MtkitError
from mtkit.text.glossary import Glossary, Term, encode_terms
from mtkit.text.tokenizer import Tokenizer
from mtkit.translation.translate import NbestList

MAX_REQUEST_TERMS = 1000  # a request's own glossary entries at most
MAX_TERM_CHARS = 200  # characters of one term at most


class TermsError(MtkitError):
    """A request's glossary that cannot be used, and why (refused as UNUSABLE)."""


class ServerTerms:
    """The server's glossary and what requests may add to it."""

    def __init__(
        self,
        src_tokenizer: Tokenizer,
        tgt_tokenizer: Tokenizer,
        terms: Sequence[Term] = (),
        case_sensitive: bool = False,
        refused: str | None = None,
    ):
        """terms: serve --glossary's; refused: why this server's engine cannot place terms (None: it can)."""
        self.normalize, self.tgt_tokenizer = src_tokenizer.normalize, tgt_tokenizer
        self.terms, self.case_sensitive, self.refused = list(terms), case_sensitive, refused
        self.glossary = Glossary(self.terms, self.normalize, case_sensitive) if self.terms else None
        self._check_writable(self.terms)

    def for_request(self, pairs: Any) -> Glossary | None:
        """The glossary of a request with these pairs (None: none given; a Glossary: a stored one,
        already checked): its own terms first."""
        if not pairs:
            return self.glossary
        if isinstance(pairs, Glossary):
            return pairs
        if not isinstance(pairs, list):
            raise TermsError("glossary: a list of [source term, target term] pairs")
        if len(pairs) > MAX_REQUEST_TERMS:
            raise TermsError(f"glossary: {len(pairs):,} entries; a request may give {MAX_REQUEST_TERMS:,} at most")
        own = []
        for n, pair in enumerate(pairs):
            if not (
                isinstance(pair, list | tuple)
                and len(pair) == 2
                and all(isinstance(t, str) and t.strip() for t in pair)
            ):
                raise TermsError(f"glossary entry {n}: a [source term, target term] pair of non-empty strings")
            if max(map(len, pair)) > MAX_TERM_CHARS:
                raise TermsError(f"glossary entry {n}: a term of more than {MAX_TERM_CHARS} characters")
            own.append(Term(pair[1], pair[0], f"glossary entry {n}"))
        return Glossary(own + self.terms, self.normalize, self.case_sensitive)

    def stored(self, entries: Sequence[tuple[str, str]]) -> Glossary:
        """A stored glossary's entries (source, target) as a request's glossary, before the server's terms."""
        own = [Term(target, source, f"glossary entry {n}") for n, (source, target) in enumerate(entries)]
        return Glossary(own + self.terms, self.normalize, self.case_sensitive)

    def per_piece(
        self, glossary: Glossary | None, pieces: Sequence[tuple[int, str]], beam: int
    ) -> list[tuple[Term, ...]]:
        """Each piece's terms; pieces: (its text's index, the piece's text)."""
        if glossary is None:
            return [() for _ in pieces]
        found = [tuple(glossary.terms(text)) for _, text in pieces]
        if any(found) and self.refused:
            raise TermsError(f"glossary: {self.refused}")
        if any(found) and beam == 1:
            raise TermsError("glossary: terms need beam search (beam 2 or more)")
        for (text, _), terms in zip(pieces, found):
            if len(terms) > beam:
                raise TermsError(
                    f"text {text}: {len(terms)} glossary terms in one sentence, more than beam {beam} holds"
                )
        self._check_writable({term for terms in found for term in terms})
        return found

    def _check_writable(self, terms) -> None:
        try:
            encode_terms(self.tgt_tokenizer, list(terms))
        except MtkitError as err:
            raise TermsError(str(err)) from None


def missed_terms(results: Sequence[tuple[NbestList, Any, Any]], counts: list[int]) -> list[int]:
    """The texts (by index) whose translation lacks a term: a piece cut at the length limit first
    (results: each piece's n-best first, as the engine answers)."""
    owners = [n for n, count in enumerate(counts) for _ in range(count)]
    return sorted({n for n, (nbest, _, _) in zip(owners, results) if nbest and nbest[0][0].missed_constraints})
