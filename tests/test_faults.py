"""Fault injection: kill -9 at exact moments (mtkit.core.faults), drawn from a seeded generator. Training
resumes to the losses of an uninterrupted run; preprocess, average and export leave either their
complete output or none. Every kill lands where it was meant to, whatever the machine's speed."""

import json
import random
import signal

from conftest import TINY_TRAIN, losses, run_mtkit, start_mtkit, write_corpus


def killed_at(point: str, *args) -> bool:
    """Run the CLI with MTKIT_KILL_AT=point; True if it died by SIGKILL (there), False if it ended."""
    result = run_mtkit(*args, env={"MTKIT_KILL_AT": point})
    assert result.returncode in (0, -signal.SIGKILL), result.stderr.decode()
    return result.returncode == -signal.SIGKILL


def test_training_killed_at_drawn_moments_resumes_to_the_uninterrupted_losses(tmp_path, data_dir):
    """Kills land while Python starts, after updates, and while checkpoints, the state and the
    index are half written (their temporary file made, or written and not yet renamed)."""
    settings = [*TINY_TRAIN, "--set", "model.dropout=0.2", "--set", "train.max_steps=150", "--set", "train.save_every=1",
                "--set", "train.keep_last=2"]  # fmt: skip
    reference = run_mtkit("train", "-d", data_dir, "-o", tmp_path / "reference", *settings)
    assert reference.returncode == 0, reference.stderr.decode()
    run = tmp_path / "run"
    rng = random.Random(20261126)
    # The first run must save a state to resume from: it dies after an update that follows a save.
    # Then each kind of moment twice, in a drawn order, each at a drawn count.
    kinds = ["update", "tempfile", "rename"] * 2
    rng.shuffle(kinds)
    points = [f"update:{rng.randint(2, 24)}", *(f"{kind}:{rng.randint(1, 24)}" for kind in kinds)]
    assert killed_at(points[0], "train", "-d", data_dir, "-o", run, *settings)
    for point in points[1:]:
        assert killed_at(point, "train", "--resume", run)
    starting = start_mtkit("train", "--resume", run)
    starting.kill()  # at once: while Python starts
    assert starting.wait() == -signal.SIGKILL
    final = run_mtkit("train", "--resume", run)
    assert final.returncode == 0, final.stderr.decode()
    assert losses(run) == losses(tmp_path / "reference")  # bitwise, every step from 1 to 150


def test_preprocess_average_export_killed_while_writing_leave_nothing_then_succeed(
    tmp_path, tokenizer_path, trained_run
):
    write_corpus(tmp_path, {"part": 2000})
    for lang in ("en", "de"):  # 20,000 lines (the grammar has about 5,000 distinct sentences)
        (tmp_path / f"big.{lang}").write_text((tmp_path / f"part.{lang}").read_text() * 10)
    checkpoints = sorted((trained_run / "checkpoints").glob("step_*.pt"))
    commands = {
        "bin": ["preprocess", "-s", "en", "-t", "de", "--train", tmp_path / "big", "--tokenizer", tokenizer_path,
                "-o", tmp_path / "bin"],
        "avg.pt": ["average", *checkpoints, "-o", tmp_path / "avg.pt"],
        "ct2": ["export", "-m", trained_run, "-o", tmp_path / "ct2"],
    }  # fmt: skip
    for output, command in commands.items():
        path = tmp_path / output
        for point in ("tempfile:1", "rename:1"):
            assert killed_at(point, *command), f"{output}: never reached {point}"
            assert not path.exists(), f"{output}: killed at {point}, yet the output is there"
        finished = run_mtkit(*command)  # and a later run over the debris succeeds
        assert finished.returncode == 0, finished.stderr.decode()
        assert_complete(path)


def assert_complete(path):
    if path.name == "bin":
        assert json.loads((path / "manifest.json").read_text())["splits"]["train"]["read"] == 20000
    elif path.name == "ct2":
        assert (path / "model.bin").is_file() and (path / "mtkit.json").is_file()
    else:
        assert run_mtkit("translate", "-m", path, "--beam", "1", stdin=b"A dog.\n").returncode == 0
