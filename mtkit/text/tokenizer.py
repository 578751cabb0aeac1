"""Subword tokenizers: training, loading, and lossless encode/decode.

A tokenizer is one Hugging Face `tokenizer.json`: NFKC normalisation (or NFC, or none), a Metaspace
pre-tokenizer (spaces become "▁" and word starts are marked; with split_scripts, text in a script
written without spaces is cut into short pre-tokens (SCRIPT_PIECES); with split_punctuation, every
punctuation character is also a piece of its own, as SentencePiece's script split and a
Moses-tokenized subword-nmt pipeline keep it: "Straße." is "▁Straße" + ".", " (" is "▁("; a
Unigram tokenizer also keeps "<" apart, so that typed "</s>" or "<0x41>" stay text),
a BPE or Unigram model with byte fallback, and the decoder that undoes all of it. Byte
fallback means that a character never seen in training is encoded as its UTF-8 bytes
(`<0xC3><0xB4>`) rather than `<unk>`, so decode(encode(s)) gives back normalize(s) for any text
but one holding "▁" (U+2581) itself, which reads as a space, as in SentencePiece and Marian.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from mtkit.core import console
from mtkit.core.errors import MtkitError
from mtkit.core.textio import (
    check_input_file,
    check_output_file,
    iter_lines,
    line_bytes,
    progress_size,
    sample_lines,
    write_text_atomic,
)

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL_TOKENS = [PAD, UNK, BOS, EOS]  # their order fixes their ids
PAD_ID, UNK_ID, BOS_ID, EOS_ID = range(4)
BYTE_TOKENS = [f"<0x{byte:02X}>" for byte in range(256)]
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + len(BYTE_TOKENS) + 1
# Subwords are learned from at most this many lines, sampled uniformly (SentencePiece's
# input_sentence_size, Marian's --sentencepiece-max-lines): counts settle long before a WMT-size corpus.
DEFAULT_MAX_LINES = 2_000_000
# A vocabulary entry whose name starts with NUL is one this tokenizer never produces, since no
# normalized text holds a NUL: the other side's pieces of a joint vocabulary (see mtkit.interop.marian).
UNPRODUCED = "\x00"
# Every character that ends a line for Python's str.splitlines (and "\n", "\r" for every other tool):
# a translation holding one would break the one-line-in, one-line-out contract.
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
NORMALIZATIONS = {"nfkc": normalizers.NFKC, "nfc": normalizers.NFC, "none": None}
# Chinese, Japanese, Thai, Lao, Khmer and Burmese put no spaces between words, so a Metaspace "word" there
# is a whole clause, which BPE then learns from as one pre-token (slowly, and merging across words).
# split_scripts cuts such text where its script changes and into short pieces, as SentencePiece's
# split_by_unicode_script and OpenNMT Tokenizer's segment_alphabet do: every Han character alone (each is
# a morpheme, as in character-level Chinese MT), runs of hiragana or of katakana of up to 8 characters,
# and runs of up to 10 letters of the others, each letter with up to 2 combining marks (vowel signs, tone
# marks) so that none is cut from its letter (marks with no letter before them: runs of up to 10). A
# pre-token of these scripts thus holds at most 31 characters, the "▁" of a space before it included.
# Space-delimited scripts are untouched.
SCRIPT_PIECES = "|".join(
    [
        r"▁?\p{Han}\p{M}{0,2}",
        r"▁?(?:\p{Hiragana}\p{M}{0,2}){1,8}",
        r"▁?(?:[\p{Katakana}\x{30FC}]\p{M}{0,2}){1,8}",  # U+30FC, the prolonged sound mark, is of no one script
        *(rf"▁?(?:[\p{{{script}}}&&\P{{M}}]\p{{M}}{{0,2}}){{1,10}}" for script in ("Thai", "Lao", "Khmer", "Myanmar")),
        r"▁?[\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}\p{Hiragana}\p{Katakana}]{1,10}",  # marks without a letter
    ]
)


class Tokenizer:
    """A trained subword tokenizer and the exact JSON text it was loaded from."""

    def __init__(self, json_text: str):
        self.json_text = json_text
        try:
            self._hf = HFTokenizer.from_str(json_text)
        except Exception as err:  # the Rust side raises plain Exceptions
            raise MtkitError(f"not a valid tokenizer: {err}") from None
        for token_id, token in enumerate(SPECIAL_TOKENS):
            if self._hf.token_to_id(token) != token_id:
                raise MtkitError(f"not an mtkit tokenizer: {token} must have id {token_id}")
        # Text is text: "</s>" or "<pad>" typed by a user are characters, never control ids.
        self._hf.encode_special_tokens = True
        self.sha256 = hashlib.sha256(json_text.encode("utf-8")).hexdigest()
        self._line_breaks: list[list[int]] | None = None
        # The entries this tokenizer never produces by itself, by their text (an imported joint vocabulary's other side)
        vocab = self._hf.get_vocab()
        self._unproduced = {t.removeprefix(UNPRODUCED): i for t, i in vocab.items() if t.startswith(UNPRODUCED)}

    @classmethod
    def load(cls, path: Path) -> Tokenizer:
        path = Path(path)
        if not path.is_file():
            raise MtkitError(f"{path}: no such tokenizer file")
        try:
            return cls(path.read_text(encoding="utf-8"))
        except MtkitError as err:
            raise MtkitError(f"{path}: {err}") from None

    def save(self, path: Path) -> None:
        write_text_atomic(Path(path), self.json_text)

    @property
    def vocab_size(self) -> int:
        return self._hf.get_vocab_size()

    def with_bpe_dropout(self, p: float) -> Tokenizer:
        """A copy that segments with BPE-dropout (each merge skipped with probability p): another
        segmentation at every call, each decoding to the same text. Unseeded (tokenizers draws it)."""
        if type(self._hf.model).__name__ != "BPE":
            raise MtkitError(f"--bpe-dropout needs a BPE tokenizer, not {type(self._hf.model).__name__}")
        copy = Tokenizer(self.json_text)
        copy._hf.model.dropout = p
        return copy

    def encode_batch(self, lines: Sequence[str]) -> list[list[int]]:
        """Subword ids of each line, without <s> or </s> (multi-threaded in Rust). With UNPRODUCED
        entries, a run of characters the model lacks (one <unk>) whose text is such an entry gets
        its id, as MarianTokenizer looks SentencePiece's unknown pieces up in the joint vocabulary."""
        if not self._unproduced:  # no offsets needed: the faster call
            return [encoding.ids for encoding in self._hf.encode_batch_fast(list(lines), add_special_tokens=False)]
        encodings = self._hf.encode_batch(list(lines), add_special_tokens=False)
        return [
            [
                self._unproduced.get(line[start:end], i) if i == UNK_ID else i
                for i, (start, end) in zip(e.ids, e.offsets)
            ]
            for line, e in zip(lines, encodings)
        ]

    def decode_batch(self, ids: Sequence[Sequence[int]]) -> list[str]:
        return self._hf.decode_batch([list(row) for row in ids], skip_special_tokens=True)

    def normalize(self, text: str) -> str:
        """The text as this tokenizer's normalizer leaves it (NFKC, NFC, or as it is)."""
        normalizer = self._hf.normalizer
        return normalizer.normalize_str(text) if normalizer is not None else text

    def pre_tokens(self, text: str) -> list[str]:
        """The pieces the subword model segments: the normalized text, split by the pre-tokenizer."""
        return [piece for piece, _ in self._hf.pre_tokenizer.pre_tokenize_str(self.normalize(text))]

    def tokens(self, line: str) -> list[str]:
        return self._hf.encode(line, add_special_tokens=False).tokens

    def tag_id(self, tag: str) -> int | None:
        """The id of tag token <tag> (train-tokenizer --tag), or None when the tokenizer has none."""
        token = tag_token(tag)
        return next((i for i, added in self._hf.get_added_tokens_decoder().items() if added.content == token), None)

    def tag_names(self) -> list[str]:
        """The names of the tokenizer's tag tokens (train-tokenizer --tag), in id order."""
        added = sorted(self._hf.get_added_tokens_decoder().items())
        return [token.content[1:-1] for _, token in added if token.content not in SPECIAL_TOKENS]

    def vocabulary(self) -> list[str]:
        """Every token, in id order; an entry this tokenizer never produces (UNPRODUCED) by its name."""
        return [self._hf.id_to_token(i).removeprefix(UNPRODUCED) for i in range(self.vocab_size)]

    def line_break_sequences(self) -> list[list[int]]:
        """The id sequences whose decoding can break a line: every token that decodes to a text with a
        character of LINE_BREAKS (the byte tokens <0x0A> and <0x0D> among them), and the byte-token
        spellings of the multi-byte ones (U+2028 is <0xE2><0x80><0xA8>). A search that never completes
        one of these never writes a line break."""
        if self._line_breaks is None:
            self._line_breaks = self.sequences_writing(LINE_BREAKS)
        return self._line_breaks

    def sequences_writing(self, chars: str) -> list[list[int]]:
        """The id sequences whose decoding writes one of chars: every token whose text holds one, and
        the byte-token spellings of the multi-byte ones."""
        texts = self._hf.decode_batch([[i] for i in range(self.vocab_size)], skip_special_tokens=True)
        found = [[i] for i, text in enumerate(texts) if any(char in chars for char in text)]
        for char in chars:
            spelled = [self._hf.token_to_id(f"<0x{byte:02X}>") for byte in char.encode("utf-8")]
            if len(spelled) > 1 and None not in spelled:
                found.append(spelled)
        return found

    def entry_id(self, token: str) -> int | None:
        """The id of a vocabulary entry by its text, one this tokenizer never produces included."""
        found = self._hf.token_to_id(token)
        return found if found is not None else self._unproduced.get(token)

    def id_to_token(self, token_id: int) -> str:
        return self._hf.id_to_token(token_id)

    def token_to_id(self, token: str) -> int:
        return self._hf.token_to_id(token)


