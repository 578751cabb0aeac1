"""Several training corpora in one dataset: sampling weights per epoch, and tagged back-translation
(a <bt> token that starts every back-translated source and that text never produces)."""

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import write_corpus
from typer.testing import CliRunner

from mtkit.cli import app
from mtkit.core.config import TrainConfig
from mtkit.core.distributed import Distributed
from mtkit.core.errors import MtkitError
from mtkit.data.batching import BatchStream, collate
from mtkit.data.dataset import ParallelDataset, TrainingSamples, read_manifest, tempered, weighted_pairs
from mtkit.data.preprocess import Corpus, preprocess
from mtkit.data.sentence_packing import pairs_of
from mtkit.text.tokenizer import PAD_ID, Tokenizer, train_tokenizer


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpora")
    for name, pairs, seed in (("genuine", 120, 1), ("bt", 60, 2)):
        (root / name).mkdir()
        write_corpus(root / name, {"train": pairs, "valid": 10}, seed=seed)
    return root


@pytest.fixture(scope="module")
def tagged_tokenizer(corpora, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    texts = [corpora / name / f"train.{lang}" for name in ("genuine", "bt") for lang in ("en", "de")]
    train_tokenizer(texts, path, vocab_size=400, tags=["bt"])
    return path


@pytest.fixture(scope="module")
def joined(corpora, tagged_tokenizer, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("joined") / "bin"
    train = [Corpus("genuine", corpora / "genuine" / "train"),
             Corpus("bt", corpora / "bt" / "train", weight=0.5, back_translated=True)]  # fmt: skip
    preprocess("en", "de", {"train": train, "valid": corpora / "genuine" / "valid"}, tagged_tokenizer, out)
    return out


def test_a_tag_token_is_a_vocabulary_entry_that_text_never_produces(tagged_tokenizer, corpora, tmp_path):
    tokenizer = Tokenizer.load(tagged_tokenizer)
    assert tokenizer.vocab_size == 400 and tokenizer.tag_id("bt") == 399
    assert tokenizer.vocabulary()[399] == "<bt>"
    typed = tokenizer.encode_batch(["<bt> A dog runs."])[0]
    assert 399 not in typed and tokenizer.decode_batch([typed]) == ["<bt> A dog runs."]
    assert tokenizer.decode_batch([[399, *typed]]) == ["<bt> A dog runs."]  # the tag itself decodes to nothing
    plain = tmp_path / "plain.json"
    train_tokenizer([corpora / "genuine" / "train.en"], plain, vocab_size=400)
    assert Tokenizer.load(plain).tag_id("bt") is None
    with pytest.raises(MtkitError, match="--tag 'B T'"):
        train_tokenizer([corpora / "genuine" / "train.en"], tmp_path / "x.json", vocab_size=400, tags=["B T"])


def test_joined_corpora_keep_their_order_and_only_back_translations_are_tagged(joined, corpora, tagged_tokenizer):
    tokenizer = Tokenizer.load(tagged_tokenizer)
    manifest = read_manifest(joined)
    assert [(c["name"], c["weight"], c["back_translated"], c["kept"]) for c in manifest["corpora"]] == [
        ("genuine", 1.0, False, 120), ("bt", 0.5, True, 60)
    ]  # fmt: skip
    total = manifest["splits"]["train"]
    assert total["kept"] == 180 and total["src_tokens"] == sum(c["src_tokens"] for c in manifest["corpora"])
    data = ParallelDataset(joined, "train")
    texts = {lang: [(corpora / n / f"train.{lang}").read_text().splitlines() for n in ("genuine", "bt")]
             for lang in ("en", "de")}  # fmt: skip
    genuine, back = (tokenizer.encode_batch(texts["en"][k]) for k in (0, 1))
    expected_sources = genuine + [[399, *ids] for ids in back]
    assert [data[i][0].tolist() for i in range(180)] == expected_sources
    assert [data[i][1].tolist() for i in range(180)] == tokenizer.encode_batch(texts["de"][0] + texts["de"][1])
    assert manifest["corpora"][1]["src_tokens"] == sum(map(len, back)) + 60  # the tags count


def test_weights_choose_each_epoch_s_pairs():
    corpora = [{"kept": 10, "weight": 2.0}, {"kept": 6, "weight": 0.5}, {"kept": 4, "weight": 0.0}]
    epochs = [weighted_pairs(corpora, seed=1, epoch=e) for e in range(4)]
    for pairs in epochs:
        counts = Counter(pairs.tolist())
        assert all(counts[i] == 2 for i in range(10))  # weight 2: every pair twice
        half = [i for i in range(10, 16) if counts[i]]
        assert len(half) == 3 and all(counts[i] == 1 for i in half)  # weight 0.5: 3 of 6, once
        assert not any(counts[i] for i in range(16, 20))  # weight 0: none
    assert np.array_equal(epochs[0], weighted_pairs(corpora, seed=1, epoch=0))  # (seed, epoch) decides
    assert len({tuple(pairs[20:].tolist()) for pairs in epochs}) > 1  # another half each epoch
    assert weighted_pairs([{"kept": 5, "weight": 1}, {"kept": 3, "weight": 1.0}], 0, 0) is None


@pytest.mark.parametrize("temperature", [1.0, 2.0, 5.0])
def test_temperature_gives_each_corpus_its_share_of_an_epoch(temperature):
    """Shares of a drawn epoch within 2 points of (weight x pairs)^(1/T), normalised, a corpus 10x
    smaller than the others and a weighted one among them; the epoch as long as the weights make it."""
    corpora = [{"kept": 10_000, "weight": 1}, {"kept": 10_000, "weight": 1}, {"kept": 1_000, "weight": 1},
               {"kept": 4_000, "weight": 0.5}]  # fmt: skip
    sizes = np.array([corpus["kept"] * corpus["weight"] for corpus in corpora], dtype=np.float64)
    expected = sizes ** (1 / temperature) / (sizes ** (1 / temperature)).sum()
    for epoch in range(3):
        pairs = weighted_pairs(tempered(corpora, temperature), seed=3, epoch=epoch)
        counts = np.histogram(pairs, bins=np.cumsum([0] + [corpus["kept"] for corpus in corpora]))[0]
        assert np.abs(counts / counts.sum() - expected).max() < 0.02
        assert abs(len(pairs) - sizes.sum()) <= len(corpora)
    assert tempered(corpora, 1.0) == corpora


@pytest.mark.parametrize("pack_length", [0, 60])
def test_an_epoch_s_batches_hold_the_weighted_pairs(joined, pack_length):
    data = TrainingSamples(joined)
    cfg = TrainConfig(max_tokens=300, seed=4, pack_length=pack_length)
    stream = BatchStream(data, cfg, Distributed(), torch.device("cpu"), (0, 0))

    def pairs(epoch: int) -> list[int]:  # a packed batch's plan holds -1 after each row's last pair
        return [i for batch in stream.epoch_batches(epoch) for i in batch.ravel().tolist() if i >= 0]

    for epoch in (0, 1):
        taken = Counter(pairs(epoch))
        assert all(taken[i] == 1 for i in range(120))  # the genuine corpus, whole
        assert sorted(taken.values()) == [1] * 150 and all(120 <= i < 180 for i in taken if i >= 120)
    first, second = (set(pairs(e)) for e in (0, 1))
    assert first != second  # another half of the back-translations
    if pack_length:  # the packed rows hold the tokens of the pairs the plan names
        packed = stream.collate(stream.epoch_batches(0)[0])
        padded = collate(data, pairs_of(packed.indices))
        for side in ("src", "tgt_out"):
            tokens = [getattr(b, side)[getattr(b, side) != PAD_ID].sort().values for b in (packed, padded)]
            assert torch.equal(*tokens)


def test_the_preprocess_command_joins_corpora_and_refuses_mistakes(corpora, tagged_tokenizer, tmp_path):
    base = ["preprocess", "-s", "en", "-t", "de", "--tokenizer", str(tagged_tokenizer)]
    named = ["--train", f"genuine={corpora / 'genuine' / 'train'}", "--train", f"bt={corpora / 'bt' / 'train'}"]
    result = CliRunner().invoke(app, [*base, *named, "--weight", "bt=0.5", "--back-translated", "bt",
                                      "-o", str(tmp_path / "bin")])  # fmt: skip
    assert result.exit_code == 0, result.output
    manifest = read_manifest(tmp_path / "bin")
    lines = result.stderr.splitlines()
    for line, corpus in zip(lines, manifest["corpora"]):
        assert line.endswith(f"; {corpus['src_tokens']:,} source and {corpus['tgt_tokens']:,} target subwords")
    assert lines[0].startswith("train/genuine (weight 1): kept 120 of 120 pairs (dropped: none); ")
    assert lines[1].startswith("train/bt (weight 0.5, back-translated): kept 60 of 60 pairs (dropped: none); ")
    assert lines[2].startswith("train: kept 180 of 180 pairs (dropped: none); ")
    plain = tmp_path / "plain.json"
    train_tokenizer([corpora / "genuine" / "train.en"], plain, vocab_size=300)
    mistakes = {
        "--weight": ([*named, "--weight", "news=2"], "--weight news=2: give NAME=W for a corpus of --train (genuine, bt)"),
        "number": ([*named, "--weight", "bt=much"], "--weight bt=much: give NAME=W for a corpus of --train"),
        "negative": ([*named, "--weight", "bt=-1"], "--weight bt=-1: must not be negative"),
        "all zero": ([*named, "--weight", "bt=0", "--weight", "genuine=0"], "every corpus has weight 0"),
        "unknown bt": ([*named, "--back-translated", "news"], "--back-translated news: not a corpus of --train"),
        "same name": ([*named, "--train", f"bt={corpora / 'genuine' / 'train'}"], "--train: corpus names must differ"),
        "no tag": ([*named, "--back-translated", "bt", "--tokenizer", str(plain)],
                   "the tokenizer has no <bt> tag (train it with mtkit train-tokenizer --tag bt)"),
    }  # fmt: skip
    for case, (args, message) in mistakes.items():
        refused = CliRunner().invoke(app, [*base, *args, "-o", str(tmp_path / "refused")])
        assert refused.exit_code == 1, case
        assert message in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, (case, refused.stderr)
        assert not (tmp_path / "refused").exists()


def test_training_draws_the_corpora_at_its_sampling_temperature(joined, tmp_path):
    from mtkit.core.config import build_config, parse_overrides
    from mtkit.training.trainer import Trainer

    overrides = ["model.preset=transformer-tiny", "train.max_steps=1", "train.sampling_temperature=4"]
    trainer = Trainer(build_config(parse_overrides(overrides)), joined, tmp_path / "run")
    assert [corpus["weight"] for corpus in trainer.train_data.corpora] == pytest.approx(
        [corpus["weight"] for corpus in tempered(read_manifest(joined)["corpora"], 4)]
    )
    assert trainer.train_data.corpora[1]["weight"] > 0.5  # the smaller corpus drawn more than its weight alone
