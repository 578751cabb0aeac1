"""Import an NLLB-200 or M2M100 model (M2M100ForConditionalGeneration, as transformers saves it) as an
mtkit model file.

The directory holds config.json, model.safetensors or pytorch_model.bin, sentencepiece.bpe.model and
tokenizer_config.json (M2M100's also vocab.json). Nothing is downloaded.

The model: pre-norm layers with final LayerNorms, embeddings scaled by sqrt(d_model) and shared by
the encoder, the decoder and the output, fairseq's sinusoidal positions (model.positions: fairseq),
ReLU feed-forward layers. Its weights keep their layout; only the vocabulary is reordered.

The vocabulary is fairseq's: <s>, <pad>, </s>, <unk>, then the SentencePiece pieces (NLLB: the
piece of SentencePiece id i at i + 1; M2M100: at vocab.json's id), then the language codes
(tokenizer_config.json's added tokens; M2M100's __xx__ after vocab.json, in fairseq's order), then
<mask> and rows no token names. mtkit's order is <pad>, <unk>, <s> (a copy of the row of </s>, which
starts the decoder), </s>, then every other row in fairseq's order; the output layer scores every
id but mtkit's <s> (model.output_vocab = target), so that its softmax is the model's own.

Languages (mtkit.text.targets.LANGUAGE_TOKENS): the source starts with its language's token
(`eng_Latn ... </s>`, `__en__ ... </s>`), and the target's token is the first one after the
decoder's start, given rather than predicted, as transformers' forced_bos_token_id gives it.
Needs sentencepiece, protobuf and safetensors: pip install 'mtkit[marian]'.
"""

from __future__ import annotations

from pathlib import Path

import torch

from mtkit.core.config import ModelConfig
from mtkit.core.errors import MtkitError
from mtkit.interop.hf import layer_names
from mtkit.interop.marian import read_json, read_weights
from mtkit.interop.sentencepiece import produced_pieces, read_model, tokenizer_json
from mtkit.model.files import ModelFile, save_model_file
from mtkit.model.transformer import Transformer, fairseq_positions
from mtkit.text.targets import LANGUAGE_TOKENS
from mtkit.text.tokenizer import BOS_ID, EOS, PAD, UNK, Tokenizer

EXTRA = "pip install 'mtkit[marian]'"
FAIRSEQ_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0..3 of every fairseq dictionary
FAIRSEQ_BOS = "<s:fairseq>"  # fairseq's <s>: a row of the model that mtkit's <s> (the decoder's start) is not
UNUSED = "<unused-"  # <unused-N>: row N, which the tokenizer does not name
M2M100_CODES = {  # transformers' M2M100Tokenizer: the __xx__ tokens follow vocab.json in this order
    "m2m100": (
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha he hi hr ht hu "
        "hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my ne nl no ns oc or pa pl ps pt "
        "ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo zh zu"
    ).split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}


def is_m2m100(directory: Path) -> bool:
    config = Path(directory) / "config.json"
    return config.is_file() and read_json(config).get("model_type") == "m2m_100"


