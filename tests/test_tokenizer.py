import json
import re
import unicodedata

import pytest
from conftest import write_lines
from hypothesis import given, settings
from hypothesis import strategies as st

from mtkit.core.errors import MtkitError
from mtkit.text.tokenizer import BYTE_TOKENS, SPECIAL_TOKENS, UNK_ID, Tokenizer, train_tokenizer


def normalized(line: str) -> str:
    return unicodedata.normalize("NFKC", line).strip()


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def full_tokenizer(request, multi30k, tmp_path_factory) -> Tokenizer:
    path = tmp_path_factory.mktemp(request.param) / "tokenizer.json"
    report = train_tokenizer([multi30k / "train.en", multi30k / "train.de"], path, vocab_size=8000, kind=request.param)
    assert report.vocab_size == 8000 and report.lines == 58000
    return Tokenizer.load(path)


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def punctuation_tokenizer(request, multi30k, tmp_path_factory) -> Tokenizer:
    path = tmp_path_factory.mktemp(request.param) / "tokenizer.json"
    inputs = [multi30k / "train.en", multi30k / "train.de"]
    train_tokenizer(inputs, path, vocab_size=8000, kind=request.param, split_punctuation=True)
    return Tokenizer.load(path)


def assert_test2016_round_trips(tokenizer: Tokenizer, path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    decoded = tokenizer.decode_batch(tokenizer.encode_batch(lines))
    mismatches = [(a, b) for a, b in zip(lines, decoded) if normalized(a) != b]
    assert len(decoded) == 1000 and mismatches == []


@pytest.mark.parametrize("lang", ["en", "de"])
def test_every_test2016_line_round_trips(full_tokenizer, multi30k, lang):
    assert_test2016_round_trips(full_tokenizer, multi30k / f"test2016.{lang}")


@pytest.mark.parametrize("lang", ["en", "de"])
def test_every_test2016_line_round_trips_with_punctuation_split(punctuation_tokenizer, multi30k, lang):
    assert_test2016_round_trips(punctuation_tokenizer, multi30k / f"test2016.{lang}")


PUNCTUATION = re.compile(r"[.,:;!?'\"()\[\]\-–—]")


def joins_punctuation_to_a_word(token: str) -> bool:
    return bool(PUNCTUATION.search(token) and re.search(r"\w", token))


def learned_tokens(tokenizer: Tokenizer) -> list[str]:
    return tokenizer.vocabulary()[len(SPECIAL_TOKENS) + len(BYTE_TOKENS) :]


def test_without_split_punctuation_words_and_punctuation_share_subwords(full_tokenizer):
    fused = [token for token in learned_tokens(full_tokenizer) if joins_punctuation_to_a_word(token)]
    assert len(fused) >= 50, fused  # "▁Sand.", "▁T-Shirt", "'s": why --split-punctuation exists


def test_split_punctuation_keeps_every_punctuation_mark_a_subword_of_its_own(punctuation_tokenizer):
    with_punctuation = [token for token in learned_tokens(punctuation_tokenizer) if PUNCTUATION.search(token)]
    assert with_punctuation and all(re.fullmatch(r"▁?.", token) for token in with_punctuation)


def test_split_punctuation_segments_a_sentence(punctuation_tokenizer):
    tokens = punctuation_tokenizer.tokens("Ein Mann, eine Frau und ein Kind stehen auf der Straße.")
    words = ["▁Ein", "▁Mann", ",", "▁eine", "▁Frau", "▁und", "▁ein", "▁Kind", "▁stehen", "▁auf", "▁der", "▁Straße"]
    assert tokens == [*words, "."]
    tokens = punctuation_tokenizer.tokens('Ein Mann (links) sagt: "Hallo."')
    assert "".join(tokens) == '▁Ein▁Mann▁(links)▁sagt:▁"Hallo."'
    assert not [token for token in tokens if joins_punctuation_to_a_word(token)]


UNSEEN = [
    "Ça coûte 12,50 € — naïve Zoë 🙂 déjà-vu",  # accents and symbols rare or absent in Multi30k
    "Ἀθῆναι καὶ Σπάρτη",  # Greek: a language the tokenizer never saw
    "東京タワーは高い。",  # Japanese
    "Ölçü ﬁnal x² ½ Ⅻ",  # NFKC folds the ligature, superscript and numerals
    "tabs\tand  double  spaces",
]


@pytest.mark.parametrize("text", UNSEEN)
def test_unseen_characters_survive_without_unk(full_tokenizer, text):
    ids = full_tokenizer.encode_batch([text])[0]
    assert UNK_ID not in ids
    assert full_tokenizer.decode_batch([ids])[0] == normalized(text)


def test_unseen_character_becomes_its_utf8_bytes(full_tokenizer):
    tokens = full_tokenizer.tokens("ŵ")  # U+0175 = C5 B5 in UTF-8, absent from Multi30k
    assert tokens[-2:] == ["<0xC5>", "<0xB5>"]


def test_special_and_byte_token_ids(full_tokenizer):
    assert full_tokenizer.vocabulary()[:4] == SPECIAL_TOKENS
    assert [full_tokenizer.id_to_token(4 + b) for b in (0, 0xC3, 255)] == ["<0x00>", "<0xC3>", "<0xFF>"]


def test_vocab_size_too_small_is_refused(tmp_path):
    src = write_lines(tmp_path / "a.txt", ["hello world"])
    with pytest.raises(MtkitError, match="too small.*261"):
        train_tokenizer([src], tmp_path / "t.json", vocab_size=len(SPECIAL_TOKENS) + len(BYTE_TOKENS))
    assert not (tmp_path / "t.json").exists()


def test_gzip_input_and_exact_vocab_size(tmp_path):
    import gzip

    lines = [f"sentence number {i} about a dog and a cat" for i in range(200)]
    with gzip.open(tmp_path / "a.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    report = train_tokenizer([tmp_path / "a.txt.gz"], tmp_path / "t.json", vocab_size=300, min_frequency=1)
    tokenizer = Tokenizer.load(tmp_path / "t.json")
    assert report.lines == 200 and tokenizer.vocab_size == 300
    assert tokenizer.decode_batch(tokenizer.encode_batch(lines)) == lines


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nalso fine\nbroken \xff here\n")
    with pytest.raises(MtkitError, match=r"bad.txt:3: invalid UTF-8"):
        train_tokenizer([path], tmp_path / "t.json", vocab_size=300)


def test_not_an_mtkit_tokenizer(tmp_path):
    (tmp_path / "t.json").write_text(json.dumps({"nonsense": True}))
    with pytest.raises(MtkitError, match="t.json"):
        Tokenizer.load(tmp_path / "t.json")


def test_a_unigram_tokenizer_round_trips_and_keeps_the_special_ids(corpus, tmp_path):
    report = train_tokenizer([corpus / "train.en", corpus / "train.de"], tmp_path / "uni.json", 400, kind="unigram")
    tokenizer = Tokenizer.load(tmp_path / "uni.json")
    assert report.vocab_size == tokenizer.vocab_size <= 400
    assert type(tokenizer._hf.model).__name__ == "Unigram"
    assert tokenizer.vocabulary()[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    lines = (corpus / "test.de").read_text().splitlines() + ["Ça coûte 5 € — naïve façade!", "</s> <pad> as text"]
    ids = tokenizer.encode_batch(lines)
    assert tokenizer.decode_batch(ids) == lines
    assert all(i > 3 for row in ids for i in row)  # typed special tokens are text, and nothing is <unk>


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def small_tokenizer(request, corpus, tmp_path_factory) -> Tokenizer:
    path = tmp_path_factory.mktemp(request.param) / "tokenizer.json"
    train_tokenizer([corpus / "train.en", corpus / "train.de"], path, vocab_size=400, kind=request.param)
    return Tokenizer.load(path)


LOOKALIKES = st.sampled_from(["</s>", "<s>", "<pad>", "<unk>", "<0x41>", "<0xC3>", "<", ">", " "])


@settings(max_examples=200, deadline=None)
@given(
    pieces=st.lists(st.one_of(LOOKALIKES, st.text(st.characters(exclude_categories=["Cs"]), max_size=8)), max_size=8)
)
def test_any_text_round_trips_and_never_becomes_a_control_id(small_tokenizer, pieces):
    """A line (NFKC-normalised and stripped, as translation reads it) comes back exactly, and typed
    special or byte tokens stay text, in BPE and Unigram tokenizers alike. ("▁" is the space marker:
    typed, it reads as a space, as in SentencePiece.)"""
    text = unicodedata.normalize("NFKC", "".join(pieces)).replace("▁", " ").strip()
    ids = small_tokenizer.encode_batch([text])[0]
    assert all(i > 3 for i in ids)
    assert small_tokenizer.decode_batch([ids])[0] == text


@settings(max_examples=200, deadline=None)
@given(count=st.integers(0, 60), size=st.integers(0, 70), seed=st.integers(0, 2**32))
def test_a_line_sample_is_an_ordered_subset_of_the_size_asked_for(count, size, seed):
    from mtkit.core.textio import sample_lines

    lines = [f"line {i}" for i in range(count)]
    consumed = []
    sample = sample_lines((consumed.append(line) or line for line in lines), size, seed)
    assert len(sample) == min(size, count)
    assert sample == [line for line in lines if line in set(sample)]  # distinct lines, kept in their order
    assert sample_lines(iter(lines), size, seed) == sample  # the seed decides
    if size >= count:
        assert sample == lines
    if size > 0:
        assert consumed == lines  # read to the end, once


def test_a_line_sample_is_uniform():
    """Over 4,000 seeds, each of 20 lines is in a sample of 5 about 1,000 times (binomial sd 27)."""
    from mtkit.core.textio import sample_lines

    counts = [0] * 20
    for seed in range(4000):
        for line in sample_lines(range(20), 5, seed):
            counts[line] += 1
    assert sum(counts) == 20_000
    assert all(900 <= c <= 1100 for c in counts), counts


def test_the_tokenizer_learns_from_a_sample_when_asked(tmp_path):
    from typer.testing import CliRunner

    from mtkit.cli import app
    from mtkit.core.textio import sample_lines
    from mtkit.text.tokenizer import DEFAULT_MAX_LINES

    lines = [f"word{i % 97} and thing{i % 31} number {i}" for i in range(3000)]
    corpus = write_lines(tmp_path / "corpus.txt", lines)
    args = ["train-tokenizer", "-i", str(corpus), "--vocab-size", "400"]
    sampled = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "sampled.json"), "--max-lines", "500"])
    assert sampled.exit_code == 0, sampled.output
    assert "from a sample of 500 of 3,000 lines" in sampled.stderr
    # the same tokenizer as training on those 500 lines written out
    write_lines(tmp_path / "sample.txt", sample_lines(lines, 500))
    train_tokenizer([tmp_path / "sample.txt"], tmp_path / "direct.json", vocab_size=400)
    assert (tmp_path / "sampled.json").read_text() == (tmp_path / "direct.json").read_text()
    # under the default, every line of a small corpus
    whole = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "whole.json")])
    assert "from 3,000 lines" in whole.stderr
    train_tokenizer([corpus], tmp_path / "all.json", vocab_size=400, max_lines=0)
    assert (tmp_path / "whole.json").read_text() == (tmp_path / "all.json").read_text()
    help_text = re.sub(r"[\s\u2500-\u257f]+", " ", CliRunner().invoke(app, ["train-tokenizer", "--help"]).output)
    assert f"(0: all lines). [default: {DEFAULT_MAX_LINES}]" in help_text
    refused = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "x.json"), "--max-lines", "-1"])
    assert refused.exit_code == 1 and "--max-lines -1" in refused.stderr
