"""Fault injection: kill -9 at random moments. Training resumes to the losses of an uninterrupted run;
preprocess, average and export leave either their complete output or none."""

import json
import random
import shutil
import subprocess
import time

from conftest import TINY_TRAIN, losses, run_mtkit, start_mtkit, write_corpus

KILLS = 10


def kill_after(proc: subprocess.Popen, seconds: float) -> bool:
    """SIGKILL after `seconds` unless it ended first; True if it was killed."""
    try:
        proc.wait(timeout=seconds)
        return False
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return True


def test_training_killed_at_random_moments_resumes_to_the_uninterrupted_losses(tmp_path, data_dir):
    """Kills land while Python starts, inside steps, while checkpoints, the state and metrics are written."""
    settings = [*TINY_TRAIN, "--set", "model.dropout=0.2", "--set", "train.max_steps=400", "--set", "train.save_every=1",
                "--set", "train.keep_last=2"]  # fmt: skip
    reference = run_mtkit("train", "-d", data_dir, "-o", tmp_path / "reference", *settings)
    assert reference.returncode == 0, reference.stderr.decode()
    run = tmp_path / "run"
    rng = random.Random(20261122)
    first = start_mtkit("train", "-d", data_dir, "-o", run, *settings)
    deadline = time.time() + 120
    while not (run / "state.pt").exists() and time.time() < deadline:  # a start takes ~4 s to its first save
        time.sleep(0.02)
    killed = trials = int(kill_after(first, rng.uniform(0.0, 1.5)))
    while killed < KILLS and trials < 3 * KILLS:  # a trial that ends before its kill is not counted
        trials += 1
        killed += kill_after(start_mtkit("train", "--resume", run), rng.uniform(1.0, 6.0))
    assert killed == KILLS
    final = run_mtkit("train", "--resume", run)
    assert final.returncode == 0, final.stderr.decode()
    assert losses(run) == losses(tmp_path / "reference")  # bitwise, every step from 1 to 400


def test_preprocess_average_export_killed_leave_all_or_nothing(tmp_path, tokenizer_path, trained_run):
    write_corpus(tmp_path, {"part": 2000})
    for lang in ("en", "de"):  # 20,000 lines (the grammar has about 5,000 distinct sentences)
        (tmp_path / f"big.{lang}").write_text((tmp_path / f"part.{lang}").read_text() * 10)
    rng = random.Random(7)
    checkpoints = sorted((trained_run / "checkpoints").glob("step_*.pt"))
    commands = {
        "bin": ["preprocess", "-s", "en", "-t", "de", "--train", tmp_path / "big", "--tokenizer", tokenizer_path,
                "-o", tmp_path / "bin"],
        "avg.pt": ["average", *checkpoints, "-o", tmp_path / "avg.pt"],
        "ct2": ["export", "-m", trained_run, "-o", tmp_path / "ct2"],
    }  # fmt: skip
    for output, command in commands.items():
        path = tmp_path / output
        for _ in range(3):
            kill_after(start_mtkit(*command), rng.uniform(0.5, 3.0))
            if path.exists():  # the command finished before the kill: its output must be whole
                assert_complete(path)
                shutil.rmtree(path) if path.is_dir() else path.unlink()
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
