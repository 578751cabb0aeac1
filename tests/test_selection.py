"""`mtkit choose`: each run averaged the way val prefers, the best runs ensembled, the length penalty
chosen, every choice a val BLEU that `mtkit evaluate` reproduces, and the stages' rules (ties, what
is decoded once only) on made-up scores."""

import json
from pathlib import Path

import pytest
import torch
from conftest import TINY_TRAIN, run_mtkit

from mtkit.core.errors import MtkitError
from mtkit.model.files import load_model_file, write_index
from mtkit.training import selection
from mtkit.training.average import average_checkpoints
from mtkit.training.selection import Averaging, averaging_candidates, choose, parse_averagings, parse_numbers


def test_averagings_and_lists_of_numbers_parse_and_refuse_in_one_line():
    assert parse_averagings("last:5, best:15") == [Averaging("last", 5), Averaging("best", 15)]
    assert parse_numbers("0.6,1.0,3", "--lenpen") == [0.6, 1.0, 3.0]
    assert parse_numbers("1,2,4", "--ensemble", whole=True) == [1, 2, 4]
    for text, message in [("first:5", "each item is last:N or best:N with N >= 1, not 'first:5'"),
                          ("last:0", "not 'last:0'"), ("last", "not 'last'"), ("", "name at least one way")]:  # fmt: skip
        with pytest.raises(MtkitError, match=message):
            parse_averagings(text)
    with pytest.raises(MtkitError, match="--lenpen 0.6,x: give comma-separated numbers"):
        parse_numbers("0.6,x", "--lenpen")
    with pytest.raises(MtkitError, match="--ensemble 0,1: give at least one whole number from 1"):
        parse_numbers("0,1", "--ensemble", whole=True)


def index(run: Path, steps_and_bleu: list[tuple[int, float | None]]) -> Path:
    write_index(run, [{"step": step, "file": f"step_{step:08d}.pt", "metric_name": "bleu", "metric": bleu}
                      for step, bleu in steps_and_bleu])  # fmt: skip
    return run


def test_each_averaging_names_other_checkpoints_and_says_how_many_it_found(tmp_path):
    """A run that keeps fewer than asked averages what it has; the same checkpoints twice are tried once;
    only validated checkpoints count as best."""
    run = index(tmp_path / "run", [(10, 5.0), (20, None), (30, 7.0), (40, 6.0), (50, None)])
    found = averaging_candidates(run, parse_averagings("last:2,last:5,last:15,best:1,best:15,best:3"))
    assert [(str(a), [p.name for p in paths]) for a, paths in found] == [
        ("last:2", ["step_00000040.pt", "step_00000050.pt"]),
        ("last:5", ["step_00000010.pt", "step_00000020.pt", "step_00000030.pt", "step_00000040.pt", "step_00000050.pt"]),
        ("best:1", ["step_00000030.pt"]),
        ("best:3", ["step_00000030.pt", "step_00000040.pt", "step_00000010.pt"]),
    ]  # fmt: skip
    assert all(path.parent == run / "checkpoints" for _, paths in found for path in paths)
    unvalidated = index(tmp_path / "unvalidated", [(10, None)])
    with pytest.raises(MtkitError, match="no validated checkpoints to average the best of"):
        averaging_candidates(unvalidated, [Averaging("best", 5)])
    with pytest.raises(MtkitError, match="no checkpoints"):
        averaging_candidates(tmp_path / "empty", [Averaging("last", 5)])


class MadeUpScores:
    """A validation set whose BLEU for each (members, lenpen) is given; it counts the decodings asked for."""

    def __init__(self, scores: dict[tuple[tuple[str, ...], float], float]):
        self.scores, self.asked = scores, []

    def bleu(self, models, lenpen):
        key = (tuple(model for model in models), lenpen)
        self.asked.append(key)
        return self.scores[key]


def test_the_stages_choose_by_val_keep_the_first_of_equals_and_decode_nothing_twice(tmp_path, monkeypatch):
    """Each 'model' is the name of what it averages: run a's best averaging is its last 2; the runs rank
    b, a, c; ensembles of 2 and 3 score the same, so the smaller wins; lenpens 1.0 and 2.0 tie, and the
    first given wins. The best single run and the chosen ensemble at the ranking lenpen are not decoded
    again."""
    runs = {name: index(tmp_path / name, [(10, 1.0), (20, 2.0), (30, 3.0)]) for name in "abc"}
    monkeypatch.setattr(selection, "average_checkpoints", lambda paths: f"{paths[0].parts[-3]}:{len(paths)}")
    monkeypatch.setattr(selection, "check_compatible", lambda models, names: None)
    val = MadeUpScores({
        (("a:2",), 1.0): 20.0, (("a:3",), 1.0): 19.0, (("a:1",), 1.0): 20.0,
        (("b:2",), 1.0): 21.0, (("b:3",), 1.0): 22.0, (("b:1",), 1.0): 20.0,
        (("c:2",), 1.0): 10.0, (("c:3",), 1.0): 11.0, (("c:1",), 1.0): 12.0,
        (("b:3", "a:2"), 1.0): 24.0, (("b:3", "a:2", "c:1"), 1.0): 24.0,
        (("b:3", "a:2"), 0.5): 23.0, (("b:3", "a:2"), 2.0): 24.0,
    })  # fmt: skip
    chosen = choose(list(runs.values()), parse_averagings("last:2,last:3,best:1"), [1, 2, 3], [0.5, 1.0, 2.0], 1.0, val)
    assert [(member.run.name, str(member.averaging)) for member in chosen.members] == [("b", "last:3"), ("a", "last:2")]
    assert (chosen.lenpen, chosen.bleu) == (1.0, 24.0)
    assert [(t.stage, t.tried, t.lenpen, t.bleu) for t in chosen.trials[9:]] == [
        ("ensemble", "best 1", 1.0, 22.0), ("ensemble", "best 2", 1.0, 24.0), ("ensemble", "best 3", 1.0, 24.0),
        ("lenpen", "0.5", 0.5, 23.0), ("lenpen", "1", 1.0, 24.0), ("lenpen", "2", 2.0, 24.0),
    ]  # fmt: skip
    assert len(val.asked) == len(set(val.asked)) == 9 + 2 + 2


