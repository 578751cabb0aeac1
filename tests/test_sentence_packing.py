"""train.pack_length: several sentence pairs per row, and the model sees exactly what it sees padded."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import losses, run_mtkit, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st
from test_compile import traced  # noqa: F401 - a fixture
from test_train import tiny_config

from mtkit.data.batching import Batch, collate, collate_rows
from mtkit.data.dataset import ParallelDataset, read_manifest
from mtkit.data.sentence_packing import PackedLayout, into_rows, pack_rows, pairs_of
from mtkit.text.tokenizer import BOS_ID, EOS_ID, PAD_ID
from mtkit.training.loss import TrainingObjective
from mtkit.training.train import train


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=200),
    length=st.integers(2, 40),
    rows=st.integers(1, 8),
    epoch=st.integers(0, 3),
)
def test_every_pair_that_fits_is_packed_once_within_the_row_length(lengths, length, rows, epoch):
    src, tgt = (np.array(side) for side in zip(*lengths))
    batches, skipped = pack_rows(src, tgt, length, rows, seed=1, epoch=epoch)
    packed = np.concatenate([pairs_of(plan) for plan in batches]) if batches else np.array([], dtype=np.int64)
    too_long = np.flatnonzero((src + 1 > length) | (tgt + 1 > length))
    assert sorted(skipped.tolist()) == too_long.tolist()
    assert sorted(packed.tolist()) == sorted(set(range(len(src))) - set(too_long.tolist()))
    for plan in batches:
        assert plan.shape[0] == rows
        for row in plan:
            pairs = row[row >= 0]
            assert (row[len(pairs) :] == -1).all()  # the pairs first, then -1
            assert (src[pairs] + 1).sum() <= length and (tgt[pairs] + 1).sum() <= length
    again, _ = pack_rows(src, tgt, length, rows, seed=1, epoch=epoch)
    assert all((a == b).all() for a, b in zip(again, batches)) and len(again) == len(batches)


def test_each_epoch_packs_in_its_own_order():
    lengths = np.arange(200) % 7
    first, _ = pack_rows(lengths, lengths, 16, 4, seed=1, epoch=0)
    second, _ = pack_rows(lengths, lengths, 16, 4, seed=1, epoch=1)
    assert pairs_of(first[0]).tolist() != pairs_of(second[0]).tolist()


def test_packed_rows_hold_each_pair_with_its_segment_and_positions():
    plan = np.array([[4, 7], [9, -1]])  # row 0: pairs 4 and 7; row 1: pair 9
    src = np.array([[11, 12, EOS_ID], [13, EOS_ID, PAD_ID], [14, 15, EOS_ID]])
    tgt_in = np.array([[BOS_ID, 21, PAD_ID], [BOS_ID, 22, 23], [BOS_ID, PAD_ID, PAD_ID]])
    tgt_out = np.array([[21, EOS_ID, PAD_ID], [22, 23, EOS_ID], [EOS_ID, PAD_ID, PAD_ID]])
    packed, layout = into_rows(plan, [src, tgt_in, tgt_out], 6)
    assert packed[0].tolist() == [[11, 12, EOS_ID, 13, EOS_ID, PAD_ID], [14, 15, EOS_ID, PAD_ID, PAD_ID, PAD_ID]]
    assert packed[1].tolist() == [
        [BOS_ID, 21, BOS_ID, 22, 23, PAD_ID],
        [BOS_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID],
    ]
    assert packed[2].tolist() == [
        [21, EOS_ID, 22, 23, EOS_ID, PAD_ID],
        [EOS_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID],
    ]
    src_segments, tgt_segments, src_positions, tgt_positions = (a.tolist() for a in layout)
    assert src_segments == [[1, 1, 1, 2, 2, 0], [1, 1, 1, 0, 0, 0]]
    assert tgt_segments == [[1, 1, 2, 2, 2, 0], [1, 0, 0, 0, 0, 0]]
    assert src_positions == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 0, 0, 0]]
    assert tgt_positions == [[0, 1, 0, 1, 2, 0], [0, 0, 0, 0, 0, 0]]


def test_the_masks_keep_each_sentence_to_itself():
    layout = PackedLayout(*(torch.tensor([row]) for row in ([1, 1, 2, 0], [1, 2, 2, 0], [0, 1, 0, 0], [0, 0, 1, 0])))
    assert layout.encoder_mask()[0, 0].int().tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [1, 1, 1, 1]]
    assert layout.decoder_mask()[0, 0].int().tolist() == [[1, 0, 0, 0], [0, 1, 0, 0], [0, 1, 1, 0], [1, 1, 1, 1]]
    assert layout.cross_mask()[0, 0].int().tolist() == [[1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 0], [1, 1, 1, 1]]


def _without_dropout(model):
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model.train()


def _loss_and_gradients(objective, batch: Batch, layout=None):
    objective.model.zero_grad()
    loss, nll = objective(batch.src, batch.tgt_in, batch.tgt_out, layout)
    loss.backward()
    return loss.detach(), nll, [p.grad.clone() for p in objective.model.parameters()]


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("fused", [False, True])
def test_packed_and_padded_batches_give_the_same_loss_and_gradients(data_dir, norm, fused):
    dataset = ParallelDataset(data_dir, "train")
    vocab = read_manifest(data_dir)["src_tokenizer"]["vocab_size"]
    model = _without_dropout(tiny_model(vocab=vocab, norm=norm))
    objective = TrainingObjective(model, 0.1, fused=fused)
    plan = np.array([[0, 1, 2], [3, 4, -1], [5, -1, -1], [-1, -1, -1]])  # an empty row, as an epoch's last batch has
    padded = collate(dataset, pairs_of(plan))
    packed = collate_rows(dataset, plan, 3 * int(max(padded.src.size(1), padded.tgt_in.size(1))))
    loss_a, nll_a, grads_a = _loss_and_gradients(objective, padded)
    loss_b, nll_b, grads_b = _loss_and_gradients(objective, packed, packed.layout)
    assert packed.tgt_tokens == padded.tgt_tokens and packed.src_tokens == padded.src_tokens
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(nll_b, nll_a, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_packed_training_learns_and_resumes_exactly(tmp_path, data_dir):
    packed = ("train.max_tokens=400", "train.pack_length=40", "model.dropout=0.2")
    train(tiny_config("train.max_steps=12", *packed), data_dir, tmp_path / "full")
    train(tiny_config("train.max_steps=6", *packed), data_dir, tmp_path / "half")
    train(None, None, tmp_path / "half", resume=True, overrides=["train.max_steps=12"])
    full = losses(tmp_path / "full")
    assert [s for s, _ in full] == list(range(1, 13))
    assert losses(tmp_path / "half") == full  # bitwise, dropout included


def test_compiled_packed_training_logs_the_eager_losses(tmp_path, data_dir, traced):  # noqa: F811
    packed = ("train.max_tokens=400", "train.pack_length=40", "train.precision=fp32", "train.max_steps=6")
    train(tiny_config(*packed), data_dir, tmp_path / "eager")
    eager = losses(tmp_path / "eager")
    train(tiny_config(*packed, "train.compile=true"), data_dir, tmp_path / "compiled")
    compiled = losses(tmp_path / "compiled")
    assert [s for s, _ in compiled] == list(range(1, 7))
    assert [loss for _, loss in compiled] == pytest.approx([loss for _, loss in eager], rel=1e-4)


def _plan_batches(data_dir, device="cpu"):
    dataset = ParallelDataset(data_dir, "train")
    plan = np.array([[0, 1, 2], [3, 4, -1], [5, -1, -1], [-1, -1, -1]])
    padded = collate(dataset, pairs_of(plan))
    length = 3 * int(max(padded.src.size(1), padded.tgt_in.size(1)))
    dense, flex = (collate_rows(dataset, plan, length, flex) for flex in (False, True))
    return padded.to(device), dense.to(device), flex.to(device)


def test_flex_attention_masks_give_the_dense_masks_loss(data_dir):
    """FlexAttention has no backward on CPUs: the forward here, the gradients in the GPU test below."""
    vocab = read_manifest(data_dir)["src_tokenizer"]["vocab_size"]
    objective = TrainingObjective(_without_dropout(tiny_model(vocab=vocab, norm="pre")), 0.1)
    padded, dense, flex = _plan_batches(data_dir)
    with torch.no_grad():
        expected = objective(padded.src, padded.tgt_in, padded.tgt_out)
        for packed in (dense, flex):
            got = objective(packed.src, packed.tgt_in, packed.tgt_out, packed.layout)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu("FlexAttention's backward needs a GPU")
def test_flex_attention_gives_the_dense_masks_gradients_on_a_gpu(data_dir):
    vocab = read_manifest(data_dir)["src_tokenizer"]["vocab_size"]
    objective = TrainingObjective(_without_dropout(tiny_model(vocab=vocab, norm="pre")).cuda(), 0.1)
    _, dense, flex = _plan_batches(data_dir, torch.device("cuda"))
    loss_a, _, grads_a = _loss_and_gradients(objective, dense, dense.layout)
    loss_b, _, grads_b = _loss_and_gradients(objective, flex, flex.layout)
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("settings_", "message"),
    [
        (["train.pack_length=3000", "train.max_tokens=4096"], "train.pack_length must be 0 (off) or from 2"),
        (["train.pack_length=64", "train.rdrop_alpha=5"], "train.rdrop_alpha cannot be combined"),
        (["train.cuda_graphs=true"], "train.cuda_graphs needs train.compile=true"),
        (["train.flex_attention=true"], "train.flex_attention needs a train.pack_length"),
        (["train.flex_attention=true", "train.pack_length=64", "train.device=cpu"], "needs a GPU"),
        (["train.cuda_graphs=true", "train.compile=true", "train.pack_length=64", "train.device=cpu"], "needs a GPU"),
    ],
)
def test_packing_settings_that_cannot_work_are_refused_in_one_line(tmp_path, data_dir, settings_, message):
    args = ["train", "-d", data_dir, "-o", tmp_path / "run", "--set", "model.preset=transformer-tiny"]
    for setting in settings_:
        args += ["--set", setting]
    result = run_mtkit(*args)
    assert result.returncode == 1
    [line] = result.stderr.decode().strip().splitlines()
    assert message in line
