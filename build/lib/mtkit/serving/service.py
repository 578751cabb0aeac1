"""The translation service behind `mtkit serve`: request options, the queue and its worker
(mtkit.serving.dynamic_batching), model information and the warm-up; no HTTP here (mtkit.serving.http adds it)."""

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mtkit.core.console import warn
from mtkit.core.errors import MtkitError
from mtkit.core.textio import sha256_file
from mtkit.decoding.search_rules import SearchConfig
from mtkit.serving.dynamic_batching import Batcher, Job, QueueFull
from mtkit.serving.metrics import Metrics
from mtkit.text.targets import tag_id, target_tag
from mtkit.text.tokenizer import Tokenizer
from mtkit.translation.sentences import Segmenter, require_splitter, segmenter_for
from mtkit.translation.translate import LineStream, NbestList, TextTranslator

MAX_BEAM = 16


@dataclass(frozen=True)
class Sentence:
    """A text of a request and its source subword ids: encoded once, to cost it and to translate it."""

    text: str
    ids: list[int]


class SentenceStream:
    """The engine's running search (translate.LineStream), fed Sentences: it need not encode them again."""

    def __init__(self, stream: LineStream):
        self.stream = stream

    def add(self, keys: Sequence[Any], sentences: Sequence[Sentence]) -> None:
        self.stream.add(keys, [s.text for s in sentences], [s.ids for s in sentences])

    def step(self) -> None:
        self.stream.step()


@dataclass(frozen=True)
class Options:
    """The per-request decoding options; requests with equal options share batches."""

    beam: int
    nbest: int
    lenpen: float
    alignment: bool


@dataclass
class ServeConfig:
    max_batch_tokens: int = 4096
    max_wait_ms: float = 20.0
    max_queue: int = 2048
    max_chars: int = 20000
    split_sentences: bool = False  # the requests' default
    max_source_len: int = 0  # subwords a piece holds at most (0: the model's training limit)
    max_texts: int = 0  # texts per request at most (0: as many as the queue holds)

    def validate(self) -> None:
        for name in ("max_batch_tokens", "max_queue", "max_chars"):
            if getattr(self, name) < 1:
                raise MtkitError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be at least 1")
        if self.max_texts < 0:
            raise MtkitError(f"--max-texts {self.max_texts}: must be at least 0")
        if self.max_wait_ms < 0:
            raise MtkitError(f"--max-wait-ms {self.max_wait_ms}: must be at least 0")


@dataclass
class ModelInfo:
    name: str
    path: Path  # the file whose checksum /v1/models reports
    engine: str
    source_language: str | None
    target_language: str | None  # the default target (a multilingual model's: serve --tgt-lang, or none)
    meta: dict[str, Any] = field(default_factory=dict)  # the model file's: languages, training lengths


class RequestError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