def import_m2m100(directory: Path, output: Path, force: bool = False) -> ModelFile:
    directory = Path(directory)
    if Path(output).exists() and not force:
        raise MtkitError(f"{output}: exists; use --force to replace it")
    config = read_json(directory / "config.json")
    model_config = _model_config(config, directory)
    proto = read_model(directory / "sentencepiece.bpe.model", EXTRA)
    if not isinstance(config.get("vocab_size"), int):
        raise MtkitError(f"{directory / 'config.json'}: no vocab_size")
    names, languages = _fairseq_vocabulary(directory, proto, config["vocab_size"])
    order = _mtkit_order(config, names, directory)
    model_config.src_vocab_size = model_config.tgt_vocab_size = len(order)
    weights = read_weights(directory, EXTRA)
    try:
        mtkit_weights = _weights(weights, model_config, order)
    except KeyError as missing:
        raise MtkitError(f"{directory}: not a complete M2M100 model (no weight {missing})") from None
    tokens = [PAD, UNK, "<s>", EOS] + [FAIRSEQ_BOS if i == 0 else names[i] for i in order[4:].tolist()]
    # Language codes, fairseq's <s>, <mask> and the unnamed rows: special tokens, never text, dropped when decoding
    controls = {*languages.values(), FAIRSEQ_BOS, "<mask>"} | {t for t in tokens if t.startswith(UNUSED)}
    tokenizer = Tokenizer(tokenizer_json(proto, tokens, tuple(t for t in tokens if t in controls)))
    family = "nllb" if "Nllb" in _tokenizer_class(directory) else "m2m100"
    meta = {"imported_from": str(directory), "architecture": "M2M100ForConditionalGeneration", "family": family,
            LANGUAGE_TOKENS: languages}  # fmt: skip
    model_file = ModelFile(model_config, mtkit_weights, tokenizer, tokenizer, meta)
    save_model_file(Path(output), model_file)
    return model_file


def _tokenizer_class(directory: Path) -> str:
    path = directory / "tokenizer_config.json"
    return read_json(path).get("tokenizer_class", "") if path.is_file() else ""


def _model_config(config: dict, directory: Path) -> ModelConfig:
    where = directory / "config.json"
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if config.get(a) != config.get(b):
            raise MtkitError(
                f"{where}: {a} {config.get(a)} and {b} {config.get(b)} differ; mtkit's layers share one size"
            )
    if not config.get("scale_embedding", False):
        raise MtkitError(f"{where}: unscaled embeddings (scale_embedding false) are not supported")
    if config.get("activation_function", "relu") != "relu":
        raise MtkitError(f"{where}: activation_function {config.get('activation_function')!r} is not supported")
    if config.get("pad_token_id") != 1 or config.get("eos_token_id") != 2 or config.get("decoder_start_token_id") != 2:
        raise MtkitError(f"{where}: expected fairseq's ids (<pad> 1, </s> 2, the decoder starting from </s>)")
    try:
        model_config = ModelConfig(
            preset="transformer-big", d_model=config["d_model"], heads=config["encoder_attention_heads"],
            ffn_dim=config["encoder_ffn_dim"], encoder_layers=config["encoder_layers"],
            decoder_layers=config["decoder_layers"], dropout=config.get("dropout", 0.1),
            attention_dropout=config.get("attention_dropout", 0.0),
            activation_dropout=config.get("activation_dropout", 0.0), norm="pre", tie_embeddings=True,
            joint_vocab=True, output_vocab="target", positions="fairseq",
        )  # fmt: skip
    except KeyError as missing:
        raise MtkitError(f"{where}: no {missing}") from None
    model_config.validate()
    return model_config


def _fairseq_vocabulary(directory: Path, proto, rows: int) -> tuple[list[str], dict[str, str]]:
    """The token of each of the model's rows in fairseq's order (rows no token names: <unused-N>),
    and the languages: {code: token}."""
    vocab_json = directory / "vocab.json"
    named: dict[int, str] = dict(enumerate(FAIRSEQ_SPECIALS))
    if vocab_json.is_file():  # M2M100: vocab.json holds fairseq's dictionary
        vocab = read_json(vocab_json)
        named.update((i, t) for t, i in vocab.items())
        settings = (
            read_json(directory / "tokenizer_config.json") if (directory / "tokenizer_config.json").is_file() else {}
        )
        codes = M2M100_CODES.get(settings.get("language_codes", "m2m100"))
        if codes is None:
            raise MtkitError(
                f"{directory / 'tokenizer_config.json'}: unknown language_codes {settings['language_codes']!r}"
            )
        languages = {code: f"__{code}__" for code in codes}
        named.update((len(vocab) + i, f"__{code}__") for i, code in enumerate(codes))
    else:  # NLLB: SentencePiece's ids shifted by one, then the added tokens
        produced = set(produced_pieces(proto))
        named.update((i + 1, p.piece) for i, p in enumerate(proto.pieces) if p.piece in produced)
        added = _added_tokens(directory, len(proto.pieces) + 1)
        named.update(added)
        languages = {t: t for t in added.values() if t not in FAIRSEQ_SPECIALS and t != "<mask>"}
    if not languages:
        raise MtkitError(f"{directory / 'tokenizer_config.json'}: names no language codes")
    if max(named) >= rows:
        raise MtkitError(f"{directory}: the tokenizer names id {max(named):,}, but the model has {rows:,} rows")
    return [named.get(i, f"{UNUSED}{i}>") for i in range(rows)], languages


