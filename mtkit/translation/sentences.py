"""Source lines into the pieces a model translates one at a time, and the pieces' translations back
into one line each.

A model learns from sentences of bounded length. Given a paragraph on one line it tends to stop
after the first sentence, and given more subwords than it was trained on it drifts. So:
- with split_sentences (segmenter_for's default), every line is cut into its sentences by pysbd's
  rules for the source language (shipped in its pip package, a dependency of mtkit);
- a line longer than max_len subwords is always cut: into sentences (pysbd's), and a sentence
  still longer at word starts (subwords whose token begins with "▁"), into pieces of at most max_len
  subwords, as Sockeye does. Nothing is truncated or dropped.
Each sentence is made ready for the model first (with keep_spans and recase, segmenter_for's
defaults): numbers, links, addresses, paths, code, placeholders and emoji replaced by stand-ins and
put back after (mtkit.text.spans: masked in the whole line, before the splitter sees it), and a
sentence in ALL CAPS or Title Case translated in sentence case and cased as it was after
(mtkit.text.casing).
A text of several lines (mtkit.text.sentence_splitter.split_lines) is cut at its line breaks first:
a sentence never spans two lines, and the line breaks come back exactly as they were.
Each piece is translated alone; a line's translations are joined with a space, or with nothing for
a target language written without spaces. A line of one sentence, within max_len, with nothing to
make ready, stays as it is. With keep_spans, a translation holds no span (mtkit.text.spans: a number,
link, address, price, placeholder, code or identifier) that its sentence does not: one the model
made up is taken out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mtkit.core.errors import MtkitError
from mtkit.decoding.search_rules import MAX_SOURCE_TOKENS, Hypothesis
from mtkit.text.casing import casing_of, recase, sentence_case
from mtkit.text.sentence_splitter import Lines, SentenceSplitter, split_lines
from mtkit.text.spans import Masked, mask, without_invented
from mtkit.text.tokenizer import Tokenizer

# The fewest subwords a piece may be limited to: a character unseen in training is up to 4 byte tokens.
MIN_LEN = 4
# The byte tokens of UTF-8 continuation bytes: a piece never begins with one.
CONTINUATION_BYTES = {f"<0x{byte:02X}>" for byte in range(0x80, 0xC0)}
UNSPACED_LANGUAGES = {"zh", "ja", "th", "lo", "km", "my", "bo"}


def segmenter_for(
    tokenizer: Tokenizer,
    meta: dict,
    split_sentences: bool = True,
    max_len: int = 0,
    keep_spans: bool = True,
    recase: bool = True,
) -> Segmenter:
    """The Segmenter of a model with this source tokenizer and meta (its languages, and "max_len", the
    training data's length limit: the default max_len, 0 or none meaning MAX_SOURCE_TOKENS; with
    "target_tags", a piece is at most MAX_SOURCE_TOKENS - 1 long, the tag taking the last place)."""
    trained = meta.get("max_len") or MAX_SOURCE_TOKENS
    segmenter = Segmenter(tokenizer, max_len or min(trained, MAX_SOURCE_TOKENS), split_sentences, meta.get("src_lang"),
                          meta.get("tgt_lang"), keep_spans, recase)  # fmt: skip
    if meta.get("target_tags"):  # a piece leaves room for the target's tag before it
        segmenter.max_len = min(segmenter.max_len, MAX_SOURCE_TOKENS - 1)
    return segmenter


@dataclass
class Prepared:
    """A sentence as the model translates it, and how its translation is made the reader's again."""

    text: str
    masked: Masked | None = None  # its spans, replaced by stand-ins
    casing: str | None = None  # mtkit.text.casing: UPPER or TITLE, where the source was written so
    source: str | None = None  # the sentence with its stand-ins, where a translation may hold no span it lacks

    def restore(self, translation: str) -> str:
        """The translation as the reader's: cased as the source was, without the spans the model made up
        (looked for before the stand-ins become spans, which then cannot run together with them), the
        stand-ins' spans put back."""
        translation = recase(translation, self.casing)
        translation = translation if self.source is None else without_invented(translation, self.source)
        return self.masked.restore(translation) if self.masked else translation


class Cut(list):
    """A text's pieces (subword ids, a list of them), with its sentences as prepared, how many pieces
    each sentence has, and its lines (how many sentences each has, and the line breaks between them):
    what Segmenter.join needs to make the text's translation."""

    def __init__(
        self,
        pieces: list[list[int]],
        sentences: list[Prepared],
        counts: list[int],
        lines: Lines | None = None,
        per_line: list[int] | None = None,
    ):
        super().__init__(pieces)
        self.sentences, self.counts = sentences, counts
        self.lines = lines or Lines([""])
        self.per_line = per_line or [len(sentences)]

    @property
    def as_is(self) -> bool:
        """Whether the text is one piece of one line whose translation is the reader's as it is."""
        first = self.sentences[0]
        return len(self) == 1 and not first.masked and not first.casing and first.source is None and self.lines.single


