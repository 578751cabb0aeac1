"""The one typed configuration that flows through training: strict YAML + dotted overrides.

Precedence: dataclass defaults < the preset named by `model.preset` < the YAML file <
`--set section.key=value`. An unknown key or a value of the wrong type is an error that
names the key and the valid choices. The resolved configuration is saved in the run dir.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from mtkit.core.errors import MtkitError

PRESETS: dict[str, dict[str, Any]] = {
    # Vaswani et al. 2017, Table 3.
    "transformer-base": dict(d_model=512, heads=8, ffn_dim=2048, encoder_layers=6, decoder_layers=6, dropout=0.1),
    "transformer-big": dict(d_model=1024, heads=16, ffn_dim=4096, encoder_layers=6, decoder_layers=6, dropout=0.3),
    # Sized for Multi30k / IWSLT on a few CPU cores.
    "transformer-small": dict(d_model=256, heads=4, ffn_dim=1024, encoder_layers=3, decoder_layers=3, dropout=0.3),
    # transformer-small's depth with 60% of its matrix products: more updates where training is slow
    # (the quick Multi30k recipe on a CPU that trains in fp32).
    "transformer-narrow": dict(d_model=192, heads=4, ffn_dim=768, encoder_layers=3, decoder_layers=3, dropout=0.3),
    # Bergamot's "tiny" student (browsermt/students): a deep encoder, run once per sentence, and a
    # shallow decoder, run once per output token; trained on a teacher's translations, decoded greedily.
    "transformer-student": dict(d_model=256, heads=8, ffn_dim=1536, encoder_layers=6, decoder_layers=2, dropout=0.1),
    # A few thousand parameters besides the embeddings: for tests.
    "transformer-tiny": dict(d_model=16, heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=1, dropout=0.0),
}

DEFAULT_BEAM = 5
PRESET_BEAMS = {"transformer-student": 1}  # a student decodes greedily: its teacher's search is in its data


def default_beam(preset: str) -> int:
    """The beam a model of this preset decodes with unless told otherwise."""
    return PRESET_BEAMS.get(preset, DEFAULT_BEAM)


@dataclass
class ModelConfig:
    preset: str = "transformer-small"
    d_model: int = 256
    heads: int = 4
    ffn_dim: int = 1024
    encoder_layers: int = 3
    decoder_layers: int = 3
    dropout: float = 0.3
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    norm: Literal["post", "pre"] = "post"
    tie_embeddings: bool = True  # target input = output; all three when the vocabulary is joint
    src_vocab_size: int = 0  # filled in from the dataset
    tgt_vocab_size: int = 0
    joint_vocab: bool = False
    # all: the output layer scores every subword. target: only the subwords on the training data's
    # target side (and <unk>, </s>); the rest of a joint vocabulary is never predicted and costs nothing.
    output_vocab: Literal["all", "target"] = "all"
    activation: Literal["relu", "swish", "gelu"] = "relu"  # the FFN's: the paper's ReLU; swish (SiLU) as OPUS-MT's
    output_bias: bool = False  # a bias on the output layer's logits (MarianMT's final_logits_bias)
    positions: Literal["sinusoidal", "fairseq"] = "sinusoidal"  # the paper's table, or fairseq's (NLLB's, M2M100's)

    def validate(self) -> None:
        if self.d_model % self.heads:
            raise MtkitError(f"model.d_model ({self.d_model}) must be divisible by model.heads ({self.heads})")
        for name in ("d_model", "heads", "ffn_dim", "encoder_layers", "decoder_layers"):
            if getattr(self, name) < 1:
                raise MtkitError(f"model.{name} must be at least 1")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise MtkitError(f"model.{name} must be in [0, 1)")


@dataclass
class TrainConfig:
    max_tokens: int = 4096  # padded source + target tokens per batch (per process)
    update_freq: int = 1
    lr: float = 7e-4  # peak learning rate, reached at the end of warmup
    warmup: int = 4000
    lr_schedule: Literal["inverse_sqrt", "linear"] = "inverse_sqrt"  # linear: decays to 0 at max_steps/max_time
    label_smoothing: float = 0.1
    clip_norm: float = 0.0  # 0 = no clipping
    weight_decay: float = 0.0
    max_steps: int = 100_000
    max_epochs: int = 0  # 0 = no limit
    max_time: float = 0.0  # seconds of training wall-clock; 0 = no limit
    precision: Literal["auto", "fp32", "bf16", "fp16", "fp8"] = (
        "auto"  # fp8: GPUs from Ada/Hopper on (mtkit.training.float8)
    )
    device: Literal["auto", "cpu", "cuda"] = "auto"
    seed: int = 1
    log_every: int = 100
    valid_every: int = 1000
    save_every: int = 1000
    keep_last: int = 5
    keep_best: int = 1
    patience: int = 0  # validations without improvement before stopping; 0 = never stop early
    valid_metric: Literal["bleu", "chrf", "loss"] = "bleu"
    valid_beam: int = 1
    valid_max_sentences: int = 0  # decode only the first N valid sentences for BLEU; 0 = all
    threads: int = 0  # torch intra-op threads on CPU; 0 = torch's default
    ema_decay: float = 0.0  # keep an exponential moving average of the weights (e.g. 0.9999); 0 = off
    rdrop_alpha: float = 0.0  # R-Drop: weight of the KL term between two dropout passes (e.g. 5); 0 = off
    compile: bool = False  # torch.compile the model and loss (GPU training: fused kernels; minutes to compile)
    pack_length: int = 0  # pack several pairs into rows of this many tokens a side (one batch shape); 0 = pad
    cuda_graphs: bool = False  # replay the compiled model as CUDA graphs (GPU; needs compile and pack_length)
    flex_attention: bool = False  # packed rows' attention by FlexAttention (no attention dropout; compile on GPUs)
    collective_timeout: float = 600.0  # seconds a process waits for the others in a collective before it stops
    sampling_temperature: float = 1.0  # corpus i's share of an epoch ~ (weight_i x pairs_i)^(1/T); 1 = as weighted
    valid_direction: str = ""  # multilingual: the direction (en-de) whose valid_metric picks checkpoints; "": average
    freeze_embeddings: bool = False  # the embeddings (and the output layer tied to them) are not trained: no Adam state

    def validate(self) -> None:
        at_least_one = ("max_tokens", "update_freq", "max_steps", "log_every", "valid_every", "save_every")
        for name in (*at_least_one, "valid_beam", "keep_last"):
            if getattr(self, name) < 1:
                raise MtkitError(f"train.{name} must be at least 1")
        if self.collective_timeout <= 0:
            raise MtkitError("train.collective_timeout must be more than 0 seconds")
        if self.valid_direction and self.valid_metric == "loss":
            raise MtkitError(
                "train.valid_direction needs train.valid_metric bleu or chrf (the loss is the whole set's)"
            )
        if self.sampling_temperature <= 0:
            raise MtkitError("train.sampling_temperature must be more than 0 (1: the corpora as weighted)")
        not_negative = ("warmup", "clip_norm", "weight_decay", "max_epochs", "max_time", "keep_best", "patience")
        for name in (*not_negative, "valid_max_sentences", "threads", "rdrop_alpha"):
            if getattr(self, name) < 0:
                raise MtkitError(f"train.{name} must not be negative")
        if self.lr < 0:
            raise MtkitError("train.lr must not be negative")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise MtkitError("train.label_smoothing must be in [0, 1)")
        if not 0.0 <= self.ema_decay < 1.0:
            raise MtkitError("train.ema_decay must be in [0, 1) (0 = no moving average)")
        self._validate_packing()

    def _validate_packing(self) -> None:
        if self.pack_length and not 2 <= self.pack_length <= self.max_tokens // 2:
            raise MtkitError("train.pack_length must be 0 (off) or from 2 to train.max_tokens / 2")
        if self.pack_length and self.rdrop_alpha:
            raise MtkitError("train.rdrop_alpha cannot be combined with train.pack_length")
        if self.flex_attention and not self.pack_length:
            raise MtkitError("train.flex_attention needs a train.pack_length (it attends within packed rows)")
        if self.cuda_graphs and not (self.compile and self.pack_length):
            raise MtkitError("train.cuda_graphs needs train.compile=true and a train.pack_length (one batch shape)")


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: Path) -> None:
        from mtkit.core.textio import write_text_atomic

        write_text_atomic(path, yaml.safe_dump(self.to_dict(), sort_keys=False))


# Settings that may change when a run is resumed: they stop or report, but do not change the model or data order.
RESUMABLE_KEYS = {
    "train.max_steps",
    "train.max_epochs",
    "train.max_time",
    "train.patience",
    "train.log_every",
    "train.valid_every",
    "train.save_every",
    "train.keep_last",
    "train.keep_best",
    "train.device",
    "train.valid_beam",
    "train.valid_max_sentences",
    "train.threads",
    "train.compile",
    "train.cuda_graphs",
    "train.flex_attention",
    "train.collective_timeout",
}


def _check_type(key: str, value: Any, annotation: Any) -> Any:
    """Return `value` converted to the field type, or raise naming `key`."""
    if get_origin(annotation) is Literal:
        choices = get_args(annotation)
        if value not in choices:
            raise MtkitError(f"{key}: {value!r} is not one of {', '.join(map(str, choices))}")
        return value
    if annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "5e-4" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif annotation is str:
        if isinstance(value, str):
            return value
    raise MtkitError(f"{key}: expected {annotation.__name__}, got {value!r}")


def _build(cls: type, values: dict[str, Any], section: str) -> Any:
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        if key not in valid:
            raise MtkitError(f"unknown config key '{section}.{key}'; valid keys: {', '.join(valid)}")
        kwargs[key] = _check_type(f"{section}.{key}", value, hints[key])
    return cls(**kwargs)


def parse_overrides(assignments: list[str]) -> dict[str, dict[str, Any]]:
    """`["train.lr=5e-4", "model.norm=pre"]` -> {"train": {"lr": 0.0005}, "model": {"norm": "pre"}}."""
    tree: dict[str, dict[str, Any]] = {}
    for assignment in assignments:
        key, sep, raw = assignment.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or not name:
            raise MtkitError(f"--set {assignment!r}: expected section.key=value, e.g. train.lr=5e-4")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        tree.setdefault(section, {})[name] = value
    return tree


def merge_trees(base: dict, update: dict) -> dict:
    merged = {section: dict(values) for section, values in base.items()}
    for section, values in update.items():
        merged.setdefault(section, {}).update(values)
    return merged


def read_yaml(path: Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise MtkitError(f"{path}: no such config file")
    try:
        tree = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as err:
        raise MtkitError(f"{path}: not a YAML config (invalid UTF-8 at byte {err.start + 1})") from None
    except yaml.YAMLError as err:
        line = f":{err.problem_mark.line + 1}" if getattr(err, "problem_mark", None) else ""
        raise MtkitError(f"{path}{line}: not valid YAML ({getattr(err, 'problem', err)})") from None
    if not isinstance(tree, dict) or not all(isinstance(v, dict) for v in tree.values()):
        raise MtkitError(f"{path}: expected sections 'model:' and 'train:' holding key: value pairs")
    return tree


def build_config(tree: dict[str, dict[str, Any]]) -> Config:
    """Resolve a config tree (from YAML and overrides) into a validated Config."""
    sections = {f.name for f in dataclasses.fields(Config)}
    for section in tree:
        if section not in sections:
            raise MtkitError(f"unknown config section '{section}'; valid sections: {', '.join(sorted(sections))}")
    model_values = dict(tree.get("model", {}))
    preset = model_values.get("preset", ModelConfig.preset)
    if preset not in PRESETS:
        raise MtkitError(f"model.preset: {preset!r} is not one of {', '.join(PRESETS)}")
    config = Config(
        model=_build(ModelConfig, {**PRESETS[preset], **model_values}, "model"),
        train=_build(TrainConfig, dict(tree.get("train", {})), "train"),
    )
    config.model.validate()
    config.train.validate()
    return config


def config_from_dict(tree: dict[str, dict[str, Any]]) -> Config:
    """Rebuild a saved (already resolved) config without re-applying the preset."""
    config = Config(
        model=_build(ModelConfig, dict(tree.get("model", {})), "model"),
        train=_build(TrainConfig, dict(tree.get("train", {})), "train"),
    )
    config.model.validate()
    return config


def load_config(path: Path | None, overrides: list[str]) -> Config:
    tree = read_yaml(path) if path else {}
    return build_config(merge_trees(tree, parse_overrides(overrides)))


# Filled in from the dataset when a run starts, not given by the user
FROM_THE_DATASET = ("model.src_vocab_size", "model.tgt_vocab_size", "model.joint_vocab")


def resume_config(saved: dict[str, dict[str, Any]], overrides: list[str], expected: Config | None = None) -> Config:
    """A run's saved config with only the stopping/reporting settings (RESUMABLE_KEYS) changed.
    expected: the config the command gives (`train --auto-resume`), which must be the run's."""
    before = config_from_dict(saved).to_dict()
    config = config_from_dict(merge_trees(saved, parse_overrides(overrides)))
    config.train.validate()
    after = config.to_dict()
    for section, values in after.items():
        for key, value in values.items():
            dotted = f"{section}.{key}"
            if value != before[section][key] and dotted not in RESUMABLE_KEYS:
                raise MtkitError(
                    f"--set {dotted}: cannot change on resume (it would change the model or the data order); "
                    f"these can: {', '.join(sorted(RESUMABLE_KEYS))}"
                )
    given = expected.to_dict() if expected else after
    differing = [f"{s}.{k}" for s, values in after.items() for k, v in values.items() if given[s][k] != v]
    differing = [key for key in differing if key not in FROM_THE_DATASET]
    if differing:
        raise MtkitError(
            f"the run directory holds a run whose config differs in {', '.join(differing)}: --auto-resume "
            "continues the run that the same command started; --resume RUN_DIR continues it with its own config"
        )
    return config


# What fine-tuning (`mtkit train --init-from MODEL`) may change of the model: the rest is the model's.
FINE_TUNABLE_MODEL_KEYS = ("dropout", "attention_dropout", "activation_dropout")


def fine_tuning_config(model: ModelConfig, path: Path | None, overrides: list[str]) -> Config:
    """The config of a run that starts from `model`'s weights: its architecture, the train section
    from the YAML file and --set, and any dropout given there."""
    tree = merge_trees(read_yaml(path) if path else {}, parse_overrides(overrides))
    model_values = dict(tree.get("model", {}))
    for key in model_values:
        if key not in FINE_TUNABLE_MODEL_KEYS:
            raise MtkitError(
                f"model.{key}: comes from the --init-from model; fine-tuning may change only "
                + ", ".join(f"model.{k}" for k in FINE_TUNABLE_MODEL_KEYS)
            )
    config = build_config({section: values for section, values in tree.items() if section != "model"})
    config.model = _build(ModelConfig, {**dataclasses.asdict(model), **model_values}, "model")
    config.model.validate()
    return config
