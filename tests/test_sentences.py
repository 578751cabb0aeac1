"""Lines translated in pieces: --split-sentences, and long lines cut at sentence ends or word starts.

An engine that copies its source (CopyTranslator) makes every piece visible in the output: nothing
lost, nothing truncated, order kept. The real engine then must translate each piece as it would
translate that piece alone.
"""

import re

import pytest
from conftest import run_mtkit, synthetic_pairs, write_lines
from hypothesis import given, settings
from hypothesis import strategies as st

from mtkit.core.errors import MtkitError
from mtkit.decoding.search import Hypothesis, SearchConfig
from mtkit.model.files import load_model_file
from mtkit.text.sentence_splitter import LONGEST_WINDOW, WINDOW, SentenceSplitter
from mtkit.text.tokenizer import Tokenizer
from mtkit.translation.sentences import Segmenter
from mtkit.translation.translate import TextTranslator, Translator


class CopyTranslator(TextTranslator):
    """Translates every piece into itself: its source ids, decoded by the same tokenizer."""

    def __init__(self, tokenizer: Tokenizer, meta: dict):
        self.src_tokenizer = self.tgt_tokenizer = tokenizer
        self.model_meta = meta
        self.searched: list[list[int]] = []

    def _search(self, sentences, prefixes=None, on_done=None):
        self.searched += sentences
        return [[Hypothesis(list(s), -1.0, -float(len(s)))] for s in sentences]


@pytest.fixture(scope="module")
def tokenizer(tokenizer_path) -> Tokenizer:
    return Tokenizer.load(tokenizer_path)


def spaced(text: str) -> str:
    return " ".join(text.split())


SENTENCES = [en for en, _ in synthetic_pairs(400, seed=7)]


def test_a_line_of_one_sentence_within_the_limit_is_one_piece_as_encoded(tokenizer):
    segmenter = Segmenter(tokenizer, max_len=250, split_sentences=True, src_lang="en")
    lines = SENTENCES[:20]
    ids = tokenizer.encode_batch(lines)
    assert segmenter.pieces(lines, ids) == [[row] for row in ids]


def test_split_sentences_cuts_a_paragraph_into_its_sentences(tokenizer):
    segmenter = Segmenter(tokenizer, split_sentences=True, src_lang="en")
    line = "Mr. Smith runs in the park. A dog sits at the beach!  Two children play near the water?"
    expected = tokenizer.encode_batch(
        ["Mr. Smith runs in the park.", "A dog sits at the beach!", "Two children play near the water?"]
    )
    assert segmenter.pieces([line], tokenizer.encode_batch([line])) == [expected]


# Sentences with what pysbd's rules look at: abbreviations, numbers, ellipses, quotes and brackets
# holding sentence ends, a line break.
MESSY = [
    "Mr. Smith paid $3.50 at 7:45 p.m. today.",
    'It\'s "great!" she said.',
    "See e.g. the U.S. report (p. 12).",
    "Wait... what?",
    "Dr. Who? Yes!",
    "He said (quietly. Very quietly.) no.",
    "Visit www.example.com now.",
    "“Quoted. Two sentences.” Then.",
    "A\nnew line.",
    "Ok",
]