@dataclass
class TokenizerReport:
    vocab_size: int
    lines: int  # read
    trained_on: int  # lines the subwords were learned from: all, or a sample of them
    seconds: float


def _blank_tokenizer(
    model: models.Model,
    split_punctuation: bool,
    split_scripts: bool = True,
    normalization: str = "nfkc",
    split_digits: bool = True,
) -> HFTokenizer:
    tokenizer = HFTokenizer(model)
    if NORMALIZATIONS[normalization] is not None:
        tokenizer.normalizer = NORMALIZATIONS[normalization]()
    steps = [pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)]
    if split_punctuation:  # each punctuation character alone, or with the "▁" of a space before it: "▁(", "."
        steps.append(pre_tokenizers.Split(Regex(r"▁?\p{P}"), behavior="isolated"))
    if split_scripts:
        steps.append(pre_tokenizers.Split(Regex(SCRIPT_PIECES), behavior="isolated"))
    if split_digits:  # each digit alone (SentencePiece's split_digits): a number is written digit by digit
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    if isinstance(model, models.Unigram):
        # A Unigram model segments a word into any pieces of its vocabulary, the special and byte
        # tokens included, so typed "</s>" or "<0x41>" would become them. Every such token starts
        # with "<": kept a word of its own, "<" never begins a longer piece.
        steps.append(pre_tokenizers.Split(Regex("▁?<"), behavior="isolated"))
    tokenizer.pre_tokenizer = steps[0] if len(steps) == 1 else pre_tokenizers.Sequence(steps)
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return tokenizer


