"""CTranslate2 as a deployment engine: export an mtkit model, and translate with it.

The export describes mtkit's Transformer with CTranslate2's TransformerSpec: post- or pre-norm,
ReLU FFN, embeddings scaled by sqrt(d_model), the model's sinusoidal positions (mtkit's own
interleaved ones, or fairseq's) as a fixed table, tied embeddings. The tokenizer(s) are copied beside the model, so the
directory is all that `mtkit translate --engine ctranslate2 -m DIR` needs.
Needs the optional extra: pip install 'mtkit[ct2]'.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import torch

from mtkit.core.config import DEFAULT_BEAM, default_beam
from mtkit.core.errors import MtkitError
from mtkit.core.textio import atomic_directory
from mtkit.decoding.constraints import without_line_breaks
from mtkit.decoding.search_rules import MAX_POSITIONS, Hypothesis, OnDone, SearchConfig, max_output_length
from mtkit.model.files import ModelFile
from mtkit.model.output_layer import export_logit_bias
from mtkit.model.transformer import POSITION_TABLES
from mtkit.text.tokenizer import PAD, Tokenizer
from mtkit.translation.translate import TextTranslator

QUANTIZATIONS = ("float32", "int8", "int16", "float16", "bfloat16", "int8_float32", "int8_bfloat16")
META_FILE = "mtkit.json"


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise MtkitError("the CTranslate2 engine needs ctranslate2: pip install 'mtkit[ct2]'") from None
    return ctranslate2


def _vocabulary(tokenizer: Tokenizer) -> list[str]:
    return ["<blank>" if tok == PAD else tok for tok in tokenizer.vocabulary()]


def _spec(model_file: ModelFile):
    ctranslate2 = _ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = model_file.config
    weights = {name: tensor.float().numpy() for name, tensor in model_file.weights.items()}
    activation = getattr(common_spec.Activation, {"relu": "RELU", "swish": "SWISH", "gelu": "GELU"}[cfg.activation])
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.encoder_layers, cfg.decoder_layers), cfg.heads, pre_norm=cfg.norm == "pre", activation=activation
    )
    positions = POSITION_TABLES[cfg.positions](MAX_POSITIONS, cfg.d_model).numpy()

    def linear(target, prefix: str) -> None:
        target.weight = weights[f"{prefix}.weight"]
        if f"{prefix}.bias" in weights:
            target.bias = weights[f"{prefix}.bias"]

    def norm(target, prefix: str) -> None:
        target.gamma, target.beta = weights[f"{prefix}.weight"], weights[f"{prefix}.bias"]

    def attention(target, prefix: str, self_attention: bool) -> None:
        q_w, q_b = weights[f"{prefix}.q_proj.weight"], weights[f"{prefix}.q_proj.bias"]
        kv_w, kv_b = weights[f"{prefix}.kv_proj.weight"], weights[f"{prefix}.kv_proj.bias"]
        if self_attention:  # one fused q|k|v projection
            target.linear[0].weight, target.linear[0].bias = np.concatenate([q_w, kv_w]), np.concatenate([q_b, kv_b])
        else:  # q from the decoder, fused k|v from the encoder
            target.linear[0].weight, target.linear[0].bias = q_w, q_b
            target.linear[1].weight, target.linear[1].bias = kv_w, kv_b
        linear(target.linear[-1], f"{prefix}.out_proj")

    def ffn(target, prefix: str) -> None:
        linear(target.linear_0, f"{prefix}.ffn.fc1")
        linear(target.linear_1, f"{prefix}.ffn.fc2")
        norm(target.layer_norm, f"{prefix}.ffn_block.norm")

    spec.encoder.embeddings[0].weight = weights["src_embed.tokens.weight"]
    spec.encoder.position_encodings.encodings = positions
    for i, layer in enumerate(spec.encoder.layer):
        attention(layer.self_attention, f"encoder_layers.{i}.self_attn", True)
        norm(layer.self_attention.layer_norm, f"encoder_layers.{i}.attn_block.norm")
        ffn(layer.ffn, f"encoder_layers.{i}")
    spec.decoder.embeddings.weight = weights["tgt_embed.tokens.weight"]
    spec.decoder.position_encodings.encodings = positions
    for i, layer in enumerate(spec.decoder.layer):
        attention(layer.self_attention, f"decoder_layers.{i}.self_attn", True)
        norm(layer.self_attention.layer_norm, f"decoder_layers.{i}.self_block.norm")
        attention(layer.attention, f"decoder_layers.{i}.cross_attn", False)
        norm(layer.attention.layer_norm, f"decoder_layers.{i}.cross_block.norm")
        ffn(layer.ffn, f"decoder_layers.{i}")
    if cfg.norm == "pre":
        norm(spec.encoder.layer_norm, "encoder_norm")
        norm(spec.decoder.layer_norm, "decoder_norm")
    spec.decoder.projection.weight = weights["tgt_embed.tokens.weight" if cfg.tie_embeddings else "output.weight"]
    bias = export_logit_bias(model_file.weights, cfg.tgt_vocab_size)
    if bias is not None:
        spec.decoder.projection.bias = bias.numpy()
    spec.register_source_vocabulary(_vocabulary(model_file.src_tokenizer))
    spec.register_target_vocabulary(_vocabulary(model_file.tgt_tokenizer))
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = "<unk>", "<s>", "</s>"
    spec.config.decoder_start_token = "<s>"
    return ctranslate2, spec


def export_ctranslate2(model_file: ModelFile, output: Path, quantization: str = "float32", force: bool = False) -> None:
    if quantization not in QUANTIZATIONS:
        raise MtkitError(f"--quantization {quantization}: must be one of {', '.join(QUANTIZATIONS)}")
    ctranslate2, spec = _spec(model_file)

    class MtkitConverter(ctranslate2.converters.Converter):
        def _load(self):
            return spec

    with atomic_directory(output, force) as tmp:
        shutil.rmtree(tmp)  # the converter creates the directory itself
        MtkitConverter().convert(str(tmp), quantization=None if quantization == "float32" else quantization)
        model_file.src_tokenizer.save(tmp / "src_tokenizer.json")
        model_file.tgt_tokenizer.save(tmp / "tgt_tokenizer.json")
        meta = {
            "format": "mtkit-ctranslate2",
            "quantization": quantization,
            "max_positions": MAX_POSITIONS,
            "beam": default_beam(model_file.config.preset),  # what the model decodes with unless told otherwise
            "source": model_file.meta,
        }
        (tmp / META_FILE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def exported_beam(directory: Path) -> int:
    """The beam an exported model decodes with unless told otherwise (5 where its export did not say)."""
    try:
        return int(json.loads((Path(directory) / META_FILE).read_text(encoding="utf-8")).get("beam", DEFAULT_BEAM))
    except (OSError, ValueError, AttributeError):  # loading it says what is wrong
        return DEFAULT_BEAM


class CTranslate2Translator(TextTranslator):
    """The same interface as mtkit.translation.translate.Translator, decoding with CTranslate2.

    The one difference: CTranslate2 normalises beam scores by length ** lenpen (not GNMT's
    ((5 + length) / 6) ** lenpen), so beam search with lenpen > 0 may rank otherwise. Greedy search,
    and beam search without a length penalty, give mtkit's own translations, at the length limit too.
    """

    def __init__(
        self,
        directory: Path,
        cfg: SearchConfig,
        device: str = "auto",
        compute_type: str = "default",
        batch_size: int = 128,
        threads: int = 0,
    ):
        ctranslate2 = _ctranslate2()
        directory = Path(directory)
        if not (directory / META_FILE).is_file():
            raise MtkitError(f"{directory}: not an exported mtkit CTranslate2 model (no {META_FILE}; see mtkit export)")
        cfg.validate()
        self.src_tokenizer = Tokenizer.load(directory / "src_tokenizer.json")
        self.tgt_tokenizer = Tokenizer.load(directory / "tgt_tokenizer.json")
        self.cfg = without_line_breaks(cfg, self.tgt_tokenizer)
        device = ("cuda" if ctranslate2.get_cuda_device_count() else "cpu") if device == "auto" else device
        # CTranslate2's own default is 4 threads whatever the machine: on 2 cores that oversubscribes
        # them. Use as many as torch does (the physical cores, or OMP_NUM_THREADS).
        self.translator = ctranslate2.Translator(
            str(directory), device=device, compute_type=compute_type, intra_threads=threads or torch.get_num_threads()
        )
        self.batch_size = batch_size
        self.meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))  # "source": the model's meta
        self.max_positions = self.meta["max_positions"]
        self.model_meta = self.meta.get("source", {})

    @property
    def suppressed(self) -> list[list[str]]:
        """Never generated, as in mtkit's own search: <s>, <pad> (CTranslate2's <blank>), cfg's banned sequences."""
        return [["<s>"], ["<blank>"]] + [[self.tgt_tokenizer.id_to_token(i) for i in seq] for seq in self.cfg.banned]

    def _search(
        self, sentences: list[list[int]], prefixes: list[list[int]] | None = None, on_done: OnDone | None = None
    ) -> list[list[Hypothesis]]:
        """Decode every sentence with its own length limit, in as few engine calls as possible
        (on_done is not called: CTranslate2 returns a batch's translations together).

        CTranslate2 takes one length limit per call, and calls of a few sentences each are slow.
        So all sentences go in one call under the largest limit. Where one token is chosen a step
        (greedy search, sampling), CTranslate2's step callback stops each sentence at its own limit.
        Beam search has no callback: a sentence is decoded again under its own limit only where the
        search ran up to that limit (at most its limit minus one steps): until a search's last step, a
        larger limit changes nothing in it.
        """
        cfg = self.cfg
        if any(len(s) >= self.max_positions for s in sentences):  # a model exported before the table grew
            raise MtkitError(f"this export covers sources of up to {self.max_positions - 1} subwords: export it again")
        sources = [[self.src_tokenizer.id_to_token(t) for t in s] + ["</s>"] for s in sentences]
        targets = [[self.tgt_tokenizer.id_to_token(t) for t in p] or None for p in prefixes] if prefixes else None
        limits = [max_output_length(len(s), cfg) for s in sentences]
        if cfg.beam == 1:
            return [hyps for hyps, _ in self._translate(sources, max(limits, default=1), targets, limits)]
        if cfg.lenpen == 0:
            # Without a length penalty CTranslate2 exits early, before the step where it stopped can be
            # read from its hypotheses: decode under each sentence's own limit.
            out: list[tuple[list[Hypothesis], float]] = [([], math.inf)] * len(sources)
        else:
            out = self._translate(sources, max(limits, default=1), targets)
        again: dict[int, list[int]] = {}  # limit -> the sentences to decode again under it
        for i, (_, steps) in enumerate(out):
            if steps >= limits[i] - 1:
                again.setdefault(limits[i], []).append(i)
        for limit, indices in sorted(again.items()):
            subset = [targets[i] for i in indices] if targets else None
            for i, result in zip(indices, self._translate([sources[i] for i in indices], limit, subset)):
                out[i] = result
        return [hyps for hyps, _ in out]

    def _translate(
        self,
        sources: list[list[str]],
        limit: int,
        prefixes: list[list[str] | None] | None = None,
        own_limits: list[int] | None = None,
    ) -> list[tuple[list[Hypothesis], float]]:
        """The n-best hypotheses of each source, and the last step its search ran; with own_limits
        (greedy search and sampling), each source stops at its own limit.

        Beam search stops once it has `beam` finished hypotheses, so the longest of those is the
        step where it stopped (ask for all of them: fewer than `beam` finished before that step).
        """
        cfg = self.cfg
        # The callback's batch_id is the source's index in this call, whatever CTranslate2's batches.
        stop = (lambda step: step.step + 1 >= own_limits[step.batch_id]) if own_limits else None
        finished = cfg.beam if cfg.beam > 1 else cfg.nbest
        results = self.translator.translate_batch(
            sources,
            prefixes,
            beam_size=cfg.beam,
            num_hypotheses=finished,
            length_penalty=cfg.lenpen,
            max_decoding_length=limit,
            min_decoding_length=cfg.min_len,
            no_repeat_ngram_size=cfg.no_repeat_ngram,
            return_scores=True,
            max_batch_size=self.batch_size,
            max_input_length=0,  # sources come cut to MAX_SOURCE_TOKENS (mtkit.translation.translate)
            suppress_sequences=self.suppressed,
            sampling_topk=(cfg.top_k or 0) if cfg.sample else 1,
            sampling_topp=cfg.top_p,
            sampling_temperature=cfg.temperature,
            callback=stop,
        )
        out = []
        for i, result in enumerate(results):
            # A hypothesis that has the limit's full length was cut there, without </s>.
            cut_at = own_limits[i] if own_limits else limit
            hyps = [
                Hypothesis([self.tgt_tokenizer.entry_id(t) for t in tokens], score, score, len(tokens) < cut_at)
                for tokens, score in zip(result.hypotheses, result.scores)
            ]
            out.append((hyps[: cfg.nbest], max(len(h.tokens) for h in hyps)))
        return out
