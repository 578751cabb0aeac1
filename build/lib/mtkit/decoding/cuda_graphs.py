"""Decoding steps replayed as CUDA graphs (`translate --cuda-graphs`).

A decoding step of a batch of sentences is a few hundred short kernels per decoder stack; on a GPU
the host takes longer to launch them than the GPU takes to run them, so the search waits on the
host at every step (and bf16, with more kernels, is no faster than fp32). Captured once as a CUDA
graph, a step is one launch. A graph replays fixed shapes at fixed addresses, so the decoder's
state lives in static buffers (StepBuffers) of a few bucketed shapes:

- every layer's keys and values for `positions` cached positions, the new one written in place at
  the step's index, and self-attention over all of them with a mask (cached positions before a
  row's start or after the step are hidden);
- the cross-attention keys and values of `sentences` sentences, the source padded to `source`;
- sentences that finish are moved to the front (the search drops them); the rows after the live
  ones are computed and ignored, until few enough remain for a smaller bucket.

The search (mtkit.decoding.search, mtkit.decoding.beam) is the same for both: GraphedDecoder offers the decoding
interface of one Transformer, as mtkit.decoding.ensemble.Ensemble does. With capture off (CPUs, and the
tests) the same static steps run eagerly, so their translations can be compared with the dynamic
cache's (mtkit.model.kv_cache). One search at a time per GraphedDecoder: its states share the buffers.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from mtkit.core.errors import MtkitError
from mtkit.decoding.search_rules import MAX_POSITIONS
from mtkit.model.transformer import Transformer

SOURCE_BUCKET = 16  # source capacity: a multiple of this
POSITION_BUCKET = 64  # cached positions: a multiple of this, grown when a search reaches the end
MAX_SHAPES = 16  # buffers (and graphs) kept per decoder, least recently used dropped first: a capture
# costs a few eager steps, and a batch can pass through four sentence buckets as its sentences finish
WARMUP_STEPS = 2  # eager runs on a side stream before a capture, as torch's documentation advises


def check_device(device: torch.device) -> None:
    if device.type != "cuda":
        raise MtkitError(f"--cuda-graphs: CUDA graphs need a GPU (the device is {device.type})")


@dataclass(frozen=True)
class Shape:
    sentences: int
    beams: int
    source: int
    positions: int

    @staticmethod
    def covering(sentences: int, beams: int, source: int, positions: int) -> Shape:
        """The bucketed shape with room for these sizes."""
        return Shape(
            1 << max(0, sentences - 1).bit_length(),  # the next power of two
            beams,
            -(-source // SOURCE_BUCKET) * SOURCE_BUCKET,
            -(-positions // POSITION_BUCKET) * POSITION_BUCKET,
        )


class StaticLayerCache:
    """One layer's view of the static keys and values, with LayerCache's append (mtkit.model.kv_cache)."""

    def __init__(self, kv: Tensor, step: Tensor):
        self.kv, self.step = kv, step  # (rows, 2h, positions, d_k); the step's index, a 0-d tensor

    def append(self, kv: Tensor) -> tuple[Tensor, Tensor]:
        self.kv.index_copy_(2, self.step.view(1), kv.to(self.kv.dtype))
        heads = self.kv.size(1) // 2
        return self.kv[:, :heads], self.kv[:, heads:]


class StepBuffers:
    """The static state of one shape, its decoding step, and (once captured) the step's graph."""

    def __init__(self, model: Transformer, shape: Shape, device: torch.device, dtype: torch.dtype):
        cfg = model.cfg
        layers, heads, d_k = cfg.decoder_layers, cfg.heads, cfg.d_model // cfg.heads
        rows = shape.sentences * shape.beams
        self.model, self.shape = model, shape
        self.self_kv = torch.zeros(layers, rows, 2 * heads, shape.positions, d_k, device=device, dtype=dtype)
        self.cross_kv = torch.zeros(layers, 2, shape.sentences, heads, shape.source, d_k, device=device, dtype=dtype)
        self.src_mask = torch.zeros(shape.sentences, 1, 1, shape.source, dtype=torch.bool, device=device)
        self.src_mask[..., 0] = True  # rows past the live ones attend somewhere: no softmax over nothing
        self.tokens = torch.zeros(rows, dtype=torch.long, device=device)
        self.starts = torch.zeros(rows, dtype=torch.long, device=device)  # the position each row began at
        self.step = torch.zeros((), dtype=torch.long, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: Tensor | None = None
        self.position_table = model.tgt_embed.positions  # a graph reads it: kept alive should the model grow it

    def put_sources(self, first: int, cross_kv: Tensor, src_mask: Tensor) -> None:
        """Write sentences' cross-attention keys and values and source mask from sentence `first` on,
        their sources padded to the buffers' (masked)."""
        end, source = first + src_mask.size(0), src_mask.size(-1)
        self.cross_kv[:, :, first:end, :, :source] = cross_kv
        self.src_mask[first:end] = False
        self.src_mask[first:end, ..., :source] = src_mask

    @torch.no_grad()
    def compute(self) -> Tensor:
        """One decoding step of every row: the logits (rows, V)."""
        model, beams = self.model, self.shape.beams
        positions = torch.arange(self.shape.positions, device=self.step.device)
        self_mask = ((positions >= self.starts[:, None]) & (positions <= self.step))[:, None, None, :]
        # Rows past the live ones may hold a later start than the step: clamped, their lookup stays in the table.
        x = model.tgt_embed(self.tokens[:, None], positions=(self.step - self.starts).clamp(min=0)[:, None])
        for layer, kv, (cross_k, cross_v) in zip(model.decoder_layers, self.self_kv, self.cross_kv):
            x = layer(x, (cross_k, cross_v), self.src_mask, StaticLayerCache(kv, self.step), beams, self_mask)
        return model.logits(model.decoder_norm(x[:, 0]))

    def run(self, capture: bool, pool) -> Tensor:
        if not capture:
            return self.compute()
        if self.graph is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(WARMUP_STEPS):  # writes the same keys and values the replay writes
                    self.compute()
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, pool=pool, capture_error_mode="thread_local"):  # a server's other threads
                self.logits = self.compute()
        self.graph.replay()
        return self.logits


