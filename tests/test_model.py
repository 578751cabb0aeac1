import math

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_model

from mtkit.core.config import build_config
from mtkit.model.kernels import Dropout, attend, matmul_attention
from mtkit.model.kv_cache import CACHE_CHUNK
from mtkit.model.transformer import MultiHeadAttention, Transformer, sinusoidal_positions
from mtkit.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID


def reference_attention(q, k, v, allowed):
    """softmax(Q K^T / sqrt(d_k) + B) V in float64, with B = 0 where allowed and -inf elsewhere."""
    q, k, v = q.double(), k.double(), v.double()
    bias = torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + bias, dim=-1)
    return weights @ v, weights


def test_positional_encoding_matches_the_formula():
    pe = sinusoidal_positions(3, 4)
    assert torch.allclose(pe[1], torch.tensor([math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]))
    assert torch.allclose(pe[1], torch.tensor([0.841, 0.540, 0.010, 1.000]), atol=5e-4)
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0]


def worked_example(scores: tuple[float, float]):
    """The SPEC's single query (d_k = 16) over two keys with raw scores `scores`; the values are
    one-hot, so the attention output's first two features are the weights."""
    k = torch.zeros(1, 1, 2, 16)
    k[0, 0, :, 0] = torch.tensor(scores)
    q = torch.zeros(1, 1, 1, 16)
    q[0, 0, 0, 0] = 1.0
    return q, k, torch.eye(2, 16)[None, None]


# scores (6, 4) scale by 1/sqrt(16) to (1.5, 1.0): weights (sigmoid(0.5), sigmoid(-0.5)) = (0.62, 0.38);
# scores (3, 8) to (0.75, 2.0): (sigmoid(-1.25), sigmoid(1.25)) = (0.22, 0.78).
WORKED = [((6.0, 4.0), 0.5), ((3.0, 8.0), -1.25)]


@pytest.mark.parametrize("path", ["sdpa", "matmul", "inspection"])
def test_spec_worked_attention_examples_on_every_path(path):
    for scores, margin in WORKED:
        q, k, v = worked_example(scores)
        if path == "sdpa":
            out, _ = attend(q, k, v, None, False, dropout=0.0, training=False)
        elif path == "matmul":
            out = matmul_attention(q, k, v, None, False, dropout=0.0)
        else:
            out, weights = attend(q, k, v, None, False, dropout=0.0, training=False, keep_weights=True)
            assert weights[0, 0, 0].tolist() == pytest.approx([math_sigmoid(margin), math_sigmoid(-margin)], abs=1e-6)
        assert out[0, 0, 0, :2].tolist() == pytest.approx([math_sigmoid(margin), math_sigmoid(-margin)], abs=1e-6)
    assert round(math_sigmoid(0.5), 2) == 0.62 and round(math_sigmoid(-1.25), 2) == 0.22  # the SPEC's figures


def math_sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_attention_equals_float64_reference(causal):
    torch.manual_seed(0)
    attention = MultiHeadAttention(d_model=16, heads=4, dropout=0.0).eval()
    x = torch.randn(3, 5, 16)
    mask = torch.ones(3, 1, 1, 5, dtype=torch.bool)
    mask[1, ..., 3:] = False  # sentence 1 has two padding positions
    k, v = attention.keys_values(x)
    out = attention(x, k, v, mask=None if causal else mask, is_causal=causal)
    q = attention.q_proj(x).view(3, 5, 4, 4).transpose(1, 2)
    allowed = torch.ones(5, 5, dtype=torch.bool).tril()[None, None] if causal else mask
    ref, weights = reference_attention(q, k, v, allowed.expand(3, 4, 5, 5))
    expected = attention.out_proj(ref.transpose(1, 2).reshape(3, 5, 16).float())
    assert torch.allclose(out, expected, atol=1e-5)
    assert torch.allclose(weights.sum(-1), torch.ones(3, 4, 5, dtype=torch.float64))


