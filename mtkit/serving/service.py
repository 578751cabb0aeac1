"""The translation service behind `mtkit serve`: request options, the queue and the engine behind it
(mtkit.serving.dynamic_batching and mtkit.serving.engine in this process, or mtkit.serving.replicas),
model information and the warm-up; no HTTP here (mtkit.api.app adds it)."""

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import torch

from mtkit.core.console import warn
from mtkit.core.textio import sha256_file
from mtkit.decoding.constraints import without_made_up_spans
from mtkit.decoding.search_rules import SearchConfig
from mtkit.serving.calls import Asked, Call, Reason, Refused, Translated
from mtkit.serving.dynamic_batching import Batcher, EngineStopped
from mtkit.serving.engine import Engine, Options, Result, Sentence, when_all
from mtkit.serving.metrics import Metrics
from mtkit.serving.pivot import Runs
from mtkit.serving.replicas import Replicas
from mtkit.serving.settings import LanguageError, Languages, ModelInfo, ServeConfig, aligns
from mtkit.serving.terms import ServerTerms, TermsError, missed_terms
from mtkit.serving.waiting import Job, QueueFull
from mtkit.text.sentence_splitter import SentenceSplitter, split_lines
from mtkit.text.targets import LANGUAGE_TOKENS
from mtkit.text.tokenizer import Tokenizer
from mtkit.translation.confidence import Calibration
from mtkit.translation.sentences import Cut, Prepared, Segmenter, segmenter_for
from mtkit.translation.translate import NbestList, TextTranslator

# The pieces a request's answer is joined from on the event loop; more are joined on a thread (a
# document's chunk of 512 sentences, spans restored and terms checked, held the loop 50-90 ms).
JOINED_ON_LOOP = 16

MAX_BEAM = 16
MAX_LENPEN = 10.0


