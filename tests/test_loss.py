import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

import mtkit.training.loss
from mtkit.text.tokenizer import PAD_ID, UNK_ID
from mtkit.training.loss import TrainingObjective, label_smoothed_loss, symmetric_kl


def reference(logits, target, epsilon):
    """torch's own label-smoothed cross-entropy and NLL."""
    loss = F.cross_entropy(logits.double(), target, label_smoothing=epsilon, reduction="sum")
    nll = F.cross_entropy(logits.double(), target, reduction="sum")
    return loss, nll


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("rows_per_chunk", [1, 5, None])  # 5: 7 chunks of 5 rows, then 2; None: one chunk
def test_loss_nll_and_gradient_equal_torch_cross_entropy(epsilon, rows_per_chunk, monkeypatch):
    if rows_per_chunk:
        monkeypatch.setattr(mtkit.training.loss, "CHUNK_ELEMENTS", rows_per_chunk * 53)
    torch.manual_seed(0)
    logits = (3 * torch.randn(37, 53)).requires_grad_()
    target = torch.randint(0, 53, (37,))
    weight = 0.37  # the trainer scales the summed loss by 1 / target tokens

    loss, nll = label_smoothed_loss(logits, target, epsilon)
    (weight * loss).backward()
    expected_logits = logits.detach().double().requires_grad_()
    expected_loss, expected_nll = reference(expected_logits, target, epsilon)
    (weight * expected_loss).backward()

    assert loss.dtype == nll.dtype == torch.float32
    torch.testing.assert_close(loss.double(), expected_loss, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(nll.double(), expected_nll, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(logits.grad.double(), expected_logits.grad, rtol=1e-4, atol=1e-6)
    assert not nll.requires_grad


def test_gradient_matches_central_differences():
    torch.manual_seed(1)
    logits = torch.randn(6, 11, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 11, (6,))
    label_smoothed_loss(logits, target, 0.2)[0].backward()

    numerical = torch.zeros_like(logits)
    for index in range(logits.numel()):
        step = torch.zeros(logits.numel(), dtype=torch.float64)
        step[index] = 1e-2
        step = step.view_as(logits)
        plus = label_smoothed_loss(logits.detach() + step, target, 0.2)[0]
        minus = label_smoothed_loss(logits.detach() - step, target, 0.2)[0]
        numerical.view(-1)[index] = (plus - minus) / 2e-2
    torch.testing.assert_close(logits.grad, numerical, rtol=0, atol=1e-3)


@pytest.mark.parametrize("rows_per_chunk", [3, None])  # 3: 6 chunks of 3 rows, then 2; None: one chunk (as on a GPU)
def test_bf16_logits_get_a_bf16_gradient_of_the_fp32_loss(rows_per_chunk, monkeypatch):
    if rows_per_chunk:
        monkeypatch.setattr(mtkit.training.loss, "CHUNK_ELEMENTS", rows_per_chunk * 30)
    torch.manual_seed(2)
    logits = torch.randn(20, 30).bfloat16().requires_grad_()
    target = torch.randint(0, 30, (20,))

    loss, _ = label_smoothed_loss(logits, target, 0.1)
    loss.backward()
    expected_logits = logits.detach().float().requires_grad_()
    expected, _ = reference(expected_logits, target, 0.1)
    expected.backward()

    assert loss.dtype == torch.float32 and logits.grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss.double(), expected, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(logits.grad.float(), expected_logits.grad, rtol=1e-2, atol=1e-3)


def test_without_autograd_the_loss_and_nll_are_the_same(monkeypatch):
    """Validation runs under no_grad, where no gradient is computed: the values must not change."""
    monkeypatch.setattr(mtkit.training.loss, "CHUNK_ELEMENTS", 4 * 30)
    torch.manual_seed(3)
    logits = torch.randn(21, 30).bfloat16()
    target = torch.randint(0, 30, (21,))
    with torch.no_grad():
        without = label_smoothed_loss(logits, target, 0.1)
    with_grad = label_smoothed_loss(logits.clone().requires_grad_(), target, 0.1)
    assert [float(v) for v in without] == [float(v.detach()) for v in with_grad]


def test_no_positions_give_zero_loss():
    logits = torch.randn(0, 9, requires_grad=True)
    loss, nll = label_smoothed_loss(logits, torch.zeros(0, dtype=torch.long), 0.1)
    loss.backward()
    assert loss.item() == 0.0 and nll.item() == 0.0 and logits.grad.shape == (0, 9)


def torch_symmetric_kl(logits_p, logits_q):
    log_p, log_q = F.log_softmax(logits_p.double(), -1), F.log_softmax(logits_q.double(), -1)
    return F.kl_div(log_q, log_p, log_target=True, reduction="sum") + F.kl_div(
        log_p, log_q, log_target=True, reduction="sum"
    )


@given(
    rows=st.integers(0, 6),
    vocab=st.integers(2, 9),
    seed=st.integers(0, 2**16),
    scale=st.floats(0.1, 8.0),
)
@settings(max_examples=40, deadline=None)
def test_symmetric_kl_and_its_gradient_equal_torch_kl_div(rows, vocab, seed, scale):
    generator = torch.Generator().manual_seed(seed)
    p, q = (t.clone().requires_grad_() for t in scale * torch.randn(2, rows, vocab, generator=generator))
    expected_p, expected_q = p.detach().double().requires_grad_(), q.detach().double().requires_grad_()

    kl = symmetric_kl(p, q)
    kl.backward()
    expected = torch_symmetric_kl(expected_p, expected_q)
    expected.backward()

    torch.testing.assert_close(kl.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(p.grad.double(), expected_p.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(q.grad.double(), expected_q.grad, rtol=1e-4, atol=1e-5)
    assert symmetric_kl(p, p).item() == 0.0


def a_batch(vocab=30):
    generator = torch.Generator().manual_seed(3)
    src = torch.randint(4, vocab, (3, 7), generator=generator)
    tgt_in, tgt_out = torch.randint(4, vocab, (2, 3, 6), generator=generator).unbind(0)
    tgt_out[0, 4:] = PAD_ID  # a shorter sentence
    return src, tgt_in, tgt_out


def loss_and_gradient(objective, batch, seed=0):
    torch.manual_seed(seed)
    objective.model.zero_grad()
    loss, nll = objective(*batch)
    loss.backward()
    return loss.detach(), nll, {name: p.grad.clone() for name, p in objective.model.named_parameters()}


def test_rdrop_without_dropout_is_the_plain_loss():
    """Two passes without dropout are the same pass: the KL term is zero and the loss, the NLL and
    the gradient are the plain objective's."""
    model = tiny_model(vocab=30, dropout=0.0).train()
    plain = loss_and_gradient(TrainingObjective(model, 0.1), a_batch())
    rdrop = loss_and_gradient(TrainingObjective(model, 0.1, rdrop_alpha=5.0), a_batch())
    torch.testing.assert_close(rdrop[0], plain[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rdrop[1], plain[1], rtol=1e-5, atol=1e-5)
    for name, grad in plain[2].items():
        torch.testing.assert_close(rdrop[2][name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_rdrop_loss_equals_the_papers_formula_with_the_same_dropout_masks():
    """With dropout, the loss is (ce_1 + ce_2) / 2 + alpha / 4 * (KL(p1||p2) + KL(p2||p1)), computed
    here with torch's own functions from the same two passes (the same seed draws the same masks)."""
    model = tiny_model(vocab=30, dropout=0.3).train()
    src, tgt_in, tgt_out = a_batch()
    loss, nll, _ = loss_and_gradient(TrainingObjective(model, 0.1, rdrop_alpha=2.5), (src, tgt_in, tgt_out), seed=7)

    torch.manual_seed(7)
    memory, src_mask = model.encode(torch.cat([src, src]))
    hidden = model.decode(torch.cat([tgt_in, tgt_in]), memory, src_mask)
    logits = model.logits(hidden).detach().double()
    first, second = logits[:3][tgt_out != PAD_ID], logits[3:][tgt_out != PAD_ID]
    target = tgt_out[tgt_out != PAD_ID]
    ce = [F.cross_entropy(half, target, label_smoothing=0.1, reduction="sum") for half in (first, second)]
    nlls = [F.cross_entropy(half, target, reduction="sum") for half in (first, second)]
    expected = (ce[0] + ce[1]) / 2 + 2.5 / 4 * torch_symmetric_kl(first, second)

    assert torch_symmetric_kl(first, second) > 1e-3  # the two passes did differ
    torch.testing.assert_close(loss.double(), expected, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(nll.double(), (nlls[0] + nlls[1]) / 2, rtol=1e-5, atol=1e-4)


def test_rdrop_runs_two_passes_only_while_the_model_trains():
    """The batch is doubled in training mode only; in eval mode (no dropout) the objective is the
    plain one, whatever rdrop_alpha says."""
    model = tiny_model(vocab=30, dropout=0.3)
    rows_encoded = []
    encode = model.encode
    model.encode = lambda src, layout=None: rows_encoded.append(src.size(0)) or encode(src, layout)
    objective = TrainingObjective(model, 0.1, rdrop_alpha=5.0)
    model.train()
    objective(*a_batch())
    model.eval()
    rdrop = objective(*a_batch())
    plain = TrainingObjective(model, 0.1)(*a_batch())
    assert rows_encoded == [6, 3, 3]
    assert torch.equal(plain[0], rdrop[0]) and torch.equal(plain[1], rdrop[1])


def test_with_output_vocab_target_the_loss_smooths_over_the_scored_ids_only():
    """The objective of a model scoring 8 of 30 ids is torch's label-smoothed cross-entropy over
    those 8 columns of the full model's logits; a reference id outside them counts as <unk>."""
    model = tiny_model(vocab=30, dropout=0.0, output_vocab="target").train()
    src, tgt_in, tgt_out = a_batch()
    real = tgt_out != PAD_ID
    references = tgt_out[real]
    model.output.set_vocab(references[references != references[0]].unique())  # all but the first one's
    ids = model.output.ids()
    loss, nll, _ = loss_and_gradient(TrainingObjective(model, 0.1), (src, tgt_in, tgt_out))

    hidden = model.decode(tgt_in, *model.encode(src))
    logits = torch.nn.functional.linear(hidden, model.tgt_embed.tokens.weight)[real][:, ids].detach().double()
    columns = torch.tensor([(ids == t).nonzero().item() if t in ids else 0 for t in references.tolist()])
    assert columns[0] == 0 and ids[0] == UNK_ID  # the first reference id counts as <unk>
    expected = F.cross_entropy(logits, columns, label_smoothing=0.1, reduction="sum")
    torch.testing.assert_close(loss.double(), expected, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(nll.double(), F.cross_entropy(logits, columns, reduction="sum"), rtol=1e-5, atol=1e-4)
