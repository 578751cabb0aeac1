"""What a request is translated by: one model's service (mtkit.serving.service), or two of them one
after the other through a pivot language (Pivot: de -> en -> fr where no model translates de -> fr).
Both translate markup the same way (Runs: segments with word alignments, the markup put back)."""

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from mtkit.core.errors import MtkitError
from mtkit.serving.calls import Call, Reason, Refused
from mtkit.serving.engine import Options
from mtkit.serving.settings import LanguageError, ModelInfo, aligns
from mtkit.text.markup import FORMATS
from mtkit.text.markup_placement import (
    assemble,
    markup_segments,
    parse_alignment,
    pending_texts,
    rejoined,
    sentences_of,
)
from mtkit.translation.alignment import composed as compose
from mtkit.translation.alignment import pharaoh

DETECTED_CHARS = 2000  # of a request's texts, for language identification


def detected_language(texts: Sequence[str], sources: Sequence[str]) -> str:
    """The texts' language, among those the server translates from (sources)."""
    if len(sources) == 1:
        return sources[0]
    text = " ".join(texts)[:DETECTED_CHARS].strip()
    from mtkit.text.langid import identify, require_langid

    try:
        require_langid("source auto")
    except MtkitError as err:
        raise Refused(Reason.INVALID, f"source: give one of {', '.join(sources)} ({err})") from None
    if not text:
        raise Refused(Reason.INVALID, f"source: give one of {', '.join(sources)} (no text to identify its language)")
    try:
        return identify(text, tuple(sources))[0]
    except (ValueError, KeyError):  # a code py3langid does not know: among all it knows
        return identify(text)[0]


class Runs:
    """Markup translated through a route's run(): its segments, sentence by sentence where asked, each
    with its word alignment, and the markup put back around the aligned words
    (mtkit.text.markup_placement). A route has run, can_align, cfg, check_chars, languages and
    sentence_splitter."""

    def check_source(self, source: str | None) -> None:
        """A request's source language, where it names one, must be one of the route's (INVALID where not)."""
        try:
            self.languages.check_source(source)
        except LanguageError as err:
            raise Refused(Reason.INVALID, str(err)) from None

    async def run_markup(
        self,
        call: Call,
        texts: Sequence[str],
        options: Options,
        fmt: str,
        target: str | None = None,
        split_sentences: bool | None = None,
        glossary: Any = None,
        kept: frozenset[str] = frozenset(),
        source: str | None = None,
    ) -> list[str]:
        """Texts of markup (fmt html or xml), a string per text; kept: more elements whose text is not
        translated."""
        if fmt not in FORMATS:
            raise Refused(Reason.UNUSABLE, f"format {fmt}: must be one of {', '.join(FORMATS)}")
        if fmt == "text":
            return (await self.run(call, texts, options, split_sentences, target, source, glossary))[0]
        if options.nbest > 1 or options.alignment:
            raise Refused(
                Reason.UNUSABLE, f"format {fmt}: one translation per text, with its markup (no nbest or alignment)"
            )
        if not self.can_align:
            needs = "--engine pytorch and a model without target tags or language tokens"
            raise Refused(Reason.UNUSABLE, f"format {fmt} needs {needs}")
        self.check_chars(texts)
        split = self.cfg.split_sentences if split_sentences is None else split_sentences
        try:
            documents = markup_segments(texts, fmt, lambda i: f"text {i}", kept)
        except MtkitError as err:
            raise Refused(Reason.INVALID, str(err)) from None
        cut = sentences_of(
            pending_texts(documents, lines=True), self.sentence_splitter().split if split else lambda t: [t]
        )
        sentences = [s for parts in cut for s in parts]
        translated = await self.run_aligned(call, sentences, options, target, glossary, source)
        return assemble(documents, rejoined(cut, translated))

    async def run_aligned(
        self,
        call: Call,
        sentences: list[str],
        options: Options,
        target: str | None = None,
        glossary: Any = None,
        source: str | None = None,
    ) -> list[tuple[str, list[tuple[int, int]]]]:
        """Each sentence's translation with its word alignment (one piece each)."""
        if not sentences:
            return []
        options = replace(options, alignment=True, confidence=False)
        answers = (await self.run(call, sentences, options, False, target, source, glossary))[0]
        return [(h[0]["text"], parse_alignment(h[0]["alignment"])) if h else ("", []) for h in answers]


