"""Source lines into the pieces a model translates one at a time, and the pieces' translations back
into one line each.

A model learns from sentences of bounded length. Given a paragraph on one line it tends to stop
after the first sentence, and given more subwords than it was trained on it drifts. So:
- with split_sentences, every line is cut into its sentences by pysbd's rules for the source
  language (shipped in its pip package: `pip install 'mtkit[text]'`);
- a line longer than max_len subwords is always cut: into sentences (pysbd's where installed, else
  a split after . ! ? … and CJK full stops), and a sentence still longer at word starts (subwords
  whose token begins with "▁"), into pieces of at most max_len subwords, as Sockeye does. Nothing
  is truncated or dropped.
Each piece is translated alone; a line's translations are joined with a space, or with nothing for
a target language written without spaces. A line of one sentence, within max_len, stays as it is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from mtkit.core.console import warn
from mtkit.core.errors import MtkitError
from mtkit.decoding.search_rules import MAX_SOURCE_TOKENS, Hypothesis
from mtkit.text.tokenizer import Tokenizer

# The fewest subwords a piece may be limited to: a character unseen in training is up to 4 byte tokens.
MIN_LEN = 4
# The byte tokens of UTF-8 continuation bytes: a piece never begins with one.
CONTINUATION_BYTES = {f"<0x{byte:02X}>" for byte in range(0x80, 0xC0)}
UNSPACED_LANGUAGES = {"zh", "ja", "th", "lo", "km", "my", "bo"}
# The sentence end that any language shares: . ! ? … (and their closing quotes or brackets) before a
# space, or a CJK full stop, question or exclamation mark anywhere.
_SENTENCE_END = re.compile(r"(?:(?<=[.!?…])|(?<=[.!?…][\"'”’»)\]]))\s+|(?<=[。！？])")


def require_splitter(option: str = "--split-sentences") -> None:
    try:
        import pysbd  # noqa: F401
    except ImportError:
        raise MtkitError(f"{option} needs pysbd, the sentence splitter: pip install 'mtkit[text]'") from None


class SentenceSplitter:
    """Sentences of a text, by pysbd's rules for `lang` (English's where pysbd has none), or by the
    shared sentence ends of _SENTENCE_END with rules=False."""

    def __init__(self, lang: str | None, rules: bool = True):
        self._segmenter = None
        if rules:
            require_splitter()
            import pysbd
            from pysbd.languages import LANGUAGE_CODES

            if lang not in LANGUAGE_CODES:
                named = f"has no rules for '{lang}'" if lang else "is not told the model's source language"
                warn(f"the sentence splitter {named}: splitting by its English rules")
            self._segmenter = pysbd.Segmenter(language=lang if lang in LANGUAGE_CODES else "en", clean=False)

    def split(self, text: str) -> list[str]:
        pieces = self._segmenter.segment(text) if self._segmenter else _SENTENCE_END.split(text)
        return [piece.strip() for piece in pieces if piece.strip()] or [text]


def default_splitter(lang: str | None) -> SentenceSplitter:
    """pysbd's rules where the extra is installed (it is never required for cutting long lines)."""
    try:
        import pysbd  # noqa: F401
    except ImportError:
        return SentenceSplitter(lang, rules=False)
    return SentenceSplitter(lang)


def segmenter_for(tokenizer: Tokenizer, meta: dict, split_sentences: bool = False, max_len: int = 0) -> Segmenter:
    """The Segmenter of a model with this source tokenizer and meta (its languages, and "max_len", the
    training data's length limit: the default max_len, 0 or none meaning MAX_SOURCE_TOKENS; with
    "target_tags", a piece is at most MAX_SOURCE_TOKENS - 1 long, the tag taking the last place)."""
    trained = meta.get("max_len") or MAX_SOURCE_TOKENS
    segmenter = Segmenter(tokenizer, max_len or min(trained, MAX_SOURCE_TOKENS), split_sentences, meta.get("src_lang"),
                          meta.get("tgt_lang"))  # fmt: skip
    if meta.get("target_tags"):  # a piece leaves room for the target's tag before it
        segmenter.max_len = min(segmenter.max_len, MAX_SOURCE_TOKENS - 1)
    return segmenter


