"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), written from the paper.

Shapes: B batch, S source length, T target length, d model width, h heads, d_k = d / h.
Masks are boolean and True where a query may look (what scaled_dot_product_attention expects):
the source mask is (B, 1, 1, S); decoder self-attention uses the kernel's causal mask.

Departures from the paper, all options: `norm: pre` puts LayerNorm before each sub-layer and
adds a final LayerNorm (trains more stably); `tie_embeddings` shares the target embedding
with the output projection (and with the source embedding when the vocabulary is joint);
`output_vocab: target` has the output projection score only the ids the training data's target
side holds (a joint vocabulary's source-only ids are then never predicted and cost nothing).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mtkit.config import ModelConfig
from mtkit.tokenizer import EOS_ID, PAD_ID, UNK_ID


def sinusoidal_positions(length: int, d_model: int) -> Tensor:
    """PE[pos, 2j] = sin(pos / 10000^(2j/d)), PE[pos, 2j+1] = cos(pos / 10000^(2j/d)); (length, d)."""
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    two_j = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = position / 10000.0 ** (two_j / d_model)  # (length, ceil(d/2))
    encoding = torch.zeros(length, d_model, dtype=torch.float64)
    encoding[:, 0::2] = torch.sin(angle)
    encoding[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return encoding.float()


class Dropout(nn.Dropout):
    """nn.Dropout with a cheaper mask on a CPU, where torch draws one Bernoulli number per element
    (about a tenth of a 2-core training step). Here each 64-bit draw decides four elements with 16
    bits each, so p is rounded to a multiple of 1/65536 and kept values are scaled by exactly
    1 / (1 - that p). Other devices use torch's own kernel."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0 or x.device.type != "cpu":
            return super().forward(x)
        return cpu_dropout(x, self.p)


def cpu_dropout(x: Tensor, p: float) -> Tensor:
    dropped = round(p * 65536)  # of the 65,536 values a 16-bit lane can take
    if dropped >= 65536:
        return x * 0.0
    bits = torch.empty((x.numel() + 3) // 4, dtype=torch.int64).random_(-(2**63), None)  # all 64 bits uniform
    keep = bits.view(torch.int16)[: x.numel()].view(x.shape) >= dropped - 32768
    return x * keep * (65536 / (65536 - dropped))


class Embedding(nn.Module):
    """Learned subword vectors scaled by sqrt(d), plus sinusoidal positions, then dropout."""

    def __init__(self, vocab_size: int, d_model: int, dropout: float):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model, padding_idx=PAD_ID)
        nn.init.normal_(self.tokens.weight, mean=0.0, std=d_model**-0.5)
        nn.init.zeros_(self.tokens.weight[PAD_ID])
        self.scale = math.sqrt(d_model)
        self.dropout = Dropout(dropout)
        self.register_buffer("positions", sinusoidal_positions(256, d_model), persistent=False)

    def forward(self, ids: Tensor, start: int | Tensor = 0) -> Tensor:
        """ids (B, L) at positions start.. start + L - 1; or, with start a (B,) tensor, one id per
        row (L = 1) at each row's own position."""
        end = (int(start.max()) if isinstance(start, Tensor) else start) + ids.size(1)
        if end > self.positions.size(0):  # sinusoids extend to any length: no position limit
            self.positions = sinusoidal_positions(2 * end, self.positions.size(1)).to(self.positions.device)
        positions = self.positions[start][:, None] if isinstance(start, Tensor) else self.positions[start:end]
        return self.dropout(self.tokens(ids) * self.scale + positions)


def split_heads(x: Tensor, heads: int) -> Tensor:
    batch, length, width = x.shape
    return x.view(batch, length, heads, width // heads).transpose(1, 2)  # (B, h, L, d_k)


def merge_heads(x: Tensor) -> Tensor:
    batch, heads, length, d_k = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * d_k)  # (B, L, d)


def attention_with_weights(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool
) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(d_k) + B) V, returning the weights too (slow path, for inspection)."""
    weights = masked_scores(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), mask, is_causal).softmax(dim=-1)
    return weights @ v, weights


def masked_scores(scores: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
    """(B, h, Lq, Lk) scores with -inf where a query may not look: past the causal diagonal (aligned
    at the last key) and where mask is False."""
    if is_causal:
        causal = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril(
            scores.size(-1) - scores.size(-2)
        )
        scores = scores.masked_fill(~causal, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores


def matmul_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, dropout: float) -> Tensor:
    """softmax(Q K^T / sqrt(d_k) + B) V as two batched matrix products in q's dtype around an fp32
    softmax (attention as "eager" implementations compute it under autocast). For training on a CPU
    under bf16 autocast: with sentence-length sequences, forward and backward take about half the
    time of the flash kernel in fp32 (docs/RESULTS.md, "Measured design choices"). CPU tensors only (its dropout is cpu_dropout)."""
    scores = (q @ k.transpose(-2, -1)).float() * q.size(-1) ** -0.5  # (B, h, Lq, Lk)
    weights = masked_scores(scores, mask, is_causal).softmax(dim=-1)
    if dropout > 0:
        weights = cpu_dropout(weights, dropout)
    return weights.to(v.dtype) @ v


def _bf16_training_on_cpu(q: Tensor, training: bool) -> bool:
    """Whether attention takes matmul_attention: training under CPU bf16 autocast. Evaluation and
    decoding keep the kernel, whose incremental steps (one query per row) it serves well."""
    return training and q.device.type == "cpu" and q.dtype == torch.bfloat16 and torch.is_autocast_enabled("cpu")


def _fp32_attention_on_cpu(q: Tensor) -> contextlib.AbstractContextManager:
    """Under CPU autocast, run the attention kernel in fp32: torch's CPU kernels are about 5x slower
    in bf16 (measured here with AVX-512 bf16), while the projections around them keep the speed-up."""
    if q.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        return torch.autocast("cpu", enabled=False)
    return contextlib.nullcontext()


def attention_dtype(x: Tensor) -> torch.dtype:
    """What attention computes in: fp32 on a CPU (see _fp32_attention_on_cpu), x's dtype elsewhere."""
    return torch.float32 if x.device.type == "cpu" else x.dtype


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
        if self.keep_weights:
            out, self.weights = attention_with_weights(q, k, v, mask, is_causal)
        elif _bf16_training_on_cpu(q, self.training):
            out = matmul_attention(q, k, v, mask, is_causal, self.dropout)
        else:
            dropout = self.dropout if self.training else 0.0
            with _fp32_attention_on_cpu(q):
                q, k, v = (t.to(attention_dtype(t)) for t in (q, k, v))
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal)
        if group > 1:  # back to (B*g, h, 1, d_k)
            out = out.transpose(1, 2).reshape(-1, out.size(1), 1, out.size(3))
        return self.out_proj(merge_heads(out))


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, with dropout on the activation."""

    def __init__(self, d_model: int, ffn_dim: int, activation_dropout: float):
        super().__init__()
        self.fc1 = nn.Linear(d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, d_model)
        self.dropout = Dropout(activation_dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.dropout(F.relu(self.fc1(x))))


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
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation_dropout)
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
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation_dropout)
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
        self_mask: (rows, 1, 1, cached positions), True on the positions a row may attend to."""
        x = self.self_block(x, lambda h: self._self_attend(h, cache, self_mask))
        x = self.cross_block(x, lambda h: self.cross_attn(h, *memory_kv, mask=src_mask, group=beams))
        return self.ffn_block(x, self.ffn)

    def _self_attend(self, h: Tensor, cache: LayerCache | None, self_mask: Tensor | None = None) -> Tensor:
        if cache is None:
            # Teacher forcing: padding sits after the last real token, so the causal mask alone
            # keeps every real query away from padded keys; no padding mask is needed.
            return self.self_attn(h, *self.self_attn.keys_values(h), is_causal=True)
        # One new position, which may see every cached one; the cache keeps the packed layout.
        k, v = cache.append(self.self_attn.packed_keys_values(h))
        return self.self_attn(h, k, v, mask=self_mask)


