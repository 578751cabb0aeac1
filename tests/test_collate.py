"""Collation gathers a batch in array operations and gives exactly the per-sentence padding's tensors."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mtkit.data.batching import collate, pad_batch
from mtkit.data.dataset import ParallelDataset, TrainingSamples
from mtkit.text.tokenizer import BOS_ID, EOS_ID


def reference(dataset, indices):
    """The batch one sentence at a time, as mtkit built it before."""
    pairs = [dataset[int(i)] for i in indices]
    src, tgt = [s for s, _ in pairs], [t for _, t in pairs]
    return pad_batch(src, suffix=EOS_ID), pad_batch(tgt, prefix=BOS_ID), pad_batch(tgt, suffix=EOS_ID)


def assert_same(dataset, indices):
    batch = collate(dataset, np.asarray(indices))
    for got, expected in zip((batch.src, batch.tgt_in, batch.tgt_out), reference(dataset, indices)):
        assert got.dtype == torch.int64 and torch.equal(got, expected)
    assert batch.indices.tolist() == list(indices)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_split_collates_as_sentence_by_sentence(data_dir, data):
    dataset = ParallelDataset(data_dir, "train")
    indices = data.draw(st.lists(st.integers(0, len(dataset) - 1), min_size=1, max_size=40))
    assert_same(dataset, indices)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_several_samples_collate_as_sentence_by_sentence(sampled, data):
    """BPE-dropout samples: a batch may even take pairs from several samples (index k x N + i)."""
    samples = TrainingSamples(sampled)
    indices = data.draw(st.lists(st.integers(0, 3 * samples.pairs - 1), min_size=1, max_size=40))
    assert_same(samples, indices)
