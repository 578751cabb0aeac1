"""`mtkit adapt`: a model fine-tuned on a translator's corrections within a time budget.

Continued training on the corrections (as OPUS-CAT fine-tunes a model on a TMX file), with a share of the
model's original data replayed beside them so that it keeps what it knew: without replay a small model
that learns a new domain forgets its old one (Freitag and Al-Onaizan, 2016; Chu et al., 2017). The replay
pool is larger than its share of an epoch, so each epoch draws a different part of it (a corpus weight
below 1: mtkit.data.preprocess.Corpus). The budget is the whole command's: what preparing the data takes
is taken from the training's. The model file written records what it learned from."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

from mtkit.core.config import Config, fine_tuning_config
from mtkit.core.errors import MtkitError
from mtkit.data.dataset import ParallelDataset, read_manifest
from mtkit.data.preprocess import Corpus, preprocess
from mtkit.model.files import ModelFile, load_model_file, resolve_model_path, save_model_file
from mtkit.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from mtkit.training.loss import TrainingObjective
from mtkit.training.train import train

REPLAY_POOL = 20  # replay pairs kept per pair an epoch takes of them (a new part each epoch), at most MAX_POOL
MAX_POOL = 100_000
SAVE_SECONDS = 15.0  # kept from the training's budget for writing the model file (at most 5% of the budget)
# The training settings adapt starts from (--set changes any): small batches (many updates in a few minutes
# on a CPU), a short warm-up and a linear decay to zero at the end of the budget. The learning rate and
# the replay share (0.25) were chosen by bench/adapt.py (docs/results/memory.md#adaptation).
ADAPT_SETTINGS = {
    "max_tokens": 2048,
    "lr": 1e-3,
    "warmup": 50,
    "lr_schedule": "linear",
    "log_every": 20,
    "save_every": 1_000_000,  # the run saves once, when the budget is spent
    "keep_last": 1,
    "keep_best": 0,
}

Pairs = list[tuple[str, str]]


@dataclasses.dataclass
class Adaptation:
    """What `adapt` did: the pairs it trained on, its updates and its seconds."""

    corrections: int
    replay_pool: int
    replay_share: float
    steps: int
    seconds: float
    reason: str


def adapt(
    model_file: ModelFile,
    model_path: Path,
    corrections: Pairs,
    output: Path,
    minutes: float,
    replay: Pairs | None = None,
    replay_share: float = 0.25,
    overrides: Sequence[str] = (),
    origin: str = "",
) -> Adaptation:
    """Fine-tune the model (`model_file`, read from `model_path`) on `corrections` for at most `minutes`
    (all of it: data and training) and write the result to `output`. replay: the original data's pairs
    (default: read from the model's data-bin); replay_share: the part of each epoch they make; origin:
    what the corrections are (a memory's name, or files), recorded in the model file."""
    start = time.monotonic()
    if not corrections:
        raise MtkitError("no corrections to adapt to (the memory or the files hold no pairs in the model's languages)")
    if not 0 <= replay_share < 1:
        raise MtkitError(f"--replay-share {replay_share:g}: must be in [0, 1)")
    if minutes <= 0:
        raise MtkitError(f"--minutes {minutes:g}: must be more than 0")
    languages = model_languages(model_file)
    pool = _replay_pool(model_file, replay, len(corrections), replay_share) if replay_share else []
    with tempfile.TemporaryDirectory(prefix="mtkit-adapt-") as tmp:
        data = _dataset(Path(tmp), model_file, languages, corrections, pool, replay_share)
        budget = minutes * 60 - min(SAVE_SECONDS, 3 * minutes) - (time.monotonic() - start)
        if budget <= 0:
            raise MtkitError(f"--minutes {minutes:g}: preparing the data took the whole budget; give more minutes")
        config = _config(model_file, budget, overrides)
        run_dir = Path(tmp) / "run"
        reason = train(config, data, run_dir, init_from=model_file)
        if reason.startswith("interrupted"):
            raise MtkitError(f"adapt: interrupted; {output} was not written")
        adapted = load_model_file(resolve_model_path(run_dir, "last"))
        steps = int(adapted.meta.get("step", 0))
        seconds = time.monotonic() - start
        adapted.meta = {
            **adapted.meta,
            "data_dir": model_file.meta.get("data_dir", ""),  # adapting again replays the original data
            "adapted": _record(model_path, model_file, origin, corrections, pool, replay_share, steps, seconds),
        }
        save_model_file(output, adapted)
    return Adaptation(len(corrections), len(pool), replay_share if pool else 0.0, steps, seconds, reason)


def model_languages(model_file: ModelFile) -> tuple[str, str]:
    src, tgt = model_file.meta.get("src_lang"), model_file.meta.get("tgt_lang")
    if not (src and tgt) or model_file.meta.get("target_tags"):
        raise MtkitError(
            "adapt: the model must translate one language pair and say which "
            "(a multilingual model: fine-tune it with mtkit train --init-from on a dataset of its directions)"
        )
    return src, tgt


def _replay_pool(model_file: ModelFile, given: Pairs | None, corrections: int, share: float) -> Pairs:
    """Up to REPLAY_POOL times the replay pairs an epoch takes: the given pairs, or the model's data-bin's."""
    wanted = min(MAX_POOL, REPLAY_POOL * _per_epoch(corrections, share))
    rng = np.random.default_rng(0)
    if given is not None:
        if not given:
            raise MtkitError("--replay-src/--replay-ref: no pairs")
        chosen = rng.choice(len(given), size=min(wanted, len(given)), replace=False)
        return [given[i] for i in sorted(chosen)]
    data_dir = Path(model_file.meta.get("data_dir") or "")
    if not model_file.meta.get("data_dir") or not (data_dir / "manifest.json").is_file():
        raise MtkitError(
            f"the model's training data ({data_dir or 'not recorded in the model file'}) is not here: give the "
            "original pairs with --replay-src and --replay-ref, or --replay-share 0 to train on the corrections alone"
        )
    return _decoded_pairs(data_dir, model_file, wanted, rng)


def _per_epoch(corrections: int, share: float) -> int:
    return max(1, round(corrections * share / (1 - share)))


def _decoded_pairs(data_dir: Path, model_file: ModelFile, wanted: int, rng: np.random.Generator) -> Pairs:
    manifest = read_manifest(data_dir)
    if manifest["src_tokenizer"]["sha256"] != model_file.src_tokenizer.sha256:
        raise MtkitError(f"{data_dir}: its tokenizers are not the model's; give the replay pairs with --replay-src")
    train = ParallelDataset(data_dir, "train", manifest)
    chosen = np.sort(rng.choice(len(train), size=min(wanted, len(train)), replace=False))
    sources = model_file.src_tokenizer.decode_batch([train.src[int(i)].tolist() for i in chosen])
    targets = model_file.tgt_tokenizer.decode_batch([train.tgt[int(i)].tolist() for i in chosen])
    return list(zip(sources, targets))


def _dataset(
    tmp: Path, model_file: ModelFile, languages: tuple[str, str], corrections: Pairs, pool: Pairs, share: float
) -> Path:
    """A data-bin of the corrections (weight 1) and the replay pool (the weight that makes it `share`
    of an epoch), made with the model's own tokenizers."""
    src, tgt = languages
    corpora = [Corpus("corrections", _written(tmp / "corrections", languages, corrections))]
    if pool:
        weight = min(1.0, _per_epoch(len(corrections), share) / len(pool))
        corpora.append(Corpus("replay", _written(tmp / "replay", languages, pool), weight))
    tokenizers = _saved(model_file.src_tokenizer, tmp / "src-tokenizer.json"), None
    if model_file.tgt_tokenizer is not model_file.src_tokenizer:
        tokenizers = tokenizers[0], _saved(model_file.tgt_tokenizer, tmp / "tgt-tokenizer.json")
    output = tmp / "data-bin"
    preprocess(src, tgt, {"train": corpora}, tokenizers[0], output, tokenizers[1])
    return output


def _written(prefix: Path, languages: tuple[str, str], pairs: Pairs) -> Path:
    for side, lang in enumerate(languages):
        lines = (" ".join(pair[side].split()) for pair in pairs)  # one line each, whatever the text held
        Path(f"{prefix}.{lang}").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return prefix


def _saved(tokenizer: Tokenizer, path: Path) -> Path:
    tokenizer.save(path)
    return path


def _config(model_file: ModelFile, budget: float, overrides: Sequence[str]) -> Config:
    settings = [f"train.{key}={value}" for key, value in {**ADAPT_SETTINGS, "max_time": round(budget, 1)}.items()]
    return fine_tuning_config(model_file.config, None, [*settings, *overrides])


def _record(
    model_path: Path, model_file: ModelFile, origin: str, corrections: Pairs, pool: Pairs, share: float,
    steps: int, seconds: float,
) -> dict:  # fmt: skip
    """What the adapted model learned from, for whoever reads its file later."""
    digest = hashlib.sha256("".join(f"{s}\t{t}\n" for s, t in corrections).encode()).hexdigest()
    return {
        "from_model": str(Path(model_path).resolve()),
        "from_step": model_file.meta.get("step"),
        "corrections": {"source": origin, "pairs": len(corrections), "sha256": digest},
        "replay": {"pairs": len(pool), "share": share if pool else 0.0},
        "steps": steps,
        "seconds": round(seconds, 1),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "previous": model_file.meta.get("adapted"),
    }


STEER_STEPS, STEER_LR, STEER_MATCHES = 10, 1e-3, 3  # chosen by bench/fuzzy_steering.py (results/memory.md)


class Steering:
    """Fuzzy matches steering the model at request time, as ModernMT does: a sentence's translation made
    after a few updates of a copy of the model (fp32, on the CPU) on the sentence's matches; the weights
    put back after each sentence. Called with (sentence, [(source, target) of its matches, best first])."""

    def __init__(self, model_file: ModelFile, cfg, steps: int = STEER_STEPS, lr: float = STEER_LR):
        from mtkit.translation.translate import Translator

        self.translator = Translator(model_file, cfg, device="cpu", precision="fp32")
        self.model = model_file.build_model("cpu")  # its own copy, not packed for inference: it trains
        self.translator.model = self.translator.searcher = self.model
        self.steps, self.lr = steps, lr
        self._lock = threading.Lock()  # one sentence at a time: the copy's weights are changed and put back

    def __call__(self, sentence: str, pairs: Pairs) -> str:
        with self._lock:
            return steered_translation(
                self.translator, self.model, sentence, pairs[:STEER_MATCHES], self.steps, self.lr
            )


def steered_translation(translator, model: torch.nn.Module, sentence: str, pairs: Pairs, steps: int, lr: float) -> str:
    """Request-time adaptation as ModernMT does it: `steps` Adam updates of `model` (the one `translator`
    searches with, fp32) on a sentence's fuzzy matches `pairs`, all in one batch, without dropout; the
    sentence translated; the weights put back as they were."""
    saved = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    sources = [[*ids, EOS_ID] for ids in translator.src_tokenizer.encode_batch([s for s, _ in pairs])]
    targets = translator.tgt_tokenizer.encode_batch([t for _, t in pairs])
    src, tgt_in, tgt_out = (
        pad_sequence([torch.tensor(row) for row in rows], batch_first=True, padding_value=PAD_ID)
        for rows in (sources, [[BOS_ID, *ids] for ids in targets], [[*ids, EOS_ID] for ids in targets])
    )
    objective = TrainingObjective(model, label_smoothing=0.1)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.eval()  # no dropout: a sentence with the same matches is translated the same way every time
    try:
        for _ in range(steps):
            loss, _ = objective(src, tgt_in, tgt_out)
            optimizer.zero_grad()
            (loss / int((tgt_out != PAD_ID).sum())).backward()
            optimizer.step()
        with torch.no_grad():
            return translator.translate_hypotheses([sentence])[0][0][1]
    finally:
        model.load_state_dict(saved)