@pytest.fixture(scope="module")
def two_runs(data_dir, tmp_path_factory):
    """Two tiny runs of other seeds, checkpoints every 50 updates, validated every 100, all kept."""
    root = tmp_path_factory.mktemp("runs")
    for seed in (1, 2):
        result = run_mtkit("train", "-d", data_dir, "-o", root / f"seed{seed}", *TINY_TRAIN, "--set", "train.max_steps=300",
                           "--set", "train.save_every=50", "--set", "train.valid_every=100", "--set", "train.keep_last=6",
                           "--set", "train.keep_best=6", "--set", f"train.seed={seed}", "--set", "train.precision=fp32")  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
    return root / "seed1", root / "seed2"


@pytest.mark.parametrize("sizes", ["1,2", "2"])
def test_every_choice_is_the_bleu_mtkit_evaluate_gives_and_the_models_are_the_averages_chosen(
    two_runs, corpus, tmp_path, sizes
):
    out = tmp_path / "chosen"
    common = ["--src", corpus / "valid.en", "--ref", corpus / "valid.de", "--precision", "fp32", "--beam", "3"]
    result = run_mtkit("choose", *two_runs, *common, "-o", out, "--average", "last:2,best:3", "--ensemble", sizes,
                       "--lenpen", "0.6,1.4", "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    record = json.loads(result.stdout)
    assert record == json.loads((out / "choice.json").read_text())
    assert len(record["models"]) == (
        2 if sizes == "2" else 1 + (record["trials"][5]["bleu"] > record["trials"][4]["bleu"])
    )
    assert record["val_bleu"] > 5  # trained enough that the choices differ
    assert sorted(p.name for p in out.iterdir()) == sorted(["choice.json", *record["models"]])
    evaluate = ["evaluate", "--src", corpus / "valid.en", "--ref", corpus / "valid.de", "--precision", "fp32",
                "--beam", "3", "--metrics", "bleu", "--json"]  # fmt: skip
    for trial in record["trials"]:
        if trial["stage"] == "average":
            run, averaging = trial["tried"].rsplit(" ", 1)
            by, count = averaging.split(":")
            averaged = tmp_path / f"{Path(run).name}-{by}{count}.pt"
            assert run_mtkit("average", run, f"--{by}", count, "-o", averaged).returncode == 0
            models = ["-m", averaged]
        elif trial["stage"] == "ensemble":
            size = int(trial["tried"].split()[1])
            if size > len(record["models"]):
                continue  # the ensemble that was not chosen
            models = [arg for name in record["models"][:size] for arg in ("-m", out / name)]
        else:
            models = [arg for name in record["models"] for arg in ("-m", out / name)]
        shown = run_mtkit(*evaluate, *models, "--lenpen", str(trial["lenpen"]))
        assert json.loads(shown.stdout)["bleu"]["score"] == pytest.approx(trial["bleu"], abs=1e-4), trial
    lenpens = [trial for trial in record["trials"] if trial["stage"] == "lenpen"]
    assert record["lenpen"] == max(lenpens, key=lambda trial: trial["bleu"])["lenpen"]
    for name, run, averaging in zip(record["models"], record["runs"], record["averaging"], strict=True):
        by, count = averaging.split(":")
        from mtkit.training.average import select_checkpoints

        expected = average_checkpoints(select_checkpoints(Path(run), int(count) if by == "last" else None,
                                                          int(count) if by == "best" else None))  # fmt: skip
        written = load_model_file(out / name)
        assert all(torch.equal(written.weights[key], expected.weights[key]) for key in expected.weights)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--average", "worst:3"],
            "error: --average worst:3: each item is last:N or best:N with N >= 1, not 'worst:3'",
        ),
        (["--ensemble", "two"], "error: --ensemble two: give comma-separated whole numbers"),
        (["--ref", "SHORT"], "line counts differ"),
        (["--existing"], "already exists (use --force to replace it)"),
        (["--not-a-run"], "no checkpoints (a run directory of mtkit train)"),
    ],
)
def test_bad_choices_are_one_line_before_anything_is_written(two_runs, corpus, tmp_path, options, message):
    out = tmp_path / "chosen"
    runs = list(two_runs)
    args = ["--src", corpus / "valid.en", "--ref", corpus / "valid.de"]
    if options == ["--ref", "SHORT"]:
        (tmp_path / "short.de").write_text("Ein Hund.\n")
        args, options = ["--src", corpus / "valid.en", "--ref", tmp_path / "short.de"], []
    elif options == ["--existing"]:
        out.mkdir()
        (out / "kept.txt").write_text("mine\n")
        options = []
    elif options == ["--not-a-run"]:
        runs.append(tmp_path)
        options = []
    result = run_mtkit("choose", *runs, *args, "-o", out, "--precision", "fp32", *options)
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert message in stderr and stderr.count("\n") == 1 and "Traceback" not in stderr
    assert not out.exists() or [p.name for p in out.iterdir()] == ["kept.txt"]
