"""The engine side of `mtkit serve`: the translator, built on the thread that decodes with it, and
what the batcher (mtkit.serving.dynamic_batching) calls on that thread: translate a batch, or open
a running search. It runs in the server's process, or in each engine replica (mtkit.serving.replicas)."""

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from mtkit.serving.dynamic_batching import Batcher, BatchStats
from mtkit.text.glossary import Term
from mtkit.translation.confidence import Calibration, confidences
from mtkit.translation.translate import LineStream, NbestList, TextTranslator

# A piece's n-best, with alignment each hypothesis's, and with confidence the best one's.
Result = tuple[NbestList, list[str] | None, float | None]


@dataclass(frozen=True)
class Sentence:
    """A text of a request and its source subword ids: encoded once, to cost it and to translate it;
    `given`: the ids its translation starts with, given (a target language's token); aligned: its
    hypotheses' word alignments are wanted (read after the search, which is the same either way)."""

    text: str
    ids: list[int]
    given: tuple[int, ...] = ()
    terms: tuple[Term, ...] = ()  # target terms its translation must contain (mtkit.serving.terms)
    aligned: bool = False


@dataclass(frozen=True)
class Options:
    """The per-request decoding options; requests with equal search options share batches (see
    search_options: an alignment is read after the search, for the sentences that want one)."""

    beam: int
    nbest: int
    lenpen: float
    alignment: bool
    confidence: bool = False

    def search_options(self) -> "Options":
        """What a batch's sentences must share: a document's aligned sentences and a plain request's
        then share searches, and neither waits for a search of the other to end (5 s at a time
        behind a document's long lines)."""
        return replace(self, alignment=False)


class SentenceStream:
    """The engine's running search (translate.LineStream), fed Sentences: it need not encode them again;
    aligned(key): whether the sentence added under this key wants alignments (asked once, as it is
    delivered). after(): called after each add and step, once the search has delivered what it finished
    (the engine aligns those sentences then, together)."""

    def __init__(self, stream: LineStream, after: Callable[[], None] = lambda: None):
        self.stream, self.after = stream, after
        self._aligned: set[Any] = set()

    def add(self, keys: Sequence[Any], sentences: Sequence[Sentence]) -> None:
        self._aligned.update(key for key, s in zip(keys, sentences) if s.aligned)
        texts, ids = [s.text for s in sentences], [s.ids for s in sentences]
        self.stream.add(keys, texts, ids, [s.given for s in sentences], [s.terms for s in sentences])
        self.after()  # (a blank line is finished as it is added)

    def aligned(self, key: Any) -> bool:
        wanted = key in self._aligned
        self._aligned.discard(key)
        return wanted

    def step(self) -> None:
        self.stream.step()
        self.after()


def when_all(futures: list[Future], then: Callable[[BaseException | None], None]) -> Future:
    """A future settled once all of these are: with the first error if one failed; then(that error or
    None) is called just before."""
    done: Future = Future()
    remaining, lock = [len(futures)], threading.Lock()

    def one_back(future: Future) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0]:
                return
        errors = [f.exception() for f in futures if f.exception() is not None]
        then(errors[0] if errors else None)
        done.set_exception(errors[0]) if errors else done.set_result(None)

    for future in futures:
        future.add_done_callback(one_back)
    return done


