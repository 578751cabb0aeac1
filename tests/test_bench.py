"""The benchmarks do not rot: every script under bench/ answers --help, and every `python bench/...`
command that the docs give names a script that exists and only options that script takes."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_mtkit, write_corpus

from mtkit.core.config import load_config
from mtkit.model.files import load_model_file

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
    GPU tests themselves, so that the GPU run never meets a renamed option; and what the recipe made."""
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
    assert_the_gpu_recipe_swept_chose_on_val_and_decoded_test2016_once(tmp_path / "work" / "recipe", data)


# The model's shape that the GPU check's dry run sets after each sweep line's settings (a tiny model).
TINY_SHAPE = {"model.d_model", "model.heads", "model.ffn_dim", "model.encoder_layers", "model.decoder_layers"}


def assert_the_gpu_recipe_swept_chose_on_val_and_decoded_test2016_once(out: Path, data: Path) -> None:
    """run.sh --gpu --dry-run, as the GPU check ran it: each setting of gpu_sweep.txt trained side by side
    (the first's progress shown, the others logged; those marked dropout on the BPE-dropout samples),
    `mtkit choose` on val, and test2016 decoded once with what it chose, scored cased and lowercased."""
    sweep = [line.split() for line in (REPO / "recipes/multi30k_en_de/gpu_sweep.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]  # fmt: skip
    for number, (name, _, *settings) in enumerate(sweep):
        config = load_config(out / "sweep" / name / "config.yaml", [])
        train, expected = config.train, ("cpu", 128, False, 15, 1)  # the mode's, on the CPU, a core each
        assert (train.device, train.pack_length, train.compile, train.keep_best, train.threads) == expected
        for key, value in (setting.split("=") for setting in settings):
            if key not in TINY_SHAPE:
                section, field = key.split(".")
                assert str(getattr(getattr(config, section), field)) == value, f"{name}: {key}={value}"
        assert (out / "sweep" / f"{name}.log").exists() == (number > 0)
    data_of = {name: kind for name, kind, *_ in sweep}
    choice = json.loads((out / "chosen" / "choice.json").read_text())
    for run, model in zip(choice["runs"], choice["models"], strict=True):  # each chosen model from its run's data
        data_dir = Path(load_model_file(out / "chosen" / model).meta["data_dir"]).name
        assert data_dir == ("data-bin" if data_of[Path(run).name] == "plain" else "data-bin-dropout")
    rows = [line.split("\t") for line in (out / "val_lenpen.tsv").read_text().splitlines()]
    assert rows == [[str(t["lenpen"]), str(t["bleu"])] for t in choice["trials"] if t["stage"] == "lenpen"]
    assert [float(lenpen) for lenpen, _ in rows] == [1.0, 2.0]
    log = (out.parent / "recipe.log").read_text()
    assert f"lenpen {choice['lenpen']}: the best val BLEU of" in log
    assert "case:lc" in log and "case:mixed" in log
    model_args = [arg for model in choice["models"] for arg in ("-m", out / "chosen" / model)]
    expected = run_mtkit(
        "translate", *model_args, "-i", data / "test2016.en", "--beam", "5", "--lenpen", str(choice["lenpen"])
    )
    assert (out / "test2016.hyp.de").read_bytes() == expected.stdout
