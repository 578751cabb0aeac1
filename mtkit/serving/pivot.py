"""What a request is translated by: one model's service (mtkit.serving.service), or two of them one
after the other through a pivot language (Pivot: de -> en -> fr where no model translates de -> fr).
Both translate markup the same way (Runs: segments with word alignments, the markup put back)."""

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from mtkit.core.errors import MtkitError
from mtkit.serving.calls import Asked, Reason, Refused, Translated
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
    """What a route (a Service or a Pivot) answers: run(asked) translates plain text, translate(asked)
    any format: markup through run(), its segments sentence by sentence where asked, each with its word
    alignment, and the markup put back around the aligned words (mtkit.text.markup_placement). A route
    has run, can_align, cfg, check_chars, languages and sentence_splitter."""

    def check_source(self, source: str | None) -> None:
        """A request's source language, where it names one, must be one of the route's (INVALID where not)."""
        try:
            self.languages.check_source(source)
        except LanguageError as err:
            raise Refused(Reason.INVALID, str(err)) from None

    async def translate(self, asked: Asked) -> Translated:
        """The request's answer, whatever its format: plain text through run(); markup (html or xml) a
        string per text, its segments translated with word alignments and the markup put back."""
        if asked.format not in FORMATS:
            raise Refused(Reason.UNUSABLE, f"format {asked.format}: must be one of {', '.join(FORMATS)}")
        if asked.format == "text":
            return await self.run(asked)
        fmt, options = asked.format, asked.options
        if options.nbest > 1 or options.alignment:
            raise Refused(
                Reason.UNUSABLE, f"format {fmt}: one translation per text, with its markup (no nbest or alignment)"
            )
        if not self.can_align:
            needs = "--engine pytorch and a model without target tags or language tokens"
            raise Refused(Reason.UNUSABLE, f"format {fmt} needs {needs}")
        self.check_chars(asked.texts)
        split = self.cfg.split_sentences if asked.split is None else asked.split
        try:
            documents = markup_segments(asked.texts, fmt, lambda i: f"text {i}", asked.kept)
        except MtkitError as err:
            raise Refused(Reason.INVALID, str(err)) from None
        cut = sentences_of(
            pending_texts(documents, lines=True), self.sentence_splitter().split if split else lambda t: [t]
        )
        translated = await self.run_aligned(replace(asked, texts=[s for parts in cut for s in parts]))
        aligned = [(text, parse_alignment(alignment)) for text, alignment in translated]
        return Translated(assemble(documents, rejoined(cut, aligned)))

    async def run_aligned(self, asked: Asked) -> list[tuple[str, str]]:
        """Each of the request's texts (a sentence each) translated with its word alignment, in one piece:
        (translation, Pharaoh pairs "i-j ..."). The pairs stay text until used: a document's thousands of
        them go to its worker, and as lists of tuples they pickled 4-7 times slower, in one call that holds
        the interpreter."""
        if not asked.texts:
            return []
        options = replace(asked.options, alignment=True, confidence=False)
        answers = (await self.run(replace(asked, options=options, format="text", split=False))).texts
        return [(h[0]["text"], h[0]["alignment"]) if h else ("", "") for h in answers]


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

    async def run(self, asked: Asked) -> Translated:
        """Each text's answer, as Service.run gives it, through both legs."""
        if asked.glossary:
            raise self._glossary_refused()
        call, options = asked.call, asked.options
        into_pivot = replace(asked, options=replace(options, nbest=1), target=self.pivot)
        middle = await self.first.run(into_pivot)
        sentences, long = call.sentences, call.long  # the log line's: the request's texts
        pivoted = [(m[0]["text"] if m else "") for m in middle.texts] if options.alignment else middle.texts
        answer = await self.second.run(replace(asked, texts=pivoted, source=self.pivot, checked=False))
        call.sentences, call.long = call.sentences + sentences, long
        if options.alignment:
            for before, after in zip(middle.texts, answer.texts):
                for hypothesis in after:
                    hypothesis["alignment"] = composed(before[0]["alignment"], hypothesis["alignment"])
        if answer.confidences is not None and middle.confidences is not None:
            answer.confidences = [a * b for a, b in zip(middle.confidences, answer.confidences)]
        return answer


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
