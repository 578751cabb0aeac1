"""The recipes: the paper ones cannot run here (they need GPUs and WMT14), so check that they are ready to;
the Multi30k script runs end to end on a generated corpus."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch
from conftest import REPO, TINY_TRAIN, run_mtkit, write_corpus, write_lines

from mtkit.core.config import load_config
from mtkit.core.device import resolve_device, resolve_precision
from mtkit.model.files import load_model_file
from mtkit.model.transformer import Transformer
from mtkit.text.tokenizer import Tokenizer

RECIPES = REPO / "recipes"


def paper_size(d: int, ff: int, layers: int, vocab: int, pre_norm: bool = False) -> int:
    attention = 4 * (d * d + d)
    ffn = 2 * d * ff + ff + d
    final_norms = 2 * 2 * d if pre_norm else 0  # pre-norm adds a LayerNorm after each stack
    return vocab * d + layers * (attention + ffn + 4 * d) + layers * (2 * attention + ffn + 6 * d) + final_norms


@pytest.mark.parametrize(
    "config, expected",
    [
        ("wmt14_en_de/base.yaml", paper_size(512, 2048, 6, 37000)),  # 63.1M; the paper reports 65M
        ("wmt14_en_de/big.yaml", paper_size(1024, 4096, 6, 37000)),  # 214.2M; the paper reports 213M
        ("iwslt14_de_en/config.yaml", paper_size(512, 1024, 6, 10000)),
        ("multi30k_en_de/config.yaml", paper_size(256, 1024, 3, 8000, pre_norm=True)),  # 7,578,624
    ],
)
def test_recipe_configs_parse_and_build_the_expected_model(config, expected):
    vocab = 37000 if "wmt14" in config else 10000 if "iwslt" in config else 8000
    cfg = load_config(
        RECIPES / config, [f"model.src_vocab_size={vocab}", f"model.tgt_vocab_size={vocab}", "model.joint_vocab=true"]
    )
    assert Transformer(cfg.model).num_parameters() == expected


def test_paper_settings():
    base = load_config(RECIPES / "wmt14_en_de/base.yaml", [])
    big = load_config(RECIPES / "wmt14_en_de/big.yaml", [])
    assert (base.model.d_model, base.model.ffn_dim, base.model.heads, base.model.dropout) == (512, 2048, 8, 0.1)
    assert (big.model.d_model, big.model.ffn_dim, big.model.heads, big.model.dropout) == (1024, 4096, 16, 0.3)
    for cfg in (base, big):
        assert cfg.train.warmup == 4000 and cfg.train.label_smoothing == 0.1 and cfg.model.norm == "post"
        assert cfg.train.lr == pytest.approx(cfg.model.d_model**-0.5 * 4000**-0.5, rel=0.01)
    assert (base.train.keep_last, big.train.keep_last) == (5, 20)


@pytest.fixture(scope="module")
def made_up_data(tmp_path_factory, tokenizer_path):
    """A few dozen pairs of made-up 'translations': digit words and their reversal."""
    from mtkit.data.preprocess import preprocess

    root = tmp_path_factory.mktemp("madeup")
    words = "zero one two three four five six seven eight nine".split()
    rng = random.Random(0)
    src = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 6))) for _ in range(40)]
    write_lines(root / "c.en", src)
    write_lines(root / "c.de", [" ".join(reversed(s.split())) for s in src])
    preprocess("en", "de", {"train": root / "c", "valid": root / "c"}, tokenizer_path, root / "bin")
    return root / "bin"


@pytest.mark.parametrize("config", ["wmt14_en_de/base.yaml", "wmt14_en_de/big.yaml", "iwslt14_de_en/config.yaml"])
def test_paper_recipes_take_training_steps_on_cpu(config, made_up_data, tmp_path):
    result = run_mtkit(
        "train",
        "-d",
        made_up_data,
        "-o",
        tmp_path / "run",
        "-c",
        RECIPES / config,
        "--set",
        "train.max_steps=2",
        "--set",
        "train.max_tokens=64",  # a few captions a batch: transformer-big's steps take seconds on one thread
        "--set",
        "train.log_every=1",
        "--set",
        "train.threads=1",
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert "stopped at step 2" in result.stderr.decode()


@pytest.mark.parametrize("script", sorted(str(p.relative_to(RECIPES)) for p in RECIPES.glob("*/*.sh")))
def test_recipe_scripts_are_valid_bash(script):
    assert subprocess.run(["bash", "-n", RECIPES / script]).returncode == 0


def recipe_env(data: Path, lenpens: str) -> dict[str, str]:
    """run.sh's environment in tests: the data folder, the lenpens to try, one thread, this mtkit."""
    return {
        **os.environ,
        "DATA": str(data),
        "LENPENS": lenpens,
        "OMP_NUM_THREADS": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }


