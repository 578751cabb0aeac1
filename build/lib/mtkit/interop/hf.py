"""Export to Hugging Face transformers: a directory that `pipeline("translation")` loads.

The mapping is exact. MarianMT is mtkit's post-norm Transformer (the FFN's activation and the
logits' bias, final_logits_bias, as model.activation and model.output_bias have them; embeddings
scaled by sqrt(d_model), LayerNorm eps 1e-5, tied embeddings) with one difference:
its sinusoids are a block of sines then a block of cosines, where mtkit interleaves them. Every
weight that reads or writes the d_model-wide residual stream is permuted the same way along that
axis (mtkit dimension 2i becomes i, 2i+1 becomes d/2 + i), which LayerNorm, attention and the
FFN do not notice; the positions then line up. Pegasus is the same model in pre-norm form, with
a final LayerNorm in the encoder and in the decoder: pre-norm models export to it, post-norm
models to MarianMT. Separate source/target vocabularies (the fast tokenizer is one) are refused.
Needs safetensors: pip install 'mtkit[hf]'.
"""

from __future__ import annotations

import json

import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import processors

from mtkit.core.config import ModelConfig
from mtkit.core.errors import MtkitError
from mtkit.core.textio import atomic_directory
from mtkit.decoding.search_rules import MAX_OUTPUT_TOKENS, MAX_POSITIONS, MAX_SOURCE_TOKENS
from mtkit.model.files import ModelFile
from mtkit.model.output_layer import export_logit_bias
from mtkit.model.transformer import sinusoidal_positions
from mtkit.text.tokenizer import BOS, BOS_ID, EOS, EOS_ID, PAD, PAD_ID, UNK


def _safetensors():
    try:
        from safetensors.torch import save_file
    except ImportError:
        raise MtkitError("the Hugging Face export needs safetensors: pip install 'mtkit[hf]'") from None
    return save_file


