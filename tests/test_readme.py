"""Every command in the README's console blocks runs, on a generated corpus and a tiny model."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, write_corpus

SHRINK_STEPS = 5
# The recipe's own model, trained for 5 updates on 600-token batches and validated (BLEU) twice, as in the tour
SHRINK_TRAINING = [
    "--set", "train.max_tokens=600", "--set", "train.warmup=5", "--set", f"train.max_steps={SHRINK_STEPS}",
    "--set", "train.valid_every=2", "--set", "train.save_every=1",
    "--set", "train.keep_last=5", "--set", "train.threads=1",
]  # fmt: skip


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


# The README's tour uses DATA=../shared/data/multi30k; the test lays its generated corpus out the same
# way, so that paths in the output (evaluate's table title) are the README's.
README_DATA = "../shared/data/multi30k"


@pytest.fixture(scope="module")
def tour_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tour")
    data = root / "shared" / "data" / "multi30k"
    data.mkdir(parents=True)
    write_corpus(data, {"train": 300, "val": 20, "test2016": 20})
    # Like Multi30k's training set, two pairs whose lengths are too far apart for --max-ratio
    for lang, line in (
        ("en", "Yes."),
        ("de", "Ein Mann mit einem roten Hut wartet am Strand vor einem Gebäude im Park."),
    ):
        with open(data / f"train.{lang}", "a", encoding="utf-8") as f:
            f.write(f"{line}\n{line}\n")
    tour = root / "tour"
    tour.mkdir()
    (tour / "recipes").symlink_to(REPO / "recipes")
    return tour


def shape(text: str) -> str:
    """Output as a comparable shape: numbers become '#', whitespace and table borders go (so a table
    row that wraps differently reads the same), and precision 'auto' may choose bf16 or fp32."""
    text = re.sub(r"precision (bf16|fp16|fp32)", "precision P", text)
    text = re.sub(r"[\s\u2500-\u257f]+", "", text)  # first: a wrapped cell may split a number
    return re.sub(r"\d+(?:[.,]\d+)*", "#", text)


def assert_output_has_the_shape_shown(shown: str, output: str, command: str) -> None:
    """Each run of shown lines between '...' lines appears in the output, in order, up to numbers."""
    segments = [shape(s) for s in re.split(r"^\.\.\.$", shown, flags=re.M)]
    actual, position = shape(output), 0
    for segment in filter(None, segments):
        found = actual.find(segment, position)
        assert found >= 0, f"{command}\nREADME shows:\n{shown}\nthe command wrote:\n{output}"
        position = found + len(segment)


def test_every_readme_command_runs_and_prints_what_the_readme_shows(tour_dir):
    env = {
        **os.environ,
        "DATA": README_DATA,
        "OMP_NUM_THREADS": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    for command, shown in readme_commands():
        if command.startswith("mtkit train ") and "--resume" not in command:
            command = re.sub(r"\s+#.*$", "", command)  # flags appended after a shell comment would be ignored
            command += " " + " ".join(SHRINK_TRAINING)
            # the tour stopped on its time budget; the shrunk run stops on its step budget
            shown = re.sub(r"train\.max_time=\d+s", f"train.max_steps={SHRINK_STEPS}", shown)
        command = command.replace("--vocab-size 8000", "--vocab-size 500")
        result = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {{ {command} ; }} 2>&1"],
            cwd=tour_dir, env=env, capture_output=True, timeout=600,
        )  # fmt: skip
        output = result.stdout.decode()
        if shown.startswith("error:"):
            assert result.returncode == 1 and output.strip() == shown.strip(), command
            continue
        assert result.returncode == 0, f"{command}\n{output[-2000:]}"
        if " mtkit translate " in f" {command} ":  # a 5-step model's translation is not the tour's: one line
            assert len(output.splitlines()) == len(shown.splitlines()) == 1, output
        else:
            assert_output_has_the_shape_shown(shown, output, command)


def test_the_tour_data_steps_print_exactly_what_the_readme_shows_on_multi30k(multi30k, tmp_path):
    """On the real corpus, the tokenizer and preprocessing steps are deterministic: the README's
    counts must be today's, word for word (only the seconds taken may differ)."""
    env = {
        **os.environ,
        "DATA": str(multi30k),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    steps = [(c, s) for c, s in readme_commands() if c.startswith(("mtkit train-tokenizer ", "mtkit preprocess "))]
    assert len(steps) == 2
    for command, shown in steps:
        result = subprocess.run(["bash", "-c", f"{{ {command} ; }} 2>&1"], cwd=tmp_path, env=env, capture_output=True)
        assert result.returncode == 0, result.stdout.decode()[-2000:]
        untimed = [re.sub(r" in \d+\.\d+s$", " in Ts", text, flags=re.M) for text in (result.stdout.decode(), shown)]
        assert untimed[0] == untimed[1]
