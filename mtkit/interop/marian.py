"""Import a MarianMT model (an OPUS-MT model as transformers saves it) as an mtkit model file.

The directory holds config.json, model.safetensors or pytorch_model.bin, vocab.json (one id space
for both languages), source.spm and target.spm (SentencePiece models). Nothing is downloaded.

Ids: mtkit's special tokens have fixed ids (<pad>, <unk>, <s>, </s> = 0..3), Marian's do not (</s>
is usually 0, <pad> the last id, and decoding starts from <pad>), so the vocabulary is reordered:
<pad>, <unk>, <s> (the row of Marian's decoder-start token, its <pad> in OPUS-MT), </s>, then every
other entry in Marian's order. <s> is a second copy of a row Marian has once, so the output layer
never scores it (model.output_vocab = target, every id but <s>): mtkit's softmax is then MarianMT's,
and scores, sampling and the fine-tuning loss are transformers' own. The weights are the inverse of
mtkit.interop.hf's export (the residual stream permuted back from sine/cosine blocks to interleaved
sinusoids); the FFN's activation and final_logits_bias become model.activation and
model.output_bias.

Tokenizers: each SentencePiece model becomes a tokenizers Unigram with its own pieces and scores
and mtkit's ids. A joint vocabulary also holds the other side's pieces; they are stored with a
leading NUL (mtkit.text.tokenizer.UNPRODUCED), which no normalized text holds, so that this side never
forms them: a run of characters this side's model lacks is one <unk>, as in SentencePiece, and
then, as MarianTokenizer does, the run's text is looked up among those entries (Tokenizer.encode_batch).
Decoding drops the NUL.
A multilingual model's >>xxx<< tokens become its target tags (mtkit.text.targets): --tgt-lang xxx puts
the tag before every source, as MarianTokenizer does with ">>xxx<< text".
Needs sentencepiece, protobuf and safetensors: pip install 'mtkit[marian]'.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from mtkit.core.config import ModelConfig
from mtkit.core.errors import MtkitError
from mtkit.interop.hf import layer_names, marian_order
from mtkit.interop.sentencepiece import read_model, tokenizer_json
from mtkit.model.files import ModelFile, save_model_file
from mtkit.model.transformer import Transformer, sinusoidal_positions
from mtkit.text.targets import marian_target_tags
from mtkit.text.tokenizer import BOS, BOS_ID, EOS, PAD, UNK, Tokenizer

MARIAN_ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}
MARIAN_EXTRA = "pip install 'mtkit[marian]'"


def import_marian(directory: Path, output: Path, force: bool = False) -> ModelFile:
    directory = Path(directory)
    if Path(output).exists() and not force:
        raise MtkitError(f"{output}: exists; use --force to replace it")
    config = read_json(directory / "config.json")
    vocab = read_json(directory / "vocab.json")
    weights = read_weights(directory)
    try:
        model_config = _model_config(config, directory)
        token_of = {i: t for t, i in vocab.items()}
        marian_ids = _mtkit_order(config, vocab, token_of, weights, directory)
        model_config.src_vocab_size = model_config.tgt_vocab_size = len(marian_ids)
        model_config.output_vocab = "target"  # every id but <s>: see the module's docstring
        bias = weights.get("final_logits_bias", torch.zeros(1, len(vocab)))[0]
        model_config.output_bias = bool(bias.abs().max() > 0)
        mtkit_weights = _weights(weights, model_config, marian_ids, bias)
    except KeyError as missing:  # a setting or a weight that every MarianMT model has
        raise MtkitError(f"{directory}: not a complete MarianMT model (no {missing})") from None
    tokens = [PAD, UNK, BOS, EOS] + [token_of[i] for i in marian_ids[4:].tolist()]
    protos = [read_model(directory / name, MARIAN_EXTRA) for name in ("source.spm", "target.spm")]
    tokenizers = [Tokenizer(tokenizer_json(proto, tokens)) for proto in protos]
    meta = {"imported_from": str(directory), "architecture": "MarianMTModel"}
    tags = marian_target_tags(list(vocab))
    if tags:  # a multilingual model: >>fra<< at the start of the source chooses the target
        meta["target_tags"] = tags
    model_file = ModelFile(model_config, mtkit_weights, *tokenizers, meta)
    model_file.build_model()  # every weight in place, or a clear error before anything is written
    save_model_file(Path(output), model_file)
    return model_file


def tokenizer_paths(output: Path) -> tuple[Path, Path]:
    """Where `mtkit import` writes the source and target tokenizers beside the model file."""
    output = Path(output)
    return output.with_suffix(".src-tokenizer.json"), output.with_suffix(".tgt-tokenizer.json")


def read_json(path: Path) -> dict:
    """A JSON file of a model directory as transformers saves it."""
    if not path.is_file():
        raise MtkitError(f"{path}: missing")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise MtkitError(f"{path}: not JSON ({err})") from None


def read_weights(directory: Path, needs: str = MARIAN_EXTRA) -> dict[str, torch.Tensor]:
    """The weights of a transformers model directory, in float32, without their leading "model."."""
    if (directory / "model.safetensors").is_file():
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise MtkitError(f"importing this model needs safetensors: {needs}") from None
        weights = load_file(str(directory / "model.safetensors"))
    elif (directory / "pytorch_model.bin").is_file():
        weights = torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)  # data only
    else:
        raise MtkitError(f"{directory}: no model.safetensors or pytorch_model.bin")
    return {name.removeprefix("model."): tensor.float() for name, tensor in weights.items()}


def _model_config(config: dict, directory: Path) -> ModelConfig:
    where = directory / "config.json"
    if config.get("model_type") != "marian":
        raise MtkitError(f"{where}: model_type {config.get('model_type')!r} is not MarianMT's ('marian')")
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if config[a] != config[b]:
            raise MtkitError(f"{where}: {a} {config[a]} and {b} {config[b]} differ; mtkit's layers share one size")
    if not config.get("share_encoder_decoder_embeddings", True) or not config.get("scale_embedding", False):
        raise MtkitError(f"{where}: separate vocabularies or unscaled embeddings are not supported")
    if config.get("activation_function") not in MARIAN_ACTIVATIONS:
        raise MtkitError(f"{where}: activation_function {config.get('activation_function')!r} is not supported")
    model_config = ModelConfig(
        preset="transformer-base", d_model=config["d_model"], heads=config["encoder_attention_heads"],
        ffn_dim=config["encoder_ffn_dim"], encoder_layers=config["encoder_layers"],
        decoder_layers=config["decoder_layers"], dropout=config.get("dropout", 0.1),
        attention_dropout=config.get("attention_dropout", 0.0), activation_dropout=config.get("activation_dropout", 0.0),
        norm="post", tie_embeddings=True, joint_vocab=True, activation=MARIAN_ACTIVATIONS[config["activation_function"]],
    )  # fmt: skip
    model_config.validate()
    return model_config


def _mtkit_order(
    config: dict, vocab: dict[str, int], token_of: dict[int, str], weights: dict, directory: Path
) -> torch.Tensor:
    """For each mtkit id, the Marian id whose row it takes."""
    rows = weights["shared.weight"].size(0)
    if len(vocab) != rows or sorted(vocab.values()) != list(range(rows)):
        raise MtkitError(f"{directory / 'vocab.json'}: {len(vocab)} entries do not match the weights' {rows} rows")
    if BOS in vocab:
        raise MtkitError(f"{directory / 'vocab.json'}: holds {BOS}, which mtkit keeps for the decoder's start")
    pad, eos, start = config["pad_token_id"], config["eos_token_id"], config.get("decoder_start_token_id")
    unk = vocab.get(UNK)
    if unk is None or token_of.get(pad) != PAD or token_of.get(eos) != EOS:
        raise MtkitError(f"{directory}: expected {PAD}, {UNK} and {EOS} in vocab.json at config.json's ids")
    specials = [pad, unk, pad if start is None else start, eos]
    rest = [i for i in range(rows) if i not in (pad, unk, eos)]
    return torch.tensor(specials + rest)


def _weights(w: dict[str, torch.Tensor], cfg: ModelConfig, marian_ids: torch.Tensor, bias: torch.Tensor) -> dict:
    """mtkit's names for Marian's weights: the residual stream permuted back, the vocabulary reordered."""
    back = torch.argsort(marian_order(cfg.d_model))  # mtkit dimension j is Marian dimension back[j]
    positions = w.get("encoder.embed_positions.weight")
    if positions is not None:
        ours = sinusoidal_positions(positions.size(0), cfg.d_model)
        if not torch.allclose(positions[:, back], ours, atol=1e-4):
            raise MtkitError("the model's positions are not the sinusoids MarianMT computes")
    out: dict[str, torch.Tensor] = {}

    def reads(name: str, source: str) -> None:  # a Linear whose input is the residual stream
        out[f"{name}.weight"], out[f"{name}.bias"] = w[f"{source}.weight"][:, back], w[f"{source}.bias"]

    def writes(name: str, source: str) -> None:  # a Linear whose output joins the residual stream
        out[f"{name}.weight"], out[f"{name}.bias"] = w[f"{source}.weight"][back, :], w[f"{source}.bias"][back]

    def norm(name: str, source: str) -> None:
        out[f"{name}.weight"], out[f"{name}.bias"] = w[f"{source}.weight"][back], w[f"{source}.bias"][back]

    def attention(name: str, source: str) -> None:
        reads(f"{name}.q_proj", f"{source}.q_proj")
        k, v = w[f"{source}.k_proj.weight"][:, back], w[f"{source}.v_proj.weight"][:, back]
        out[f"{name}.kv_proj.weight"] = torch.cat([k, v])
        out[f"{name}.kv_proj.bias"] = torch.cat([w[f"{source}.k_proj.bias"], w[f"{source}.v_proj.bias"]])
        writes(f"{name}.out_proj", f"{source}.out_proj")

    def ffn(name: str, source: str) -> None:
        reads(f"{name}.fc1", f"{source}.fc1")
        writes(f"{name}.fc2", f"{source}.fc2")

    embeddings = w["shared.weight"][marian_ids][:, back]
    out["tgt_embed.tokens.weight"] = out["src_embed.tokens.weight"] = embeddings
    imports = {"attention": attention, "ffn": ffn, "norm": norm}
    for kind, theirs, ours in layer_names(cfg):
        imports[kind](ours, theirs)
    if cfg.output_bias:
        out["output.bias"] = bias[marian_ids]
    scored = torch.ones(len(marian_ids), dtype=torch.bool)
    scored[BOS_ID] = False  # Marian's decoder-start row already has its place in the distribution
    out["output.mask"] = scored
    model = Transformer(cfg)  # the tied names, as the model's own state dict holds them
    model.load_state_dict(out, strict=True)
    return model.state_dict()