def _added_tokens(directory: Path, first: int) -> dict[int, str]:
    """NLLB's language codes and <mask>: tokenizer_config.json's added_tokens_decoder, or, in older
    files, its additional_special_tokens from id `first` on, then <mask>."""
    path = directory / "tokenizer_config.json"
    if not path.is_file():
        raise MtkitError(f"{path}: missing (it names the model's language codes)")
    settings = read_json(path)
    decoder = settings.get("added_tokens_decoder")
    if decoder:
        return {int(i): entry["content"] for i, entry in decoder.items() if int(i) >= len(FAIRSEQ_SPECIALS)}
    codes = list(settings.get("additional_special_tokens") or [])
    return {first + i: token for i, token in enumerate([*codes, "<mask>"])}


def _mtkit_order(config: dict, names: list[str], directory: Path) -> torch.Tensor:
    """For each mtkit id, the fairseq row it takes."""
    if names[:4] != FAIRSEQ_SPECIALS:
        raise MtkitError(f"{directory}: expected fairseq's {', '.join(FAIRSEQ_SPECIALS)} at ids 0-3")
    pad, eos, unk = 1, config["eos_token_id"], 3
    start = config["decoder_start_token_id"]
    return torch.tensor([pad, unk, start, eos] + [i for i in range(len(names)) if i not in (pad, eos, unk)])


def _weights(w: dict[str, torch.Tensor], cfg: ModelConfig, order: torch.Tensor) -> dict[str, torch.Tensor]:
    """mtkit's names for the model's weights (the same layout; the vocabulary reordered), tied as the
    model's own state dict ties them. Each source tensor is dropped once used: the peak stays near
    one copy of the model."""
    embeddings = w.pop("shared.weight")[order]
    for name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"):
        w.pop(name, None)
    positions = w.pop("encoder.embed_positions.weights", None)
    if positions is not None and not torch.equal(positions[2 : 2 + 64], fairseq_positions(64, cfg.d_model)):
        raise MtkitError("the model's positions are not the sinusoids fairseq computes")
    out = {"tgt_embed.tokens.weight": embeddings, "src_embed.tokens.weight": embeddings}
    for kind, theirs, ours in layer_names(cfg):
        if kind == "attention":
            for proj in ("q_proj", "out_proj"):
                for part in ("weight", "bias"):
                    out[f"{ours}.{proj}.{part}"] = w.pop(f"{theirs}.{proj}.{part}")
            for part in ("weight", "bias"):
                k, v = w.pop(f"{theirs}.k_proj.{part}"), w.pop(f"{theirs}.v_proj.{part}")
                out[f"{ours}.kv_proj.{part}"] = torch.cat([k, v])
        else:
            fcs = ("fc1", "fc2") if kind == "ffn" else ("",)
            for fc in fcs:
                source, target = (f"{theirs}.{fc}", f"{ours}.{fc}") if fc else (theirs, ours)
                for part in ("weight", "bias"):
                    out[f"{target}.{part}"] = w.pop(f"{source}.{part}")
    if w:
        raise MtkitError(f"weights mtkit has no place for: {', '.join(sorted(w)[:3])}")
    scored = torch.ones(len(order), dtype=torch.bool)
    scored[BOS_ID] = False  # the row of </s> is scored once, as </s>
    out["output.mask"] = scored
    with torch.device("meta"):  # every name in place, nothing allocated
        Transformer(cfg).load_state_dict(out, strict=True, assign=True)
    return out
