"""Validation during training: loss and perplexity on the validation set, and BLEU/chrF of real decoding.

The scores come from `mtkit.translation.evaluate.corpus_scores`, the function `mtkit evaluate` uses, against the
raw reference lines, so a run's validation BLEU means what `mtkit evaluate` would print. Under
torchrun every rank takes a shard (every world_size-th batch and sentence) and the results are
gathered, so no rank idles in a collective while another decodes the whole set.
"""

from __future__ import annotations

import math

import torch

from mtkit.core.config import TrainConfig
from mtkit.core.device import autocast
from mtkit.core.distributed import Distributed
from mtkit.core.errors import MtkitError
from mtkit.data.batching import collate, make_batches
from mtkit.data.dataset import ParallelDataset
from mtkit.decoding.constraints import without_line_breaks
from mtkit.decoding.search import translate_ids
from mtkit.decoding.search_rules import SearchConfig
from mtkit.model.transformer import Transformer
from mtkit.text.tokenizer import Tokenizer
from mtkit.training.loss import TrainingObjective
from mtkit.translation.evaluate import corpus_scores
from mtkit.translation.translate import without_start

VALID_BATCH_TOKENS = 1 << 14  # validation batches are at least this large: no gradients to keep


@torch.no_grad()
def validate(
    model: Transformer,
    data: ParallelDataset,
    tgt_tokenizer: Tokenizer,
    cfg: TrainConfig,
    device: torch.device,
    precision: str,
    dist: Distributed | None = None,
) -> dict[str, float]:
    """valid_loss (NLL per target token), valid_ppl and, when asked for, valid_bleu and valid_chrf."""
    dist = dist or Distributed()
    model.eval()
    result = _loss(model, data, cfg, device, precision, dist)
    if cfg.valid_metric != "loss" or cfg.valid_beam > 1:
        result.update(_decoding_scores(model, data, tgt_tokenizer, cfg, device, precision, dist))
    model.train()
    return result


def _loss(
    model: Transformer, data: ParallelDataset, cfg: TrainConfig, device: torch.device, precision: str, dist: Distributed
) -> dict[str, float]:
    objective = TrainingObjective(model, cfg.label_smoothing)
    nll_sum = tokens = 0.0
    batches, _ = make_batches(
        data.src_lengths, data.tgt_lengths, max(cfg.max_tokens, VALID_BATCH_TOKENS), 0, 0, shuffle=False
    )
    for indices in batches[dist.rank :: dist.world_size]:
        batch = collate(data, indices).to(device)
        with autocast(device, precision):
            _, nll = objective(batch.src, batch.tgt_in, batch.tgt_out)
        nll_sum, tokens = nll_sum + nll.item(), tokens + batch.tgt_tokens
    nll_sum, tokens = dist.sum([nll_sum, float(tokens)])
    return {"valid_loss": nll_sum / tokens, "valid_ppl": math.exp(min(nll_sum / tokens, 50.0))}


def _decoding_scores(
    model: Transformer,
    data: ParallelDataset,
    tgt_tokenizer: Tokenizer,
    cfg: TrainConfig,
    device: torch.device,
    precision: str,
    dist: Distributed,
) -> dict[str, float]:
    """valid_bleu and valid_chrf; for a multilingual set, each direction's (valid_bleu_en-de, ...) too,
    and valid_bleu and valid_chrf are their macro averages. valid_max_sentences counts per direction."""
    segments = direction_segments(data, cfg.valid_max_sentences)
    chosen = [i for _, indices in segments for i in indices]
    shard = chosen[dist.rank :: dist.world_size]
    lead = data.tgt.lead.tolist()  # given, as translation gives it: a model's target-language token
    search_cfg = SearchConfig(beam=cfg.valid_beam, lenpen=0.6 if cfg.valid_beam > 1 else 1.0, given_prefix=len(lead))
    search_cfg = without_line_breaks(search_cfg, tgt_tokenizer)
    prefixes = [lead] * len(shard) if lead else None
    hyps = translate_ids(model, [data.src[i] for i in shard], search_cfg, device, precision, prefixes=prefixes)
    mine = tgt_tokenizer.decode_batch([without_start(h, len(lead))[0].tokens if h else [] for h in hyps])
    texts: dict[int, str] = {}
    for indices, decoded in zip(dist.gather_objects(shard), dist.gather_objects(mine)):
        texts.update(zip(indices, decoded))
    references = data.raw_lines("tgt")
    result = {}
    for name, indices in segments:
        scores = corpus_scores([texts[i] for i in indices], [[references[i] for i in indices]], ["bleu", "chrf"])
        suffix = f"_{name}" if name else ""
        result[f"valid_bleu{suffix}"], result[f"valid_chrf{suffix}"] = scores["bleu"]["score"], scores["chrf"]["score"]
    if len(segments) > 1:  # the macro averages, first
        per_direction = [f"_{name}" for name, _ in segments]
        averages = {
            f"valid_{m}": sum(result[f"valid_{m}{d}"] for d in per_direction) / len(segments) for m in ("bleu", "chrf")
        }
        result = {**averages, **result}
    return result


def metric_key(cfg: TrainConfig) -> str:
    """The score that picks the best checkpoints and stops early: valid_bleu, or valid_bleu_en-de with
    train.valid_direction en-de."""
    return f"valid_{cfg.valid_metric}" + (f"_{cfg.valid_direction}" if cfg.valid_direction else "")


def check_valid_direction(direction: str, manifest: dict) -> None:
    """train.valid_direction names one of the dataset's directions, or is empty."""
    if not direction:
        return
    directions = ["-".join(pair) for pair in manifest.get("directions", [])]
    if direction not in directions:
        have = f"its directions are {', '.join(directions)}" if directions else "it is not multilingual"
        raise MtkitError(f"train.valid_direction {direction}: not a direction of the dataset ({have})")


def direction_segments(data: ParallelDataset, max_sentences: int = 0) -> list[tuple[str | None, list[int]]]:
    """The sentences of a valid split to decode, by direction: [(None, indices)] for a bilingual set,
    [("en-de", indices), ...] for a multilingual one; the first max_sentences of each (0: all)."""
    directions = data.manifest.get("split_directions", {}).get(data.split)
    spans = [(f"{s}-{t}", n) for s, t, n in directions] if directions else [(None, len(data))]
    segments, start = [], 0
    for name, count in spans:
        taken = min(count, max_sentences) if max_sentences else count
        segments.append((name, list(range(start, start + taken))))
        start += count
    return segments
