"""The benchmarks do not rot: every script under bench/ answers --help, and every `python bench/...`
command that the docs give names a script that exists and only options that script takes."""

import re
import subprocess
import sys

import pytest
from conftest import REPO

SCRIPTS = sorted(path.name for path in (REPO / "bench").glob("*.py") if path.name != "common.py")
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
COMMAND = re.compile(r"`python\s+bench/(\w+\.py)([^`]*)`")


def help_text(script: str) -> str:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--help"], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def documented_commands() -> list[tuple[str, str, str]]:
    """(doc file, script, its options) for every bench command the docs give."""
    found = []
    for doc in DOCS:
        for script, rest in COMMAND.findall(doc.read_text(encoding="utf-8")):
            found.append((doc.name, script, " ".join(rest.split())))
    return found


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_bench_script_answers_help(script):
    text = help_text(script)
    assert text.startswith("usage:") and "--" in text


def test_every_documented_bench_command_names_a_script_and_options_it_takes():
    commands = documented_commands()
    assert len({script for _, script, _ in commands}) >= 10  # the docs do cite the benchmarks
    helps = {script: help_text(script) for script in {script for _, script, _ in commands} if script in SCRIPTS}
    wrong = []
    for doc, script, options in commands:
        if script not in SCRIPTS:
            wrong.append(f"{doc}: bench/{script} does not exist")
            continue
        for option in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", options):
            if not re.search(rf"{re.escape(option)}\b", helps[script]):
                wrong.append(f"{doc}: bench/{script} takes no {option}")
    assert wrong == []