@dataclass
class Segmenter:
    """Cuts lines into pieces (see the module's docstring) for one model's tokenizer and languages."""

    tokenizer: Tokenizer
    max_len: int = MAX_SOURCE_TOKENS
    split_sentences: bool = False
    src_lang: str | None = None
    tgt_lang: str | None = None
    _splitter: SentenceSplitter | None = field(default=None, repr=False)
    _word_starts: set[int] | None = field(default=None, repr=False)
    _continuations: set[int] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        if not MIN_LEN <= self.max_len <= MAX_SOURCE_TOKENS:  # from the --max-source-len option, or a model's meta
            raise MtkitError(
                f"--max-source-len {self.max_len}: must be between {MIN_LEN} and {MAX_SOURCE_TOKENS:,} "
                "(0: the model's training limit)"
            )
        if self.split_sentences:
            self._splitter = SentenceSplitter(self.src_lang)

    @property
    def separator(self) -> str:
        return "" if self.tgt_lang in UNSPACED_LANGUAGES else " "

    def pieces(self, lines: Sequence[str], ids: Sequence[list[int]]) -> list[list[list[int]]]:
        """Each (stripped, non-blank) line's pieces, as subword ids; `ids`: the lines' own encodings."""
        out = []
        for line, row in zip(lines, ids):
            sentences = self._splitter.split(line) if self.split_sentences else [line]
            if len(sentences) == 1 and len(row) <= self.max_len:
                out.append([row])
                continue
            if len(sentences) == 1:
                if self._splitter is None:
                    self._splitter = default_splitter(self.src_lang)
                sentences = self._splitter.split(line)
            encoded = self.tokenizer.encode_batch(sentences) if len(sentences) > 1 else [row]
            out.append([piece for sentence in encoded for piece in self._within_max_len(sentence)])
        return out

    def _within_max_len(self, row: list[int]) -> list[list[int]]:
        """A sentence's ids in pieces of at most max_len, each cut before the last word start that fits,
        or where a piece has none after its first subword, before the last subword that begins a
        character (never between the byte tokens of one: MIN_LEN covers the longest character)."""
        if self._word_starts is None:
            vocabulary = self.tokenizer.vocabulary()
            self._word_starts = {i for i, token in enumerate(vocabulary) if token.startswith("▁")}
            self._continuations = {i for i, token in enumerate(vocabulary) if token in CONTINUATION_BYTES}
        pieces, start = [], 0
        while len(row) - start > self.max_len:
            end = start + self.max_len
            window = range(end, start, -1)
            cut = next((i for i in window if row[i] in self._word_starts), None)
            if cut is None:
                cut = next(i for i in window if row[i] not in self._continuations)
            pieces.append(row[start:cut])
            start = cut
        return pieces + [row[start:]]

    def join(self, nbest_lists: Sequence[list[tuple[Hypothesis, str]]]) -> list[tuple[Hypothesis, str]]:
        """One line's n-best from its pieces': the k-th joins every piece's k-th (or its last, where a
        piece has fewer); its tokens are the pieces' in order, its score and log-probability their sums."""
        if len(nbest_lists) == 1:
            return list(nbest_lists[0])
        joined = []
        for rank in range(max(len(n) for n in nbest_lists)):
            chosen = [n[min(rank, len(n) - 1)] for n in nbest_lists]
            hypothesis = Hypothesis(
                tokens=[token for h, _ in chosen for token in h.tokens],
                score=sum(h.score for h, _ in chosen),
                log_prob=sum(h.log_prob for h, _ in chosen),
                ended=all(h.ended for h, _ in chosen),
                missed_constraints=sum(h.missed_constraints for h, _ in chosen),
            )
            joined.append((hypothesis, self.separator.join(text for _, text in chosen if text)))
        return joined