class Service:
    """The translator, its batcher and what the endpoints share."""

    def __init__(
        self,
        make_translator: Callable[[], TextTranslator],
        tokenizers: tuple[Tokenizer, Tokenizer],
        base_cfg: SearchConfig,
        info: ModelInfo,
        cfg: ServeConfig,
    ):
        """make_translator runs on the worker thread, which then does all the translating: torch's
        OpenMP threads are per calling thread, and a model built on the main thread and run on
        another decodes about 1.5x slower on 2 cores as the two thread teams compete (docs/results/design-choices.md)."""
        self._make_translator = make_translator
        self.translator: TextTranslator | None = None
        self.src_tokenizer, self.tgt_tokenizer = tokenizers
        self.base_cfg = base_cfg
        self.info = info
        self.cfg = cfg
        self.metrics = Metrics(lambda: self.batcher.depth)
        self.batcher = Batcher(
            self._translate, cfg.max_batch_tokens, cfg.max_wait_ms / 1000, cfg.max_queue, self.metrics.observe_batch,
            setup=self._build, open_stream=self._open_stream,
        )  # fmt: skip
        self.ready = False
        self.checksum = sha256_file(info.path)
        if cfg.split_sentences:
            require_splitter("serve --split-sentences")
        self._segmenters: dict[bool, Segmenter] = {
            False: segmenter_for(self.src_tokenizer, info.meta, False, cfg.max_source_len)
        }
        self._tags: dict[str | None, int | None] = {}

    def targets(self) -> list[str]:
        """The languages this server translates into."""
        tags = self.info.meta.get("target_tags")
        return sorted(tags) if tags else [lang for lang in [self.info.target_language] if lang]

    def source_tag(self, target: str | None) -> int | None:
        """The id before every source of a request for `target` (None: the model needs none; a request
        without target gets the default); a target the model lacks is a 400 naming the ones it has."""
        into = f"this server translates into {', '.join(self.targets()) or self.info.target_language}"
        if not self.info.meta.get("target_tags"):
            if target is not None and target != self.info.target_language:
                raise RequestError(400, f"target {target}: {into}")
            return None
        target = target or self.info.target_language
        if target is None:
            raise RequestError(400, f"target: give one of {', '.join(self.targets())}")
        if target not in self._tags:
            try:
                tag = target_tag(self.info.meta, target)
            except MtkitError:
                raise RequestError(400, f"target {target}: {into}") from None
            self._tags[target] = tag_id(self.src_tokenizer, tag)
        return self._tags[target]

    def segmenter(self, split_sentences: bool) -> Segmenter:
        """How texts are cut into the pieces translated one by one (mtkit.translation.sentences)."""
        if split_sentences not in self._segmenters:
            try:
                require_splitter("split_sentences")
            except MtkitError as err:
                raise RequestError(422, f"{err} (on the server)") from None
            self._segmenters[True] = segmenter_for(self.src_tokenizer, self.info.meta, True, self.cfg.max_source_len)
        return self._segmenters[split_sentences]

    def defaults(self) -> Options:
        return Options(self.base_cfg.beam, 1, self.base_cfg.lenpen, False)

    def options(self, beam: int | None, nbest: int | None, lenpen: float | None, alignment: bool) -> Options:
        default = self.defaults()
        beam = default.beam if beam is None else beam
        nbest = 1 if nbest is None else nbest
        lenpen = default.lenpen if lenpen is None else lenpen
        if not 1 <= beam <= MAX_BEAM:
            raise RequestError(422, f"beam {beam}: must be between 1 and {MAX_BEAM}")
        if not 1 <= nbest <= beam:
            raise RequestError(422, f"nbest {nbest}: must be between 1 and beam ({beam})")
        if lenpen < 0:
            raise RequestError(422, f"lenpen {lenpen}: must be at least 0")
        if alignment and not self.can_align:
            if self.info.engine != "pytorch":
                raise RequestError(422, "alignment needs a server started with --engine pytorch")
            raise RequestError(422, "alignment is not available for a model that chooses its target by a tag")
        return Options(beam, nbest, lenpen, alignment)

    @property
    def can_align(self) -> bool:
        """Whether requests may ask for word alignments (/v1/models says so)."""
        return self.info.engine == "pytorch" and not self.info.meta.get("target_tags")

    def _build(self) -> None:
        self.translator = self._make_translator()
        self.translator.keep_lines_whole()  # requests come cut into pieces, each with its target's tag

    def _translate(self, sentences: list[Sentence], options: Options, deliver: Callable[[int, Any], None]) -> None:
        """On the worker thread: one batch, with its options; each piece's result is delivered as
        soon as its translation is finished."""
        texts = [s.text for s in sentences]
        self._translator_for(options).translate_hypotheses(
            texts,
            on_line=lambda i, nbest_list: deliver(i, self._result(texts[i], options, nbest_list)),
            encoded=[s.ids for s in sentences],
        )

    def _open_stream(self, options: Options, deliver: Callable[[int, Any], None]) -> SentenceStream | None:
        """On the worker thread: a running search for continuous batching, where the engine has one."""
        stream = self._translator_for(options).open_stream(
            lambda key, line, nbest_list: deliver(key, self._result(line, options, nbest_list))
        )
        return SentenceStream(stream) if stream is not None else None

    def _translator_for(self, options: Options) -> TextTranslator:
        assert self.translator is not None
        # The translator's own cfg: it holds what the engine added (the banned line breaks).
        self.translator.cfg = replace(
            self.translator.cfg, beam=options.beam, nbest=options.nbest, lenpen=options.lenpen
        )
        return self.translator

    def _result(self, line: str, options: Options, nbest_list: NbestList) -> tuple[NbestList, list[str] | None]:
        """On the worker thread: a piece's n-best, and with alignment each hypothesis's alignment."""
        if not options.alignment:
            return nbest_list, None
        return nbest_list, [self.translator.alignment(line, h) for h, _ in nbest_list]

    @staticmethod
    def _answer(options: Options, nbest_list: NbestList, alignments: list[str] | None) -> Any:
        """One text's entry in "translations": the text, or its n-best (with alignments)."""
        if options.nbest == 1 and not options.alignment:
            return nbest_list[0][1] if nbest_list else ""
        hyps = [{"text": t, "score": h.score} for h, t in nbest_list]
        for entry, alignment in zip(hyps, alignments or []):
            entry["alignment"] = alignment
        return hyps

    def jobs(
        self, texts: Sequence[str], options: Options, split_sentences: bool = False, target: str | None = None
    ) -> tuple[list[Job], list[int], int]:
        """A job per piece of each text (mtkit.translation.sentences: one, unless the text is long or sentences
        are split), each starting with its target's tag where the model has tags (so that requests for
        different targets share batches); each text's number of pieces, and how many texts were long."""
        tag = self.source_tag(target)
        chars = sum(len(t) for t in texts)
        if chars > self.cfg.max_chars:
            raise RequestError(
                413, f"{chars:,} characters: the limit is {self.cfg.max_chars:,} per request (--max-chars)"
            )
        if not texts:
            raise RequestError(422, "text: give at least one")
        if self.cfg.max_texts and len(texts) > self.cfg.max_texts:
            raise RequestError(
                413, f"{len(texts):,} texts: the limit is {self.cfg.max_texts:,} per request (--max-texts)"
            )
        if len(texts) > self.cfg.max_queue:
            raise RequestError(413, f"{len(texts):,} texts: the queue holds {self.cfg.max_queue:,} (--max-queue)")
        segmenter = self.segmenter(split_sentences)
        stripped = [t.strip() for t in texts]
        encoded = self.src_tokenizer.encode_batch(stripped)
        wanted = [i for i, text in enumerate(stripped) if text]
        cut = dict(zip(wanted, segmenter.pieces([stripped[i] for i in wanted], [encoded[i] for i in wanted])))
        pieces = [cut.get(i, [ids]) for i, ids in enumerate(encoded)]
        if options.alignment and any(len(p) > 1 for p in pieces):
            n = next(i for i, p in enumerate(pieces) if len(p) > 1)
            raise RequestError(
                422, f"alignment: text {n} is translated in {len(pieces[n])} pieces; an alignment is of one"
            )
        jobs = []
        for text, parts in zip(texts, pieces):
            piece_texts = [text] if len(parts) == 1 else self.src_tokenizer.decode_batch(parts)
            tagged = parts if tag is None else [[tag, *ids] for ids in parts]
            jobs += [Job(Sentence(t, ids), len(ids) + 1, options) for t, ids in zip(piece_texts, tagged)]
        return jobs, [len(parts) for parts in pieces], sum(len(ids) > segmenter.max_len for ids in encoded)

    async def run(
        self,
        request,
        texts: Sequence[str],
        options: Options,
        split_sentences: bool | None = None,
        target: str | None = None,
    ) -> list[Any]:
        """Queue the texts' pieces and wait for their translations; drop them if the client goes away.
        split_sentences: None for the server's default; target: None for the server's default."""
        split = self.cfg.split_sentences if split_sentences is None else split_sentences
        jobs, counts, long = self.jobs(texts, options, split, target)
        request.state.sentences, request.state.long = len(jobs), long
        try:
            futures = self.batcher.submit(jobs)
        except QueueFull as err:
            raise RequestError(503, f"busy: {err}; retry later", {"Retry-After": "1"}) from None
        waiting = asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        gone = asyncio.ensure_future(_disconnect(request))
        try:
            done, _ = await asyncio.wait({waiting, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if waiting in done:
            return self._joined(waiting.result(), counts, options)
        for future in futures:
            future.cancel()
        waiting.cancel()
        raise RequestError(499, "the client closed the connection")

    def _joined(
        self, results: list[tuple[NbestList, list[str] | None]], counts: list[int], options: Options
    ) -> list[Any]:
        """Each text's answer from its pieces' results, in order."""
        answers, start = [], 0
        segmenter = self._segmenters[False]
        for count in counts:
            parts = results[start : start + count]
            start += count
            alignments = parts[0][1] if count == 1 else None
            answers.append(self._answer(options, segmenter.join([nbest for nbest, _ in parts]), alignments))
        return answers

    def warm_up(self) -> Future:
        """Translate one sentence through the batcher; /ready says yes once it is back."""
        target = self.info.target_language or next(iter(self.targets()), None)
        (job,) = self.jobs(["Hello."], self.defaults(), target=target)[0]
        (future,) = self.batcher.submit([job])
        future.add_done_callback(self._warmed_up)
        return future

    def _warmed_up(self, future: Future) -> None:
        error = future.exception()
        self.ready = error is None
        if error is not None:
            warn(f"the warm-up translation failed, so /ready stays 503: {type(error).__name__}: {error}")


async def _disconnect(request) -> None:
    """Returns when the client has gone: once the body is read, the server's next message is that."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
