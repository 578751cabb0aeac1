"""Trim a model's vocabulary to the subwords that given texts use: smaller embedding and output
matrices (an imported NLLB model's 256k rows to the tens of thousands a few languages need), so
that fine-tuning needs less memory and the output layer costs less per decoding step.

Kept: the specials, every added token (language codes, tags, an imported model's fairseq <s>, which
its export puts back in place) but an imported model's rows that nothing produces (<mask>, rows no
token names), and every subword the tokenizer produces on the texts; for a BPE tokenizer also every
piece a kept piece is merged from, so that each merge that the texts take is still there. The
texts then encode exactly as before, each id renumbered (checked). Other text loses the pieces it
alone used: a unigram model segments it with the kept ones, a BPE model stops at the last kept
merge, and characters no kept piece covers become <unk>.
The rows keep their order, so mtkit's specials keep their ids. Models with one joint vocabulary only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import torch

from mtkit.core.errors import MtkitError
from mtkit.interop.m2m100 import UNUSED
from mtkit.model.files import ModelFile
from mtkit.text.tokenizer import SPECIAL_TOKENS, Tokenizer

CHUNK = 10_000  # lines encoded at a time


def kept_ids(tokenizer: Tokenizer, lines: Iterable[str]) -> list[int]:
    """The ids to keep, in order: the specials, the added tokens, those the lines use and their merge parts."""
    spec = json.loads(tokenizer.json_text)
    added = {entry["id"] for entry in spec["added_tokens"]
             if entry["content"] != "<mask>" and not entry["content"].startswith(UNUSED)}  # fmt: skip
    keep = set(range(len(SPECIAL_TOKENS))) | added
    chunk: list[str] = []
    for line in lines:
        chunk.append(line.strip())
        if len(chunk) == CHUNK:
            keep.update(i for row in tokenizer.encode_batch(chunk) for i in row)
            chunk = []
    keep.update(i for row in tokenizer.encode_batch(chunk) for i in row)
    model = spec["model"]
    if model["type"] == "BPE":
        vocab = model["vocab"]
        parts = {}
        for left, right in map(_pair, model["merges"]):
            if left + right in vocab:
                parts.setdefault(vocab[left + right], []).append((vocab[left], vocab[right]))
        pending = list(keep)
        while pending:
            for pair in parts.get(pending.pop(), []):
                for piece in pair:
                    if piece not in keep:
                        keep.add(piece)
                        pending.append(piece)
    return sorted(keep)


def _pair(merge: list[str] | str) -> tuple[str, str]:
    """A BPE merge as (left, right): tokenizers writes [left, right], older files "left right"."""
    left, right = merge if isinstance(merge, list) else merge.split(" ", 1)
    return left, right


def trimmed_tokenizer(tokenizer: Tokenizer, kept: list[int]) -> Tokenizer:
    """The tokenizer with only the kept ids, renumbered in order."""
    spec = json.loads(tokenizer.json_text)
    new_id = {old: new for new, old in enumerate(kept)}
    model = spec["model"]
    if model["type"] == "Unigram":
        model["vocab"] = [model["vocab"][old] for old in kept]
        model["unk_id"] = new_id[model["unk_id"]]
    elif model["type"] == "BPE":
        vocab = model["vocab"]
        model["vocab"] = {token: new_id[i] for token, i in vocab.items() if i in new_id}
        kept_pieces = {token for token, i in vocab.items() if i in new_id}
        model["merges"] = [m for m in model["merges"] if {*_pair(m), "".join(_pair(m))} <= kept_pieces]
    else:
        raise MtkitError(f"trimming a {model['type']} tokenizer is not supported (unigram and BPE are)")
    spec["added_tokens"] = [
        dict(entry, id=new_id[entry["id"]]) for entry in spec["added_tokens"] if entry["id"] in new_id
    ]
    return Tokenizer(json.dumps(spec, ensure_ascii=False))


def trim_vocabulary(model_file: ModelFile, lines: Iterable[str]) -> tuple[ModelFile, int]:
    """The model with only the rows that `lines` need (see the module's docstring), and the count
    of lines that encode otherwise than before (0: every one the same, as it should be)."""
    if model_file.src_tokenizer.json_text != model_file.tgt_tokenizer.json_text or not model_file.config.joint_vocab:
        raise MtkitError("trimming needs a model with one joint vocabulary")
    lines = list(lines)
    kept = kept_ids(model_file.src_tokenizer, lines)
    tokenizer = trimmed_tokenizer(model_file.src_tokenizer, kept)
    index = torch.tensor(kept)
    weights = dict(model_file.weights)
    for name in ("src_embed.tokens.weight", "tgt_embed.tokens.weight", "output.weight", "output.bias", "output.mask"):
        if name in weights:
            weights[name] = weights[name][index]
    if "src_embed.tokens.weight" in weights:  # tied, as the model's own state dict ties them
        weights["src_embed.tokens.weight"] = weights["tgt_embed.tokens.weight"]
    config = type(model_file.config)(**vars(model_file.config))
    config.src_vocab_size = config.tgt_vocab_size = len(kept)
    meta = {**model_file.meta, "trimmed_from": model_file.config.tgt_vocab_size}
    trimmed = ModelFile(config, weights, tokenizer, tokenizer, meta)
    new_id = {old: new for new, old in enumerate(kept)}
    before, after = model_file.src_tokenizer.encode_batch(lines), tokenizer.encode_batch(lines)
    differing = sum([new_id[i] for i in old] != new for old, new in zip(before, after))
    return trimmed, differing