class Engine:
    """A translator behind a batcher. make_translator runs on the batcher's thread, which then does
    all the translating: torch's OpenMP threads are per calling thread, and a model built on one
    thread and run on another decodes about 1.5x slower on 2 cores as the two thread teams compete
    (docs/results/design-choices.md)."""

    def __init__(self, make_translator: Callable[[], TextTranslator], calibration: Calibration | None = None):
        """calibration: the confidences' (mtkit.translation.confidence), for requests that ask for them."""
        self._make_translator = make_translator
        self.calibration = calibration or Calibration()
        self.translator: TextTranslator | None = None

    def batcher(
        self,
        max_batch_tokens: int,
        max_wait_s: float,
        max_queue: int,
        on_batch: Callable[[BatchStats], None],
        max_client_tokens: int | None = None,
    ) -> Batcher:
        return Batcher(
            self.translate, max_batch_tokens, max_wait_s, max_queue, on_batch,
            setup=self.build, open_stream=self.open_stream, max_client_tokens=max_client_tokens,
        )  # fmt: skip

    def build(self) -> None:
        self.translator = self._make_translator()
        self.translator.keep_lines_whole()  # requests come cut into pieces, each with its target's tag
        self.translator.warn_missed_terms = False  # the answer says which texts (Hypothesis.missed_constraints)

    def translate(self, sentences: list[Sentence], options: Options, deliver: Callable[[int, Result], None]) -> None:
        """One batch, with its options; each piece's result is delivered as soon as it is finished (with
        confidences, once all are)."""
        texts, encoded = [s.text for s in sentences], [s.ids for s in sentences]
        translator = self._translator_for(options)
        on_line = None if options.confidence else lambda i, nbest_list: deliver(i, self._result(texts[i], sentences[i].aligned, nbest_list))  # fmt: skip
        terms = [s.terms for s in sentences] if any(s.terms for s in sentences) else None
        nbest_lists = translator.translate_hypotheses(
            texts, on_line=on_line, encoded=encoded, starts=[s.given for s in sentences], terms=terms
        )
        if options.confidence:
            scores = confidences(self.calibration, translator, texts, nbest_lists, encoded)
            aligned = [i for i, sentence in enumerate(sentences) if sentence.aligned]
            found = dict(zip(aligned, self._alignments([(texts[i], nbest_lists[i]) for i in aligned])))
            for i, (nbest_list, score) in enumerate(zip(nbest_lists, scores)):
                deliver(i, (nbest_list, found.get(i), score))

    def open_stream(self, options: Options, deliver: Callable[[int, Result], None]) -> SentenceStream | None:
        """A running search for continuous batching, where the engine has one (and the requests ask for no
        confidence, which is of whole batches)."""
        if options.confidence:
            return None

        to_align: list[tuple[Any, str, NbestList]] = []

        def finished(key: Any, line: str, nbest_list: NbestList) -> None:
            if fed.aligned(key):
                to_align.append((key, line, nbest_list))
            else:
                deliver(key, (nbest_list, None, None))

        def align_finished() -> None:
            """The step's aligned sentences, aligned in one call: one at a time, a document's thousands
            took 1.7 ms each of the engine's thread (0.4 ms together), every other client's step waiting."""
            if not to_align:
                return
            finished_now = to_align[:]
            to_align.clear()
            alignments = self._alignments([(line, nbest_list) for _, line, nbest_list in finished_now])
            for (key, _, nbest_list), found in zip(finished_now, alignments):
                deliver(key, (nbest_list, found, None))

        stream = self._translator_for(options).open_stream(finished)
        fed = SentenceStream(stream, align_finished) if stream is not None else None
        return fed

    def _translator_for(self, options: Options) -> TextTranslator:
        assert self.translator is not None
        # The translator's own cfg: it holds what the engine added (the banned line breaks).
        self.translator.cfg = replace(
            self.translator.cfg, beam=options.beam, nbest=options.nbest, lenpen=options.lenpen
        )
        return self.translator

    def _result(self, line: str, aligned: bool, nbest_list: NbestList) -> Result:
        return nbest_list, self._alignments([(line, nbest_list)])[0] if aligned else None, None

    def _alignments(self, finished: Sequence[tuple[str, NbestList]]) -> list[list[str]]:
        """Each finished sentence's alignments, one per n-best entry, computed in one call."""
        assert self.translator is not None
        lines = [line for line, nbest_list in finished for _ in nbest_list]
        flat = iter(self.translator.alignments(lines, [h for _, nbest_list in finished for h, _ in nbest_list]))
        return [[next(flat) for _ in nbest_list] for _, nbest_list in finished]
