import itertools
import json

import numpy as np
import pytest
from conftest import write_lines
from hypothesis import given, settings
from hypothesis import strategies as st

from mtkit.core.errors import MtkitError
from mtkit.data.dataset import ParallelDataset, check_tokenizers_match
from mtkit.data.preprocess import CleaningRules, preprocess
from mtkit.text.tokenizer import Tokenizer

NOISE_OFF = {"copy": 0, "numbers": 0, "script": 0, "language": 0}  # the noise filters' counts, off by default


def test_dataset_holds_exactly_the_tokenizer_ids(data_dir, corpus, tokenizer_path):
    tokenizer = Tokenizer.load(tokenizer_path)
    dataset = ParallelDataset(data_dir, "train")
    src_lines = (corpus / "train.en").read_text().splitlines()
    tgt_lines = (corpus / "train.de").read_text().splitlines()
    assert len(dataset) == len(src_lines) == 400  # Multi30k's first 400 pairs are all clean
    expected_src, expected_tgt = tokenizer.encode_batch(src_lines), tokenizer.encode_batch(tgt_lines)
    for i in range(len(dataset)):
        src, tgt = dataset[i]
        assert src.tolist() == expected_src[i] and tgt.tolist() == expected_tgt[i]
    assert dataset.src_lengths.tolist() == [len(ids) for ids in expected_src]
    assert isinstance(dataset.src.ids, np.memmap) and dataset.src.ids.dtype == np.uint16


def test_manifest_and_raw_references(data_dir, corpus, tokenizer_path):
    manifest = json.loads((data_dir / "manifest.json").read_text())
    assert manifest["src_lang"] == "en" and manifest["joint_vocab"] is True
    assert manifest["src_tokenizer"]["sha256"] == Tokenizer.load(tokenizer_path).sha256
    assert manifest["splits"]["valid"]["kept"] == 20
    valid = ParallelDataset(data_dir, "valid")
    assert valid.raw_lines("tgt") == (corpus / "valid.de").read_text().splitlines()
    assert Tokenizer.load(data_dir / "tokenizer.json").sha256 == manifest["src_tokenizer"]["sha256"]


def make_corpus(tmp_path, pairs):
    write_lines(tmp_path / "c.src", [s for s, _ in pairs])
    write_lines(tmp_path / "c.tgt", [t for _, t in pairs])
    return tmp_path / "c"


def test_each_cleaning_rule_drops_exactly_its_pairs(tmp_path, tokenizer_path):
    tokenizer = Tokenizer.load(tokenizer_path)
    long_side = " ".join(["dog"] * 30)
    pairs = [
        ("A dog runs.", "Ein Hund rennt."),  # kept
        ("   ", "Ein Hund."),  # empty source after stripping
        ("A man.", ""),  # empty target
        (long_side, long_side),  # too long for max_len 40
        ("A dog.", " ".join(["Hund"] * 7)),  # length ratio far above 3
        ("A dog runs.", "Ein Hund rennt."),  # exact duplicate of the first pair
        ("  Two cats sit.  ", "Zwei Katzen sitzen."),  # kept, stripped
    ]
    n_long, n_dog, n_hunde = map(len, tokenizer.encode_batch([long_side, "A dog.", pairs[4][1]]))
    assert n_long > 40 and n_hunde <= 40 and n_hunde / n_dog > 3
    prefix = make_corpus(tmp_path, pairs)
    rules = CleaningRules(max_len=40, max_ratio=3.0, dedup=True)
    manifest = preprocess("src", "tgt", {"train": prefix}, tokenizer_path, tmp_path / "bin", rules=rules)
    report = manifest["splits"]["train"]
    assert report["dropped"] == {"empty": 2, "too_long": 1, "ratio": 1, "duplicate": 1} | NOISE_OFF
    assert report["read"] == 7 and report["kept"] == 2
    dataset = ParallelDataset(tmp_path / "bin", "train")
    assert tokenizer.decode_batch([dataset[1][0].tolist()]) == ["Two cats sit."]


def test_rules_can_be_switched_off(tmp_path, tokenizer_path):
    pairs = [
        ("A dog runs.", "Ein Hund rennt."),
        ("A dog runs.", "Ein Hund rennt."),
        ("A dog.", " ".join(["Hund"] * 12)),
    ]
    prefix = make_corpus(tmp_path, pairs)
    rules = CleaningRules(max_len=0, max_ratio=0, dedup=False)
    manifest = preprocess("src", "tgt", {"train": prefix}, tokenizer_path, tmp_path / "bin", rules=rules)
    assert manifest["splits"]["train"]["kept"] == 3


