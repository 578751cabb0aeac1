"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), written from the paper.

Shapes: B batch, S source length, T target length, d model width, h heads, d_k = d / h.
Masks are boolean and True where a query may look (what scaled_dot_product_attention expects):
the source mask is (B, 1, 1, S); decoder self-attention uses the kernel's causal mask.

Departures from the paper, all options: `norm: pre` puts LayerNorm before each sub-layer and
adds a final LayerNorm (trains more stably); `tie_embeddings` shares the target embedding
with the output projection (and with the source embedding when the vocabulary is joint);
`output_vocab: target` has the output layer score only the ids the training data's target
side holds (mtkit.model.output_layer).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mtkit.core.config import ModelConfig
from mtkit.data.sentence_packing import PackedLayout
from mtkit.model.kernels import Dropout, attend
from mtkit.model.kv_cache import DecoderState, LayerCache
from mtkit.model.output_layer import OutputLayer, rename_old_keys
from mtkit.text.tokenizer import PAD_ID


def sinusoidal_positions(length: int, d_model: int) -> Tensor:
    """PE[pos, 2j] = sin(pos / 10000^(2j/d)), PE[pos, 2j+1] = cos(pos / 10000^(2j/d)); (length, d)."""
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    two_j = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = position / 10000.0 ** (two_j / d_model)  # (length, ceil(d/2))
    encoding = torch.zeros(length, d_model, dtype=torch.float64)
    encoding[:, 0::2] = torch.sin(angle)
    encoding[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return encoding.float()


FAIRSEQ_FIRST_POSITION = 2  # fairseq counts positions from its padding id (1) + 1


def fairseq_positions(length: int, d_model: int) -> Tensor:
    """fairseq's SinusoidalPositionalEmbedding (NLLB's, M2M100's) at positions 2 .. length + 1:
    sin(pos * f_j) for j < d/2, then cos(pos * f_j), f_j = 10000^(-j / (d/2 - 1)); computed in float32
    as fairseq computes it, so that an imported model's table is its own to the last bit."""
    half = d_model // 2
    frequencies = torch.exp(torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1)))
    position = torch.arange(FAIRSEQ_FIRST_POSITION, FAIRSEQ_FIRST_POSITION + length, dtype=torch.int64).float()
    angle = position[:, None] * frequencies[None, :]
    encoding = torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)
    return torch.cat([encoding, torch.zeros(length, d_model % 2)], dim=1)


POSITION_TABLES = {"sinusoidal": sinusoidal_positions, "fairseq": fairseq_positions}


class Embedding(nn.Module):
    """Learned subword vectors scaled by sqrt(d), plus sinusoidal positions (model.positions'), then dropout."""

    def __init__(self, vocab_size: int, d_model: int, dropout: float, positions: str = "sinusoidal"):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model, padding_idx=PAD_ID)
        nn.init.normal_(self.tokens.weight, mean=0.0, std=d_model**-0.5)
        nn.init.zeros_(self.tokens.weight[PAD_ID])
        self.scale = math.sqrt(d_model)
        self.dropout = Dropout(dropout)
        self.table = POSITION_TABLES[positions]
        if torch.get_default_device().type == "meta":  # for a model file's weights: make_tables() fills it
            self.register_buffer("positions", torch.empty(256, d_model), persistent=False)
        else:
            self.register_buffer("positions", self.table(256, d_model), persistent=False)

    def cover(self, length: int) -> None:
        """Extend the position table to at least `length` positions (sinusoids extend to any length)."""
        if length > self.positions.size(0):
            self.positions = self.table(2 * length, self.positions.size(1)).to(self.positions.device)

    def forward(self, ids: Tensor, start: int = 0, positions: Tensor | None = None) -> Tensor:
        """ids (B, L) at positions start.. start + L - 1; or at `positions` (B, L): packed rows'
        (each below L), or positions the caller covered (cover())."""
        end = start + ids.size(1)
        self.cover(end)
        encoding = self.positions[positions] if positions is not None else self.positions[start:end]
        return self.dropout(self.tokens(ids) * self.scale + encoding)


def split_heads(x: Tensor, heads: int) -> Tensor:
    batch, length, width = x.shape
    return x.view(batch, length, heads, width // heads).transpose(1, 2)  # (B, h, L, d_k)


def merge_heads(x: Tensor) -> Tensor:
    batch, heads, length, d_k = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * d_k)  # (B, L, d)


