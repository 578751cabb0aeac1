import errno
import json
import signal
import subprocess
import time

import numpy as np
import pytest
import torch
from conftest import TINY_TRAIN, losses, records, run_mtkit, start_mtkit, write_lines

from mtkit.core.config import build_config, parse_overrides
from mtkit.core.errors import MtkitError
from mtkit.model.files import MODEL_FORMAT, load_payload, read_index, resolve_model_path
from mtkit.training.rundir import STATE_FILE
from mtkit.training.train import train


def tiny_config(*overrides: str):
    pairs = [TINY_TRAIN[i + 1] for i in range(0, len(TINY_TRAIN), 2)] + list(overrides)
    return build_config(parse_overrides(pairs))


def test_tiny_model_overfits_a_tiny_corpus(tmp_path, tokenizer_path):
    from mtkit.data.preprocess import preprocess

    lines = [
        ("A dog runs.", "Ein Hund rennt."),
        ("Two men talk.", "Zwei Männer reden."),
        ("A red car.", "Ein rotes Auto."),
    ]
    write_lines(tmp_path / "c.en", [s for s, _ in lines] * 4)
    write_lines(tmp_path / "c.de", [t for _, t in lines] * 4)
    preprocess("en", "de", {"train": tmp_path / "c"}, tokenizer_path, tmp_path / "bin")
    config = tiny_config(
        "train.max_steps=150", "model.d_model=32", "model.ffn_dim=64", "train.lr=1e-2", "train.label_smoothing=0"
    )
    train(config, tmp_path / "bin", tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["nll"] > 5.0  # about ln(500) at the start
    assert rows[-1]["nll"] < 0.3  # memorised: below a third of a nat per token


def test_exact_resume_gives_identical_losses(tmp_path, data_dir):
    dropout = ("model.dropout=0.2", "train.max_tokens=300")  # dropout makes the RNG state matter
    train(tiny_config("train.max_steps=12", *dropout), data_dir, tmp_path / "full")
    train(tiny_config("train.max_steps=6", *dropout), data_dir, tmp_path / "half")
    train(None, None, tmp_path / "half", resume=True, overrides=["train.max_steps=12"])
    full, resumed = losses(tmp_path / "full"), losses(tmp_path / "half")
    assert [s for s, _ in full] == list(range(1, 13))
    assert resumed == full  # bitwise: same floats at every step


def test_linear_schedule_follows_the_step_budget(tmp_path, data_dir):
    schedule = ("train.lr_schedule=linear", "train.warmup=2", "train.lr=1e-2")
    train(tiny_config("train.max_steps=10", *schedule), data_dir, tmp_path / "full")
    rows = [json.loads(line) for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    expected = [min(step / 2, 1 - step / 10) * 1e-2 for step in range(1, 11)]
    assert [r["lr"] for r in rows] == pytest.approx(expected)
    assert rows[-1]["lr"] == 0.0


def test_sigterm_saves_and_resume_continues_exactly(tmp_path, data_dir):
    run = tmp_path / "run"
    args = [
        "train",
        "-d",
        data_dir,
        "-o",
        run,
        *TINY_TRAIN,
        "--set",
        "train.max_steps=100000",
        "--set",
        "model.dropout=0.1",
    ]
    proc = start_mtkit(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and not ((run / "metrics.jsonl").exists() and len(losses(run)) >= 5):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr.decode()
    assert "interrupted" in stderr.decode()
    stopped_at = load_payload(run / STATE_FILE, "mtkit-train-state")["progress"]["step"]
    assert stopped_at >= 5 and read_index(run)[-1]["step"] == stopped_at
    result = run_mtkit("train", "--resume", run, "--set", f"train.max_steps={stopped_at + 4}")
    assert result.returncode == 0, result.stderr.decode()
    reference = tmp_path / "reference"
    result = run_mtkit(
        "train",
        "-d",
        data_dir,
        "-o",
        reference,
        *TINY_TRAIN,
        "--set",
        f"train.max_steps={stopped_at + 4}",
        "--set",
        "model.dropout=0.1",
    )
    assert result.returncode == 0
    assert losses(run) == losses(reference)


@pytest.mark.parametrize(
    "precision, dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)]
)
def test_training_computes_in_the_precision_asked_for(tmp_path, data_dir, precision, dtype):
    from mtkit.training.trainer import Trainer

    (tmp_path / "run").mkdir()
    trainer = Trainer(tiny_config("train.max_steps=4", f"train.precision={precision}"), data_dir, tmp_path / "run")
    seen = set()  # the dtype every feed-forward layer's first product came out in
    for layer in [*trainer.model.encoder_layers, *trainer.model.decoder_layers]:
        layer.ffn.fc1.register_forward_hook(lambda module, inputs, output: seen.add(output.dtype))
    assert "max_steps" in trainer.run()
    assert seen == {dtype}
    state = load_payload(tmp_path / "run" / STATE_FILE, "mtkit-train-state")
    assert state["progress"]["step"] == 4
    assert (state["scaler"] is not None) == (precision == "fp16")
    assert all(t.dtype != torch.float16 and torch.isfinite(t).all() for t in state["model"].values())


def test_rdrop_trains_like_the_plain_loss_without_dropout_and_apart_with_it(tmp_path, data_dir):
    """Through the whole trainer: without dropout R-Drop's two passes agree, so the losses are the
    plain run's; with dropout the KL term joins the loss and the runs part."""
    for dropout in ("0.0", "0.2"):
        common = ("train.max_steps=5", f"model.dropout={dropout}")
        train(tiny_config(*common), data_dir, tmp_path / f"plain{dropout}")
        train(tiny_config(*common, "train.rdrop_alpha=5"), data_dir, tmp_path / f"rdrop{dropout}")
    plain, rdrop = losses(tmp_path / "plain0.0"), losses(tmp_path / "rdrop0.0")
    assert [s for s, _ in rdrop] == list(range(1, 6))
    assert [loss for _, loss in rdrop] == pytest.approx([loss for _, loss in plain], rel=1e-4)
    assert losses(tmp_path / "rdrop0.2")[1][1] != pytest.approx(losses(tmp_path / "plain0.2")[1][1], rel=1e-4)


def test_nonfinite_gradients_are_skipped_then_training_stops(tmp_path, data_dir, monkeypatch):
    from mtkit.training import trainer as trainer_module

    original = trainer_module.TrainingObjective.forward
    calls = {"n": 0}

    def poisoned(self, *args):
        calls["n"] += 1
        loss, nll = original(self, *args)
        return (loss * float("nan"), nll) if calls["n"] > 3 else (loss, nll)

    monkeypatch.setattr(trainer_module.TrainingObjective, "forward", poisoned)
    with pytest.raises(MtkitError, match="diverged: 32 updates in a row had inf/nan.*step 3"):
        train(tiny_config("train.max_steps=100"), data_dir, tmp_path / "run")
    state = load_payload(tmp_path / "run" / STATE_FILE, "mtkit-train-state")
    assert state["progress"]["step"] == 3 and state["progress"]["nonfinite_updates"] == 32
    monkeypatch.undo()
    train(tiny_config("train.max_steps=3"), data_dir, tmp_path / "three")
    three = load_payload(tmp_path / "three" / STATE_FILE, "mtkit-train-state")
    for name, weights in three["model"].items():  # the skipped updates changed nothing, moments included
        assert torch.equal(state["model"][name], weights), name
    for saved, expected in zip(state["optimizer"]["state"].values(), three["optimizer"]["state"].values()):
        assert all(torch.equal(saved[key], expected[key]) for key in expected)


def test_disk_full_keeps_the_previous_checkpoint(tmp_path, data_dir, monkeypatch):
    train(tiny_config("train.max_steps=2"), data_dir, tmp_path / "run")
    before = (tmp_path / "run" / STATE_FILE).read_bytes()
    real_save = torch.save

    def full_disk(obj, path, *a, **k):
        with open(path, "wb") as handle:
            handle.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(MtkitError, match="could not write \\(No space left on device\\); the previous file is intact"):
        train(None, None, tmp_path / "run", resume=True, overrides=["train.max_steps=4"])
    monkeypatch.setattr(torch, "save", real_save)
    assert (tmp_path / "run" / STATE_FILE).read_bytes() == before
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.startswith(".")] == []


def test_sentences_longer_than_max_tokens_are_skipped_with_a_warning(tmp_path, data_dir):
    result = run_mtkit(
        "train",
        "-d",
        data_dir,
        "-o",
        tmp_path / "run",
        *TINY_TRAIN,
        "--set",
        "train.max_tokens=40",
        "--set",
        "train.max_steps=2",
    )
    assert result.returncode == 0, result.stderr.decode()
    assert "longer than train.max_tokens=40" in result.stderr.decode()


def test_pairs_longer_than_max_tokens_are_left_out_of_every_batch_and_the_rest_kept(data_dir):
    from mtkit.data.batching import make_batches
    from mtkit.data.dataset import TrainingSamples

    samples = TrainingSamples(data_dir)
    _, _, src_lengths, tgt_lengths = samples.epoch_sample(0)
    cost = src_lengths.astype(int) + tgt_lengths.astype(int) + 2  # </s> on the source, <s> or </s> on the target
    too_long = set(np.flatnonzero(cost > 40).tolist())
    assert too_long and len(too_long) < len(cost)
    batches, skipped = make_batches(src_lengths, tgt_lengths, 40, seed=1, epoch=0)
    batched = [int(i) for batch in batches for i in batch]
    assert set(skipped.tolist()) == too_long
    assert sorted(batched) == sorted(set(range(len(cost))) - too_long)  # every other pair, once


def test_checkpoint_files_are_data_and_carry_everything(trained_run):
    entries = read_index(trained_run)
    assert [e["step"] for e in entries] == [20, 40]
    payload = load_payload(trained_run / "checkpoints" / entries[-1]["file"], MODEL_FORMAT)
    assert payload["config"]["d_model"] == 16 and payload["src_tokenizer"].startswith("{")
    assert "optimizer" not in payload  # weights-only model file; optimizer state lives in state.pt
    assert (trained_run / "config.yaml").read_text().startswith("model:")


def test_keep_last_removes_old_checkpoints(tmp_path, data_dir):
    train(
        tiny_config("train.max_steps=6", "train.save_every=1", "train.keep_last=2", "train.keep_best=0"),
        data_dir,
        tmp_path / "run",
    )
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("*.pt")) == [
        "step_00000005.pt",
        "step_00000006.pt",
    ]


def test_early_stopping_and_best_checkpoint(tmp_path, data_dir):
    config = tiny_config(
        "train.max_steps=200",
        "train.valid_every=2",
        "train.patience=2",
        "train.lr=5.0",
        "train.warmup=0",
        "train.keep_best=1",
        "train.keep_last=1",
    )
    reason = train(config, data_dir, tmp_path / "run")
    assert "no improvement of valid loss in 2 validations" in reason
    validations = [r for r in records(tmp_path / "run") if "valid_loss" in r]
    losses_ = [r["valid_loss"] for r in validations]
    best = validations[losses_.index(min(losses_))]["step"]
    assert [r["step"] for r in validations][-3] == best  # then 2 validations without improvement, and a stop
    assert validations[-1]["step"] < 200
    assert resolve_model_path(tmp_path / "run", "best").name == f"step_{best:08d}.pt"
    assert [e["step"] for e in read_index(tmp_path / "run")] == [best, validations[-1]["step"]]


def test_the_best_checkpoint_under_bleu_is_the_highest_bleu(tmp_path, data_dir):
    """BLEU, the default metric: higher is better, for keep_best, -m RUN, --checkpoint and average --best."""
    config = tiny_config("train.max_steps=40", "train.valid_every=5", "train.save_every=5", "train.valid_metric=bleu",
                         "train.keep_best=2", "train.keep_last=1", "train.valid_max_sentences=10")  # fmt: skip
    train(config, data_dir, tmp_path / "run")
    scores = {r["step"]: r["valid_bleu"] for r in records(tmp_path / "run") if "valid_bleu" in r}
    assert len(scores) == 8 and len(set(scores.values())) > 1
    ranked = sorted(scores, key=lambda step: (-scores[step], -step))  # ties: the later checkpoint
    kept = [e["step"] for e in read_index(tmp_path / "run")]
    assert sorted(kept) == sorted({*ranked[:2], 40})
    assert resolve_model_path(tmp_path / "run", "best").name == f"step_{ranked[0]:08d}.pt"
    assert resolve_model_path(tmp_path / "run", "last").name == "step_00000040.pt"
    from mtkit.training.average import select_checkpoints

    assert [p.name for p in select_checkpoints(tmp_path / "run", None, 2)] == [f"step_{s:08d}.pt" for s in ranked[:2]]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "train.bogus=1"], "unknown config key 'train.bogus'; valid keys:"),
        (["--set", "model.norm=sideways"], "model.norm: 'sideways' is not one of post, pre"),
        (["--set", "train.rdrop_alpha=-1"], "train.rdrop_alpha must not be negative"),
    ],
)
def test_bad_config_is_one_clear_line(tmp_path, data_dir, args, message):
    result = run_mtkit("train", "-d", data_dir, "-o", tmp_path / "run", *args)
    stderr = result.stderr.decode()
    assert result.returncode == 1 and message in stderr and "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_missing_dataset_and_missing_resume(tmp_path):
    result = run_mtkit("train", "-d", tmp_path / "nothing", "-o", tmp_path / "run")
    assert result.returncode == 1 and "not an mtkit dataset" in result.stderr.decode()
    result = run_mtkit("train", "--resume", tmp_path / "nothing")
    assert result.returncode == 1 and "nothing to resume" in result.stderr.decode()


