"""A SentencePiece model (an imported model's tokenizer) as a tokenizers JSON with mtkit's ids.

The pieces keep SentencePiece's segmentation: a unigram model keeps its pieces and scores; a BPE
model's merges are ranked by the score of the piece they form, which is the order SentencePiece
merges in. Entries of the imported vocabulary that the SentencePiece model lacks (a joint
vocabulary's other side, a language code) are stored with a leading NUL
(mtkit.text.tokenizer.UNPRODUCED), which no normalized text holds: the model never forms them.
The normalizer is SentencePiece's own (its precompiled character map), whitespace as it handles it.
Needs sentencepiece and protobuf (`pip install 'mtkit[marian]'`).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from mtkit.core.errors import MtkitError
from mtkit.text.tokenizer import SPECIAL_TOKENS, UNK, UNPRODUCED

# The special tokens' score: below any path of real pieces, so that typed "</s>" stays text, as
# SentencePiece's control symbols do (mtkit finds them by their plain names: no NUL for them).
SPECIAL_SCORE = -1e6
UNIGRAM, BPE = 1, 2  # SentencePiece's model types
NORMAL = 1  # SentencePiece's type of a piece that text forms


def read_model(path: Path, needs: str):
    """The ModelProto of a SentencePiece model file; `needs`: the pip command named if sentencepiece is missing."""
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError:
        raise MtkitError(f"reading {path.name} needs sentencepiece and protobuf: {needs}") from None
    if not path.is_file():
        raise MtkitError(f"{path}: missing (the model's SentencePiece model)")
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(path.read_bytes())
    except Exception as err:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise MtkitError(f"{path}: not a SentencePiece model ({err})") from None
    if proto.trainer_spec.model_type not in (UNIGRAM, BPE):
        raise MtkitError(f"{path}: a SentencePiece model of type {proto.trainer_spec.model_type}; only unigram and BPE ones are supported")  # fmt: skip
    return proto


def produced_pieces(proto) -> list[str]:
    """The pieces that the model forms from text, in its id order."""
    return [p.piece for p in proto.pieces if p.type == NORMAL]


def tokenizer_json(proto, tokens: list[str], extra_specials: tuple[str, ...] = ()) -> str:
    """A tokenizers JSON segmenting as `proto` does, with `tokens` (mtkit's four specials first) as its
    vocabulary in id order; extra_specials: tokens that are added special tokens (language codes),
    never formed from text and dropped from decoded text."""
    scores = {p.piece: p.score for p in proto.pieces if p.type == NORMAL}
    specials = set(SPECIAL_TOKENS) | set(extra_specials)
    names = [t if t in scores or t in specials else UNPRODUCED + t for t in tokens]
    if proto.trainer_spec.model_type == UNIGRAM:
        vocab = [(t, scores.get(t, SPECIAL_SCORE * len(t) if t in specials else SPECIAL_SCORE)) for t in names]
        model = models.Unigram(vocab, unk_id=SPECIAL_TOKENS.index(UNK), byte_fallback=False)
    else:
        model = models.BPE({t: i for i, t in enumerate(names)}, _merges(scores), unk_token=UNK, fuse_unk=True)
    tokenizer = HFTokenizer(model)
    spec = proto.normalizer_spec
    steps = [normalizers.Replace(UNPRODUCED, "")]
    if spec.precompiled_charsmap:
        steps.append(normalizers.Precompiled(spec.precompiled_charsmap))
    if spec.remove_extra_whitespaces:
        steps += [normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")]
    tokenizer.normalizer = normalizers.Sequence(steps)
    prepend = "always" if spec.add_dummy_prefix else "never"
    # "<" starts a piece of its own, as in mtkit's tokenizers, so that typed "</s>" stays text
    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([metaspace, pre_tokenizers.Split(Regex("▁?<"), "isolated")])
    unspace = decoders.Metaspace(replacement="▁", prepend_scheme=prepend)
    tokenizer.decoder = decoders.Sequence([decoders.Replace(UNPRODUCED, ""), unspace])
    added = [t for t in tokens if t in specials]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in added])
    return tokenizer.to_str()


def _merges(scores: dict[str, float]) -> list[tuple[str, str]]:
    """A BPE model's merges: every split of a piece into two pieces, ranked by the formed piece's
    score (SentencePiece merges the best-scored pair first), then by where the split falls."""
    found = []
    for piece, score in scores.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in scores and right in scores:
                found.append((-score, scores[left] * -1, scores[right] * -1, left, right))
    found.sort()
    return [(left, right) for *_, left, right in found]
