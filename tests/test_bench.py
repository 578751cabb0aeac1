"""The benchmarks do not rot: every script under bench/ answers --help, and every `python bench/...`
command that the docs give names a script that exists and only options that script takes."""

import re
import subprocess
import sys

import pytest
from conftest import REPO, write_corpus

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


def test_every_documented_bench_command_names_a_script():
    commands = documented_commands()
    assert len({script for _, script, _ in commands}) >= 10  # the docs do cite the benchmarks
    assert [f"{doc}: bench/{script}" for doc, script, _ in commands if script not in SCRIPTS] == []


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_bench_script_answers_help_with_every_option_the_docs_give_it(script):
    text = help_text(script)
    assert text.startswith("usage:") and "--" in text
    wrong = []
    for doc, options in [(doc, options) for doc, cited, options in documented_commands() if cited == script]:
        for option in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", options):
            if not re.search(rf"{re.escape(option)}\b", text):
                wrong.append(f"{doc}: bench/{script} takes no {option}")
    assert wrong == []


def test_the_gpu_check_runs_every_step_end_to_end_on_the_cpu(tmp_path):
    """`bench/gpu_check.py --all --device cpu`: the GPU run's five steps with tiny budgets (the recipe's
    --gpu --dry-run, its sweep and mtkit choose included), one table, nothing failed or skipped but the
    GPU tests themselves, so that the GPU run never meets a renamed option."""
    data = write_corpus(tmp_path, {"train": 300, "val": 40, "test2016": 20})
    command = [sys.executable, str(REPO / "bench" / "gpu_check.py"), "--all", "--device", "cpu", "--data", str(data),
               "--work", str(tmp_path / "work")]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if re.fullmatch(r"\|\s+step \|\s+figure \|\s+value \|", line))
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[header + 2 :]]
    steps = ["tests", "recipe", "throughput", "decoding", "serving"]
    assert [step for step, figure, _ in rows if figure == "seconds"] == steps
    assert not [row for row in rows if row[1] in ("FAILED", "skipped")]
    figures = {figure: value for _, figure, value in rows}
    assert re.fullmatch(r"\d+ skipped, \d+ deselected in .*", figures["pytest -m gpu (4 files)"])
    for name in ("base", "bpe-dropout", "smooth-0.1", "wide"):  # the sweep of gpu_sweep.txt, 30 updates each
        assert [value for figure, value in figures.items() if figure.startswith(f"{name}: updates")] == ["30"]
    assert re.fullmatch(
        r"\S+ \((last|best):\d+\)(, \S+ \((last|best):\d+\))*; lenpen [12]\.0; val BLEU [\d.]+",
        figures["chosen on val"],
    )
    assert re.fullmatch(r"[\d.]+ / [\d.]+", figures["test2016 BLEU cased / lowercased"])
    assert {
        "transformer-tiny, eager, 1,024 tokens: target tok/s",
        "transformer-tiny, packed, 1,024 tokens: target tok/s",
    } <= set(figures)
    assert re.fullmatch(r"[\d,.]+", figures[next(f for f in figures if f.startswith("beam 5, "))])
    for clients in (2, 4):
        assert re.fullmatch(r"[\d,.]+, [\d,]+, \d+%", figures[f"{clients} clients: sentences/s, p95 ms, of offline"])
