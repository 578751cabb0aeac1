"""The training loss: label-smoothed cross-entropy (Szegedy et al., 2016), with the plain NLL beside it.

With smoothing epsilon over a vocabulary of V, the target distribution is (1 - epsilon) on the
reference token plus epsilon / V on every token (the definition of torch's cross_entropy), so
per position

    loss = (1 - epsilon) * nll + epsilon * smooth,   nll = -log p(reference),   smooth = -mean_v log p(v)

and the gradient with respect to the logits is softmax - (1 - epsilon) * onehot - epsilon / V.
On a CPU the vocabulary projection's softmax is the largest cost after the matrix products;
this computes the loss, the NLL and that gradient from one softmax, which is about 2.5 times as
fast as torch's cross_entropy followed by a separate logsumexp for the NLL.

R-Drop (Liang et al., 2021; train.rdrop_alpha): each batch goes through the model twice with
different dropout masks (as one batch of two copies), and the loss adds the symmetric KL divergence
between the two output distributions, per position

    loss = (ce_1 + ce_2) / 2 + alpha / 4 * (KL(p_1 || p_2) + KL(p_2 || p_1))

which is the paper's loss (eq. 3) halved, so that one position still weighs one token; the NLL
reported is the mean of the two.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mtkit.model import Transformer
from mtkit.tokenizer import PAD_ID


def _softmax_and_sums(logits32: Tensor, target: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Softmax, log-sum-exp per row, and the summed nll and smooth terms, from one pass of exp."""
    probs = torch.softmax(logits32, dim=-1)
    # The largest probability is exp(max - lse), and being at least 1/V it never underflows.
    lse = logits32.amax(dim=-1) - probs.amax(dim=-1).log()
    nll = (lse - logits32.gather(1, target[:, None]).squeeze(1)).sum()
    smooth = (lse - logits32.mean(dim=-1)).sum()
    return probs, lse, nll, smooth


class _LabelSmoothedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
        probs, _, nll, smooth = _softmax_and_sums(logits.float(), target)
        ctx.save_for_backward(probs, target)
        ctx.epsilon, ctx.logits_dtype = epsilon, logits.dtype
        ctx.mark_non_differentiable(nll)
        return (1.0 - epsilon) * nll + epsilon * smooth, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor, None, None]:
        probs, target = ctx.saved_tensors
        # The gradient is built in the probabilities' memory: nothing needs them afterwards, and a
        # second backward through this graph fails autograd's in-place check instead of going wrong.
        grad = probs.sub_(ctx.epsilon / probs.size(-1))
        grad.scatter_add_(1, target[:, None], grad.new_full((target.numel(), 1), ctx.epsilon - 1.0))
        grad.mul_(grad_loss)
        return grad.to(ctx.logits_dtype), None, None


def label_smoothed_loss(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy (the training loss) and summed NLL (for reporting, no
    gradient) over (N, V) logits and (N,) reference ids; both in fp32 whatever the logits' dtype."""
    return _LabelSmoothedCrossEntropy.apply(logits, target, epsilon)


class _RDropLoss(torch.autograd.Function):
    """R-Drop's loss over (2N, V) logits, the first N rows from one pass and the rest from the other,
    from one softmax as above; the symmetric KL uses log p - log q = logits_p - logits_q - (lse_p - lse_q)."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float, alpha: float) -> tuple[Tensor, Tensor]:
        n, logits32 = target.numel(), logits.float()
        probs, lse, nll, smooth = _softmax_and_sums(logits32, torch.cat([target, target]))
        log_ratio = logits32[:n] - logits32[n:]  # log p - log q, row by row
        log_ratio -= (lse[:n] - lse[n:])[:, None]
        p, q = probs[:n], probs[n:]
        kl = torch.dot(p.reshape(-1), log_ratio.reshape(-1)) - torch.dot(q.reshape(-1), log_ratio.reshape(-1))
        ctx.save_for_backward(probs, log_ratio, target)
        ctx.epsilon, ctx.alpha, ctx.logits_dtype = epsilon, alpha, logits.dtype
        mean_nll = nll / 2
        ctx.mark_non_differentiable(mean_nll)
        return ((1.0 - epsilon) * nll + epsilon * smooth) / 2 + alpha / 4 * kl, mean_nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor, None, None, None]:
        probs, log_ratio, target = ctx.saved_tensors
        n, a = target.numel(), ctx.alpha / 4
        p, q = probs[:n], probs[n:]
        # With r = log p - log q: dKL/dlogits_p = p * (r - <p, r>) + p - q and
        # dKL/dlogits_q = q * (<q, r> - r) + q - p; the cross-entropies add (softmax - target) / 2.
        p_r, q_r = (p * log_ratio).sum(-1, keepdim=True), (q * log_ratio).sum(-1, keepdim=True)
        scaled = log_ratio.mul_(a)
        grad_p = (scaled - a * p_r).add_(0.5 + a).mul_(p).sub_(q, alpha=a)
        grad_q = (a * q_r - scaled).add_(0.5 + a).mul_(q).sub_(p, alpha=a)
        grad = torch.cat([grad_p, grad_q]).sub_(0.5 * ctx.epsilon / probs.size(-1))
        grad.scatter_add_(1, torch.cat([target, target])[:, None], grad.new_full((2 * n, 1), 0.5 * (ctx.epsilon - 1.0)))
        grad.mul_(grad_loss)
        return grad.to(ctx.logits_dtype), None, None, None


def rdrop_loss(logits: Tensor, target: Tensor, epsilon: float, alpha: float) -> tuple[Tensor, Tensor]:
    """R-Drop's loss (the module docstring) and the mean NLL of the two passes, summed over positions:
    `logits` (2N, V) holds one pass's N positions, then the other's, both for the (N,) `target`."""
    return _RDropLoss.apply(logits, target, epsilon, alpha)


class TrainingObjective(nn.Module):
    """Teacher-forced loss of a batch; the unit that DistributedDataParallel wraps. With rdrop_alpha
    > 0, in training mode, the R-Drop loss of the module docstring."""

    def __init__(self, model: Transformer, label_smoothing: float, rdrop_alpha: float = 0.0):
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing
        self.rdrop_alpha = rdrop_alpha

    def forward(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> tuple[Tensor, Tensor]:
        real = tgt_out != PAD_ID  # only real positions reach the vocabulary projection
        if self.rdrop_alpha > 0 and self.training:  # two copies in one batch: each draws its own dropout masks
            hidden = self._decode(torch.cat([src, src]), torch.cat([tgt_in, tgt_in]))
            logits = self.model.logits(hidden[torch.cat([real, real])])  # one copy's positions, then the other's
            return rdrop_loss(logits, tgt_out[real], self.label_smoothing, self.rdrop_alpha)
        logits = self.model.logits(self._decode(src, tgt_in)[real])
        return label_smoothed_loss(logits, tgt_out[real], self.label_smoothing)

    def _decode(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        memory, src_mask = self.model.encode(src)
        return self.model.decode(tgt_in, memory, src_mask)