class MultiHeadAttention(nn.Module):
    """h heads in parallel: W_q, W_k, W_v per head (stored as one d x d matrix each), then W_o."""

    def __init__(self, d_model: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.kv_proj = nn.Linear(d_model, 2 * d_model)  # W_k and W_v side by side
        self.out_proj = nn.Linear(d_model, d_model)
        self.keep_weights = False  # set by mtkit.inspect to record attention weights
        self.weights: Tensor | None = None

    def packed_keys_values(self, x: Tensor) -> Tensor:
        """(B, 2h, L, d_k): the h key heads, then the h value heads (W_k and W_v side by side)."""
        return split_heads(self.kv_proj(x), 2 * self.heads)

    def keys_values(self, x: Tensor) -> tuple[Tensor, Tensor]:
        kv = self.packed_keys_values(x)
        return kv[:, : self.heads], kv[:, self.heads :]  # (B, h, L, d_k) each

    def forward(
        self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, is_causal: bool = False, group: int = 1
    ) -> Tensor:
        """group > 1: x holds `group` consecutive rows (beams) per row of k and v, one position each;
        they attend as `group` queries of that one row, so k and v are never copied per beam."""
        q = split_heads(self.q_proj(x), self.heads)  # (B, h, Lq, d_k)
        if group > 1:  # (B*g, h, 1, d_k) -> (B, h, g, d_k)
            rows, heads, _, d_k = q.shape
            q = q.view(rows // group, group, heads, d_k).transpose(1, 2)
        out, weights = attend(q, k, v, mask, is_causal, self.dropout, self.training, self.keep_weights)
        if self.keep_weights:
            self.weights = weights
        if group > 1:  # back to (B*g, h, 1, d_k)
            out = out.transpose(1, 2).reshape(-1, out.size(1), 1, out.size(3))
        return self.out_proj(merge_heads(out))


ACTIVATIONS = {"relu": F.relu, "swish": F.silu, "gelu": F.gelu}


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, with dropout on the activation (model.activation: ReLU,
    the paper's, or swish or GELU in its place)."""

    def __init__(self, d_model: int, ffn_dim: int, activation_dropout: float, activation: str = "relu"):
        super().__init__()
        self.fc1 = nn.Linear(d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, d_model)
        self.dropout = Dropout(activation_dropout)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.dropout(self.activation(self.fc1(x))))


class SubLayer(nn.Module):
    """Residual connection and LayerNorm around a sub-layer: post-norm LN(x + f(x)) or pre-norm x + f(LN(x))."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(self, x: Tensor, sublayer) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        pre = cfg.norm == "pre"
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation_dropout, cfg.activation)
        self.attn_block = SubLayer(cfg.d_model, cfg.dropout, pre)
        self.ffn_block = SubLayer(cfg.d_model, cfg.dropout, pre)

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        x = self.attn_block(x, lambda h: self.self_attn(h, *self.self_attn.keys_values(h), mask=src_mask))
        return self.ffn_block(x, self.ffn)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        pre = cfg.norm == "pre"
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation_dropout, cfg.activation)
        self.self_block = SubLayer(cfg.d_model, cfg.dropout, pre)
        self.cross_block = SubLayer(cfg.d_model, cfg.dropout, pre)
        self.ffn_block = SubLayer(cfg.d_model, cfg.dropout, pre)

    def forward(
        self,
        x: Tensor,
        memory_kv: tuple[Tensor, Tensor],
        src_mask: Tensor,
        cache: LayerCache | None = None,
        beams: int = 1,
        self_mask: Tensor | None = None,
    ) -> Tensor:
        """beams: rows of x per row of memory_kv (incremental decoding: the beams of a sentence);
        self_mask: True where a position may attend: (rows, 1, 1, cached positions) with a cache,
        (rows, 1, T, T) in teacher forcing over packed rows (else the causal mask)."""
        x = self.self_block(x, lambda h: self._self_attend(h, cache, self_mask))
        x = self.cross_block(x, lambda h: self.cross_attn(h, *memory_kv, mask=src_mask, group=beams))
        return self.ffn_block(x, self.ffn)

    def _self_attend(self, h: Tensor, cache: LayerCache | None, self_mask: Tensor | None = None) -> Tensor:
        if cache is None:
            # Teacher forcing: padding sits after the last real token, so the causal mask alone
            # keeps every real query away from padded keys; no padding mask is needed.
            return self.self_attn(h, *self.self_attn.keys_values(h), mask=self_mask, is_causal=self_mask is None)
        # One new position, which may see every cached one; the cache keeps the packed layout.
        k, v = cache.append(self.self_attn.packed_keys_values(h))
        return self.self_attn(h, k, v, mask=self_mask)


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.tgt_embed = Embedding(cfg.tgt_vocab_size, cfg.d_model, cfg.dropout, cfg.positions)
        share_src = cfg.tie_embeddings and cfg.joint_vocab
        if share_src:
            self.src_embed = self.tgt_embed
        else:
            self.src_embed = Embedding(cfg.src_vocab_size, cfg.d_model, cfg.dropout, cfg.positions)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        pre = cfg.norm == "pre"
        self.encoder_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        tied = self.tgt_embed.tokens if cfg.tie_embeddings else None
        restricted = cfg.output_vocab == "target"
        self.output = OutputLayer(cfg.d_model, cfg.tgt_vocab_size, tied, restricted, bias=cfg.output_bias)
        self._init_linear_layers()
        self._register_load_state_dict_pre_hook(lambda state, prefix, *_: rename_old_keys(state, prefix))

    def _init_linear_layers(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, OutputLayer) and module.weight is not None:
                nn.init.xavier_uniform_(module.weight)

    def make_tables(self) -> None:
        """Compute the tables that are not weights (the positions): for a model built on the meta device."""
        for embed in {self.src_embed, self.tgt_embed}:
            embed.positions = embed.table(256, self.cfg.d_model)

    def encode(self, src: Tensor, layout: PackedLayout | None = None) -> tuple[Tensor, Tensor]:
        """src (B, S) ids -> memory (B, S, d) and source mask (B, 1, 1, S), True on real tokens;
        packed rows (see mtkit.data.sentence_packing): the mask keeps each sentence to itself, (B, 1, S, S)."""
        if layout is None:
            src_mask, x = (src != PAD_ID)[:, None, None, :], self.src_embed(src)
        else:
            src_mask, x = layout.encoder_mask(), self.src_embed(src, positions=layout.src_positions)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return self.encoder_norm(x), src_mask

    def decode(self, tgt_in: Tensor, memory: Tensor, src_mask: Tensor, layout: PackedLayout | None = None) -> Tensor:
        """Teacher forcing: tgt_in (B, T) starting with <s> -> hidden states (B, T, d)."""
        if layout is None:
            x, self_mask = self.tgt_embed(tgt_in), None
        else:  # packed rows: each target sentence sees itself and its own source
            x, self_mask = self.tgt_embed(tgt_in, positions=layout.tgt_positions), layout.decoder_mask()
            src_mask = layout.cross_mask()
        for layer in self.decoder_layers:
            x = layer(x, layer.cross_attn.keys_values(memory), src_mask, self_mask=self_mask)
        return self.decoder_norm(x)

    def logits(self, hidden: Tensor) -> Tensor:
        """(..., d) -> (..., V): the output layer (see mtkit.model.output_layer)."""
        return self.output(hidden)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        memory, src_mask = self.encode(src)
        return self.logits(self.decode(tgt_in, memory, src_mask))

    def start_decoding(self, memory: Tensor, src_mask: Tensor, beams: int = 1) -> DecoderState:
        """Compute every layer's cross-attention keys/values once per sentence; decoding then
        feeds `beams` consecutive rows per sentence."""
        layers = [LayerCache(*layer.cross_attn.keys_values(memory)) for layer in self.decoder_layers]
        return DecoderState(layers, src_mask, beams)

    @torch.no_grad()  # inference only: the cache is written in place
    def decode_step(self, tokens: Tensor, state: DecoderState) -> Tensor:
        """Feed one token per row (B,) at position state.step; returns next-token logits (B, V)."""
        positions = state.positions()
        if isinstance(positions, Tensor):  # each row at its own position, none past state.step
            self.tgt_embed.cover(state.step + 1)
            x = self.tgt_embed(tokens[:, None], positions=positions[:, None])
        else:
            x = self.tgt_embed(tokens[:, None], start=positions)
        self_mask = state.self_attention_mask()
        for layer, cache in zip(self.decoder_layers, state.layers):
            x = layer(x, (cache.cross_k, cache.cross_v), state.src_mask, cache, state.beams, self_mask)
        state.step += 1
        return self.logits(self.decoder_norm(x[:, 0]))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
