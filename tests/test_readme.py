"""Every command in the README's console blocks runs, on a generated corpus and a tiny model."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, TINY_TRAIN, write_corpus

SHRINK_TRAINING = [
    *TINY_TRAIN,
    "--set",
    "train.max_steps=5",
    "--set",
    "train.save_every=1",
    "--set",
    "train.keep_last=5",
]


def readme_commands() -> list[tuple[str, str]]:
    """(command, the output shown under it) for every `$ ` line in the README's console blocks."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    pairs = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        chunks = re.split(r"^\$ ", block, flags=re.M)[1:]
        for chunk in chunks:
            command, _, output = chunk.partition("\n")
            pairs.append((command, output))
    return pairs


def test_the_readme_has_a_tour():
    commands = [c for c, _ in readme_commands()]
    for name in ("train-tokenizer", "preprocess", "train", "average", "translate", "evaluate"):
        assert any(f"mtkit {name} " in c for c in commands), name


@pytest.fixture(scope="module")
def tour_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tour")
    data = root / "data"
    data.mkdir()
    write_corpus(data, {"train": 300, "val": 20, "test2016": 20})
    (root / "recipes").symlink_to(REPO / "recipes")
    return root


def test_every_readme_command_runs(tour_dir):
    env = {
        **os.environ,
        "DATA": str(tour_dir / "data"),
        "OMP_NUM_THREADS": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    for command, shown in readme_commands():
        if command.startswith("mtkit train ") and "--resume" not in command:
            command = re.sub(r"\s+#.*$", "", command)  # flags appended after a shell comment would be ignored
            command += " " + " ".join(SHRINK_TRAINING)
        command = command.replace("--vocab-size 8000", "--vocab-size 500")
        result = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {command}"], cwd=tour_dir, env=env, capture_output=True, timeout=600
        )
        stderr = result.stderr.decode()
        if shown.startswith("error:"):
            assert result.returncode == 1 and stderr.strip() == shown.strip(), command
        else:
            assert result.returncode == 0, f"{command}\n{stderr[-2000:]}"