def test_existing_run_needs_force(tmp_path, data_dir):
    train(tiny_config("train.max_steps=1"), data_dir, tmp_path / "run")
    with pytest.raises(MtkitError, match="already holds a run.*--resume.*--force"):
        train(tiny_config("train.max_steps=1"), data_dir, tmp_path / "run")
    train(tiny_config("train.max_steps=2"), data_dir, tmp_path / "run", force=True)
    assert losses(tmp_path / "run")[-1][0] == 2


@pytest.fixture
def one_process_group(tmp_path):
    """A gloo process group of one process, destroyed after the test if the code under test did not."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_a_trainer_that_fails_after_joining_the_process_group_still_leaves_it(
    tmp_path, data_dir, monkeypatch, one_process_group
):
    """Under torchrun the Trainer joins the group before it builds the model: an error after that
    still leaves the group."""
    import torch.distributed as dist

    from mtkit.training import trainer as trainer_module

    def failing_model(*args, **kwargs):
        raise MtkitError("no model today")

    for name, value in (("WORLD_SIZE", "2"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)  # as torchrun sets them; the fixture's group is the one joined
    monkeypatch.setattr(trainer_module, "Transformer", failing_model)
    with pytest.raises(MtkitError, match="no model today"):
        train(tiny_config("train.max_steps=1"), data_dir, tmp_path / "run")
    assert not dist.is_initialized()


def test_resume_refuses_changes_to_the_model_or_data_order(tmp_path, data_dir):
    train(tiny_config("train.max_steps=1"), data_dir, tmp_path / "run")
    for override in ("train.lr=0.5", "model.d_model=32", "train.seed=7", "train.max_tokens=900"):
        with pytest.raises(MtkitError, match="cannot change on resume"):
            train(None, None, tmp_path / "run", resume=True, overrides=[override])


def test_resume_with_a_dataset_of_another_tokenizer(tmp_path, data_dir, corpus):
    from mtkit.data.preprocess import preprocess
    from mtkit.text.tokenizer import train_tokenizer

    train(tiny_config("train.max_steps=1"), data_dir, tmp_path / "run")
    train_tokenizer([corpus / "train.en"], tmp_path / "other.json", vocab_size=300)
    preprocess("en", "de", {"train": corpus / "train"}, tmp_path / "other.json", tmp_path / "other")
    with pytest.raises(MtkitError, match="built with a different tokenizer than the run's checkpoint"):
        train(None, tmp_path / "other", tmp_path / "run", resume=True, overrides=["train.max_steps=2"])


def test_out_of_memory_skips_the_update_and_continues(tmp_path, data_dir, monkeypatch, capsys):
    from mtkit.training import trainer as trainer_module

    original = trainer_module.TrainingObjective.forward
    calls = {"n": 0}

    def sometimes_oom(self, *args):
        calls["n"] += 1
        if calls["n"] == 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(self, *args)

    monkeypatch.setattr(trainer_module.TrainingObjective, "forward", sometimes_oom)
    reason = train(tiny_config("train.max_steps=4"), data_dir, tmp_path / "run")
    assert "max_steps" in reason
    state = load_payload(tmp_path / "run" / STATE_FILE, "mtkit-train-state")
    assert state["progress"]["step"] == 4 and state["progress"]["oom_updates"] == 1
    assert "out of memory on a batch" in capsys.readouterr().err


def test_resume_accepts_unchanged_values_and_new_stopping_criteria(tmp_path, data_dir):
    train(tiny_config("train.max_steps=1", "train.lr=1e-3"), data_dir, tmp_path / "run")
    reason = train(
        None, None, tmp_path / "run", resume=True, overrides=["train.lr=1e-3", "train.max_steps=2", "train.patience=3"]
    )
    assert "max_steps=2" in reason


def test_kill_9_never_damages_saved_checkpoints(tmp_path, data_dir):
    run = tmp_path / "run"
    args = [
        "train",
        "-d",
        data_dir,
        "-o",
        run,
        *TINY_TRAIN,
        "--set",
        "train.max_steps=100000",
        "--set",
        "train.save_every=1",
        "--set",
        "train.keep_last=3",
    ]
    proc = start_mtkit(*args)
    deadline = time.time() + 120
    while time.time() < deadline and not ((run / "metrics.jsonl").exists() and len(losses(run)) >= 8):
        time.sleep(0.05)
    proc.kill()  # SIGKILL: no chance to clean up
    proc.wait()
    for entry in read_index(run):
        payload = load_payload(run / "checkpoints" / entry["file"], MODEL_FORMAT)
        assert payload["meta"]["step"] == entry["step"]
    step = load_payload(run / STATE_FILE, "mtkit-train-state")["progress"]["step"]
    result = run_mtkit("train", "--resume", run, "--set", f"train.max_steps={step + 2}")
    assert result.returncode == 0, result.stderr.decode()


def test_only_the_random_states_training_draws_from_are_saved(tmp_path, data_dir):
    train(tiny_config("train.max_steps=1"), data_dir, tmp_path / "run")
    state = load_payload(tmp_path / "run" / STATE_FILE, "mtkit-train-state")
    assert [sorted(rank) for rank in state["rng"]] == [["torch"]]  # on a CPU; a GPU run adds its own device's


def test_collating_ahead_in_a_thread_changes_nothing(tmp_path, data_dir):
    """The GPU path collates the next update in a background thread; forced on a CPU it gives the same run."""
    from concurrent.futures import ThreadPoolExecutor

    from mtkit.training.trainer import Trainer

    config = tiny_config("train.max_steps=8", "train.update_freq=3", "model.dropout=0.2")
    train(config, data_dir, tmp_path / "plain")
    (tmp_path / "ahead").mkdir()
    trainer = Trainer(
        tiny_config("train.max_steps=8", "train.update_freq=3", "model.dropout=0.2"),
        data_dir,
        tmp_path / "ahead",
    )
    trainer.stream._collator = ThreadPoolExecutor(1)
    trainer.run()
    assert losses(tmp_path / "ahead") == losses(tmp_path / "plain")


def test_resume_reads_the_training_state_and_the_manifest_once_each(tmp_path, data_dir, monkeypatch):
    import mtkit.data.dataset
    import mtkit.training.train
    import mtkit.training.trainer

    train(tiny_config("train.max_steps=2"), data_dir, tmp_path / "run")
    reads = {"state": 0, "manifest": 0}

    def counted(name, function):
        def wrapper(*args, **kwargs):
            reads[name] += 1
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(
        mtkit.training.train, "load_training_state", counted("state", mtkit.training.train.load_training_state)
    )
    manifest_reader = counted("manifest", mtkit.data.dataset.read_manifest)
    monkeypatch.setattr(mtkit.data.dataset, "read_manifest", manifest_reader)
    monkeypatch.setattr(mtkit.training.train, "read_manifest", manifest_reader)
    monkeypatch.setattr(mtkit.training.trainer, "read_manifest", manifest_reader)
    train(None, None, tmp_path / "run", resume=True, overrides=["train.max_steps=3"])
    assert reads == {"state": 1, "manifest": 1}
    assert [step for step, _ in losses(tmp_path / "run")] == [1, 2, 3]


def test_auto_resume_starts_a_run_then_continues_it_and_refuses_another_config(tmp_path, data_dir):
    """`--auto-resume` makes one command both start and continue a run (what torchrun --max-restarts
    and schedulers that requeue a job rerun): a run that saved a state is continued exactly."""
    run = tmp_path / "run"
    command = ["train", "-d", data_dir, "-o", run, *TINY_TRAIN, "--set", "train.save_every=2", "--auto-resume"]
    first = run_mtkit(*command, "--set", "train.max_steps=4")
    assert first.returncode == 0, first.stderr.decode()
    again = run_mtkit(*command, "--set", "train.max_steps=8")  # the same command, a later budget
    assert again.returncode == 0, again.stderr.decode()
    straight = [*TINY_TRAIN, "--set", "train.max_steps=8"]
    assert run_mtkit("train", "-d", data_dir, "-o", tmp_path / "straight", *straight).returncode == 0
    assert losses(run) == losses(tmp_path / "straight") and [s for s, _ in losses(run)] == list(range(1, 9))
    (tmp_path / "other.yaml").write_text("train:\n  clip_norm: 0.5\n")
    other = run_mtkit(*command, "--set", "train.max_steps=8", "-c", tmp_path / "other.yaml")
    assert other.returncode == 1
    assert other.stderr.decode().strip().splitlines() == [
        "error: the run directory holds a run whose config differs in train.clip_norm: --auto-resume continues the run "
        "that the same command started; --resume RUN_DIR continues it with its own config"
    ]
    both = run_mtkit(*command, "--force")
    assert both.returncode == 1 and "give one of them" in both.stderr.decode()


def test_auto_resume_starts_over_a_run_that_saved_no_state(tmp_path, data_dir):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 9.0}\n')  # killed before its first checkpoint
    result = run_mtkit("train", "-d", data_dir, "-o", run, *TINY_TRAIN, "--set", "train.max_steps=2", "--auto-resume")
    assert result.returncode == 0, result.stderr.decode()
    assert [s for s, _ in losses(run)] == [1, 2] and losses(run)[0][1] != 9.0
