import copy
import platform

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import mtkit.model.packed
import mtkit.translation.translate
from mtkit.decoding.search import SearchConfig, search
from mtkit.model.files import load_model_file
from mtkit.model.packed import PackedLinear, cast_linear_weights, pack_linear_layers, packing_works
from mtkit.text.tokenizer import BOS_ID
from mtkit.translation.translate import Translator

needs_packing = pytest.mark.skipif(not packing_works(), reason="this torch build has no oneDNN packing")


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="checked on x86-64")
def test_packing_is_available_on_x86_64():
    assert packing_works()  # else every CPU translation silently loses its speed-up


@needs_packing
@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 300),
    in_features=st.integers(1, 96),
    out_features=st.integers(1, 130),
    with_bias=st.booleans(),
    leading=st.sampled_from([(), (2,), (3, 1)]),
    seed=st.integers(0, 2**16),
)
def test_packed_linear_equals_f_linear(rows, in_features, out_features, with_bias, leading, seed):
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(out_features, in_features, generator=generator)
    bias = torch.randn(out_features, generator=generator) if with_bias else None
    x = torch.randn(*leading, rows, in_features, generator=generator)
    packed = PackedLinear(weight, bias)(x)
    assert packed.shape == (*leading, rows, out_features)
    assert torch.allclose(packed, F.linear(x, weight, bias), rtol=1e-4, atol=1e-4)


@needs_packing
def test_packed_linear_takes_non_contiguous_input():
    weight, x = torch.randn(7, 5), torch.randn(5, 4).t()  # (4, 5), transposed storage
    assert torch.allclose(PackedLinear(weight, None)(x), x @ weight.t(), atol=1e-5)


def scoring(model, output_vocab: str):
    """The model, with output_vocab = target: scoring the ids 5, 6, 8, 12, 15 (and <unk>, </s>);
    its logits' bias, if it has one, drawn at random."""
    if output_vocab == "target":
        model.output.set_vocab(torch.tensor([5, 6, 8, 12, 15]))
    if model.output.bias is not None:
        with torch.no_grad():
            model.output.bias.copy_(torch.randn(model.output.bias.shape, generator=torch.Generator().manual_seed(7)))
    return model


@needs_packing
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("output_vocab", ["all", "target"])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_model_computes_what_the_model_does(tied, output_vocab, bias):
    options = {"tie_embeddings": tied, "output_vocab": output_vocab, "output_bias": bias}
    plain = scoring(tiny_model(vocab=20, seed=3, **options), output_vocab)
    packed = scoring(tiny_model(vocab=20, seed=3, **options), output_vocab)
    assert pack_linear_layers(packed, min_weights=0)
    assert packed.output.scored.out_features == (20 if output_vocab == "all" else 7)
    assert not any(isinstance(m, nn.Linear) for m in packed.modules())
    assert isinstance(packed.output.scored, PackedLinear)
    src = torch.randint(4, 20, (3, 6))
    tgt = torch.randint(4, 20, (3, 5))
    with torch.no_grad():
        assert torch.allclose(packed(src, tgt), plain(src, tgt), atol=1e-5)
    states = [m.start_decoding(*m.encode(src), beams=1) for m in (plain, packed)]
    tokens = torch.full((3,), BOS_ID)
    for step in range(4):
        logits = [m.decode_step(tokens, s) for m, s in zip((plain, packed), states)]
        assert torch.allclose(logits[0], logits[1], atol=1e-5)
        tokens = tgt[:, step]
    cfg = SearchConfig(beam=3, nbest=3, lenpen=0.6)
    expected = [[h.tokens for h in hyps] for hyps in search(plain, src, cfg)]
    assert [[h.tokens for h in hyps] for hyps in search(packed, src, cfg)] == expected


@needs_packing
@pytest.mark.parametrize("bias", [False, True])
def test_a_model_that_leaves_out_few_ids_packs_every_row_and_masks_them_in_place(bias):
    """An imported model scores every id but <s>: the packed copy holds every row, and the logits,
    -inf on <s>, and the search are the model's."""
    options = {"output_vocab": "target", "output_bias": bias}
    plain, packed = (scoring(tiny_model(vocab=200, seed=3, **options), "all") for _ in range(2))
    for model in (plain, packed):
        model.output.set_vocab(torch.tensor([i for i in range(200) if i != BOS_ID]))
        assert model.output.masks_in_place()
    assert pack_linear_layers(packed, min_weights=0)
    assert packed.output.scored.out_features == 200
    src, tgt = torch.randint(4, 200, (3, 6)), torch.randint(4, 200, (3, 5))
    with torch.no_grad():
        logits = packed(src, tgt)
        assert torch.allclose(logits, plain(src, tgt), atol=1e-5) and logits[..., BOS_ID].isneginf().all()
    cfg = SearchConfig(beam=3, nbest=3, lenpen=0.6)
    expected = [[h.tokens for h in hyps] for hyps in search(plain, src, cfg)]
    assert [[h.tokens for h in hyps] for hyps in search(packed, src, cfg)] == expected