class Pivot(Runs):
    """Two services one after the other: the first's best translation into the pivot language is the
    second's source, as `mtkit translate -m A --then B` does (each leg cuts its own text into
    sentences). The n-best are the second's; an alignment is the two composed; a confidence the
    product of both legs'. A glossary is refused: its source terms are not in the second leg's
    source language."""

    def __init__(self, first, second, pivot: str):
        self.first, self.second, self.pivot = first, second, pivot
        self.cfg, self.languages = first.cfg, first.languages
        source, target = first.info.source_language, second.info.target_language
        self.info = ModelInfo(f"{first.info.name}+{second.info.name}", second.info.path, second.info.engine,
                              source, target, {"src_lang": source, "tgt_lang": target})  # fmt: skip

    @property
    def can_align(self) -> bool:
        return self.first.can_align and self.second.can_align

    @property
    def terms(self):  # what a stored glossary (DeepL's) is built with
        raise self._glossary_refused()

    def _glossary_refused(self) -> Refused:
        return Refused(Reason.UNUSABLE, f"glossary: not for a pair translated through {self.pivot} (two models)")

    def check_chars(self, texts: Sequence[str]) -> None:
        self.first.check_chars(texts)

    def sentence_splitter(self):
        return self.first.sentence_splitter()

    def segmenter(self, split_sentences: bool):
        return self.first.segmenter(split_sentences)

    def defaults(self) -> Options:
        return self.second.defaults()

    def options(self, beam, nbest, lenpen, alignment: bool, confidence: bool | None = None) -> Options:
        self.first.options(beam, 1, lenpen, alignment, confidence)
        return self.second.options(beam, nbest, lenpen, alignment, confidence)

    def framing(self, source: str | None, target: str | None):
        self.first.framing(source, self.pivot)
        return self.second.framing(self.pivot, target)

    async def run(
        self,
        call: Call,
        texts: Sequence[str],
        options: Options,
        split_sentences: bool | None = None,
        target: str | None = None,
        source: str | None = None,
        glossary: Any = None,
        checked: bool = True,
    ) -> tuple[list[Any], list[float] | None]:
        """Each text's answer, as Service.run gives it, through both legs."""
        if glossary:
            raise self._glossary_refused()
        first = replace(options, nbest=1)
        middle, first_scores = await self.first.run(call, texts, first, split_sentences, self.pivot, source,
                                                     checked=checked)  # fmt: skip
        sentences, long = call.sentences, call.long  # the log line's: the request's texts
        pivoted = [(m[0]["text"] if m else "") for m in middle] if options.alignment else middle
        answers, scores = await self.second.run(call, pivoted, options, split_sentences, target, self.pivot,
                                                checked=False)  # fmt: skip
        call.sentences, call.long = call.sentences + sentences, long
        if options.alignment:
            for before, after in zip(middle, answers):
                for hypothesis in after:
                    hypothesis["alignment"] = composed(before[0]["alignment"], hypothesis["alignment"])
        if scores is not None and first_scores is not None:
            scores = [a * b for a, b in zip(first_scores, scores)]
        return answers, scores


def composed(first: str, second: str) -> str:
    """Two Pharaoh alignments one after the other (mtkit.translation.alignment.composed)."""
    return pharaoh(sorted(compose(parse_alignment(first), parse_alignment(second))))


class Reachable:
    """The languages of a server of several models: each pair a model translates, and each pair two
    translate through the pivot language."""

    def __init__(self, fleet):
        direct = {tuple(d) for s in fleet.slots if s.languages is not None for d in s.languages.directions()}
        direct = {(s, t) for s, t in direct if s and t}
        into, out = {s for s, t in direct if t == fleet.pivot}, {t for s, t in direct if s == fleet.pivot}
        through = {(s, t) for s in into for t in out if s != t}
        self.pairs = sorted(direct | through)

    def directions(self) -> list[list[str]]:
        return [list(pair) for pair in self.pairs]

    def sources(self) -> list[str]:
        return sorted({s for s, _ in self.pairs})

    def targets(self) -> list[str]:
        return sorted({t for _, t in self.pairs})

    def check_source(self, source: str | None) -> None:
        if source is not None and source not in self.sources():
            raise LanguageError(f"source {source}: this server translates from {', '.join(self.sources())}")


def described(slot) -> dict[str, Any]:
    """A model as /v1/models describes it: its languages and state (its error where it failed), and
    while loaded its engine, vocabularies, checksum and defaults."""
    info, languages = slot.service.info if slot.service else slot.info, slot.languages
    entry: dict[str, Any] = {"id": slot.name, "state": slot.state}
    if slot.error:
        entry["error"] = slot.error
    if info is not None and languages is not None:
        entry |= {"engine": info.engine, "source_language": info.source_language,
                  "target_language": info.target_language, "target_languages": languages.targets(),
                  "directions": languages.directions(), "alignment": aligns(info)}  # fmt: skip
    if (service := slot.service) is not None:
        default = service.defaults()
        entry |= {
            "source_vocab_size": service.src_tokenizer.vocab_size,
            "target_vocab_size": service.tgt_tokenizer.vocab_size,
            "sha256": service.checksum,
            "defaults": {"beam": default.beam, "lenpen": default.lenpen, "nbest": 1},
            "confidence": default.confidence,
        }
    return entry