def test_kernel_and_inspection_paths_agree():
    torch.manual_seed(1)
    attention = MultiHeadAttention(16, 2, 0.0).eval()
    x = torch.randn(2, 4, 16)
    k, v = attention.keys_values(x)
    fast = attention(x, k, v, is_causal=True)
    attention.keep_weights = True
    slow = attention(x, k, v, is_causal=True)
    assert torch.allclose(fast, slow, atol=1e-6)
    assert attention.weights.triu(1).abs().max() == 0.0


def padded_and_causal_cases(seed: int, rows: int = 3, heads: int = 2, length: int = 6, d_k: int = 8):
    torch.manual_seed(seed)
    q, k, v = (torch.randn(rows, heads, length, d_k) for _ in range(3))
    mask = torch.ones(rows, 1, 1, length, dtype=torch.bool)
    mask[1, ..., 2:] = False  # sentence 1 has four padding positions
    causal = torch.ones(length, length, dtype=torch.bool).tril()[None, None]
    return (q, k, v), ((mask, False, mask), (None, True, causal), (mask, True, causal & mask))


def test_matmul_attention_equals_float64_reference():
    (q, k, v), cases = padded_and_causal_cases(seed=2)
    for mask, is_causal, allowed in cases:
        expected, _ = reference_attention(q, k, v, allowed.expand(3, 2, 6, 6))
        out = matmul_attention(q, k, v, mask, is_causal, dropout=0.0)
        assert out.dtype == torch.float32
        assert torch.allclose(out.double(), expected, atol=1e-5)


def test_matmul_attention_in_bf16_stays_within_bf16_rounding_of_the_reference():
    (q, k, v), cases = padded_and_causal_cases(seed=3)
    for mask, is_causal, allowed in cases:
        expected, _ = reference_attention(q, k, v, allowed.expand(3, 2, 6, 6))
        out = matmul_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask, is_causal, dropout=0.0)
        assert out.dtype == torch.bfloat16
        assert (out.double() - expected).abs().max() < 0.05  # bf16 keeps 8 bits: inputs, scores, weights, output
        assert (out.double() - expected).abs().max() > 0.0


def test_matmul_attention_dropout_drops_weights_and_keeps_their_expectation():
    torch.manual_seed(4)
    q, k = torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 4000, 4)
    v = torch.ones(1, 1, 4000, 1)  # uniform weights of 1/4000 over ones: the output is their sum
    out = matmul_attention(q, k, v, None, False, dropout=0.5)
    assert out.item() == pytest.approx(1.0, abs=0.05)
    weights = matmul_attention(q, k[:, :, :400], torch.eye(400)[None, None], None, False, dropout=0.5)
    assert set(weights.unique().tolist()) == {0.0, torch.tensor(2.0 / 400).item()}  # dropped, or 1/400 scaled by 2