@settings(max_examples=8, deadline=None)
@given(
    st.lists(st.sampled_from(MESSY), min_size=WINDOW // 15, max_size=WINDOW // 6), st.sampled_from(["en", "de", "fr"])
)
def test_a_text_split_a_window_at_a_time_has_pysbd_s_sentences_of_the_whole(parts, lang):
    import pysbd

    text = " ".join(parts)
    whole = pysbd.Segmenter(language=lang, clean=False).segment(text)
    assert SentenceSplitter(lang).split(text) == [piece.strip() for piece in whole if piece.strip()]


ODD = ["a", "Bb", "cc.", "Dd!", "e?", "(f", "g)", "“h", "i”", "3.5", "...", "–", "\n", "»", "«", "x\u00a0y", "   "]


@settings(max_examples=10, deadline=None)
@given(st.lists(st.sampled_from(ODD), min_size=WINDOW // 3, max_size=WINDOW))
def test_any_text_split_a_window_at_a_time_keeps_every_character_in_order(words):
    text = " ".join(words)  # unclosed quotes and brackets, and windows pysbd does not give back as they were
    assert "".join("".join(SentenceSplitter("en").split(text)).split()) == "".join(text.split())


def test_pysbd_reads_no_more_than_a_window_at_a_time_and_a_sentence_longer_than_the_longest_is_cut_at_a_space():
    splitter, read = SentenceSplitter("en"), []
    segment = splitter._segmenter.segment
    splitter._segmenter.segment = lambda text: read.append(len(text)) or segment(text)
    endless = " ".join(["word"] * (LONGEST_WINDOW // 4))  # one sentence of 20,000 characters
    text = " ".join(SENTENCES[:200]) + " " + endless + ". " + " ".join(SENTENCES[200:400])
    sentences = splitter.split(text)
    assert " ".join(sentences) == text and max(read) <= LONGEST_WINDOW
    assert sentences[:200] == SENTENCES[:200] and sentences[-200:] == SENTENCES[200:400]
    assert all(len(sentence) <= LONGEST_WINDOW for sentence in sentences) and len(sentences) == 402


def test_a_long_line_without_sentence_ends_is_cut_at_word_starts(tokenizer):
    segmenter = Segmenter(tokenizer, max_len=16, src_lang="en")
    line = " ".join(s.rstrip(".") for s in SENTENCES[:30])
    (row,) = tokenizer.encode_batch([line])
    (pieces,) = segmenter.pieces([line], [row])
    assert [i for piece in pieces for i in piece] == row
    assert all(1 <= len(piece) <= 16 for piece in pieces) and len(pieces) >= len(row) / 16
    assert all(tokenizer.id_to_token(piece[0]).startswith("▁") for piece in pieces)


@settings(max_examples=150, deadline=None)
@given(
    words=st.lists(
        st.sampled_from(SENTENCES[:50] + ["a", "Straße", "我喜欢吃苹果。", "!", "x" * 40, "ok?"]), max_size=40
    ),
    max_len=st.integers(4, 40),
    split=st.booleans(),
)
def test_pieces_are_within_the_limit_and_hold_the_whole_line(tokenizer, words, max_len, split):
    """Whatever the text and the limit: every piece at most max_len subwords, and the pieces decode
    to the line's text, in order (up to the spaces between sentences); no character's bytes are cut."""
    line = " ".join(words).strip()
    if not line:
        return
    segmenter = Segmenter(tokenizer, max_len=max_len, split_sentences=split, src_lang="en")
    (row,) = tokenizer.encode_batch([line])
    (pieces,) = segmenter.pieces([line], [row])
    assert all(1 <= len(piece) <= max_len for piece in pieces)
    text = "".join(tokenizer.decode_batch(pieces))
    assert text.replace(" ", "") == line.replace(" ", "")


def test_a_long_line_in_a_file_of_a_thousand_is_translated_whole(tokenizer):
    """1,000 lines with a 3,000-word paragraph in the middle: 1,000 translations, the long one in
    pieces of at most the model's training length, all of its sentences there, in order."""
    paragraph = " ".join(" ".join(SENTENCES * 2).split()[:3000])
    others = [en for en, _ in synthetic_pairs(999, seed=8)]
    lines = others[:500] + [paragraph] + others[500:]
    copier = CopyTranslator(tokenizer, {"src_lang": "en", "tgt_lang": "de", "max_len": 250})
    out = copier.translate(lines)
    assert len(out) == 1000 and out[:500] == lines[:500] and out[501:] == lines[501:]
    assert spaced(out[500]) == spaced(paragraph)
    assert len(re.findall(r"\.", out[500])) >= 0.8 * len(re.findall(r"\.", paragraph))
    assert copier.lines_in_pieces == 1 and max(len(piece) for piece in copier.searched) <= 250


def test_pieces_join_with_nothing_for_a_target_written_without_spaces(tokenizer):
    copier = CopyTranslator(tokenizer, {"src_lang": "en", "tgt_lang": "zh"})
    copier.set_segmenter(split_sentences=True)
    assert copier.translate(["A dog runs. A cat sits."]) == ["A dog runs.A cat sits."]


def test_a_joined_n_best_takes_each_piece_s_kth_and_sums_the_scores(tokenizer):
    segmenter = Segmenter(tokenizer, tgt_lang="de")
    first = [(Hypothesis([5], -0.1, -1.0), "Ein Hund."), (Hypothesis([6], -0.5, -2.0), "Hund.")]
    second = [(Hypothesis([7, 8], -0.2, -3.0, ended=False), "Er läuft.")]
    joined = segmenter.join([first, second])
    assert [text for _, text in joined] == ["Ein Hund. Er läuft.", "Hund. Er läuft."]
    assert joined[0][0] == Hypothesis([5, 7, 8], pytest.approx(-0.3), -4.0, ended=False)
    assert joined[1][0].score == pytest.approx(-0.7) and joined[1][0].log_prob == -5.0


@pytest.fixture(scope="module")
def translator(trained_run) -> Translator:
    cfg = SearchConfig(beam=2, max_len_b=20)
    return Translator(load_model_file(trained_run), cfg, device="cpu", precision="fp32")


def test_each_sentence_of_a_line_is_translated_as_it_is_alone(translator):
    sentences = SENTENCES[:12]
    alone = translator.translate(sentences)
    translator.set_segmenter(split_sentences=True)
    try:
        paragraphs = [" ".join(sentences[i : i + 3]) for i in range(0, 12, 3)] + ["", sentences[0]]
        joined = translator.translate(paragraphs)
    finally:
        translator.set_segmenter()
    expected = [" ".join(t for t in alone[i : i + 3] if t) for i in range(0, 12, 3)] + ["", alone[0]]
    assert joined == expected


def test_split_sentences_leaves_one_sentence_lines_as_they_were(translator, multi30k):
    lines = (multi30k / "test2016.en").read_text(encoding="utf-8").splitlines()[:300]
    plain = translator.translate(lines)
    translator.set_segmenter(split_sentences=True)
    try:
        assert translator.translate(lines) == plain
    finally:
        translator.set_segmenter()


def test_the_long_line_cut_is_counted_on_stderr_and_one_line_comes_out_per_line(trained_run, tmp_path):
    lines = SENTENCES[:5] + [" ".join(SENTENCES[:40])] + SENTENCES[5:9]
    source = write_lines(tmp_path / "in.en", lines)
    result = run_mtkit("translate", "-m", trained_run, "-i", source, "--beam", "1", "--max-source-len", "30")
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode().splitlines()
    assert len(out) == 10
    stderr = result.stderr.decode()
    assert "line 6:" in stderr and "more than 30: translated in" in stderr
    assert "1 lines longer than 30 subwords (--max-source-len) were translated in pieces" in stderr


def test_a_limit_beyond_the_positions_is_refused(tokenizer):
    with pytest.raises(MtkitError, match="--max-source-len 5000: must be between 4 and 1,024"):
        Segmenter(tokenizer, max_len=5000)
    with pytest.raises(MtkitError, match="--max-source-len 3: must be between 4 and"):
        Segmenter(tokenizer, max_len=3)


def test_a_document_keeps_its_paragraphs(trained_run, tmp_path):
    """Paragraphs one per line, separated by blank lines: one output line per input line, the blank
    ones blank, each paragraph translated sentence by sentence."""
    document = [" ".join(SENTENCES[0:3]), "", " ".join(SENTENCES[3:5]), "", "", SENTENCES[5], ""]
    source = write_lines(tmp_path / "doc.en", document)
    result = run_mtkit("translate", "-m", trained_run, "-i", source, "--beam", "1", "--split-sentences")
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode().split("\n")
    assert len(out) == len(document) + 1 and out[-1] == ""
    assert [line == "" for line in out[:-1]] == [line == "" for line in document]
    alone = run_mtkit("translate", "-m", trained_run, "--beam", "1", stdin="\n".join(SENTENCES[:6]).encode() + b"\n")
    sentences = alone.stdout.decode().splitlines()
    assert out[0] == " ".join(sentences[0:3]) and out[2] == " ".join(sentences[3:5]) and out[5] == sentences[5]
