"""Ensembles: several models that decode together, each step averaging their log-probabilities.

An Ensemble offers the decoding interface of one Transformer (encode, start_decoding, decode_step),
so greedy and beam search run on it unchanged; each model keeps its own encoder output and KV cache.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mtkit.core.errors import MtkitError
from mtkit.model.files import ModelFile
from mtkit.model.kv_cache import DecoderState
from mtkit.model.transformer import Transformer


class EnsembleMemory:
    """The encoder outputs of every model."""

    def __init__(self, memories: list[Tensor]):
        self.memories = memories


class EnsembleState:
    """Every model's decoder state, reordered together."""

    def __init__(self, states: list[DecoderState]):
        self.states = states

    def select(self, index: Tensor, sentences: Tensor | None = None) -> None:
        for state in self.states:
            state.select(index, sentences)


class Ensemble(nn.Module):
    def __init__(self, models: Sequence[Transformer]):
        super().__init__()
        self.models = nn.ModuleList(models)

    def encode(self, src: Tensor) -> tuple[EnsembleMemory, Tensor]:
        encoded = [model.encode(src) for model in self.models]
        return EnsembleMemory([memory for memory, _ in encoded]), encoded[0][1]  # the mask depends on src only

    def start_decoding(self, memory: EnsembleMemory, src_mask: Tensor, beams: int = 1) -> EnsembleState:
        return EnsembleState([m.start_decoding(mem, src_mask, beams) for m, mem in zip(self.models, memory.memories)])

    def decode_step(self, tokens: Tensor, state: EnsembleState) -> Tensor:
        """The mean of the models' next-token log-probabilities (B, V); the search normalises it again."""
        lprobs = [F.log_softmax(m.decode_step(tokens, s).float(), dim=-1) for m, s in zip(self.models, state.states)]
        return torch.stack(lprobs).mean(dim=0)


def check_compatible(model_files: Sequence[ModelFile], names: Sequence[str]) -> None:
    """An ensemble's models must read and write the same subwords: the same source and target tokenizers."""
    first = model_files[0]
    for model_file, name in zip(model_files[1:], names[1:]):
        if (model_file.src_tokenizer.sha256, model_file.tgt_tokenizer.sha256) != (
            first.src_tokenizer.sha256,
            first.tgt_tokenizer.sha256,
        ):
            raise MtkitError(
                f"{name}: its tokenizers differ from {names[0]}'s; an ensemble needs the same vocabularies"
            )