@dataclass
class Segmenter:
    """Cuts lines into pieces (see the module's docstring) for one model's tokenizer and languages."""

    tokenizer: Tokenizer
    max_len: int = MAX_SOURCE_TOKENS
    split_sentences: bool = False
    src_lang: str | None = None
    tgt_lang: str | None = None
    keep_spans: bool = False
    recase: bool = False
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

    def prepare(self, sentence: str, masked: Masked | None = None) -> Prepared:
        """A sentence as the model translates it, where `masked` is its line with spans replaced by
        stand-ins (keep_spans): in sentence case where written in ALL CAPS or Title Case (recase)."""
        masked = masked.within(sentence) if masked else None
        source = sentence if self.keep_spans else None
        casing = casing_of(sentence, self.src_lang) if self.recase else None
        if casing:
            keep = frozenset(stand_in for stand_in, _ in masked.stand_ins) if masked else frozenset()
            sentence = sentence_case(sentence, casing, self.src_lang, keep)
        return Prepared(sentence, masked if masked and masked.stand_ins else None, casing, source)

    def pieces(self, texts: Sequence[str], ids: Sequence[list[int]]) -> list[Cut]:
        """Each non-blank text's pieces, as subword ids; `ids`: the stripped texts' own encodings. A
        text is cut into its lines first (split_lines), and spans are masked in a whole line, before
        the sentence splitter sees it ("a?b=1" is no end)."""
        out = []
        for text, row in zip(texts, ids):
            layout = split_lines(text)
            rows = [row] if layout.single else self.tokenizer.encode_batch(layout.lines)
            prepared, per_line = [], []
            for line, line_row in zip(layout.lines, rows):
                sentences = self._line_sentences(line, line_row)
                prepared += sentences
                per_line.append(len(sentences))
            if len(prepared) == 1 and layout.single and prepared[0].text == layout.lines[0]:
                encoded = [row]
            else:
                encoded = self.tokenizer.encode_batch([sentence.text for sentence in prepared])
            groups = [self._within_max_len(sentence) for sentence in encoded]
            pieces = [piece for group in groups for piece in group]
            out.append(Cut(pieces, prepared, [len(g) for g in groups], layout, per_line))
        return out

    def _line_sentences(self, line: str, row: list[int]) -> list[Prepared]:
        """A line's sentences, made ready (`row`: the line's subword ids, which say whether it is long)."""
        masked = mask(line) if self.keep_spans else None
        text = masked.text if masked else line
        sentences = self._splitter.split(text) if self.split_sentences else [text]
        if len(sentences) == 1 and len(row) > self.max_len:
            if self._splitter is None:
                self._splitter = SentenceSplitter(self.src_lang)
            sentences = self._splitter.split(text)
        return [self.prepare(sentence, masked) for sentence in sentences]

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

    def join(self, nbest_lists: Sequence[NbestList], cut: Cut | None = None) -> NbestList:
        """One text's n-best from its pieces' (`cut`: the text's pieces as pieces() gave them; none: each
        piece a sentence as it is): each sentence's translations made the reader's (Prepared.restore),
        joined within a line as _joined says, and the lines with the text's line breaks."""
        if cut is None or cut.as_is:
            return self._joined(nbest_lists)
        sentences, start = [], 0
        for prepared, count in zip(cut.sentences, cut.counts):
            joined = self._joined(nbest_lists[start : start + count])
            sentences.append([(hypothesis, prepared.restore(text)) for hypothesis, text in joined])
            start += count
        lines, start = [], 0
        for count in cut.per_line:
            lines.append(self._joined(sentences[start : start + count]))
            start += count
        return lines[0] if cut.lines.single else self._joined(lines, cut.lines)

    def _joined(self, nbest_lists: Sequence[NbestList], layout: Lines | None = None) -> NbestList:
        """The k-th joins every piece's k-th (or its last, where a piece has fewer); its tokens are the
        pieces' in order, its score and log-probability their sums. Its text: the pieces' texts
        separated as the language writes sentences, or (`layout`: they are lines) by the line breaks."""
        if len(nbest_lists) == 1 and layout is None:
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
            texts = [text for _, text in chosen]
            text = layout.join(texts) if layout else self.separator.join(text for text in texts if text)
            joined.append((hypothesis, text))
        return joined


NbestList = list[tuple[Hypothesis, str]]
