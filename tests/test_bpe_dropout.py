"""Subword regularisation: preprocess --bpe-dropout P --samples K, and training on sample epoch mod K."""

import numpy as np
import pytest
import torch
from conftest import TINY_TRAIN, run_mtkit

from mtkit.core.config import TrainConfig
from mtkit.core.distributed import Distributed
from mtkit.core.errors import MtkitError
from mtkit.data.batching import BatchStream
from mtkit.data.dataset import TrainingSamples
from mtkit.data.preprocess import Sampling, preprocess
from mtkit.text.tokenizer import Tokenizer, train_tokenizer

K = 3


def test_samples_differ_and_each_decodes_to_the_same_text(sampled, corpus, tokenizer_path):
    tokenizer = Tokenizer.load(tokenizer_path)
    data = TrainingSamples(sampled)
    assert len(data.samples) == K and len(data) == 400
    plain = tokenizer.encode_batch((corpus / "train.en").read_text().splitlines())
    differing = 0
    for i in range(len(data)):
        sources = [sample[i][0].tolist() for sample in data.samples]
        texts = tokenizer.decode_batch(sources + [plain[i]])
        assert len(set(texts)) == 1  # every segmentation spells the same sentence
        differing += len({tuple(s) for s in sources}) > 1
        assert data[2 * len(data) + i][0].tolist() == sources[2]  # index k x N + i is sample k's pair i
    assert differing > len(data) // 2
    assert data.src_lengths.sum() > len(data) * np.mean([len(p) for p in plain])  # dropout splits words further


def test_one_sample_without_dropout_is_the_plain_dataset(corpus, tokenizer_path, data_dir, tmp_path):
    splits = {"train": corpus / "train", "valid": corpus / "valid", "test": corpus / "test"}
    preprocess("en", "de", splits, tokenizer_path, tmp_path / "bin", sampling=Sampling(0.0, 1))
    for name in ("train.en.bin", "train.en.idx", "train.de.bin", "train.de.idx", "valid.de.bin"):
        assert (tmp_path / "bin" / name).read_bytes() == (data_dir / name).read_bytes(), name
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == sorted(p.name for p in data_dir.iterdir())
    tokenizer = Tokenizer.load(tokenizer_path)
    data = TrainingSamples(tmp_path / "bin")
    expected = zip(
        *(tokenizer.encode_batch((corpus / f"train.{lang}").read_text().splitlines()) for lang in ("en", "de"))
    )
    assert [(s.tolist(), t.tolist()) for s, t in (data[i] for i in range(len(data)))] == list(expected)


def test_valid_and_test_stay_deterministic(sampled, data_dir):
    for name in ("valid.en.bin", "valid.de.bin", "valid.en.idx"):
        assert (sampled / name).read_bytes() == (data_dir / name).read_bytes()


def test_epoch_e_trains_on_sample_e_mod_k(sampled):
    data = TrainingSamples(sampled)
    cfg = TrainConfig(max_tokens=600)
    stream = BatchStream(data, cfg, Distributed(), torch.device("cpu"), (0, 0))
    for epoch in range(2 * K):
        k = epoch % K
        indices = np.concatenate(stream.epoch_batches(epoch))
        assert sorted(indices.tolist()) == list(range(k * len(data), (k + 1) * len(data)))


def test_training_on_a_sampled_dataset(sampled, tmp_path):
    result = run_mtkit("train", "-d", sampled, "-o", tmp_path / "run", *TINY_TRAIN, "--set", "train.max_epochs=4")
    assert result.returncode == 0, result.stderr.decode()
    assert "max_epochs=4" in result.stderr.decode()


@pytest.mark.parametrize(
    "sampling, message",
    [
        (Sampling(1.0, 2), "--bpe-dropout 1: must be in"),
        (Sampling(0.1, 0), "--samples 0: must be at least 1"),
        (Sampling(0.0, 2), "--samples 2: the samples would be identical"),
    ],
)
def test_invalid_sampling(sampling, message, corpus, tokenizer_path, tmp_path):
    with pytest.raises(MtkitError, match=message):
        preprocess("en", "de", {"train": corpus / "train"}, tokenizer_path, tmp_path / "bin", sampling=sampling)
    assert not (tmp_path / "bin").exists()


def test_unigram_tokenizers_are_refused(corpus, tmp_path):
    train_tokenizer([corpus / "train.en", corpus / "train.de"], tmp_path / "uni.json", vocab_size=500, kind="unigram")
    with pytest.raises(MtkitError, match="--bpe-dropout needs a BPE tokenizer"):
        preprocess(
            "en", "de", {"train": corpus / "train"}, tmp_path / "uni.json", tmp_path / "bin", sampling=Sampling(0.1, 2)
        )
