"""Translating with a memory: a sentence the memory holds (a 100% match, spans aside) gets the unit's
translation, with the sentence's spans; with a steer, one that has fuzzy matches is translated steered by
them, one at a time; the others are translated by the model, all in one batch.
Each line's hypothesis says where its translation came from (Hypothesis.origin)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from mtkit.core.errors import MtkitError
from mtkit.decoding.search_rules import Hypothesis
from mtkit.memory.store import TranslationMemory
from mtkit.text.sentence_splitter import SentenceSplitter
from mtkit.translation.translate import NbestList, TextTranslator

FROM_MEMORY = "tm 100"


class MemoryTranslator(TextTranslator):
    """A translator (`inner`) that takes each sentence's translation from `memory` where it holds one."""

    def __init__(
        self, inner: TextTranslator, memory: TranslationMemory, src_lang: str, tgt_lang: str,
        steer: Callable[[str, list[tuple[str, str]]], str] | None = None, threshold: int = 75,
    ):  # fmt: skip
        """steer(sentence, matches): a sentence's translation steered by its fuzzy matches of at least
        `threshold` (mtkit.training.adaptation.Steering); None: the model's alone."""
        self.inner, self.memory, self.src_lang, self.tgt_lang = inner, memory, src_lang, tgt_lang
        self.steer, self.threshold = steer, threshold
        self.src_tokenizer, self.tgt_tokenizer, self.cfg = inner.src_tokenizer, inner.tgt_tokenizer, inner.cfg
        self.model_meta, self.glossary = inner.model_meta, inner.glossary
        self.splitter = SentenceSplitter(src_lang)
        self.sentences = self.remembered = self.steered = 0  # so far: translated, taken from the memory, steered

    @property
    def segmenter(self):
        return self.inner.segmenter

    @property
    def lines_in_pieces(self) -> int:
        return self.inner.lines_in_pieces

    def set_segmenter(
        self, split_sentences: bool = True, max_len: int = 0, keep_spans: bool = True, recase: bool = True
    ) -> None:
        """The inner translator's; a line is looked up whole where sentences are not split."""
        self.inner.set_segmenter(split_sentences, max_len, keep_spans, recase)
        self.splitter = SentenceSplitter(self.src_lang) if split_sentences else None

    def translate_hypotheses(
        self,
        lines: Sequence[str],
        first_line: int | Sequence[int] = 1,
        prefixes: Sequence[str] | None = None,
        on_line: Callable[[int, NbestList], None] | None = None,
        encoded=None,
        starts=None,
        terms=None,
    ) -> list[NbestList]:
        """As TextTranslator.translate_hypotheses, one translation a line (no prefixes, given ids or starts)."""
        if prefixes or encoded is not None or starts is not None:
            raise MtkitError("a translation memory is used for plain lines: not with target prefixes")
        number = (lambda i: first_line + i) if isinstance(first_line, int) else first_line.__getitem__
        split = self.splitter.split if self.splitter else lambda text: [text]
        sentences = [split(line.strip()) if line.strip() else [] for line in lines]
        stored: dict[tuple[int, int], str] = {}
        for i, line_sentences in enumerate(sentences):
            for k, sentence in enumerate(line_sentences):
                if found := self.memory.lookup(sentence, self.src_lang, self.tgt_lang, threshold=100, limit=1):
                    stored[i, k] = found[0].target
        pending = [(i, k) for i, line_sentences in enumerate(sentences) for k in range(len(line_sentences))
                   if (i, k) not in stored]  # fmt: skip
        steered = self._steered({place: sentences[place[0]][place[1]] for place in pending})
        pending = [place for place in pending if place not in steered]
        translated = self.inner.translate_hypotheses(
            [sentences[i][k] for i, k in pending],
            [number(i) for i, _ in pending],
            terms=[terms[i] for i, _ in pending] if terms else None,
        )
        machine = dict(zip(pending, translated))
        self.sentences += len(stored) + len(pending) + len(steered)
        self.remembered += len(stored)
        self.steered += len(steered)
        out = []
        for i, line_sentences in enumerate(sentences):
            pieces = [steered.get((i, k)) or self._piece(stored.get((i, k)), machine.get((i, k)))
                      for k in range(len(line_sentences))]  # fmt: skip
            out.append([self._joined(pieces)] if pieces else [])
            if on_line:
                on_line(i, out[-1])
        return out

    def _steered(self, sentences: dict[tuple[int, int], str]) -> dict[tuple[int, int], tuple[Hypothesis, str]]:
        """The sentences that have fuzzy matches, each translated as steer() does, its origin "tm SCORE + mt"."""
        out = {}
        for place, sentence in sentences.items() if self.steer else ():
            matches = self.memory.lookup(sentence, self.src_lang, self.tgt_lang, self.threshold, limit=3)
            if matches:
                text = self.steer(sentence, [(match.source, match.target) for match in matches])
                out[place] = Hypothesis([], 0.0, 0.0, origin=f"tm {matches[0].score} + mt"), text
        return out

    @staticmethod
    def _piece(stored: str | None, machine: NbestList | None) -> tuple[Hypothesis, str]:
        if stored is not None:
            return Hypothesis([], 0.0, 0.0, origin=FROM_MEMORY), stored
        return machine[0] if machine else (Hypothesis([], 0.0, 0.0), "")

    def _joined(self, pieces: list[tuple[Hypothesis, str]]) -> tuple[Hypothesis, str]:
        """The line's sentences joined as the segmenter joins them, saying where they came from."""
        hypothesis, text = self.segmenter.join([[piece] for piece in pieces])[0]
        origins = dict.fromkeys(part for h, _ in pieces for part in h.origin.split(" + ") if part)
        return dataclasses.replace(hypothesis, origin=" + ".join(origins)), text
