"""The training loss: label-smoothed cross-entropy (Szegedy et al., 2016), with the plain NLL beside it.

With smoothing epsilon over a vocabulary of V, the target distribution is (1 - epsilon) on the
reference token plus epsilon / V on every token (the definition of torch's cross_entropy), so
per position

    loss = (1 - epsilon) * nll + epsilon * smooth,   nll = -log p(reference),   smooth = -mean_v log p(v)

and the gradient with respect to the logits is softmax - (1 - epsilon) * onehot - epsilon / V.
On a CPU the vocabulary projection's softmax is one of the larger costs after the matrix products;
this computes the loss, the NLL and that gradient from one softmax, a chunk of rows at a time,
and keeps only the gradient for the backward pass.

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

from mtkit.core.config import TrainConfig
from mtkit.core.errors import MtkitError
from mtkit.data.sentence_packing import PackedLayout
from mtkit.model.transformer import Transformer
from mtkit.text.tokenizer import PAD_ID

CHUNK_ELEMENTS = 1 << 17  # logits per chunk of rows: 512 KiB in fp32, which stays in a core's L2 cache


def _rows_per_chunk(logits: Tensor) -> int:
    """On a CPU a few rows at a time, so that every pass over a chunk reads the cache, not memory;
    on a GPU all rows at once, one kernel per pass."""
    if logits.device.type != "cpu":
        return max(1, logits.size(0))
    return max(1, CHUNK_ELEMENTS // max(1, logits.size(1)))


class _LabelSmoothedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
        rows, vocab = logits.shape
        step = _rows_per_chunk(logits)
        # In chunks, the (N, V) array is written once, as the gradient in the logits' dtype. In one
        # chunk the gradient stays in fp32, in the probabilities' memory, until it is scaled (fp16's
        # loss scale would otherwise flush the small ones); the empty one is for no rows or no gradient.
        wants_grad = ctx.needs_input_grad[0]  # not in validation, which needs only the NLL
        chunked = wants_grad and step < rows
        grad = torch.empty_like(logits) if chunked else logits.new_zeros((0, vocab), dtype=torch.float32)
        nll, smooth = logits.new_zeros(2, dtype=torch.float32).unbind()
        for start in range(0, rows, step):
            x, t = logits[start : start + step].float(), target[start : start + step, None]
            top = x.amax(dim=-1, keepdim=True)
            probs = torch.sub(x, top).exp_()
            total = probs.sum(dim=-1, keepdim=True)
            lse = top + total.log()
            nll += (lse - x.gather(1, t)).sum()
            smooth += (lse.squeeze(1) - x.mean(dim=-1)).sum()
            if not wants_grad:
                continue
            # The gradient of the summed loss: softmax - (1 - epsilon) * onehot - epsilon / V.
            probs.mul_(total.reciprocal_()).scatter_add_(1, t, probs.new_full(t.shape, epsilon - 1.0))
            if chunked:
                torch.sub(probs, epsilon / vocab, out=grad[start : start + step])
            else:
                grad = probs.sub_(epsilon / vocab)
        ctx.save_for_backward(grad)
        ctx.logits_dtype = logits.dtype
        ctx.mark_non_differentiable(nll)
        return (1.0 - epsilon) * nll + epsilon * smooth, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor, None, None]:
        (grad,) = ctx.saved_tensors
        # Scaled in place: nothing else holds it, and a second backward through this graph fails
        # autograd's in-place check instead of going wrong.
        return grad.mul_(grad_loss).to(ctx.logits_dtype), None, None


def label_smoothed_loss(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy (the training loss) and summed NLL (for reporting, no
    gradient) over (N, V) logits and (N,) reference ids; both in fp32 whatever the logits' dtype."""
    return _LabelSmoothedCrossEntropy.apply(logits, target, epsilon)


def fused_label_smoothed_loss(
    logits: Tensor, target: Tensor, epsilon: float, weights: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """label_smoothed_loss in plain differentiable operations, for torch.compile to fuse into one
    pass over the logits (forward) and one for their gradient (backward). weights (N,): each row's
    (1 for real positions, 0 for padding), so that the shapes do not depend on the data."""
    x = logits.float()
    lse = torch.logsumexp(x, dim=-1)
    nll, smooth = lse - x.gather(1, target[:, None]).squeeze(1), lse - x.mean(dim=-1)
    if weights is not None:
        nll, smooth = nll * weights, smooth * weights
    nll, smooth = nll.sum(), smooth.sum()
    return (1.0 - epsilon) * nll + epsilon * smooth, nll.detach()


def symmetric_kl(logits_p: Tensor, logits_q: Tensor) -> Tensor:
    """Summed KL(p || q) + KL(q || p) over rows of (N, V) logits, in fp32:
    sum_v (p_v - q_v) * (log p_v - log q_v)."""
    log_p, log_q = torch.log_softmax(logits_p.float(), dim=-1), torch.log_softmax(logits_q.float(), dim=-1)
    return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum()


class TrainingObjective(nn.Module):
    """Teacher-forced loss of a batch; the unit that DistributedDataParallel wraps. With rdrop_alpha
    > 0, while the model is in training mode, the R-Drop loss of the module docstring. fused: the
    loss in plain operations (fused_label_smoothed_loss), for a compiled objective; over packed rows
    it then scores every position, padding weighted 0, so that no shape depends on the data."""

    def __init__(self, model: Transformer, label_smoothing: float, rdrop_alpha: float = 0.0, fused: bool = False):
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing
        self.rdrop_alpha = rdrop_alpha
        self.fused = fused
        self.loss = fused_label_smoothed_loss if fused else label_smoothed_loss

    def forward(
        self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, layout: PackedLayout | None = None
    ) -> tuple[Tensor, Tensor]:
        rdrop = self.rdrop_alpha > 0 and self.model.training  # the model's mode: the trainer sets that one
        if rdrop:  # two copies in one batch: each row draws its own dropout masks
            src, tgt_in, tgt_out = (torch.cat([t, t]) for t in (src, tgt_in, tgt_out))
        memory, src_mask = self.model.encode(src, layout)
        hidden = self.model.decode(tgt_in, memory, src_mask, layout)
        real = tgt_out != PAD_ID
        if self.fused and layout is not None:
            logits = self.model.output.scored_logits(hidden.flatten(0, 1))
            target = self.model.output.positions(tgt_out.flatten())
            return fused_label_smoothed_loss(logits, target, self.label_smoothing, real.flatten().float())
        # Only real positions reach the vocabulary projection, and only its scored columns.
        logits = self.model.output.scored_logits(hidden[real])
        loss, nll = self.loss(logits, self.model.output.positions(tgt_out[real]), self.label_smoothing)
        if not rdrop:
            return loss, nll
        first, second = logits.chunk(2)  # the copies' real positions, in the same order
        return loss / 2 + self.rdrop_alpha / 4 * symmetric_kl(first, second), nll / 2


def compile_objective(objective: nn.Module, cfg: TrainConfig, backend: str, device: torch.device) -> nn.Module:
    """torch.compile for train.compile: padded batches each have their own (B, S, T), so for symbolic
    sizes at once; packed rows have one shape, compiled as it is, and with train.cuda_graphs replayed
    as CUDA graphs (the host then launches one graph instead of every kernel)."""
    if not cfg.pack_length:
        return torch.compile(objective, dynamic=True, backend=backend)
    if cfg.cuda_graphs and device.type != "cuda":
        raise MtkitError(f"train.cuda_graphs needs a GPU (training on {device.type})")
    mode = "reduce-overhead" if cfg.cuda_graphs else None
    return torch.compile(objective, dynamic=False, backend=backend, mode=mode)
