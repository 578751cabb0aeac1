"""Text in, text out: encode, batch by length, search, restore the input order, decode."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch

from mtkit.checkpoint import ModelFile
from mtkit.errors import MtkitError
from mtkit.model import Transformer
from mtkit.search import Hypothesis, SearchConfig, pad_batch, search
from mtkit.tokenizer import EOS_ID


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise MtkitError("device cuda was asked for, but no CUDA GPU is available (use --device cpu)")
    if device not in ("cpu", "cuda"):
        raise MtkitError(f"device {device!r}: must be auto, cpu or cuda")
    return torch.device(device)


def resolve_precision(precision: str, device: torch.device) -> str:
    """auto: bf16 on a GPU that supports it, else fp16 on CUDA, fp32 on CPU."""
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "fp32"
    if precision not in ("fp32", "bf16", "fp16"):
        raise MtkitError(f"precision {precision!r}: must be auto, fp32, bf16 or fp16")
    return precision


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def length_batches(lengths: Sequence[int], batch_size: int, max_tokens: int) -> Iterator[np.ndarray]:
    """Indices grouped longest first, each group within batch_size sentences and max_tokens source tokens."""
    order = np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable")
    group: list[int] = []
    longest = 0
    for index in order.tolist():
        width = max(longest, lengths[index] + 1)
        if group and (len(group) >= batch_size or (len(group) + 1) * width > max_tokens):
            yield np.array(group)
            group, width = [], lengths[index] + 1
        group.append(index)
        longest = width
    if group:
        yield np.array(group)


@torch.no_grad()
def translate_ids(
    model: Transformer,
    sentences: Sequence[Sequence[int]],
    cfg: SearchConfig,
    device: torch.device,
    precision: str = "fp32",
    batch_size: int = 128,
    max_tokens: int = 8192,
) -> list[list[Hypothesis]]:
    """Search for every sentence of subword ids, batched by length; results in input order."""
    results: list[list[Hypothesis]] = [[] for _ in sentences]
    lengths = [len(s) for s in sentences]
    for group in length_batches(lengths, batch_size, max(1, max_tokens // cfg.beam)):
        src = pad_batch([sentences[i] for i in group], device, suffix=EOS_ID)
        with autocast(device, precision):
            hypotheses = search(model, src, cfg)
        for index, hyps in zip(group.tolist(), hypotheses):
            results[index] = hyps
    return results


class TextTranslator:
    """What every engine offers on top of its translate_hypotheses(lines)."""

    def translate_hypotheses(self, lines: Sequence[str]) -> list[list[tuple[Hypothesis, str]]]:
        raise NotImplementedError

    def translate(self, lines: Sequence[str]) -> list[str]:
        """The best translation of each line ("" for a blank line)."""
        return [nbest[0][1] if nbest else "" for nbest in self.translate_hypotheses(lines)]

    def translate_stream(
        self, lines: Iterable[str], chunk_lines: int
    ) -> Iterator[tuple[str, list[tuple[Hypothesis, str]]]]:
        """Translate an endless stream in chunks, yielding (line, its n-best) in input order."""
        chunk: list[str] = []
        for line in lines:
            chunk.append(line)
            if len(chunk) >= chunk_lines:
                yield from zip(chunk, self.translate_hypotheses(chunk))
                chunk = []
        if chunk:
            yield from zip(chunk, self.translate_hypotheses(chunk))


class Translator(TextTranslator):
    """A loaded model ready to translate raw lines with mtkit's own (PyTorch) search."""

    def __init__(
        self,
        model_file: ModelFile,
        cfg: SearchConfig,
        device: str = "auto",
        precision: str = "auto",
        batch_size: int = 128,
        max_tokens: int = 8192,
    ):
        cfg.validate()
        self.cfg = cfg
        self.device = resolve_device(device)
        self.precision = resolve_precision(precision, self.device)
        self.model = model_file.build_model(self.device)
        self.src_tokenizer, self.tgt_tokenizer = model_file.src_tokenizer, model_file.tgt_tokenizer
        self.batch_size, self.max_tokens = batch_size, max_tokens

    def translate_hypotheses(self, lines: Sequence[str]) -> list[list[tuple[Hypothesis, str]]]:
        """n-best (hypothesis, detokenized text) per line; a blank line gets no hypotheses."""
        stripped = [line.strip() for line in lines]
        wanted = [i for i, line in enumerate(stripped) if line]
        ids = self.src_tokenizer.encode_batch([stripped[i] for i in wanted])
        found = translate_ids(self.model, ids, self.cfg, self.device, self.precision, self.batch_size, self.max_tokens)
        out: list[list[tuple[Hypothesis, str]]] = [[] for _ in lines]
        for i, hyps in zip(wanted, found):
            texts = self.tgt_tokenizer.decode_batch([h.tokens for h in hyps])
            out[i] = list(zip(hyps, texts))
        return out

    def alignment(self, line: str, hypothesis: Hypothesis) -> str:
        """Pharaoh-format word alignment of a translation (see mtkit.attention.word_alignment)."""
        from mtkit.attention import attention_weights, pharaoh, word_alignment

        src_line = line.strip()
        src_ids = self.src_tokenizer.encode_batch([src_line])[0]
        weights = attention_weights(self.model, src_ids, hypothesis.tokens)
        tgt_tokens = [self.tgt_tokenizer.id_to_token(i) for i in hypothesis.tokens]
        return pharaoh(word_alignment(weights["cross"], self.src_tokenizer.tokens(src_line), tgt_tokens))
