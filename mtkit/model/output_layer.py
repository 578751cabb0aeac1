"""The output layer: decoder states -> logits over the target vocabulary.

The projection is the target embedding's matrix (tie_embeddings, the paper's choice) or a matrix of
its own, with a bias on the logits where model.output_bias asks for one (MarianMT's). With `output_vocab: target` it scores only the ids in its mask, which training sets to the
ids of the training data's target side (<unk> and </s> always): the other ids get -inf, and training
computes the scored columns only. A joint vocabulary's source-only ids then cost nothing.

For inference, mtkit.model.packed may set `scored` to a copy of the scored rows in another form (packed for
oneDNN, or cast to bf16), which then computes the scored logits.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mtkit.text.tokenizer import EOS_ID, UNK_ID


class OutputLayer(nn.Module):
    def __init__(self, d_model: int, vocab_size: int, tied: nn.Embedding | None, restricted: bool, bias: bool = False):
        """tied: the embedding whose matrix projects (None: a matrix of its own); restricted:
        output_vocab = target (score the ids in the mask only); bias: a bias on the logits."""
        super().__init__()
        self.vocab_size = vocab_size
        self._tied = (tied,) if tied is not None else ()  # a tuple: the embedding is not a second child
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model)) if tied is None else None
        if self.weight is not None:  # as nn.Linear draws it: the model's later draws stay those of its seed
            nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        self.bias = nn.Parameter(torch.zeros(vocab_size)) if bias else None
        self.register_buffer("mask", torch.ones(vocab_size, dtype=torch.bool) if restricted else None)
        self.scored: nn.Module | None = None  # an inference copy of inference_weight() (mtkit.model.packed)
        self._ids_cache: tuple | None = None

    def projection(self) -> Tensor:
        """The (V, d) matrix: the tied embedding's or this layer's own."""
        return self._tied[0].weight if self._tied else self.weight

    def set_vocab(self, ids: Tensor) -> None:
        """Score only these target ids (<unk> and </s> always)."""
        mask = torch.zeros_like(self.mask)
        mask[ids.to(mask.device)] = True
        mask[[UNK_ID, EOS_ID]] = True
        self.mask.copy_(mask)

    def ids(self) -> Tensor | None:
        """The ids this layer scores, in order; None when it scores the whole vocabulary."""
        if self.mask is None:
            return None
        return self._mask_ids()[0]

    def _mask_ids(self) -> tuple[Tensor, Tensor]:
        """The mask's scored ids and unscored ids, computed once per mask (loading weights bumps its version)."""
        key = (self.mask._version, self.mask.device)
        if self._ids_cache is None or self._ids_cache[0] != key:
            self._ids_cache = (key, self.mask.nonzero().squeeze(1), (~self.mask).nonzero().squeeze(1))
        return self._ids_cache[1:]

    def masks_in_place(self) -> bool:
        """Whether inference scores every row and sets the few unscored ids' logits to -inf in place
        (an imported model leaves out only <s>): cheaper than writing every scored logit into a
        row of -inf, which is what a vocabulary with many unscored ids takes."""
        ids = self.ids()
        return ids is not None and (self.vocab_size - ids.numel()) * 100 <= self.vocab_size

    def inference_weight(self) -> tuple[Tensor, Tensor | None]:
        """The rows (and bias) an inference copy holds: every row where masks_in_place(), else ids()'."""
        if self.masks_in_place():
            return self.projection(), self.bias
        return self.scored_weight(), self.scored_bias()

    def scored_weight(self) -> Tensor:
        """The projection's rows for ids() (all rows when it scores every id)."""
        ids = self.ids()
        return self.projection() if ids is None else self.projection()[ids]

    def scored_bias(self) -> Tensor | None:
        """The bias of ids() (None without one)."""
        ids = self.ids()
        return self.bias if self.bias is None or ids is None else self.bias[ids]

    def positions(self, target: Tensor) -> Tensor:
        """Target ids -> their columns in scored_logits; an id this layer does not score (in valid
        data only: the training data's target side defines the set) counts as <unk>."""
        ids = self.ids()
        if ids is None:
            return target
        columns = torch.searchsorted(ids, target).clamp_(max=ids.numel() - 1)
        unk = torch.searchsorted(ids, torch.tensor(UNK_ID, device=ids.device))
        return torch.where(ids[columns] == target, columns, unk)

    def scored_logits(self, hidden: Tensor) -> Tensor:
        """(..., d) -> (..., len(ids())): the scored ids' logits only (what training needs)."""
        if self.scored is not None and not self.masks_in_place():
            return self.scored(hidden)
        return F.linear(hidden, self.scored_weight(), self.scored_bias())

    def forward(self, hidden: Tensor) -> Tensor:
        """(..., d) -> (..., V); softmax of these gives the output distribution (-inf on the ids
        outside ids())."""
        ids = self.ids()
        if self.scored is not None and self.masks_in_place():
            return self.scored(hidden).index_fill_(-1, self._mask_ids()[1], float("-inf"))
        scored = self.scored_logits(hidden)
        if ids is None:
            return scored
        full = scored.new_full((*scored.shape[:-1], self.vocab_size), float("-inf"))
        return full.index_copy_(-1, ids, scored)


def export_logit_bias(weights: dict[str, Tensor], vocab_size: int) -> Tensor | None:
    """For exporters: the (V,) bias of a model file's output layer (0 without model.output_bias),
    -inf on the ids it does not score (output_vocab = target); None when it has no bias and scores
    every id."""
    mask, bias = weights.get("output.mask"), weights.get("output.bias")
    if mask is None and bias is None:
        return None
    out = bias.float().clone() if bias is not None else torch.zeros(vocab_size)
    return out if mask is None else out.masked_fill_(~mask, float("-inf"))


def rename_old_keys(weights: dict[str, Tensor], prefix: str = "") -> None:
    """Model files written before the output layer was a module hold its mask as `output_mask`."""
    if prefix + "output_mask" in weights:
        weights[prefix + "output.mask"] = weights.pop(prefix + "output_mask")