@pytest.mark.parametrize("causal", [False, True])
def test_cpu_bf16_training_takes_the_matmul_path_and_matches_the_kernel(causal):
    """Under CPU bf16 autocast, a training-mode attention layer computes as matmul_attention does,
    and within bf16 rounding of the flash kernel that evaluation uses."""
    torch.manual_seed(5)
    attention = MultiHeadAttention(d_model=16, heads=4, dropout=0.0)
    x = torch.randn(3, 5, 16)
    mask = None if causal else torch.tensor([5, 3, 1])[:, None] > torch.arange(5)
    mask = None if mask is None else mask[:, None, None, :]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        k, v = attention.keys_values(x)
        trained = attention.train()(x, k, v, mask=mask, is_causal=causal)
        q = attention.q_proj(x).view(3, 5, 4, 4).transpose(1, 2)
        by_hand = attention.out_proj(matmul_attention(q, k, v, mask, causal, 0.0).transpose(1, 2).reshape(3, 5, 16))
        evaluated = attention.eval()(x, k, v, mask=mask, is_causal=causal)
    assert torch.equal(trained, by_hand)
    assert (trained.float() - evaluated.float()).abs().max() < 0.05
    assert not torch.equal(trained.float(), evaluated.float())


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_future_target_tokens_do_not_change_earlier_outputs(norm):
    model = tiny_model(vocab=20, norm=norm)
    src = torch.tensor([[5, 6, 7, EOS_ID]])
    tgt_a = torch.tensor([[BOS_ID, 8, 9, 10, 11]])
    tgt_b = torch.tensor([[BOS_ID, 8, 9, 15, 4]])
    out_a, out_b = model(src, tgt_a), model(src, tgt_b)
    assert torch.equal(out_a[:, :3], out_b[:, :3])
    assert not torch.allclose(out_a[:, 3:], out_b[:, 3:])


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_a_padded_batch_gives_each_sentence_its_own_outputs(norm):
    """Three sentences of different lengths in one padded batch, against each one alone, unpadded.
    Not bitwise: the kernels reduce over other lengths in a batch; 1e-6 is float32 rounding here."""
    model = tiny_model(vocab=20, norm=norm)
    sources = [[5, 6, 7, 8, 9, EOS_ID], [5, 6, EOS_ID], [11, EOS_ID]]
    targets = [[BOS_ID, 8, 9], [BOS_ID, 4, 4, 5, 6, 7], [BOS_ID]]
    src = torch.tensor([s + [PAD_ID] * (6 - len(s)) for s in sources])
    tgt = torch.tensor([t + [PAD_ID] * (6 - len(t)) for t in targets])
    batched = model(src, tgt)
    for i, (source, target) in enumerate(zip(sources, targets)):
        alone = model(torch.tensor([source]), torch.tensor([target]))[0]
        assert torch.allclose(batched[i, : len(target)], alone, atol=1e-6, rtol=0)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_incremental_decoding_equals_full_forward(norm):
    model = tiny_model(vocab=20, norm=norm)
    src = torch.tensor([[5, 6, 7, EOS_ID], [9, EOS_ID, PAD_ID, PAD_ID]])
    tgt = torch.tensor([[BOS_ID, 8, 9, 10, 11], [BOS_ID, 4, 4, 5, 6]])
    full = model(src, tgt)
    memory, src_mask = model.encode(src)
    state = model.start_decoding(memory, src_mask)
    for t in range(tgt.size(1)):
        assert torch.allclose(model.decode_step(tgt[:, t], state), full[:, t], atol=1e-5)


def test_reordering_the_cache_follows_the_rows():
    model = tiny_model(vocab=20)
    src = torch.tensor([[5, 6, EOS_ID], [9, 7, EOS_ID]])
    memory, src_mask = model.encode(src)
    state = model.start_decoding(memory, src_mask)
    model.decode_step(torch.tensor([BOS_ID, BOS_ID]), state)
    state.select(torch.tensor([1, 1, 0]))
    step = model.decode_step(torch.tensor([8, 8, 8]), state)
    full = model(src, torch.tensor([[BOS_ID, 8], [BOS_ID, 8]]))[:, 1]
    assert torch.allclose(step, full[[1, 1, 0]], atol=1e-5)


def test_transformer_base_parameter_count():
    cfg = build_config(
        {"model": {"preset": "transformer-base", "src_vocab_size": 37000, "tgt_vocab_size": 37000, "joint_vocab": True}}
    )
    model = Transformer(cfg.model)
    d, ff, n = 512, 2048, 6
    attention = 4 * (d * d + d)
    ffn = d * ff + ff + ff * d + d
    embeddings = 37000 * d  # shared by source, target and output projection
    encoder = n * (attention + ffn + 2 * 2 * d)
    decoder = n * (2 * attention + ffn + 3 * 2 * d)
    assert model.num_parameters() == embeddings + encoder + decoder == 63_082_496  # the paper: 65M