def _add_byte_fallback(json_text: str, kind: str) -> str:
    """Insert the 256 byte tokens right after the special tokens and switch byte fallback on."""
    spec = json.loads(json_text)
    model = spec["model"]
    if kind == "bpe":
        learned = [token for token, _ in sorted(model["vocab"].items(), key=lambda item: item[1])]
        learned = [token for token in learned if token not in SPECIAL_TOKENS and token not in BYTE_TOKENS]
        model["vocab"] = {token: i for i, token in enumerate(SPECIAL_TOKENS + BYTE_TOKENS + learned)}
        model["unk_token"] = UNK
    else:
        learned = [entry for entry in model["vocab"] if entry[0] not in SPECIAL_TOKENS + BYTE_TOKENS]
        specials = [[token, 0.0] for token in SPECIAL_TOKENS]
        model["vocab"] = specials + [[token, 0.0] for token in BYTE_TOKENS] + learned
        model["unk_id"] = UNK_ID
    model["byte_fallback"] = True
    for added in spec.get("added_tokens", []):
        added["id"] = SPECIAL_TOKENS.index(added["content"])
    return json.dumps(spec, ensure_ascii=False, indent=1)


def _add_tags(json_text: str, tags: Sequence[str]) -> str:
    """Tag tokens after the learned ones: special, so "<bt>" typed in text stays text."""
    if not tags:
        return json_text
    hf = HFTokenizer.from_str(json_text)
    hf.add_special_tokens([tag_token(tag) for tag in dict.fromkeys(tags)])
    return json.dumps(json.loads(hf.to_str()), ensure_ascii=False, indent=1)