def test_valid_and_test_keep_every_line(tmp_path, tokenizer_path):
    pairs = [("A dog runs.", "Ein Hund rennt."), ("", "")]
    prefix = make_corpus(tmp_path, pairs)
    manifest = preprocess("src", "tgt", {"train": prefix, "valid": prefix}, tokenizer_path, tmp_path / "bin")
    assert manifest["splits"]["train"]["kept"] == 1 and manifest["splits"]["valid"]["kept"] == 2


def test_line_count_mismatch_names_both_files(tmp_path, tokenizer_path):
    write_lines(tmp_path / "c.src", ["a", "b", "c"])
    write_lines(tmp_path / "c.tgt", ["a", "b"])
    with pytest.raises(MtkitError, match=r"c\.src has 3 lines but .*c\.tgt has 2"):
        preprocess("src", "tgt", {"train": tmp_path / "c"}, tokenizer_path, tmp_path / "bin")
    assert not (tmp_path / "bin").exists()  # no partial dataset
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".bin")] == []


def test_invalid_utf8_names_line(tmp_path, tokenizer_path):
    write_lines(tmp_path / "c.src", ["a", "b"])
    (tmp_path / "c.tgt").write_bytes(b"a\n\xc3\x28 b\n")
    with pytest.raises(MtkitError, match=r"c\.tgt:2: invalid UTF-8"):
        preprocess("src", "tgt", {"train": tmp_path / "c"}, tokenizer_path, tmp_path / "bin")


def test_empty_training_set_after_cleaning(tmp_path, tokenizer_path):
    prefix = make_corpus(tmp_path, [("", "x"), ("y", "")])
    with pytest.raises(MtkitError, match="empty after cleaning.*empty: 2"):
        preprocess("src", "tgt", {"train": prefix}, tokenizer_path, tmp_path / "bin")


def test_missing_file(tmp_path, tokenizer_path):
    with pytest.raises(MtkitError, match=r"nothere\.src: no such file"):
        preprocess("src", "tgt", {"train": tmp_path / "nothere"}, tokenizer_path, tmp_path / "bin")


def test_existing_output_needs_force_and_is_replaced_whole(tmp_path, tokenizer_path):
    prefix = make_corpus(tmp_path, [("A dog.", "Ein Hund.")])
    preprocess("src", "tgt", {"train": prefix}, tokenizer_path, tmp_path / "bin")
    with pytest.raises(MtkitError, match="already exists.*--force"):
        preprocess("src", "tgt", {"train": prefix}, tokenizer_path, tmp_path / "bin")
    make_corpus(tmp_path, [("A dog.", "Ein Hund."), ("A cat.", "Eine Katze.")])
    preprocess("src", "tgt", {"train": prefix}, tokenizer_path, tmp_path / "bin", force=True)
    assert len(ParallelDataset(tmp_path / "bin", "train")) == 2


def test_failed_run_leaves_existing_dataset_untouched(tmp_path, tokenizer_path):
    prefix = make_corpus(tmp_path, [("A dog.", "Ein Hund.")])
    preprocess("src", "tgt", {"train": prefix}, tokenizer_path, tmp_path / "bin")
    before = (tmp_path / "bin" / "manifest.json").read_text()
    (tmp_path / "c.tgt").write_bytes(b"\xff\n")
    with pytest.raises(MtkitError):
        preprocess("src", "tgt", {"train": prefix}, tokenizer_path, tmp_path / "bin", force=True)
    assert (tmp_path / "bin" / "manifest.json").read_text() == before


def test_gzip_inputs(tmp_path, tokenizer_path):
    import gzip

    for side, text in (("src", "A dog.\n"), ("tgt", "Ein Hund.\n")):
        with gzip.open(tmp_path / f"c.{side}.gz", "wt") as handle:
            handle.write(text)
    manifest = preprocess("src", "tgt", {"train": tmp_path / "c"}, tokenizer_path, tmp_path / "bin")
    assert manifest["splits"]["train"]["kept"] == 1


def test_separate_vocabularies(tmp_path, corpus):
    from mtkit.data.dataset import load_tokenizers
    from mtkit.text.tokenizer import train_tokenizer

    train_tokenizer([corpus / "train.en"], tmp_path / "en.json", vocab_size=400)
    train_tokenizer([corpus / "train.de"], tmp_path / "de.json", vocab_size=450)
    manifest = preprocess(
        "en",
        "de",
        {"train": corpus / "train"},
        tmp_path / "en.json",
        tmp_path / "bin",
        tgt_tokenizer_path=tmp_path / "de.json",
    )
    assert manifest["joint_vocab"] is False
    src_tok, tgt_tok = load_tokenizers(tmp_path / "bin")
    assert (src_tok.vocab_size, tgt_tok.vocab_size) == (400, 450)