class GraphedDecoder(nn.Module):
    """A Transformer whose decoding steps run in static buffers, replayed as CUDA graphs with
    `capture` (a CUDA model only); encode() is the model's own. For inference only."""

    def __init__(self, model: Transformer, capture: bool):
        super().__init__()
        model.requires_grad_(False)  # autocast keeps no weight casts of its own then (none may outlive a graph)
        model.tgt_embed.cover(MAX_POSITIONS)  # every position a search reaches: the table never grows in a capture
        self.model, self.capture = model, capture
        self.buffers: OrderedDict[tuple, StepBuffers] = OrderedDict()
        self.pool = torch.cuda.graph_pool_handle() if capture else None

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return self.model.encode(src)

    def start_decoding(self, memory: Tensor, src_mask: Tensor, beams: int = 1) -> StaticState:
        fresh = self.model.start_decoding(memory, src_mask, beams)
        cross = torch.stack([torch.stack([layer.cross_k, layer.cross_v]) for layer in fresh.layers])
        return StaticState(self, beams, cross, src_mask)

    def decode_step(self, tokens: Tensor, state: StaticState) -> Tensor:
        """Feed one token per row (B,) at position state.step; returns next-token logits (B, V)."""
        return state.decode(tokens)

    def buffers_for(self, shape: Shape, like: Tensor) -> StepBuffers:
        key = (shape, torch.is_autocast_enabled(like.device.type), torch.get_autocast_dtype(like.device.type))
        if key not in self.buffers:
            if len(self.buffers) == MAX_SHAPES:
                self.buffers.popitem(last=False)
            self.buffers[key] = StepBuffers(self.model, shape, like.device, like.dtype)
        self.buffers.move_to_end(key)
        return self.buffers[key]


