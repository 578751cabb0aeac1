import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtkit.core.config import PRESETS, ModelConfig, build_config, load_config, parse_overrides
from mtkit.core.errors import MtkitError
from mtkit.data.batching import make_batches, pack_by_tokens
from mtkit.training.schedule import inverse_sqrt_lr, linear_decay_lr


def test_precedence_defaults_preset_yaml_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  preset: transformer-base\n  dropout: 0.2\ntrain:\n  lr: 5e-4\n  max_steps: 10\n")
    config = load_config(path, ["train.max_steps=20", "model.norm=pre"])
    assert config.model.d_model == 512 and config.model.dropout == 0.2 and config.model.norm == "pre"
    assert config.train.lr == 5e-4 and config.train.max_steps == 20 and config.train.warmup == 4000


def test_unknown_key_names_the_valid_ones():
    with pytest.raises(MtkitError, match=r"unknown config key 'train.lrr'; valid keys: max_tokens, .*lr,"):
        build_config({"train": {"lrr": 1.0}})
    with pytest.raises(MtkitError, match="unknown config section 'optim'"):
        build_config({"optim": {"lr": 1.0}})


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.max_steps=ten", "train.max_steps: expected int"),
        ("model.norm=middle", "model.norm: 'middle' is not one of post, pre"),
        ("train.precision=fp4", "train.precision: 'fp4' is not one of auto, fp32, bf16, fp16, fp8"),
        ("model.preset=huge", "model.preset: 'huge' is not one of transformer-base"),
        ("model.heads=3", "divisible by model.heads"),
        ("train.lr", "expected section.key=value"),
    ],
)
def test_bad_values_name_the_key(override, message):
    with pytest.raises(MtkitError, match=message):
        load_config(None, [override])


NEGATIVE_IS_INVALID = [
    "warmup", "clip_norm", "weight_decay", "max_epochs", "max_time", "keep_best", "patience",
    "valid_max_sentences", "threads",
]  # fmt: skip


@pytest.mark.parametrize("key", NEGATIVE_IS_INVALID)
def test_negative_values_are_refused_and_zero_is_accepted(key):
    with pytest.raises(MtkitError, match=f"^train.{key} must not be negative$"):
        load_config(None, [f"train.{key}=-1"])
    assert getattr(load_config(None, [f"train.{key}=0"]).train, key) == 0


@pytest.mark.parametrize(
    "key",
    ["max_tokens", "update_freq", "max_steps", "log_every", "valid_every", "save_every", "valid_beam", "keep_last"],
)
def test_counts_must_be_at_least_one(key):
    with pytest.raises(MtkitError, match=f"^train.{key} must be at least 1$"):
        load_config(None, [f"train.{key}=0"])


def test_dataclass_defaults_are_the_default_presets_values():
    defaults = ModelConfig()
    assert defaults.preset == "transformer-small"
    assert {key: getattr(defaults, key) for key in PRESETS[defaults.preset]} == PRESETS[defaults.preset]
    assert build_config({}).model == defaults