def tag_token(tag: str) -> str:
    return f"<{tag}>"


def _read_lines(paths: Sequence[Path], report: list[int]) -> Iterator[str]:
    sizes = [progress_size(path) for path in paths]  # by bytes: every input is read once
    total = None if None in sizes else sum(sizes)
    with console.progress("reading text", total=total, unit="bytes" if total else "") as bar:
        for path in paths:
            for line in iter_lines(path):
                report[0] += 1
                bar.advance(line_bytes(line) if total else 1)
                yield line


def train_tokenizer(
    inputs: Sequence[Path],
    output: Path,
    vocab_size: int,
    kind: str = "bpe",
    min_frequency: int = 2,
    split_punctuation: bool = False,
    max_lines: int = DEFAULT_MAX_LINES,
    tags: Sequence[str] = (),
    split_scripts: bool = True,
    normalization: str = "nfkc",
    split_digits: bool = True,
) -> TokenizerReport:
    """Train a subword tokenizer on raw text files and write it atomically to `output`;
    split_punctuation: no subword joins a punctuation character to anything else; split_scripts:
    text in scripts without spaces is cut into short pre-tokens (SCRIPT_PIECES); normalization: one
    of NORMALIZATIONS, applied to all text before anything else (stored in the file); max_lines: train
    on a uniform sample of that many lines when the inputs hold more (0: on every line); tags: names
    of tag tokens (`bt` gives `<bt>`, for tagged back-translation) that text never produces;
    split_digits: every digit a subword of its own, so that a model learns to copy numbers digit by
    digit (a tokenizer trained without it keeps its own pre-tokenizer, in its file)."""
    if vocab_size < MIN_VOCAB_SIZE:
        raise MtkitError(
            f"--vocab-size {vocab_size} is too small: it must be at least {MIN_VOCAB_SIZE} "
            f"({len(SPECIAL_TOKENS)} special tokens + {len(BYTE_TOKENS)} byte tokens + 1)"
        )
    if kind not in ("bpe", "unigram"):
        raise MtkitError(f"--type {kind}: must be bpe or unigram")
    if max_lines < 0:
        raise MtkitError(f"--max-lines {max_lines}: must be a number of lines, or 0 for all of them")
    normalization = normalization.lower()  # NFC as well as nfc
    if normalization not in NORMALIZATIONS:
        raise MtkitError(f"--normalization {normalization}: must be one of {', '.join(NORMALIZATIONS)}")
    for path in inputs:
        check_input_file(path)
    check_output_file(output)
    for tag in tags:
        if not re.fullmatch(r"[a-z0-9_]+", tag):
            raise MtkitError(f"--tag {tag!r}: a tag name is lowercase letters, digits and _")
    learned_size = vocab_size - len(BYTE_TOKENS) - len(set(tags))
    if kind == "bpe":
        hf = _blank_tokenizer(
            models.BPE(unk_token=UNK, byte_fallback=True), split_punctuation, split_scripts, normalization, split_digits
        )
        trainer = trainers.BpeTrainer(
            vocab_size=learned_size, min_frequency=min_frequency, special_tokens=SPECIAL_TOKENS, show_progress=False
        )
    else:
        hf = _blank_tokenizer(models.Unigram(), split_punctuation, split_scripts, normalization, split_digits)
        trainer = trainers.UnigramTrainer(
            vocab_size=learned_size, special_tokens=SPECIAL_TOKENS, unk_token=UNK, show_progress=False
        )
    start = time.perf_counter()
    lines_read = [0]
    lines = _read_lines(inputs, lines_read)
    sample = sample_lines(lines, max_lines) if max_lines else lines  # read in full before training
    try:
        hf.train_from_iterator(sample, trainer=trainer)
    except MtkitError:
        raise
    except Exception as err:  # the Rust trainer raises plain Exceptions, e.g. for a Unigram vocabulary too small
        raise MtkitError(f"--vocab-size {vocab_size}: {err}") from None
    if lines_read[0] == 0:
        raise MtkitError("no text to train on: the input files are empty")
    tokenizer = Tokenizer(_add_tags(_add_byte_fallback(hf.to_str(), kind), tags))
    tokenizer.save(output)
    trained_on = len(sample) if max_lines else lines_read[0]
    return TokenizerReport(tokenizer.vocab_size, lines_read[0], trained_on, time.perf_counter() - start)