class Service(Runs):
    """The translator, its batcher and what the endpoints share."""

    steering = None  # serve --tm-steer: Steering(sentence, matches) (mtkit.training.adaptation), a copy of the model

    def __init__(
        self,
        make_translator: Callable[[], TextTranslator],
        tokenizers: tuple[Tokenizer, Tokenizer],
        base_cfg: SearchConfig,
        info: ModelInfo,
        cfg: ServeConfig,
        calibration: Calibration | None = None,
        terms: ServerTerms | None = None,
        metrics: Metrics | None = None,
    ):
        """make_translator builds the translator on the thread that decodes (mtkit.serving.engine); with
        engine processes (cfg.replicas > 1 or not cfg.in_process), in each of them, so it must pickle
        (mtkit.serving.replicas.EngineSpec).
        terms: the server's glossary (default: none, and requests' own where the engine places terms);
        metrics: the server's, where it serves several models (default: this service's own)."""
        if cfg.keep_spans:  # the pieces' spans reach the engine as stand-ins
            make_translator = functools.partial(banning_made_up_spans, make_translator)
        self.src_tokenizer, self.tgt_tokenizer = tokenizers
        self.base_cfg = base_cfg
        self.info = info
        refused = None if info.engine == "pytorch" else "terms need --engine pytorch"
        self.terms = terms or ServerTerms(*tokenizers, refused=refused)
        self.cfg = cfg
        self.metrics = metrics or Metrics(lambda: self.batcher.depth, self.engines_running, self.engines_ready)
        self.engine = Engine(make_translator, calibration)  # unused where replicas translate
        self.batcher: Batcher | Replicas
        if cfg.replicas > 1 or not cfg.in_process:
            threads = max(1, torch.get_num_threads() // cfg.replicas)
            self.batcher = Replicas(
                make_translator, cfg.replicas, threads, cfg.max_batch_tokens, cfg.max_wait_ms / 1000, cfg.max_queue,
                self.metrics.observe_batch, calibration, max_client_tokens=cfg.max_client_tokens,
            )  # fmt: skip
        else:
            self.batcher = self.engine.batcher(
                cfg.max_batch_tokens, cfg.max_wait_ms / 1000, cfg.max_queue, self.metrics.observe_batch,
                max_client_tokens=cfg.max_client_tokens,
            )  # fmt: skip
        self.ready = False
        self.checksum = sha256_file(info.path)
        self._segmenters: dict[bool, Segmenter] = {False: self._segmenter_for(False)}  # True: when first asked
        self.languages = Languages(info.meta, info.source_language, info.target_language, self.src_tokenizer)
        self._splitter: SentenceSplitter | None = None  # markup's sentences (translate)

    def engines_running(self) -> int:
        """The engine processes running (1 where the engine is in this process)."""
        return self.batcher.alive if isinstance(self.batcher, Replicas) else 1

    def engines_ready(self) -> int:
        """The engines running whose warm-up translation came back."""
        if not self.ready:
            return 0
        return self.batcher.ready if isinstance(self.batcher, Replicas) else 1

    def framing(self, source: str | None, target: str | None) -> tuple[int | None, tuple[int, ...]]:
        """The id that starts each source of a request between these languages, and the ids given as
        each translation's start (mtkit.serving.settings); a language the model lacks is INVALID."""
        try:
            return self.languages.framing(source, target)
        except LanguageError as err:
            raise Refused(Reason.INVALID, str(err)) from None

    def check_chars(self, texts: Sequence[str]) -> None:  # a request over --max-chars is TOO_LARGE
        if (chars := sum(len(t) for t in texts)) > (most := self.cfg.max_chars):
            raise Refused(Reason.TOO_LARGE, f"{chars:,} characters: the limit is {most:,} per request (--max-chars)")

    def segmenter(self, split_sentences: bool) -> Segmenter:
        """How texts are cut into the pieces translated one by one (mtkit.translation.sentences)."""
        if split_sentences not in self._segmenters:
            self._segmenters[split_sentences] = self._segmenter_for(split_sentences)
        return self._segmenters[split_sentences]

    def _segmenter_for(self, split_sentences: bool) -> Segmenter:
        cfg = self.cfg
        return segmenter_for(self.src_tokenizer, self.info.meta, split_sentences, cfg.max_source_len, cfg.keep_spans,
                             cfg.recase)  # fmt: skip

    def defaults(self) -> Options:
        return Options(self.base_cfg.beam, 1, self.base_cfg.lenpen, False, self.cfg.confidence)

    def options(
        self, beam: int | None, nbest: int | None, lenpen: float | None, alignment: bool, confidence: bool | None = None
    ) -> Options:
        default = self.defaults()
        confidence = default.confidence if confidence is None else confidence
        beam = default.beam if beam is None else beam
        nbest = 1 if nbest is None else nbest
        lenpen = default.lenpen if lenpen is None else lenpen
        if not 1 <= beam <= MAX_BEAM:
            raise Refused(Reason.UNUSABLE, f"beam {beam}: must be between 1 and {MAX_BEAM}")
        if not 1 <= nbest <= beam:
            raise Refused(Reason.UNUSABLE, f"nbest {nbest}: must be between 1 and beam ({beam})")
        if not 0 <= lenpen <= MAX_LENPEN:  # (not NaN either)
            raise Refused(Reason.UNUSABLE, f"lenpen {lenpen}: must be between 0 and {MAX_LENPEN:g}")
        if alignment and not self.can_align:
            if self.info.engine != "pytorch":
                raise Refused(Reason.UNUSABLE, "alignment needs a server started with --engine pytorch")
            raise Refused(Reason.UNUSABLE, "alignment is not available for a model with target tags or language tokens")
        if confidence and (self.info.engine != "pytorch" or self.info.meta.get(LANGUAGE_TOKENS)):
            raise Refused(Reason.UNUSABLE, "confidence needs --engine pytorch and a model without language tokens")
        return Options(beam, nbest, lenpen, alignment, confidence)

    @property
    def can_align(self) -> bool:
        """Whether requests may ask for word alignments (/v1/models says so)."""
        return aligns(self.info)

    @staticmethod
    def _answer(options: Options, nbest_list: NbestList, alignments: list[str] | None) -> Any:
        """One text's entry in "translations": the text, or its n-best (with alignments)."""
        if options.nbest == 1 and not options.alignment:
            return nbest_list[0][1] if nbest_list else ""
        hyps = [{"text": t, "score": h.score} for h, t in nbest_list]
        for entry, alignment in zip(hyps, alignments or []):
            entry["alignment"] = alignment
        return hyps

    def split(self, asked: Asked) -> bool:
        """Whether the request's texts are cut into sentences: as asked, else the server's default (an
        alignment is of one sentence: a request for one keeps its text whole)."""
        if asked.split is not None:
            return asked.split
        return self.cfg.split_sentences and not asked.options.alignment

    def jobs(self, asked: Asked) -> tuple[list[Job], list[Cut], int]:
        """A job per piece of each text (mtkit.translation.sentences: one, unless the text is long or sentences
        are split), each starting with its target's tag where the model has tags (so that requests for
        different targets share batches; the request's glossary its pairs); each text's pieces, and how
        many texts were long."""
        texts, options = asked.texts, asked.options
        tag, given = self.framing(asked.source, asked.target)
        if asked.checked:
            self.check_chars(texts)
        if not texts:
            raise Refused(Reason.UNUSABLE, "text: give at least one")
        if self.cfg.max_texts and len(texts) > self.cfg.max_texts:
            limit = f"the limit is {self.cfg.max_texts:,} per request (--max-texts)"
            raise Refused(Reason.TOO_LARGE, f"{len(texts):,} texts: {limit}")
        if len(texts) > self.cfg.max_queue:
            raise Refused(
                Reason.TOO_LARGE, f"{len(texts):,} texts: the queue holds {self.cfg.max_queue:,} (--max-queue)"
            )
        segmenter = self.segmenter(self.split(asked))
        stripped = [t.strip() for t in texts]
        encoded = self.src_tokenizer.encode_batch(stripped)
        wanted = [i for i, text in enumerate(stripped) if text]
        cut = dict(zip(wanted, segmenter.pieces([texts[i] for i in wanted], [encoded[i] for i in wanted])))
        pieces = [cut.get(i) or blank(text, ids) for i, (text, ids) in enumerate(zip(texts, encoded))]
        if options.alignment and any(len(p) > 1 for p in pieces):
            n = next(i for i, p in enumerate(pieces) if len(p) > 1)
            why = f"text {n} is translated in {len(pieces[n])} pieces; an alignment is of one"
            raise Refused(Reason.UNUSABLE, f"alignment: {why}")
        pieced = [
            (n, piece, ids if tag is None else [tag, *ids])
            for n, (text, parts) in enumerate(zip(texts, pieces))
            for piece, ids in zip([text] if parts.as_is else self.src_tokenizer.decode_batch(parts), parts)
        ]
        try:  # each piece's terms (mtkit.serving.terms)
            terms = self.terms.for_request(asked.glossary)
            found = self.terms.per_piece(terms, [(n, t) for n, t, _ in pieced], options.beam)
        except TermsError as err:
            raise Refused(Reason.UNUSABLE, str(err)) from None
        owner = asked.call.owner
        search = options.search_options()
        jobs = [Job(Sentence(t, ids, given, terms, aligned=options.alignment), len(ids) + 1, search, owner=owner)
                for (_, t, ids), terms in zip(pieced, found)]  # fmt: skip
        return jobs, pieces, sum(len(ids) > segmenter.max_len for ids in encoded)

    async def run(self, asked: Asked) -> Translated:
        """Each plain text's answer (and with options.confidence, its least confident piece's confidence),
        its pieces queued and dropped if the client goes away."""
        call = asked.call
        # Cutting, encoding and finding terms grow with the request: off the event loop, which stays free
        # for every other client (a glossary's terms in a long text once held it for seconds).
        jobs, cuts, long = await asyncio.to_thread(self.jobs, asked)
        call.sentences, call.long = len(jobs), long
        try:
            futures = self.batcher.submit(jobs)
        except QueueFull as err:
            raise Refused(Reason.UNAVAILABLE, f"busy: {err}; retry later", retry_after=1) from None
        except EngineStopped as err:
            raise Refused(Reason.UNAVAILABLE, f"{err}; retry later", retry_after=1) from None
        waiting = asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        gone = asyncio.ensure_future(call.gone())
        try:
            done, _ = await asyncio.wait({waiting, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if waiting in done:
            try:
                results = waiting.result()
            except EngineStopped as err:
                raise Refused(Reason.UNAVAILABLE, f"{err}; retry", retry_after=1) from None
            finished = functools.partial(self._finished, call, results, cuts, asked.options)
            return finished() if len(results) <= JOINED_ON_LOOP else await asyncio.to_thread(finished)
        for future in futures:
            future.cancel()
        waiting.cancel()
        raise Refused(Reason.CANCELLED, "the client closed the connection")

    def sentence_splitter(self) -> SentenceSplitter:
        if self._splitter is None:
            self._splitter = SentenceSplitter(self.info.source_language)
        return self._splitter

    def _finished(self, call: Call, results: list[Result], cuts: list[Cut], options: Options) -> Translated:
        call.missed_terms = missed_terms(results, [len(cut) for cut in cuts])
        return self._joined(results, cuts, options)

    def _joined(self, results: list[Result], cuts: list[Cut], options: Options) -> Translated:
        """Each text's answer from its pieces' results, in order, and with confidences each text's lowest."""
        answers, scores, start = [], [], 0
        segmenter = self._segmenters[False]
        for cut in cuts:
            parts = results[start : start + len(cut)]
            start += len(cut)
            alignments = parts[0][1] if len(cut) == 1 else None
            joined = segmenter.join([nbest for nbest, _, _ in parts], cut)
            answer = self._answer(options, joined, alignments)
            answers.append(cut.lines.lead if not joined and answer == "" else answer)  # a blank text's line breaks
            scores.append(min((score for _, _, score in parts if score is not None), default=1.0))
        return Translated(answers, scores if options.confidence else None)

    def warm_up(self) -> Future:
        """Translate one sentence through each engine process (or the one engine in this process), and
        through each one started again later; /ready says yes once all are back. The future says when,
        with the first error if one failed."""
        source, target = (next(iter(langs), None) for langs in (self.languages.sources(), self.languages.targets()))
        source, target = self.info.source_language or source, self.info.target_language or target

        def job() -> Job:
            return self.jobs(Asked(Call(), ["Hello."], self.defaults(), source, target))[0][0]

        futures = self.batcher.warm_up(job) if isinstance(self.batcher, Replicas) else self.batcher.submit([job()])
        return when_all(futures, self._warmed_up)

    def _warmed_up(self, error: BaseException | None) -> None:
        self.ready = error is None
        if error is not None:
            warn(f"the warm-up translation failed, so /ready stays 503: {type(error).__name__}: {error}")


def banning_made_up_spans(make_translator: Callable[[], TextTranslator]) -> TextTranslator:
    """make_translator's translator, its search never writing a character only a span holds
    (mtkit.decoding.constraints.without_made_up_spans); a module's function, so that it pickles."""
    translator = make_translator()
    translator.cfg = without_made_up_spans(translator.cfg, translator.tgt_tokenizer)
    return translator


def blank(text: str, ids: list[int]) -> Cut:
    """A blank text's one piece (translated as nothing), its line breaks kept."""
    return Cut([ids], [Prepared(text)], [1], split_lines(text))