def test_embeddings_are_tied():
    model = tiny_model(vocab=20)
    assert model.src_embed is model.tgt_embed and model.output.weight is None
    separate = tiny_model(vocab=20, joint_vocab=False)
    assert separate.src_embed is not separate.tgt_embed
    untied = tiny_model(vocab=20, tie_embeddings=False)
    assert untied.output.weight is not None and untied.output.projection() is untied.output.weight


def test_positions_extend_beyond_the_initial_table():
    model = tiny_model(vocab=20)
    src = torch.full((1, 600), 5)
    src[0, -1] = EOS_ID
    memory, _ = model.encode(src)
    assert memory.shape == (1, 600, 16) and torch.isfinite(memory).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cpu_autocast_forward_is_close_to_fp32(dtype):
    model = tiny_model(vocab=20)
    src = torch.tensor([[5, 6, 7, EOS_ID]])
    tgt = torch.tensor([[BOS_ID, 8, 9]])
    with torch.autocast("cpu", dtype=dtype):
        low = model(src, tgt)
    assert low.dtype == dtype
    assert torch.allclose(F.softmax(low.float(), -1), F.softmax(model(src, tgt), -1), atol=0.02)


def test_under_cpu_autocast_the_decoder_cache_holds_the_low_precision_values_in_fp32():
    model = tiny_model(vocab=20)
    src = torch.tensor([[5, 6, 7, EOS_ID], [8, 9, EOS_ID, PAD_ID]])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        state = model.start_decoding(*model.encode(src))
        for token in (BOS_ID, 10, 11):
            logits = model.decode_step(torch.tensor([token, token]), state)
        tgt = torch.tensor([[BOS_ID, 10, 11]] * 2)
        full = model(src, tgt)[:, -1]
    heads, d_k = model.cfg.heads, model.cfg.d_model // model.cfg.heads
    for cache in state.layers:  # attention reads fp32 on a CPU: converted once, not at every step
        k, v = cache.append(torch.zeros(2, 2 * heads, 1, d_k))  # one more position: views of what is stored
        for stored in (cache.cross_k, cache.cross_v, k[:, :, :3], v[:, :, :3]):
            assert stored.dtype == torch.float32
            assert torch.equal(stored, stored.bfloat16().float())  # exactly the bf16 projections
    assert torch.allclose(F.softmax(logits.float(), -1), F.softmax(full.float(), -1), atol=0.02)


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_cpu_dropout_drops_at_rate_p_and_scales_kept_values_exactly(p):
    torch.manual_seed(0)
    x = torch.rand(400, 250) + 0.5  # 100,000 values, none zero
    out = Dropout(p).train()(x)

    kept = out != 0
    # The kept fraction is binomial: within 5 standard deviations of 1 - p.
    assert abs(kept.float().mean().item() - (1 - p)) < 5 * (p * (1 - p) / x.numel()) ** 0.5
    torch.testing.assert_close(out[kept], x[kept] * (65536 / (65536 - round(p * 65536))), rtol=0, atol=0)


def test_cpu_dropout_gradient_is_the_same_mask_and_scale():
    x = torch.randn(61, 33, requires_grad=True)  # not a multiple of four values
    weights = torch.randn(61, 33)
    out = Dropout(0.2).train()(x)
    (out * weights).sum().backward()
    scale = 1 / (1 - round(0.2 * 65536) / 65536)
    torch.testing.assert_close(x.grad, (out != 0) * weights * scale)


def test_cpu_dropout_masks_follow_torch_seed_and_eval_is_identity():
    x = torch.ones(1000)
    torch.manual_seed(3)
    first = Dropout(0.5).train()(x)
    torch.manual_seed(3)
    again = Dropout(0.5).train()(x)
    assert torch.equal(first, again) and not torch.equal(first, Dropout(0.5).train()(x))
    assert torch.equal(Dropout(0.5).eval()(x), x) and torch.equal(Dropout(0.0).train()(x), x)
    assert torch.equal(Dropout(1.0).train()(x), torch.zeros(1000))