CACHE_CHUNK = 32  # decoder positions a self-attention cache grows by


class LayerCache:
    """One decoder layer's keys and values: self-attention grows per step and has a row per beam;
    cross-attention is fixed and has a row per sentence (every beam of a sentence reads the same).

    Self-attention keys and values live in one (rows, 2h, capacity, d_k) buffer, k heads then v
    heads, with room for CACHE_CHUNK more positions. Beam reordering gathers the filled positions
    into a second buffer of the same size and swaps the two: one copy per step (a concatenation
    and a gather before), and no new allocation until the capacity is used up.
    """

    def __init__(self, cross_k: Tensor, cross_v: Tensor):
        # Kept in attention's dtype: under CPU autocast, converted once rather than at every step.
        self.cross_k, self.cross_v = (t.to(attention_dtype(t)) for t in (cross_k, cross_v))
        self.length = 0
        self._buffers: list[Tensor] = []  # [current, spare]; the current rows are the first `rows`
        self.rows = 0

    def append(self, kv: Tensor) -> tuple[Tensor, Tensor]:
        """Store one position's (rows, 2h, 1, d_k) keys and values; returns all keys and values
        so far as (rows, h, length, d_k) views."""
        rows, heads2, _, d_k = kv.shape
        if not self._buffers or self.length == self._buffers[0].size(2):
            self._grow(rows, heads2, d_k, kv)
        self.rows = rows
        current = self._buffers[0][:rows]
        current[:, :, self.length] = kv[:, :, 0]
        self.length += 1
        filled = current[:, :, : self.length]
        return filled[:, : heads2 // 2], filled[:, heads2 // 2 :]

    def _grow(self, rows: int, heads2: int, d_k: int, like: Tensor) -> None:
        capacity = self.length + CACHE_CHUNK
        fresh = [like.new_empty(rows, heads2, capacity, d_k, dtype=attention_dtype(like)) for _ in range(2)]
        if self._buffers:
            fresh[0][:, :, : self.length] = self._buffers[0][:rows, :, : self.length]
        self._buffers = fresh

    def select(self, rows: Tensor, sentences: Tensor | None, drop: int = 0) -> None:
        """Keep `rows` (and the cross-attention rows of `sentences`), and drop the first `drop`
        positions, which no kept row attends to."""
        if sentences is not None:
            self.cross_k, self.cross_v = (
                self.cross_k.index_select(0, sentences),
                self.cross_v.index_select(0, sentences),
            )
        if self.length:
            current, spare = self._buffers
            if rows.numel() > spare.size(0):  # more rows than ever before (not in beam search)
                spare = current.new_empty(rows.numel(), *current.shape[1:])
            filled = current[: self.rows, :, drop : self.length]
            torch.index_select(filled, 0, rows, out=spare[: rows.numel(), :, : self.length - drop])
            self._buffers = [spare, current]
            self.rows = rows.numel()
            self.length -= drop

    def join(self, other: LayerCache, new_rows: int) -> None:
        """Append the sentences of a fresh cache (no positions yet) and their `new_rows` rows; the
        new rows' earlier positions are zeros (their self-attention mask hides them)."""
        self.cross_k, self.cross_v = (
            torch.cat(pad_to_common_length([mine, theirs], dim=2))
            for mine, theirs in ((self.cross_k, other.cross_k), (self.cross_v, other.cross_v))
        )
        if not self.length:
            return
        current = self._buffers[0]
        rows = self.rows + new_rows
        if rows > current.size(0):  # room for half as many rows again: joins come one after another
            grown = [current.new_empty(rows + rows // 2, *current.shape[1:]) for _ in range(2)]
            grown[0][: self.rows, :, : self.length] = current[: self.rows, :, : self.length]
            self._buffers, current = grown, grown[0]
        current[self.rows : rows, :, : self.length] = 0
        self.rows = rows


def pad_to_common_length(tensors: list[Tensor], dim: int, value: float | bool = 0) -> list[Tensor]:
    """Pad each tensor at the end of `dim` to the longest one's size there."""
    longest = max(t.size(dim) for t in tensors)
    padded = []
    for t in tensors:
        shape = list(t.shape)
        shape[dim] = longest - t.size(dim)
        padded.append(torch.cat([t, t.new_full(shape, value)], dim=dim) if shape[dim] else t)
    return padded


@dataclass
class DecoderState:
    """What incremental decoding carries between steps: `beams` consecutive rows per sentence."""

    layers: list[LayerCache]
    src_mask: Tensor  # (sentences, 1, 1, S)
    beams: int = 1
    step: int = 0  # cached positions: where the next token goes
    starts: Tensor | None = None  # (sentences,) the cached position where each sentence began; None: all at 0

    def select(self, rows: Tensor, sentences: Tensor | None = None) -> None:
        """Keep/reorder rows (beam reordering, dropping finished sentences). With one beam, rows
        are sentences; with more, `sentences` are the kept sentences (None: all, in order).
        Positions before every kept sentence's start are dropped from the cache."""
        sentences = rows if self.beams == 1 else sentences
        drop = 0
        if sentences is not None and self.starts is not None:
            self.starts = self.starts.index_select(0, sentences)
            drop = int(self.starts.min())
            self.starts -= drop
            self.step -= drop
        for layer in self.layers:
            layer.select(rows, sentences, drop)
        if sentences is not None:
            self.src_mask = self.src_mask.index_select(0, sentences)

    def join(self, other: DecoderState) -> None:
        """Append the sentences of a fresh state (start_decoding, same beams): they decode from
        the next step on, each at its own positions, alongside the sentences already here."""
        sentences = self.src_mask.size(0)
        new_sentences = other.src_mask.size(0)
        for mine, theirs in zip(self.layers, other.layers):
            mine.join(theirs, new_sentences * self.beams)
        self.src_mask = torch.cat(pad_to_common_length([self.src_mask, other.src_mask], dim=3, value=False))
        starts = self.starts if self.starts is not None else self.src_mask.new_zeros(sentences, dtype=torch.long)
        self.starts = torch.cat([starts, starts.new_full((new_sentences,), self.step)])

    def positions(self) -> int | Tensor:
        """The position of each row's next token: an int when every sentence began together."""
        if self.starts is None:
            return self.step
        return (self.step - self.starts).repeat_interleave(self.beams)

    def self_attention_mask(self) -> Tensor | None:
        """(rows, 1, 1, step + 1): which cached positions (this step's included) each row may see."""
        if self.starts is None:
            return None
        visible = torch.arange(self.step + 1, device=self.starts.device)[None, :] >= self.starts[:, None]
        return visible.repeat_interleave(self.beams, dim=0)[:, None, None, :]


def unscored_logit_bias(weights: dict[str, Tensor], cfg: ModelConfig) -> Tensor | None:
    """For exports: a (V,) bias for the output layer, -inf on the ids a model with
    output_vocab = target does not score (0 elsewhere); None when it scores every id."""
    if cfg.output_vocab == "all":
        return None
    return torch.zeros(cfg.tgt_vocab_size).masked_fill_(~weights["output_mask"], float("-inf"))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.tgt_embed = Embedding(cfg.tgt_vocab_size, cfg.d_model, cfg.dropout)
        share_src = cfg.tie_embeddings and cfg.joint_vocab
        self.src_embed = self.tgt_embed if share_src else Embedding(cfg.src_vocab_size, cfg.d_model, cfg.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        pre = cfg.norm == "pre"
        self.encoder_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        # None: the tied embedding projects. Otherwise a Linear over the whole vocabulary (trained),
        # or over output_ids() only (an inference copy, see mtkit.packed).
        self.output = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=False)
        if cfg.output_vocab == "target":  # which ids the output layer scores (see set_output_vocab)
            self.register_buffer("output_mask", torch.ones(cfg.tgt_vocab_size, dtype=torch.bool))
        self._output_ids_cache: tuple | None = None
        self._init_linear_layers()

    def _init_linear_layers(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src (B, S) ids -> memory (B, S, d) and source mask (B, 1, 1, S), True on real tokens."""
        src_mask = (src != PAD_ID)[:, None, None, :]
        x = self.src_embed(src)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return self.encoder_norm(x), src_mask

    def decode(self, tgt_in: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
        """Teacher forcing: tgt_in (B, T) starting with <s> -> hidden states (B, T, d)."""
        x = self.tgt_embed(tgt_in)
        for layer in self.decoder_layers:
            x = layer(x, layer.cross_attn.keys_values(memory), src_mask)
        return self.decoder_norm(x)

    def scored_output_weight(self) -> Tensor:
        """The output projection's rows for output_ids() (all rows when it scores every id)."""
        weight = self.tgt_embed.tokens.weight if self.output is None else self.output.weight
        ids = self.output_ids()
        return weight if ids is None else weight[ids]

    def set_output_vocab(self, ids: Tensor) -> None:
        """With model.output_vocab = target: score only these target ids (<unk> and </s> always)."""
        mask = torch.zeros_like(self.output_mask)
        mask[ids.to(mask.device)] = True
        mask[[UNK_ID, EOS_ID]] = True
        self.output_mask.copy_(mask)

    def output_ids(self) -> Tensor | None:
        """The ids the output layer scores, in order; None when it scores the whole vocabulary."""
        if self.cfg.output_vocab == "all":
            return None
        key = (self.output_mask._version, self.output_mask.device)  # loading weights bumps the version
        if self._output_ids_cache is None or self._output_ids_cache[0] != key:
            self._output_ids_cache = (key, self.output_mask.nonzero().squeeze(1))
        return self._output_ids_cache[1]

    def output_positions(self, target: Tensor) -> Tensor:
        """Target ids -> their columns in output_logits; an id the output layer does not score
        (in valid data only: the training data's target side defines the set) counts as <unk>."""
        ids = self.output_ids()
        if ids is None:
            return target
        columns = torch.searchsorted(ids, target).clamp_(max=ids.numel() - 1)
        unk = torch.searchsorted(ids, torch.tensor(UNK_ID, device=ids.device))
        return torch.where(ids[columns] == target, columns, unk)

    def output_logits(self, hidden: Tensor) -> Tensor:
        """(..., d) -> (..., len(output_ids())): the scored ids' logits only (what training needs)."""
        ids = self.output_ids()
        scored = self.cfg.tgt_vocab_size if ids is None else ids.numel()
        if self.output is not None and self.output.out_features == scored:
            return self.output(hidden)
        return F.linear(hidden, self.scored_output_weight())

    def logits(self, hidden: Tensor) -> Tensor:
        """(..., d) -> (..., V); softmax of these gives the output distribution (-inf on the ids
        outside output_ids())."""
        ids = self.output_ids()
        scored = self.output_logits(hidden)
        if ids is None:
            return scored
        full = scored.new_full((*scored.shape[:-1], self.cfg.tgt_vocab_size), float("-inf"))
        return full.index_copy_(-1, ids, scored)

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
        x = self.tgt_embed(tokens[:, None], start=state.positions())
        self_mask = state.self_attention_mask()
        for layer, cache in zip(self.decoder_layers, state.layers):
            x = layer(x, (cache.cross_k, cache.cross_v), state.src_mask, cache, state.beams, self_mask)
        state.step += 1
        return self.logits(self.decoder_norm(x[:, 0]))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
