"""Lines of HTML or XML through a translator (translate --format html|xml, serve's "format"): each
line's segments are translated with their word alignments, and the markup is put back around the
aligned words (mtkit.text.markup)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mtkit.core.errors import MtkitError
from mtkit.decoding.ensemble import Ensemble
from mtkit.decoding.search_rules import Hypothesis
from mtkit.text.markup import plain_text
from mtkit.text.markup_placement import Aligned, by_sentences, parse_alignment, translate_markup
from mtkit.translation.sentences import SentenceSplitter
from mtkit.translation.translate import NbestList, TextTranslator, Translator


def require_alignment(translator: TextTranslator, fmt: str) -> None:
    """Markup is placed by the model's word alignment: one model, mtkit's own engine, no target tags."""
    if not isinstance(translator, Translator) or isinstance(translator.model, Ensemble):
        raise MtkitError(
            f"--format {fmt} needs one model and --engine pytorch (its elements follow the word alignment)"
        )
    if translator.source_tag is not None:
        raise MtkitError(f"--format {fmt} is not available for a model with target tags or language tokens")


class MarkupTranslator(TextTranslator):
    """A Translator for lines of markup: each line's translation keeps its elements; its n-best list
    holds that one translation (its score 0: a line is several searches)."""

    def __init__(self, inner: Translator, fmt: str, split_sentences: bool = False):
        """split_sentences: translate each segment sentence by sentence (inner keeps lines whole)."""
        require_alignment(inner, fmt)
        inner.keep_attention()
        self.inner, self.fmt = inner, fmt
        self.splitter = SentenceSplitter(inner.model_meta.get("src_lang")) if split_sentences else None
        self.src_tokenizer, self.tgt_tokenizer = inner.src_tokenizer, inner.tgt_tokenizer
        self.model_meta = inner.model_meta

    @property
    def lines_in_pieces(self) -> int:
        return self.inner.lines_in_pieces

    @property
    def segmenter(self):
        return self.inner.segmenter

    def translate_hypotheses(
        self,
        lines: Sequence[str],
        first_line: int = 1,
        prefixes: Sequence[str] | None = None,
        on_line: Callable[[int, NbestList], None] | None = None,
        encoded=None,
    ) -> list[NbestList]:
        if prefixes and any(prefixes):
            raise MtkitError(f"--format {self.fmt} takes no target prefixes")
        texts = translate_markup(lines, self.fmt, self._aligned, lambda i: f"line {first_line + i}")
        results: list[NbestList] = []
        for index, (line, text) in enumerate(zip(lines, texts)):
            results.append([(Hypothesis([], 0.0, 0.0), text)] if line.strip() else [])
            if on_line:
                on_line(index, results[-1])
        return results

    def _aligned(self, texts: list[str]) -> Aligned:
        """Each segment's translation and its word alignment (sentence by sentence, where asked)."""
        if self.splitter is not None:
            return by_sentences(texts, self.splitter.split, self._aligned_whole)
        return self._aligned_whole(texts)

    def _aligned_whole(self, texts: list[str]) -> Aligned:
        best = [nbest[0] for nbest in self.inner.translate_hypotheses(texts)]
        alignments = self.inner.alignments(texts, [hypothesis for hypothesis, _ in best])
        return [(translation, parse_alignment(a)) for (_, translation), a in zip(best, alignments)]


def without_markup(lines: Sequence[str], fmt: str) -> list[str]:
    """The lines' translatable text alone, as evaluate scores it."""
    return [plain_text(line, fmt) if fmt != "text" else line for line in lines]