def test_tokenizer_mismatch_is_detected(data_dir, tmp_path, corpus):
    from mtkit.text.tokenizer import train_tokenizer

    train_tokenizer([corpus / "train.en"], tmp_path / "other.json", vocab_size=400)
    other = Tokenizer.load(tmp_path / "other.json")
    with pytest.raises(MtkitError, match="different tokenizer"):
        check_tokenizers_match(data_dir, other.sha256, other.sha256, "the model")


def test_the_cleaning_flags_reach_the_rules(tmp_path, tokenizer_path):
    """The CLI's --dedup, --max-ratio, --max-len, --no-strip and --no-drop-empty, in process."""
    from typer.testing import CliRunner

    from mtkit.cli import app

    pairs = [("A dog runs.", "Ein Hund rennt."), ("A dog runs.", "Ein Hund rennt."), ("A dog.", " ".join(["Hund"] * 12)),
             ("  Two cats sit.  ", "Zwei Katzen sitzen."), ("", "Leer.")]  # fmt: skip
    prefix = make_corpus(tmp_path, pairs)

    def dropped(name: str, *flags: str) -> dict:
        args = ["preprocess", "-s", "src", "-t", "tgt", "--train", str(prefix), "--tokenizer", str(tokenizer_path),
                "-o", str(tmp_path / name), *flags]  # fmt: skip
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        return json.loads((tmp_path / name / "manifest.json").read_text())["splits"]["train"]["dropped"]

    assert (
        dropped("all", "--dedup", "--max-ratio", "3")
        == {"empty": 1, "too_long": 0, "ratio": 1, "duplicate": 1} | NOISE_OFF
    )
    assert dropped("none", "--no-drop-empty", "--max-ratio", "0", "--max-len", "0") == {
        "empty": 0, "too_long": 0, "ratio": 0, "duplicate": 0,
    } | NOISE_OFF  # fmt: skip
    dropped("unstripped", "--no-strip", "--no-drop-empty", "--max-ratio", "0")
    raw = ParallelDataset(tmp_path / "unstripped", "train")[3][0].tolist()
    stripped = ParallelDataset(tmp_path / "none", "train")[3][0].tolist()
    tokenizer = Tokenizer.load(tokenizer_path)
    assert (
        tokenizer.encode_batch(["  Two cats sit.  "])[0]
        == raw
        != stripped
        == tokenizer.encode_batch(["Two cats sit."])[0]
    )


sentences = st.lists(st.integers(0, 40_000), max_size=6)


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(sentences, sentences), max_size=12))
def test_pair_digests_tell_pairs_apart_whatever_else_is_in_the_chunk(pairs):
    """Equal pairs, and only equal pairs, share a digest (the sides, the order and the positions of
    the ids all count: ([1], [2]) is not ([2], [1]) nor ([1, 2], [])); a pair's digest does not
    depend on the other pairs of its chunk."""
    from mtkit.text.cleaning import pair_digests

    pairs += [(tgt, src) for src, tgt in pairs[:3]] + [(src + tgt, []) for src, tgt in pairs[:3]]
    digests = pair_digests([src for src, _ in pairs], [tgt for _, tgt in pairs]).tolist()
    for (pair, digest), (other, other_digest) in itertools.combinations(zip(pairs, digests), 2):
        assert (digest == other_digest) == (pair == other)
    alone = [pair_digests([src], [tgt])[0] for src, tgt in pairs]
    assert digests == alone


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.lists(st.integers(0, 60), max_size=30), max_size=12), max_run=st.sampled_from([8, 1 << 24]))
def test_the_digest_set_keeps_the_first_of_equal_digests_like_a_set(chunks, max_run):
    from mtkit.text.cleaning import DigestSet

    seen, reference = DigestSet(max_run), set()
    for chunk in chunks:
        expected = []
        for digest in chunk:
            expected.append(digest not in reference)
            reference.add(digest)
        assert seen.add_new(chunk).tolist() == expected
    assert sorted(np.concatenate(seen.runs).tolist()) == sorted(reference) if seen.runs else not reference
    assert all((run[1:] > run[:-1]).all() for run in seen.runs)  # each run sorted, no repeats
    sizes = [len(run) for run in seen.runs]
    # Runs shrink geometrically (O(log N) of them) until merging would pass max_run.
    assert all(a > 2 * b or a + b > max_run for a, b in zip(sizes, sizes[1:]))