class StaticState:
    """DecoderState's interface (select, join, step) over a GraphedDecoder's static buffers: the live
    sentences are the first `sentences` of the buffers, their rows the first `sentences x beams`."""

    def __init__(self, decoder: GraphedDecoder, beams: int, cross_kv: Tensor, src_mask: Tensor):
        self.decoder, self.beams = decoder, beams
        self.sentences, self.step = src_mask.size(0), 0
        self.source = src_mask.size(-1)  # the longest live source
        self.buffers: StepBuffers | None = None
        self.pending: tuple[Tensor, Tensor] | None = (cross_kv, src_mask)  # not yet in buffers

    @property
    def rows(self) -> int:
        return self.sentences * self.beams

    def decode(self, tokens: Tensor) -> Tensor:
        self._make_room(self.step + 1)
        buffers = self.buffers
        buffers.tokens[: tokens.numel()].copy_(tokens)
        buffers.step.fill_(self.step)
        logits = buffers.run(self.decoder.capture, self.decoder.pool)
        self.step += 1
        return logits[: tokens.numel()]

    def select(self, rows: Tensor, sentences: Tensor | None = None) -> None:
        """As DecoderState.select: keep (and reorder) `rows`; `sentences`, the kept sentences (None:
        all); with one beam, rows are sentences."""
        sentences = rows if self.beams == 1 else sentences
        if self.pending is not None:  # nothing decoded yet: select in the pending tensors
            if sentences is not None:
                cross_kv, src_mask = self.pending
                self.pending = cross_kv.index_select(2, sentences), src_mask.index_select(0, sentences)
                self.sentences = sentences.numel()
            return
        buffers, count = self.buffers, rows.numel()
        buffers.self_kv[:, :count, :, : self.step] = buffers.self_kv[:, :, :, : self.step].index_select(1, rows)
        buffers.starts[:count] = buffers.starts.index_select(0, rows)
        if sentences is not None:
            buffers.cross_kv[:, :, : sentences.numel()] = buffers.cross_kv.index_select(2, sentences)
            buffers.src_mask[: sentences.numel()] = buffers.src_mask.index_select(0, sentences)
            self.sentences = sentences.numel()
        if self.sentences <= buffers.shape.sentences // 4:  # a smaller bucket computes fewer idle rows
            self._move(Shape.covering(self.sentences, self.beams, self.source, buffers.shape.positions))

    def join(self, other: StaticState) -> None:
        """As DecoderState.join: the sentences of a fresh state decode from the next step on, at
        their own positions."""
        cross_kv, src_mask = other.pending
        self._make_room(self.step + 1, self.sentences + other.sentences, src_mask.size(-1))
        self._place(cross_kv, src_mask, self.sentences, self.step)
        self.sentences += other.sentences

    def _make_room(self, positions: int, sentences: int | None = None, source: int = 0) -> None:
        """Buffers with room for these sizes; the first decoding step places the pending sentences."""
        sentences = self.sentences if sentences is None else sentences
        source = max(source, self.source)
        if self.buffers is None:
            cross_kv, src_mask = self.pending
            self.buffers = self.decoder.buffers_for(Shape.covering(sentences, self.beams, source, positions), cross_kv)
            self._place(cross_kv, src_mask, 0, 0)
            self.pending = None
            return
        shape = self.buffers.shape
        if positions > shape.positions:
            self._drop_unseen_positions()
            positions = self.step + 1
        if positions > shape.positions or sentences > shape.sentences or source > shape.source:
            self._move(Shape.covering(sentences, self.beams, source, max(positions, shape.positions)))

    def _place(self, cross_kv: Tensor, src_mask: Tensor, first: int, start: int) -> None:
        """Write fresh sentences' cross-attention and source mask from sentence `first` on; their
        rows start at cached position `start`."""
        end = first + src_mask.size(0)
        self.buffers.put_sources(first, cross_kv, src_mask)
        self.buffers.starts[first * self.beams : end * self.beams] = start
        self.source = max(self.source, src_mask.size(-1))

    def _drop_unseen_positions(self) -> None:
        """Move the cached positions left by the earliest live start: no live row sees those before it."""
        buffers, rows = self.buffers, self.rows
        drop = int(buffers.starts[:rows].min())
        if drop:
            kept = buffers.self_kv[:, :rows, :, drop : self.step].clone()
            buffers.self_kv[:, :rows, :, : self.step - drop] = kept
            buffers.starts[:rows] -= drop
            self.step -= drop

    def _move(self, shape: Shape) -> None:
        """Carry the live state into the buffers of another shape."""
        old, new = self.buffers, self.decoder.buffers_for(shape, self.buffers.self_kv)
        if new is old:
            return
        rows, sentences, source = self.rows, self.sentences, self.source
        new.self_kv[:, :rows, :, : self.step] = old.self_kv[:, :rows, :, : self.step]
        new.starts[:rows] = old.starts[:rows]
        new.put_sources(0, old.cross_kv[:, :, :sentences, :, :source], old.src_mask[:sentences, ..., :source])
        self.buffers = new
