"""Export a model with language tokens (an imported, perhaps fine-tuned, NLLB-200 or M2M100 model) back
to transformers: an M2M100ForConditionalGeneration directory with a fast NLLB tokenizer.

The inverse of mtkit.interop.m2m100's import: the rows go back to fairseq's order (mtkit's <s>, a
copy of the row of </s>, is dropped), the key and value projections are split, and the layers take
transformers' names. The tokenizer is mtkit's, with fairseq's ids, as NllbTokenizerFast: it puts the
source language's token first (`src_lang`), and `generate(..., forced_bos_token_id=...)` gives the
target's, as with the published models (an M2M100 model's codes are its `__en__` tokens). The
model file's languages are the defaults (tokenizer_config.json's src_lang and tgt_lang). Needs
safetensors: pip install 'mtkit[hf]'.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from mtkit.core.errors import MtkitError
from mtkit.core.textio import atomic_directory
from mtkit.decoding.search_rules import MAX_POSITIONS
from mtkit.interop.hf import layer_names
from mtkit.interop.m2m100 import FAIRSEQ_BOS, FAIRSEQ_SPECIALS
from mtkit.model.files import ModelFile
from mtkit.text.targets import LANGUAGE_TOKENS, model_language
from mtkit.text.tokenizer import BOS_ID

FAIRSEQ_PAD, FAIRSEQ_EOS = 1, 2


def fairseq_rows(vocab_size: int) -> torch.Tensor:
    """For each fairseq id, the mtkit id whose row it is: <s>, <pad>, </s>, <unk>, then the rest in order."""
    return torch.tensor([4, 0, 3, 1, *range(5, vocab_size)])


def export_m2m100(model_file: ModelFile, output: Path, force: bool = False) -> None:
    from mtkit.interop.hf import _safetensors

    cfg = model_file.config
    mask = model_file.weights.get("output.mask")
    if mask is None or mask.sum() != cfg.tgt_vocab_size - 1:
        raise MtkitError("--format huggingface: this model scores fewer ids than its vocabulary holds; transformers' M2M100 scores them all")  # fmt: skip
    save_file = _safetensors()
    rows = fairseq_rows(cfg.tgt_vocab_size)
    weights = _weights(model_file, rows)
    languages = model_file.meta[LANGUAGE_TOKENS]
    with atomic_directory(output, force) as tmp:
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        files = {
            "config.json": _config(model_file, len(rows)),
            "generation_config.json": {
                "decoder_start_token_id": FAIRSEQ_EOS,
                "bos_token_id": 0,
                "eos_token_id": FAIRSEQ_EOS,
                "pad_token_id": FAIRSEQ_PAD,
                "num_beams": 5,
                "max_length": 200,
            },  # fmt: skip
            "tokenizer_config.json": _tokenizer_config(model_file.meta, languages),
            "special_tokens_map.json": {
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "pad_token": "<pad>",
                "additional_special_tokens": list(languages.values()),
            },  # fmt: skip
        }
        for name, content in files.items():
            (tmp / name).write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
        (tmp / "tokenizer.json").write_text(_tokenizer_json(model_file, rows), encoding="utf-8")


def _weights(model_file: ModelFile, rows: torch.Tensor) -> dict[str, torch.Tensor]:
    w = {name: tensor.float() for name, tensor in model_file.weights.items()}
    out = {"model.shared.weight": w["tgt_embed.tokens.weight"][rows]}  # the encoder's, decoder's and lm_head's too
    for kind, theirs, ours in layer_names(model_file.config):
        if kind == "attention":
            k, v = w[f"{ours}.kv_proj.weight"].chunk(2), w[f"{ours}.kv_proj.bias"].chunk(2)
            out[f"model.{theirs}.k_proj.weight"], out[f"model.{theirs}.v_proj.weight"] = k
            out[f"model.{theirs}.k_proj.bias"], out[f"model.{theirs}.v_proj.bias"] = v
            parts = [(f"{theirs}.{p}", f"{ours}.{p}") for p in ("q_proj", "out_proj")]
        elif kind == "ffn":
            parts = [(f"{theirs}.{p}", f"{ours}.{p}") for p in ("fc1", "fc2")]
        else:
            parts = [(theirs, ours)]
        for their_name, our_name in parts:
            for part in ("weight", "bias"):
                out[f"model.{their_name}.{part}"] = w[f"{our_name}.{part}"]
    return {name: tensor.contiguous() for name, tensor in out.items()}


def _config(model_file: ModelFile, vocab_size: int) -> dict:
    cfg = model_file.config
    return {
        "architectures": ["M2M100ForConditionalGeneration"], "model_type": "m2m_100", "vocab_size": vocab_size,
        "d_model": cfg.d_model, "encoder_layers": cfg.encoder_layers, "decoder_layers": cfg.decoder_layers,
        "encoder_attention_heads": cfg.heads, "decoder_attention_heads": cfg.heads, "encoder_ffn_dim": cfg.ffn_dim,
        "decoder_ffn_dim": cfg.ffn_dim, "activation_function": cfg.activation, "max_position_embeddings": MAX_POSITIONS,
        "scale_embedding": True, "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.activation_dropout, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
        "pad_token_id": FAIRSEQ_PAD, "bos_token_id": 0, "eos_token_id": FAIRSEQ_EOS,
        "decoder_start_token_id": FAIRSEQ_EOS, "tie_word_embeddings": True, "is_encoder_decoder": True,
        "torch_dtype": "float32",
    }  # fmt: skip


def _tokenizer_config(meta: dict, languages: dict[str, str]) -> dict:
    codes = list(languages)
    src = languages[model_language(codes, meta["src_lang"], "src_lang")] if meta.get("src_lang") else None
    tgt = languages[model_language(codes, meta["tgt_lang"], "tgt_lang")] if meta.get("tgt_lang") else None
    return {
        "tokenizer_class": "NllbTokenizerFast", "src_lang": src or languages.get("eng_Latn", next(iter(languages.values()))),
        "tgt_lang": tgt,
        "additional_special_tokens": list(languages.values()), "legacy_behaviour": False,
        "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>", "unk_token": "<unk>",
        "pad_token": "<pad>", "mask_token": "<mask>", "model_max_length": 1024,
        "model_input_names": ["input_ids", "attention_mask"],
    }  # fmt: skip


def _tokenizer_json(model_file: ModelFile, rows: torch.Tensor) -> str:
    """mtkit's tokenizer with fairseq's ids: fairseq's <s> by its own name again, mtkit's <s> gone."""
    spec = json.loads(model_file.src_tokenizer.json_text)
    fairseq_of = {int(m): f for f, m in enumerate(rows.tolist())}  # mtkit id -> fairseq id (none for mtkit's <s>)

    def name(token: str) -> str:
        return "<s>" if token == FAIRSEQ_BOS else token

    model = spec["model"]
    if model["type"] == "Unigram":
        model["vocab"] = [[name(model["vocab"][m][0]), model["vocab"][m][1]] for m in rows.tolist()]
        model["unk_id"] = FAIRSEQ_SPECIALS.index("<unk>")
    else:
        model["vocab"] = {name(t): fairseq_of[m] for t, m in model["vocab"].items() if m in fairseq_of}
    added = [dict(entry, id=fairseq_of[entry["id"]], content=name(entry["content"]))
             for entry in spec["added_tokens"] if entry["id"] != BOS_ID]  # fmt: skip
    if not any(entry["content"] == "<s>" for entry in added):  # fairseq's <s>: special, as NllbTokenizer has it
        added.append({"id": 0, "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True})  # fmt: skip
    spec["added_tokens"] = sorted(added, key=lambda entry: entry["id"])
    return json.dumps(spec, ensure_ascii=False)
