"""`mtkit train`: start a run or resume one, with a Trainer (mtkit.training.trainer) doing the work."""

from __future__ import annotations

import os
from pathlib import Path

from mtkit.core import console
from mtkit.core.config import Config, resume_config
from mtkit.core.distributed import shutdown_distributed
from mtkit.core.errors import MtkitError
from mtkit.data.dataset import check_tokenizers_match, read_manifest
from mtkit.model.files import ModelFile
from mtkit.training.checkpoints import load_training_state
from mtkit.training.rundir import CONFIG_FILE, STATE_FILE, prepare_run_dir
from mtkit.training.trainer import Trainer


def train(
    config: Config | None,
    data_dir: Path | None,
    run_dir: Path,
    resume: bool = False,
    force: bool = False,
    overrides: list[str] | None = None,
    init_from: ModelFile | None = None,
) -> str:
    """Start (or resume) a run; returns the reason it stopped. `init_from`: start from that model's
    weights (fine-tuning); its tokenizers must be the dataset's. On resume, `config` (if given) must be the run's."""
    run_dir = Path(run_dir)
    state = None
    if resume:
        if not (run_dir / STATE_FILE).is_file():
            raise MtkitError(
                f"{run_dir}: nothing to resume (no {STATE_FILE}; start a run with mtkit train -d DATA -o {run_dir})"
            )
        state = load_training_state(run_dir)  # read once: the config, the data's place, then the Trainer's
        config = resume_config(state["config"], overrides or [], expected=config)
        data_dir = Path(data_dir) if data_dir else Path(state["data_dir"])
    else:
        assert config is not None and data_dir is not None
        read_manifest(data_dir)  # a clear error before anything is written
        if init_from is not None:
            digests = init_from.src_tokenizer.sha256, init_from.tgt_tokenizer.sha256
            check_tokenizers_match(data_dir, *digests, "the --init-from model")
        if int(os.environ.get("RANK", "0")) == 0:
            prepare_run_dir(run_dir, force)
    try:  # the Trainer joins the process group first: a failure after that must still leave it
        init = (init_from.weights, init_from.meta) if init_from else (None, None)
        trainer = Trainer(config, data_dir, run_dir, state, *init)
        if trainer.dist.is_main:
            config.save(run_dir / CONFIG_FILE)
            _describe(trainer)
        reason = trainer.run()
        if trainer.dist.is_main:
            console.info(f"stopped at step {trainer.progress.step}: {reason}")
        trainer.dist.barrier()  # no rank tears gloo down while another still writes or prints
        return reason
    finally:
        shutdown_distributed()


def _describe(trainer: Trainer) -> None:
    m = trainer.config.model
    console.info(
        f"model {m.preset}-shaped: {m.encoder_layers}+{m.decoder_layers} layers, d_model {m.d_model}, {m.heads} heads, "
        f"FFN {m.ffn_dim}, {m.norm}-norm, {trainer.model.num_parameters():,} parameters; device {trainer.device}, "
        f"precision {trainer.precision}, {trainer.dist.world_size} process(es); {len(trainer.train_data):,} training pairs"
    )