def test_tied_weights_stay_one_tensor_when_moved_to_the_cpu():
    """A GPU model's .cpu() copies each name separately; weights_on_cpu keeps tied names on one copy.
    `clone` stands in for the GPU-to-CPU copy."""
    from mtkit.model.files import weights_on_cpu

    model = tiny_model(vocab=12)
    state = model.state_dict()
    tied = [name for name in state if state[name].data_ptr() == model.tgt_embed.tokens.weight.data_ptr()]
    assert len(tied) >= 2  # source, target and output embeddings are one matrix with a joint vocabulary
    moved = weights_on_cpu(state, move=lambda t: t.detach().clone())
    assert len({moved[name].data_ptr() for name in tied}) == 1
    assert moved[tied[0]].data_ptr() != state[tied[0]].data_ptr()  # really copied
    assert all(torch.equal(moved[name], state[name]) for name in state)


@pytest.mark.parametrize("beams", [1, 3])
def test_cache_follows_many_reorders_past_its_capacity(beams):
    """More steps than the cache's first capacity (so it grows), a random reordering of the rows
    after each, a sentence dropping out on the way: every step's logits equal a full forward pass
    over each row's own history."""
    model = tiny_model(vocab=20)
    generator = torch.Generator().manual_seed(0)
    src = torch.tensor([[5, 6, 7, EOS_ID], [9, EOS_ID, PAD_ID, PAD_ID], [4, 8, EOS_ID, PAD_ID]])
    memory, src_mask = model.encode(src)
    state = model.start_decoding(memory, src_mask, beams=beams)
    sentence_of_row = torch.arange(3).repeat_interleave(beams)
    histories = torch.full((3 * beams, 1), BOS_ID)
    for step in range(CACHE_CHUNK + 8):
        logits = model.decode_step(histories[:, -1], state)
        full = model(src[sentence_of_row], histories)[:, -1]
        assert torch.allclose(logits, full, atol=1e-5), step
        sentences = None  # all sentences stay
        if step == 20:  # the middle sentence finishes
            sentences = torch.tensor([0, 2]) if beams > 1 else None
            rows = torch.tensor([0, 2]) if beams == 1 else torch.tensor([0, 1, 2, 6, 7, 8])
        else:
            rows = torch.arange(sentence_of_row.numel())
        # each row continues from a random beam of its own sentence
        rows = (rows // beams) * beams + torch.randint(0, beams, (rows.numel(),), generator=generator)
        state.select(rows, sentences)
        new_tokens = torch.randint(4, 20, (rows.numel(), 1), generator=generator)
        histories = torch.cat([histories[rows], new_tokens], dim=1)
        sentence_of_row = sentence_of_row[rows]


def scoring_5_7_9(vocab: int = 12) -> tuple[Transformer, Transformer]:
    """The same weights twice: scoring every id, and (output_vocab = target) only 5, 7, 9, <unk>, </s>."""
    everything = tiny_model(vocab=vocab, seed=4)
    target = tiny_model(vocab=vocab, seed=4, output_vocab="target")
    target.output.set_vocab(torch.tensor([9, 5, 7, 5]))
    assert torch.equal(target.tgt_embed.tokens.weight, everything.tgt_embed.tokens.weight)
    return everything, target


def test_a_target_vocab_model_scores_its_ids_as_the_full_model_and_no_others():
    everything, target = scoring_5_7_9()
    assert target.output.ids().tolist() == [UNK_ID, EOS_ID, 5, 7, 9]
    src, tgt_in = torch.randint(4, 12, (2, 5)), torch.randint(4, 12, (2, 4))
    with torch.no_grad():
        full, restricted = everything(src, tgt_in), target(src, tgt_in)
        hidden = target.decode(tgt_in, *target.encode(src))
        torch.testing.assert_close(target.output.scored_logits(hidden), full[..., [1, 3, 5, 7, 9]])
    scored = torch.zeros(12, dtype=torch.bool)
    scored[[1, 3, 5, 7, 9]] = True
    torch.testing.assert_close(restricted[..., scored], full[..., scored])
    assert bool((restricted[..., ~scored] == float("-inf")).all())
    state = target.start_decoding(*target.encode(src))
    step = target.decode_step(tgt_in[:, 0], state)
    torch.testing.assert_close(step, restricted[:, 0])


def test_target_ids_map_to_their_columns_and_unscored_ids_to_unk():
    _, target = scoring_5_7_9()
    columns = target.output.positions(torch.tensor([5, 7, 9, EOS_ID, UNK_ID, 6, 11, 4]))
    assert columns.tolist() == [2, 3, 4, 1, 0, 0, 0, 0]
    assert tiny_model(vocab=12).output.positions(torch.tensor([5, 11])).tolist() == [5, 11]


def test_the_scored_ids_are_weights_a_model_file_keeps():
    _, target = scoring_5_7_9()
    assert target.output.ids().tolist() == [1, 3, 5, 7, 9]  # computed once before loading
    fresh = tiny_model(vocab=12, seed=0, output_vocab="target")
    assert fresh.output.ids().tolist() == list(range(12))  # until set, every id
    fresh.load_state_dict(target.state_dict())
    assert fresh.output.ids().tolist() == [1, 3, 5, 7, 9]
    assert "output.mask" not in tiny_model(vocab=12).state_dict()


@pytest.mark.parametrize(("activation", "function"), [("relu", F.relu), ("swish", F.silu), ("gelu", F.gelu)])
def test_the_ffn_applies_its_activation(activation, function):
    model = tiny_model(vocab=12, activation=activation)
    ffn = model.encoder_layers[0].ffn
    x = torch.randn(2, 3, model.cfg.d_model)
    torch.testing.assert_close(ffn(x), ffn.fc2(function(ffn.fc1(x))))


def test_the_output_bias_adds_to_the_scored_logits_only():
    _, target = scoring_5_7_9()
    biased = tiny_model(vocab=12, seed=4, output_vocab="target", output_bias=True)
    biased.load_state_dict({**target.state_dict(), "output.bias": torch.arange(12.0)})
    hidden = torch.randn(2, 3, target.cfg.d_model)
    with torch.no_grad():
        plain, shifted = target.logits(hidden), biased.logits(hidden)
    scored = [1, 3, 5, 7, 9]
    torch.testing.assert_close(shifted[..., scored], plain[..., scored] + torch.tensor(scored, dtype=torch.float))
    assert bool((shifted[..., [0, 2, 4]] == float("-inf")).all())


def test_weights_saved_with_the_mask_under_its_old_name_load():
    _, target = scoring_5_7_9()
    old = {("output_mask" if name == "output.mask" else name): w for name, w in target.state_dict().items()}
    fresh = tiny_model(vocab=12, seed=0, output_vocab="target")
    fresh.load_state_dict(old)
    assert fresh.output.ids().tolist() == [1, 3, 5, 7, 9]


def test_incremental_decoding_past_the_first_position_table_equals_full_forward():
    """300 target positions: the sinusoid table (256 to start with) grows during decoding."""
    model = tiny_model(vocab=20, norm="pre")
    torch.manual_seed(6)
    src = torch.tensor([[5, 6, 7, EOS_ID]])
    tgt = torch.cat([torch.tensor([[BOS_ID]]), torch.randint(4, 20, (1, 299))], dim=1)
    memory, src_mask = model.encode(src)
    state = model.start_decoding(memory, src_mask)
    assert model.tgt_embed.positions.size(0) == 256
    steps = [model.decode_step(tgt[:, t], state) for t in range(300)]
    assert model.tgt_embed.positions.size(0) > 300  # grown by decoding itself
    assert torch.allclose(torch.stack(steps, dim=1), model(src, tgt), atol=1e-5)
