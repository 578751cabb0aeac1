import pytest
import torch
import torch.nn.functional as F

from mtkit.loss import label_smoothed_loss


def reference(logits, target, epsilon):
    """torch's own label-smoothed cross-entropy and NLL."""
    loss = F.cross_entropy(logits.double(), target, label_smoothing=epsilon, reduction="sum")
    nll = F.cross_entropy(logits.double(), target, reduction="sum")
    return loss, nll


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_loss_nll_and_gradient_equal_torch_cross_entropy(epsilon):
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


def test_bf16_logits_get_a_bf16_gradient_of_the_fp32_loss():
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


def test_no_positions_give_zero_loss():
    logits = torch.randn(0, 9, requires_grad=True)
    loss, nll = label_smoothed_loss(logits, torch.zeros(0, dtype=torch.long), 0.1)
    loss.backward()
    assert loss.item() == 0.0 and nll.item() == 0.0 and logits.grad.shape == (0, 9)