def marian_order(d_model: int) -> torch.Tensor:
    """The mtkit dimension that each MarianMT dimension holds: 0, 2, 4, ..., then 1, 3, 5, ..."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def layer_names(cfg: ModelConfig) -> list[tuple[str, str, str]]:
    """How MarianMT and Pegasus (after their leading "model.") and mtkit name each group of layer
    weights, for the export and for mtkit.interop.marian's import: (kind, their name, mtkit's name), the
    kind one of attention, ffn, norm."""
    names = []
    for i in range(cfg.encoder_layers):
        theirs, ours = f"encoder.layers.{i}", f"encoder_layers.{i}"
        names += [("attention", f"{theirs}.self_attn", f"{ours}.self_attn"),
                  ("norm", f"{theirs}.self_attn_layer_norm", f"{ours}.attn_block.norm"),
                  ("ffn", theirs, f"{ours}.ffn"),
                  ("norm", f"{theirs}.final_layer_norm", f"{ours}.ffn_block.norm")]  # fmt: skip
    for i in range(cfg.decoder_layers):
        theirs, ours = f"decoder.layers.{i}", f"decoder_layers.{i}"
        names += [("attention", f"{theirs}.self_attn", f"{ours}.self_attn"),
                  ("norm", f"{theirs}.self_attn_layer_norm", f"{ours}.self_block.norm"),
                  ("attention", f"{theirs}.encoder_attn", f"{ours}.cross_attn"),
                  ("norm", f"{theirs}.encoder_attn_layer_norm", f"{ours}.cross_block.norm"),
                  ("ffn", theirs, f"{ours}.ffn"),
                  ("norm", f"{theirs}.final_layer_norm", f"{ours}.ffn_block.norm")]  # fmt: skip
    if cfg.norm == "pre":  # Pegasus's final LayerNorms
        names += [("norm", "encoder.layer_norm", "encoder_norm"), ("norm", "decoder.layer_norm", "decoder_norm")]
    return names


def hf_weights(model_file: ModelFile) -> dict[str, torch.Tensor]:
    """mtkit's weights under MarianMTModel's (post-norm) or PegasusForConditionalGeneration's
    (pre-norm) names, which are the same but for the final LayerNorms, permuted along the residual
    stream."""
    cfg = model_file.config
    w = {name: tensor.float() for name, tensor in model_file.weights.items()}
    order = marian_order(cfg.d_model)
    out: dict[str, torch.Tensor] = {}

    def reads(name: str, source: str) -> None:  # a Linear whose input is the residual stream
        out[f"{name}.weight"] = w[f"{source}.weight"][:, order]
        out[f"{name}.bias"] = w[f"{source}.bias"]

    def writes(name: str, source: str) -> None:  # a Linear whose output joins the residual stream
        out[f"{name}.weight"] = w[f"{source}.weight"][order, :]
        out[f"{name}.bias"] = w[f"{source}.bias"][order]

    def norm(name: str, source: str) -> None:
        out[f"{name}.weight"], out[f"{name}.bias"] = w[f"{source}.weight"][order], w[f"{source}.bias"][order]

    def attention(name: str, source: str) -> None:
        q, kv = f"{source}.q_proj", f"{source}.kv_proj"
        k_w, v_w = w[f"{kv}.weight"].chunk(2, dim=0)
        k_b, v_b = w[f"{kv}.bias"].chunk(2, dim=0)
        reads(f"{name}.q_proj", q)
        out[f"{name}.k_proj.weight"], out[f"{name}.k_proj.bias"] = k_w[:, order], k_b
        out[f"{name}.v_proj.weight"], out[f"{name}.v_proj.bias"] = v_w[:, order], v_b
        writes(f"{name}.out_proj", f"{source}.out_proj")

    def ffn(name: str, source: str) -> None:
        reads(f"{name}.fc1", f"{source}.fc1")
        writes(f"{name}.fc2", f"{source}.fc2")

    embeddings = w["tgt_embed.tokens.weight"][:, order]
    positions = sinusoidal_positions(MAX_POSITIONS, cfg.d_model)[:, order]
    out["model.shared.weight"] = embeddings  # the encoder's, decoder's and lm_head's too: tied, stored once
    for side in ("encoder", "decoder"):
        out[f"model.{side}.embed_positions.weight"] = positions.clone()
    export = {"attention": attention, "ffn": ffn, "norm": norm}
    for kind, theirs, ours in layer_names(cfg):
        export[kind](f"model.{theirs}", ours)
    bias = export_logit_bias(model_file.weights, cfg.tgt_vocab_size)
    out["final_logits_bias"] = torch.zeros(1, cfg.tgt_vocab_size) if bias is None else bias[None]
    return {name: tensor.contiguous() for name, tensor in out.items()}


def hf_config(model_file: ModelFile) -> dict:
    cfg = model_file.config
    if cfg.norm == "pre":
        architecture = {"architectures": ["PegasusForConditionalGeneration"], "model_type": "pegasus"}
    else:
        architecture = {"architectures": ["MarianMTModel"], "model_type": "marian",
                        "decoder_vocab_size": cfg.tgt_vocab_size, "share_encoder_decoder_embeddings": True}  # fmt: skip
    return {
        **architecture,
        "vocab_size": cfg.tgt_vocab_size,
        "d_model": cfg.d_model,
        "encoder_layers": cfg.encoder_layers,
        "decoder_layers": cfg.decoder_layers,
        "encoder_attention_heads": cfg.heads,
        "decoder_attention_heads": cfg.heads,
        "encoder_ffn_dim": cfg.ffn_dim,
        "decoder_ffn_dim": cfg.ffn_dim,
        "activation_function": cfg.activation,  # transformers' names: relu, swish, gelu
        "max_position_embeddings": MAX_POSITIONS,
        "scale_embedding": True,
        "dropout": cfg.dropout,
        "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.activation_dropout,
        "pad_token_id": PAD_ID,
        "eos_token_id": EOS_ID,
        "bos_token_id": BOS_ID,
        "decoder_start_token_id": BOS_ID,
        "forced_eos_token_id": EOS_ID,
        "tie_word_embeddings": True,
        "is_encoder_decoder": True,
        "torch_dtype": "float32",
    }


def generation_config() -> dict:
    """mtkit translate's defaults, as far as generate() has them (its length penalty is not GNMT's)."""
    return {
        "decoder_start_token_id": BOS_ID,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "forced_eos_token_id": EOS_ID,
        "num_beams": 5,
        "max_length": MAX_OUTPUT_TOKENS,
    }


def fast_tokenizer(model_file: ModelFile) -> str:
    """tokenizer.json: mtkit's tokenizer with a post-processor that appends </s> to every source."""
    tokenizer = HFTokenizer.from_str(model_file.src_tokenizer.json_text)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A $B {EOS}", special_tokens=[(EOS, EOS_ID)]
    )
    return tokenizer.to_str()


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": UNK,
        "pad_token": PAD,
        "model_max_length": MAX_SOURCE_TOKENS + 1,
        # As MarianTokenizer: no token_type_ids, which generate(**tokenizer(...)) would refuse.
        "model_input_names": ["input_ids", "attention_mask"],
    }


def export_huggingface(model_file: ModelFile, output, force: bool = False) -> None:
    cfg = model_file.config
    if not (cfg.tie_embeddings and cfg.joint_vocab):
        raise MtkitError(
            "--format huggingface: needs one joint vocabulary with tied embeddings "
            "(model.tie_embeddings and a tokenizer trained on both languages)"
        )
    save_file = _safetensors()
    weights = hf_weights(model_file)
    with atomic_directory(output, force) as tmp:
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        files = {
            "config.json": hf_config(model_file),
            "generation_config.json": generation_config(),
            "tokenizer_config.json": tokenizer_config(),
            "special_tokens_map.json": {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "pad_token": PAD},
        }
        for name, content in files.items():
            (tmp / name).write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
        (tmp / "tokenizer.json").write_text(fast_tokenizer(model_file), encoding="utf-8")