@needs_packing
@pytest.mark.parametrize("tied", [True, False])
def test_only_weights_at_least_min_weights_are_packed(tied):
    model = tiny_model(vocab=300, tie_embeddings=tied)
    sizes = {name: m.weight.numel() for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    output_size = model.tgt_embed.tokens.weight.numel()
    threshold = sorted(set(sizes.values()))[1]  # the smallest layers stay as they are, the rest is packed
    assert 0 < sum(size < threshold for size in sizes.values()) < len(sizes)
    assert pack_linear_layers(model, min_weights=threshold)
    for name, size in sizes.items():
        module = model.get_submodule(name)
        assert isinstance(module, PackedLinear if size >= threshold else nn.Linear), name
    if tied:
        assert isinstance(model.output.scored, PackedLinear) == (output_size >= threshold)
    small = tiny_model(vocab=300, tie_embeddings=True)
    assert pack_linear_layers(small, min_weights=output_size + 1)
    assert small.output.scored is None and not any(isinstance(m, PackedLinear) for m in small.modules())


def test_without_onednn_nothing_is_packed(monkeypatch):
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    model = tiny_model(vocab=20)
    linears = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    assert not pack_linear_layers(model)
    assert [name for name, m in model.named_modules() if isinstance(m, nn.Linear)] == linears
    assert model.output.scored is None


@needs_packing
def test_cpu_fp32_translator_packs_and_translates_as_before(trained_run, corpus, monkeypatch):
    lines = (corpus / "test.en").read_text(encoding="utf-8").splitlines()[:40]
    cfg = SearchConfig(beam=3, nbest=2)
    monkeypatch.setattr(mtkit.model.packed, "PACK_MIN_WEIGHTS", 0)  # the tiny model's layers are all small
    packed = Translator(load_model_file(trained_run), cfg, device="cpu", precision="fp32")
    assert isinstance(packed.model.output.scored, PackedLinear)
    monkeypatch.setattr(mtkit.translation.translate, "pack_linear_layers", lambda model: False)
    plain = Translator(load_model_file(trained_run), cfg, device="cpu", precision="fp32")
    assert plain.model.output.scored is None
    as_tokens = [[h.tokens for h, _ in nbest] for nbest in plain.translate_hypotheses(lines)]
    assert [[h.tokens for h, _ in nbest] for nbest in packed.translate_hypotheses(lines)] == as_tokens


@needs_packing
def test_by_default_only_the_output_projection_of_the_recipe_model_is_packed():
    model = tiny_model(vocab=8000, preset="transformer-small", norm="pre")  # the Multi30k recipe's shape
    assert pack_linear_layers(model)
    assert [name for name, m in model.named_modules() if isinstance(m, PackedLinear)] == ["output.scored"]
    # every other layer stays: 3 encoder layers of 5 (q, kv, out, fc1, fc2) and 3 decoder layers of 8 (both attentions)
    assert sum(isinstance(m, nn.Linear) for m in model.modules()) == 3 * 5 + 3 * 8


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("output_vocab", ["all", "target"])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_weights_cast_once_compute_what_autocast_computes(tied, output_vocab, bias):
    options = {"tie_embeddings": tied, "output_vocab": output_vocab, "output_bias": bias}
    model = scoring(tiny_model(vocab=50, **options), output_vocab)
    cast = copy.deepcopy(model)
    cast_linear_weights(cast, torch.bfloat16)
    assert cast.output.scored is not None and cast.output.scored.weight.dtype == torch.bfloat16
    assert cast.output.scored.out_features == (50 if output_vocab == "all" else 7)
    assert all(m.weight.dtype == torch.bfloat16 for m in cast.modules() if isinstance(m, nn.Linear))
    assert cast.tgt_embed.tokens.weight.dtype == torch.float32  # the lookup stays fp32
    generator = torch.Generator().manual_seed(1)
    src = torch.randint(4, 50, (3, 7), generator=generator)
    tgt_in = torch.cat([torch.full((3, 1), BOS_ID), torch.randint(4, 50, (3, 5), generator=generator)], dim=1)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(cast(src, tgt_in), model(src, tgt_in))
        states = [m.start_decoding(*m.encode(src), beams=1) for m in (model, cast)]
        for position in range(tgt_in.size(1)):  # incremental decoding, step by step
            expected, got = (m.decode_step(tgt_in[:, position], s) for m, s in zip((model, cast), states))
            assert torch.equal(got, expected)


def test_bf16_translator_casts_once_and_translates_as_autocast_does(trained_run, corpus, monkeypatch):
    lines = (corpus / "test.en").read_text(encoding="utf-8").splitlines()[:40]
    cfg = SearchConfig(beam=3, nbest=2)
    cast = Translator(load_model_file(trained_run), cfg, device="cpu", precision="bf16")
    assert cast.model.output.scored.weight.dtype == torch.bfloat16
    monkeypatch.setattr(mtkit.translation.translate, "cast_linear_weights", lambda model, dtype: None)
    plain = Translator(load_model_file(trained_run), cfg, device="cpu", precision="bf16")
    assert plain.model.output.scored is None
    expected = plain.translate_hypotheses(lines)
    got = cast.translate_hypotheses(lines)
    assert [[(h.tokens, h.score, text) for h, text in nbest] for nbest in got] == [
        [(h.tokens, h.score, text) for h, text in nbest] for nbest in expected
    ]
    best = expected[0][0][0]  # word alignment runs under the same autocast with either model
    assert cast.alignments(lines[:1], [best]) == plain.alignments(lines[:1], [best])