def test_bad_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  lr: [1, 2\n")
    with pytest.raises(MtkitError, match=r"c.yaml:\d+: not valid YAML"):
        load_config(path, [])


def test_overrides_parse_yaml_scalars():
    assert parse_overrides(["train.lr=1e-3", "model.tie_embeddings=false", "train.max_steps=5"]) == {
        "train": {"lr": "1e-3", "max_steps": 5},
        "model": {"tie_embeddings": False},
    }
    assert build_config(parse_overrides(["train.lr=1e-3"])).train.lr == 1e-3


def test_presets_are_the_paper_sizes():
    assert PRESETS["transformer-base"] == dict(
        d_model=512, heads=8, ffn_dim=2048, encoder_layers=6, decoder_layers=6, dropout=0.1
    )
    assert PRESETS["transformer-big"]["d_model"] == 1024 and PRESETS["transformer-big"]["dropout"] == 0.3


def test_learning_rate_schedule():
    assert inverse_sqrt_lr(1, 1e-3, 4000) == pytest.approx(1e-3 / 4000)
    assert inverse_sqrt_lr(2000, 1e-3, 4000) == pytest.approx(5e-4)
    assert inverse_sqrt_lr(4000, 1e-3, 4000) == pytest.approx(1e-3)
    assert inverse_sqrt_lr(16000, 1e-3, 4000) == pytest.approx(5e-4)
    # With peak d^-0.5 * warmup^-0.5 it is exactly the paper's formula.
    d, warmup = 512, 4000
    for step in (1, 100, 4000, 10000, 100000):
        paper = d**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert inverse_sqrt_lr(step, d**-0.5 * warmup**-0.5, warmup) == pytest.approx(paper)


def test_linear_schedule_warms_up_then_reaches_zero_with_the_budget():
    assert linear_decay_lr(50, 2e-3, 100, budget_used=0.05) == pytest.approx(1e-3)
    assert linear_decay_lr(100, 2e-3, 100, budget_used=0.1) == pytest.approx(1.8e-3)  # the decay line is lower
    assert linear_decay_lr(500, 2e-3, 100, budget_used=0.5) == pytest.approx(1e-3)
    assert linear_decay_lr(1000, 2e-3, 100, budget_used=1.0) == 0.0
    assert linear_decay_lr(1200, 2e-3, 100, budget_used=1.2) == 0.0  # time ran over: never negative
    assert linear_decay_lr(1, 2e-3, 0, budget_used=0.0) == pytest.approx(2e-3)


def test_batches_cover_every_sentence_once_within_the_token_budget():
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(1, 40, 500), rng.integers(1, 40, 500)
    src[7] = 300  # alone exceeds the budget
    batches, skipped = make_batches(src, tgt, max_tokens=256, seed=3, epoch=0)
    assert skipped.tolist() == [7]
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == [i for i in range(500) if i != 7]
    for batch in batches:
        assert len(batch) * (src[batch].max() + 1 + tgt[batch].max() + 1) <= 256
    padding = sum(len(b) * (src[b].max() + 1) - (src[b] + 1).sum() for b in batches) / (src + 1).sum()
    assert padding < 0.05  # length bucketing keeps source padding small


@pytest.mark.parametrize("shuffle", [True, False])
def test_the_batch_plan_sorts_by_source_then_target_length_then_a_seeded_tie_break(shuffle):
    """The plan of (seed, epoch) is the one this rule gives (so a run resumes on the batches it
    started with, whichever version of mtkit planned them first)."""
    rng = np.random.default_rng(1)
    src, tgt = rng.integers(0, 30, 2000), rng.integers(0, 30, 2000)
    batches, _ = make_batches(src, tgt, 300, seed=5, epoch=2, shuffle=shuffle)
    reference = np.random.default_rng([5, 2])
    tie_break = reference.random(2000) if shuffle else np.arange(2000)
    order = np.lexsort((tie_break, tgt + 1, src + 1))
    expected = pack_by_tokens(order, np.stack([src + 1, tgt + 1], axis=1), 300)
    if shuffle:
        reference.shuffle(expected)
    assert len(batches) == len(expected)
    assert all(np.array_equal(a, b) for a, b in zip(batches, expected))


def test_batch_order_is_a_function_of_seed_and_epoch():
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(1, 40, 300), rng.integers(1, 40, 300)
    same = [make_batches(src, tgt, 200, seed=1, epoch=e)[0] for e in (0, 0, 1)]
    assert all(np.array_equal(a, b) for a, b in zip(same[0], same[1]))
    assert not all(np.array_equal(a, b) for a, b in zip(same[0], same[2]))
    assert not math.isclose(len(same[0]), 0)


def greedy_packing(order, widths, max_tokens, max_sentences=0):
    """The batch plan's rule, one sentence at a time: what pack_by_tokens must equal."""
    batches, members, widest = [], [], [0] * widths.shape[1]
    for index in order:
        wider = [max(a, b) for a, b in zip(widest, widths[index].tolist())]
        full = max_sentences and len(members) >= max_sentences
        if members and (full or (len(members) + 1) * sum(wider) > max_tokens):
            batches.append(members)
            members, wider = [], widths[index].tolist()
        members.append(index)
        widest = wider
    return batches + ([members] if members else [])


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(1, 120), st.integers(1, 120)), min_size=0, max_size=400),
    max_tokens=st.integers(1, 2000),
    max_sentences=st.sampled_from([0, 1, 3, 50, 200]),
    sort=st.booleans(),
)
def test_the_array_packer_cuts_where_the_greedy_rule_cuts(rows, max_tokens, max_sentences, sort):
    from mtkit.data.batching import pack_by_tokens

    widths = np.array(rows, dtype=np.int64).reshape(-1, 2)
    order = (
        np.lexsort((widths[:, 1], widths[:, 0])) if sort else np.random.default_rng(len(rows)).permutation(len(rows))
    )
    packed = pack_by_tokens(order, widths, max_tokens, max_sentences)
    assert [b.tolist() for b in packed] == greedy_packing(order.tolist(), widths, max_tokens, max_sentences)