def tiny_training(steps: int) -> list[str]:
    """run.sh's --set options for a tiny model trained `steps` updates, with a checkpoint every 5."""
    return [
        *TINY_TRAIN,
        "--set",
        f"train.max_steps={steps}",
        "--set",
        "train.max_time=0",
        "--set",
        "train.save_every=5",
    ]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no GPU")
@pytest.mark.parametrize("recipe", ["multi30k_en_de", "multi30k_multilingual"])
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--gpu"], "run.sh: --gpu needs a CUDA GPU, and torch sees none here"),
        (["--gpu", "--quick"], "run.sh: --quick and --gpu are two modes; choose one"),
    ],
)
def test_the_gpu_recipe_is_refused_in_one_line_before_it_writes_anything(tmp_path, recipe, options, message):
    out = tmp_path / "out"
    command = ["bash", RECIPES / recipe / "run.sh", *options, "--out", out]
    result = subprocess.run(command, env=recipe_env(tmp_path, "1.0"), capture_output=True, timeout=120)
    assert (result.returncode, result.stderr.decode(), result.stdout) == (2, message + "\n", b"")
    assert not out.exists()


@pytest.mark.parametrize("models", [1, 2])
def test_multi30k_recipe_runs_end_to_end_and_decodes_test2016_with_the_best_lenpen_on_val(tmp_path, models):
    """The whole script on a generated corpus with a tiny model (or an ensemble of two trained at once,
    each on its share of the cores), its length penalty chosen from two. The full mode keeps and
    averages the last 15 checkpoints; one that saved fewer (a shorter train.max_time, say: here the
    single model's 40 updates, 8 checkpoints) averages all it saved instead of failing after training.
    It trains with label smoothing 0.2, dropout 0.3 and a linear decay."""
    (tmp_path / "data").mkdir()
    data = write_corpus(tmp_path / "data", {"train": 300, "val": 40, "test2016": 20})
    out = tmp_path / "out"
    steps = 40 if models == 1 else 80
    command = ["bash", RECIPES / "multi30k_en_de/run.sh", "--out", out, "--models", str(models), *tiny_training(steps)]
    result = subprocess.run(command, env=recipe_env(data, "0.0 3.0"), capture_output=True, timeout=600)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    tokenizer = Tokenizer.load(out / "tokenizer.json")  # trained with --split-punctuation: every line ends
    vocabulary = set(tokenizer.vocabulary())  # with ".", never merged
    assert "." in vocabulary and {token for token in vocabulary if "." in token} <= {".", "▁."}
    runs = ["run"] if models == 1 else ["run1", "run2"]
    model_args = ["-m", out / "model.pt"] if models == 1 else ["-m", out / "model1.pt", "-m", out / "model2.pt"]
    full_mode = (15, 0.2, "linear", 0.3)  # keep_last, label smoothing, schedule, dropout
    last_15 = range(max(5, steps - 70), steps + 1, 5)  # of 16 checkpoints; of 8: all of them
    for run, model in zip(runs, model_args[1::2], strict=True):  # each the average of its run's last 15
        trained = load_config(out / run / "config.yaml", [])
        train = trained.train
        assert (train.keep_last, train.label_smoothing, train.lr_schedule, trained.model.dropout) == full_mode
        averaged = [Path(path).parts[-3:] for path in load_model_file(model).meta["averaged"]]
        assert averaged == [(run, "checkpoints", f"step_{step:08d}.pt") for step in last_15]
        fewer = f"run.sh: {out / run} has 8 checkpoints; averaging those"
        assert (fewer in result.stderr.decode()) == (models == 1)
    if models > 1:
        for seed in (1, 2):  # the cores shared: OMP_NUM_THREADS=1 leaves one thread for the two
            saved = load_config(out / f"run{seed}" / "config.yaml", [])
            assert (saved.train.seed, saved.train.threads) == (seed, 1)
        first, second = (load_model_file(out / f"model{i}.pt") for i in (1, 2))
        assert any(not torch.equal(first.weights[name], second.weights[name]) for name in first.weights)
        # the second model trained on the pairs as 10 samples segmented with BPE-dropout 0.05, same tokenizer
        assert Path(first.meta["data_dir"]) == (out / "data-bin").resolve()
        assert Path(second.meta["data_dir"]) == (out / "data-bin-dropout").resolve()
        plain, dropout = (
            json.loads((out / name / "manifest.json").read_text()) for name in ("data-bin", "data-bin-dropout")
        )
        assert dropout["sampling"] == {"bpe_dropout": 0.05, "samples": 10}
        assert plain["sampling"]["bpe_dropout"] == 0.0
        assert dropout["src_tokenizer"]["sha256"] == plain["src_tokenizer"]["sha256"]

    rows = [line.split("\t") for line in (out / "val_lenpen.tsv").read_text().splitlines()]
    assert [lenpen for lenpen, _ in rows] == ["0.0", "3.0"]
    for lenpen, bleu in rows:  # each row is what `mtkit evaluate` gives for that lenpen
        shown = run_mtkit(
            "evaluate", *model_args, "--src", data / "val.en", "--ref", data / "val.de",
            "--beam", "5", "--lenpen", lenpen, "--metrics", "bleu", "--json",
        )  # fmt: skip
        assert float(bleu) == json.loads(shown.stdout)["bleu"]["score"]
    best = max(rows, key=lambda row: float(row[1]))[0]  # max keeps the first of equals, as the script does
    assert f"lenpen {best}: the best val BLEU" in result.stderr.decode()
    expected = run_mtkit(
        "translate", *model_args, "-i", data / "test2016.en", "--beam", "5", "--lenpen", best
    )  # fmt: skip
    assert (out / "test2016.hyp.de").read_bytes() == expected.stdout
    hyps = expected.stdout.decode().splitlines()
    refs = (data / "test2016.de").read_text().splitlines()
    scores = json.loads((out / "test2016.json").read_text())
    assert scores["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=1e-4)


def test_multi30k_recipe_quick_mode_averages_its_last_5_checkpoints(tmp_path):
    """--quick keeps and averages the last 5 checkpoints, with the label smoothing (0.1) it was measured
    with. Where this machine trains in fp32, quick mode trains without dropout, decays the learning rate
    linearly and says so. (The full mode's: the end-to-end test's.)"""
    (tmp_path / "data").mkdir()
    data = write_corpus(tmp_path / "data", {"train": 300, "val": 40, "test2016": 20})
    out = tmp_path / "out"
    command = ["bash", RECIPES / "multi30k_en_de/run.sh", "--quick", "--models", "1", "--out", out, *tiny_training(40)]
    result = subprocess.run(command, env=recipe_env(data, "1.0"), capture_output=True, timeout=600)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    trained = load_config(out / "run" / "config.yaml", []).train
    assert (trained.keep_last, trained.label_smoothing) == (5, 0.1)
    in_fp32 = resolve_precision("auto", resolve_device("auto")) == "fp32"
    assert trained.lr_schedule == ("linear" if in_fp32 else "inverse_sqrt")
    assert load_config(out / "run" / "config.yaml", []).model.dropout == (0.0 if in_fp32 else 0.1)
    assert ("quick mode trains transformer-narrow" in result.stderr.decode()) == in_fp32
    averaged = [Path(path).parts[-3:] for path in load_model_file(out / "model.pt").meta["averaged"]]
    assert averaged == [("run", "checkpoints", f"step_{step:08d}.pt") for step in range(20, 41, 5)]
    assert "checkpoints; averaging those" not in result.stderr.decode()


def test_multi30k_recipe_with_average_best_averages_the_checkpoints_val_scored_best(tmp_path):
    """--average best keeps the best 15 by val (train.keep_best) and averages them: only validated
    checkpoints count (here every second saved one, 4 in all: fewer than 15, so all of them)."""
    (tmp_path / "data").mkdir()
    data = write_corpus(tmp_path / "data", {"train": 300, "val": 40, "test2016": 20})
    out = tmp_path / "out"
    options = ["--models", "1", "--average", "best", "--out", out, *tiny_training(40), "--set", "train.valid_every=10"]
    result = subprocess.run(["bash", RECIPES / "multi30k_en_de/run.sh", *options], env=recipe_env(data, "1.0"),
                            capture_output=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert load_config(out / "run" / "config.yaml", []).train.keep_best == 15
    averaged = [Path(path).parts[-3:] for path in load_model_file(out / "model.pt").meta["averaged"]]
    assert sorted(averaged) == [("run", "checkpoints", f"step_{step:08d}.pt") for step in (10, 20, 30, 40)]
    assert f"run.sh: {out / 'run'} has 4 validated checkpoints; averaging those" in result.stderr.decode()
    augmentation = json.loads((out / "data-bin" / "manifest.json").read_text())["augmentation"]  # the recipe's default
    assert (augmentation["upper"], augmentation["spans"], augmentation["short"], augmentation["typos"]) == (
        0.0, 0.03, 0.02, 0.01,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--average", "worst"], "run.sh: --average needs last or best, not 'worst'"),
        (["--average"], "run.sh: --average needs a value"),
        (["--augment"], "run.sh: --augment needs a value"),
    ],
)
def test_recipe_options_are_refused_in_one_line_before_anything_is_written(tmp_path, options, message):
    out = tmp_path / "out"
    command = ["bash", RECIPES / "multi30k_en_de/run.sh", "--out", out, *options]
    result = subprocess.run(command, env=recipe_env(tmp_path, "1.0"), capture_output=True, timeout=120)
    assert (result.returncode, result.stderr.decode(), result.stdout) == (2, message + "\n", b"")
    assert not out.exists()


TWO_SETTINGS = """# a comment, then a blank line

first   plain    train.seed=1
second  dropout  train.seed=2 train.label_smoothing=0.1
"""


@pytest.mark.parametrize(
    ("options", "sweep", "message"),
    [
        (["--dry-run"], None, "run.sh: --dry-run runs the --gpu mode's steps on the CPU: give --gpu too"),
        (["--models", "2"], TWO_SETTINGS, "run.sh: --models N trains one setting N times; --sweep trains the settings its file lists"),
        (["--average", "best"], TWO_SETTINGS, "run.sh: with --sweep, mtkit choose tries each run's last and best checkpoints on val; --average is for the other modes"),
        ([], "a plain train.seed=1\nb noisy train.seed=2\n", "run.sh: SWEEP, line 2: DATA is plain or dropout, not 'noisy'"),
        ([], "a plain train.seed=1 dropout\n", "run.sh: SWEEP, line 1: settings are KEY=VALUE, not 'dropout'"),
        ([], "a/b plain\n", "run.sh: SWEEP, line 1: NAME takes letters, digits, '.', '_' and '-', not 'a/b'"),
        ([], "a plain\n# b\na dropout\n", "run.sh: SWEEP, line 3: the name a is taken by an earlier line"),
        ([], "# nothing\n", "run.sh: SWEEP: no settings (one line each: NAME DATA KEY=VALUE...)"),
        ([], "", "run.sh: --sweep SWEEP: no such file"),
    ],
)  # fmt: skip
def test_sweep_options_and_files_are_refused_in_one_line_before_anything_is_written(tmp_path, options, sweep, message):
    out = tmp_path / "out"
    sweep_file = tmp_path / "sweep.txt"
    if sweep:
        sweep_file.write_text(sweep)
    command = ["bash", RECIPES / "multi30k_en_de/run.sh", "--out", out, *options]
    command += ["--sweep", sweep_file] if sweep is not None else []
    result = subprocess.run(command, env=recipe_env(tmp_path, "1.0"), capture_output=True, timeout=120)
    expected = message.replace("SWEEP", str(sweep_file))
    assert (result.returncode, result.stderr.decode(), result.stdout) == (2, expected + "\n", b"")
    assert not out.exists()


def test_wmt14_recipe_runs_end_to_end_on_a_local_folder_of_three_corpora(tmp_path):
    """run.sh on a WMT-shaped folder (three training corpora as prepare_data.sh leaves them, valid and
    test), torchrun with one CPU process, the base config shrunk by TRAIN_ARGS: the tokenizer, the
    corpora joined by preprocess, training, averaging the last 5 checkpoints, and BLEU on test."""
    data = tmp_path / "wmt"
    data.mkdir()
    write_corpus(data, {"europarl": 150, "commoncrawl": 100, "news-commentary": 50, "valid": 20, "test": 20})
    shrink = " ".join([*TINY_TRAIN, "--set", "train.max_steps=6", "--set", "train.save_every=1"])
    env = {**recipe_env(data, "0.6"), "GPUS": "1", "VOCAB": "500", "TRAIN_ARGS": shrink}
    result = subprocess.run(["bash", RECIPES / "wmt14_en_de/run.sh", "base", tmp_path / "out"], env=env,
                            capture_output=True, timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    manifest = json.loads((tmp_path / "out" / "data-bin" / "manifest.json").read_text())
    assert [(c["name"], c["kept"]) for c in manifest["corpora"]] == [
        ("europarl", 150), ("commoncrawl", 100), ("news-commentary", 50)
    ]  # fmt: skip
    log = result.stderr.decode()
    assert "the average of 5 checkpoints (step_00000002.pt, step_00000003.pt" in log
    assert "BLEU" in result.stdout.decode()
    again = subprocess.run(["bash", RECIPES / "wmt14_en_de/run.sh", "base", tmp_path / "out"], env=env,
                           capture_output=True, timeout=900)  # fmt: skip
    assert again.returncode == 0, again.stderr.decode()[-3000:]  # rerun: the run is continued, not refused


@pytest.mark.parametrize("low_resource", [False, True])
def test_multilingual_recipe_runs_end_to_end_and_scores_every_direction(tmp_path, low_resource):
    """recipes/multi30k_multilingual on a generated multi-way corpus (German and two made-up
    languages as fr and cs), a tiny model: one tokenizer with the three targets' tags, a dataset of
    the three directions, the lenpen of the best macro-average val BLEU, and test2016 per direction."""
    (tmp_path / "data").mkdir()
    data = write_corpus(tmp_path / "data", {"train": 300, "val": 40, "test2016": 20})
    for split in ("train", "val", "test2016"):
        german = (data / f"{split}.de").read_text().splitlines()
        (data / f"{split}.fr").write_text("".join(line.upper() + "\n" for line in german))
        (data / f"{split}.cs").write_text("".join(" ".join(reversed(line.split())) + "\n" for line in german))
    out = tmp_path / "out"
    command = ["bash", RECIPES / "multi30k_multilingual/run.sh", "--out", out, "--temperature", "2", *tiny_training(40)]
    command += ["--low-resource", "cs=0.1"] if low_resource else []
    result = subprocess.run(command, env=recipe_env(data, "0.6 2.2"), capture_output=True, timeout=600)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert Tokenizer.load(out / "tokenizer.json").tag_names() == ["2cs", "2de", "2fr"]
    manifest = json.loads((out / "data-bin" / "manifest.json").read_text())
    assert manifest["directions"] == [["en", "de"], ["en", "fr"], ["en", "cs"]]
    corpora = [(corpus["name"], corpus["kept"]) for corpus in manifest["corpora"]]
    if low_resource:  # en-cs from the first 30 of the 300 pairs, a corpus of its own, the bilingual recipe's DATA
        assert corpora == [("main.en-de", 300), ("main.en-fr", 300), ("cs.en-cs", 30)]
        assert (out / "raw-cs" / "train.cs").read_text() == "".join(
            (data / "train.cs").read_text().splitlines(True)[:30]
        )
        assert (out / "raw-cs" / "test2016.cs").read_text() == (data / "test2016.cs").read_text()
    else:
        assert corpora == [("en-de", 300), ("en-fr", 300), ("en-cs", 300)]
    rows = [line.split("\t") for line in (out / "val_lenpen.tsv").read_text().splitlines()]
    best = max(rows, key=lambda row: float(row[1]))[0]
    assert f"lenpen {best}: the best macro-average val BLEU" in result.stderr.decode()
    report = json.loads((out / "test2016.json").read_text())
    assert list(report["directions"]) == ["en-de", "en-fr", "en-cs"]
    shown = run_mtkit("evaluate", "-m", out / "model.pt", "--tgt-lang", "fr", "--src", data / "test2016.en",
                      "--ref", data / "test2016.fr", "--lenpen", best, "--json")  # fmt: skip
    assert report["directions"]["en-fr"]["bleu"]["score"] == pytest.approx(json.loads(shown.stdout)["bleu"]["score"])
    assert f"test2016 en-cs: BLEU {report['directions']['en-cs']['bleu']['score']:.2f}" in result.stdout.decode()
