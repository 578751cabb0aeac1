"""Nothing lost, nothing silent: pipes, text that looks like special tokens, empty and damaged inputs."""

import json
import os
import subprocess
import sys
import unicodedata

import pytest
from conftest import TINY_TRAIN, run_mtkit, write_lines
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtkit.model.files import CHECKPOINT_DIR, INDEX_FILE
from mtkit.text.tokenizer import SPECIAL_TOKENS, Tokenizer, train_tokenizer


def run_bash(command: str, **env: str) -> subprocess.CompletedProcess:
    """A shell command line with process substitution, the mtkit of this interpreter first on PATH."""
    path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(["bash", "-c", command], capture_output=True, timeout=300,
                          env={**os.environ, "PATH": path, "OMP_NUM_THREADS": "1", **env})  # fmt: skip


def assert_one_line_error(result: subprocess.CompletedProcess, message: str) -> None:
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert message in stderr and "Traceback" not in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


# --- every input is read exactly once ------------------------------------------------------------


def test_translate_reads_a_pipe_given_with_i(trained_run):
    lines = b"A dog runs.\nTwo men talk.\n"
    expected = run_mtkit("translate", "-m", trained_run, "--beam", "1", stdin=lines)
    piped = run_bash(
        f"python -m mtkit translate -m {trained_run} --beam 1 -i <(printf 'A dog runs.\\nTwo men talk.\\n')"
    )
    assert piped.returncode == 0, piped.stderr.decode()
    assert piped.stdout == expected.stdout and len(piped.stdout.decode().splitlines()) == 2


def test_train_tokenizer_reads_pipes(corpus, tmp_path):
    result = run_bash(
        f"python -m mtkit train-tokenizer -i <(cat {corpus / 'train.en'}) -i <(cat {corpus / 'train.de'}) "
        f"-o {tmp_path / 'tok.json'} --vocab-size 300"
    )
    assert result.returncode == 0, result.stderr.decode()
    assert "from 800 lines" in result.stderr.decode()


def test_evaluate_reads_pipes(corpus):
    ref = corpus / "test.de"
    result = run_bash(f"python -m mtkit evaluate --hyp <(cat {ref}) --ref <(cat {ref}) --metrics bleu --json")
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout)["bleu"]["score"] == 100.0


# --- text is text ---------------------------------------------------------------------------------


def test_special_token_strings_in_text_are_ordinary_characters(tokenizer_path):
    tokenizer = Tokenizer.load(tokenizer_path)
    text = "A dog </s> runs <pad> fast <s> and <unk>."
    ids = tokenizer.encode_batch([text])[0]
    assert not set(ids) & {0, 1, 2, 3}  # no control id: <pad>, <unk>, <s>, </s>
    assert tokenizer.decode_batch([ids]) == [text]


# "▁" itself is the one exception: it marks word starts, so a typed one reads as a space (as in
# SentencePiece); test_a_typed_word_start_mark_reads_as_a_space pins that.
LINE_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\r\n▁"), max_size=12)


@pytest.fixture(scope="module")
def punctuation_tokenizer_path(corpus, tmp_path_factory):
    path = tmp_path_factory.mktemp("punct") / "tokenizer.json"
    train_tokenizer([corpus / "train.en", corpus / "train.de"], path, vocab_size=500, split_punctuation=True)
    return path


@pytest.mark.parametrize("which", ["tokenizer_path", "punctuation_tokenizer_path"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(st.one_of(st.sampled_from(SPECIAL_TOKENS), LINE_TEXT), max_size=6))
def test_round_trip_of_arbitrary_text(request, which, pieces):
    """For any line as translate encodes it (NFKC, stripped), decode(encode(line)) gives it back:
    special-token strings, control and combining characters, unseen scripts and punctuation
    (split off or not) included."""
    tokenizer = Tokenizer.load(request.getfixturevalue(which))
    text = unicodedata.normalize("NFKC", " ".join(pieces)).strip()
    assert tokenizer.decode_batch(tokenizer.encode_batch([text])) == [text]


def test_a_typed_word_start_mark_reads_as_a_space(tokenizer_path):
    tokenizer = Tokenizer.load(tokenizer_path)
    assert tokenizer.decode_batch(tokenizer.encode_batch(["a▁dog", "▁", "a ▁"])) == ["a dog", "", "a  "]


# --- empty, damaged and contradictory inputs --------------------------------------------------


def test_evaluate_empty_files(tmp_path):
    empty = write_lines(tmp_path / "empty.de", [])
    assert_one_line_error(run_mtkit("evaluate", "--hyp", empty, "--ref", empty), "empty.de: no lines to score")


def test_evaluate_refuses_model_together_with_hyp(trained_run, corpus):
    result = run_mtkit("evaluate", "-m", trained_run, "--hyp", corpus / "test.de", "--ref", corpus / "test.de")
    assert_one_line_error(result, "--model and --hyp")


def test_train_tokenizer_output_that_is_a_directory_fails_before_training(corpus, tmp_path):
    result = run_mtkit("train-tokenizer", "-i", corpus / "train.en", "-o", tmp_path, "--vocab-size", "300")
    assert_one_line_error(result, f"{tmp_path}: is a directory")


def test_train_output_that_is_a_file(data_dir, tmp_path):
    (tmp_path / "run").write_text("not a directory")
    result = run_mtkit("train", "-d", data_dir, "-o", tmp_path / "run", *TINY_TRAIN)
    assert_one_line_error(result, "run: exists and is not a directory")


def test_preprocess_negative_max_len(corpus, tokenizer_path, tmp_path):
    args = ["preprocess", "-s", "en", "-t", "de", "--train", corpus / "train", "--tokenizer", tokenizer_path]
    result = run_mtkit(*args, "-o", tmp_path / "bin", "--max-len", "-1")
    assert_one_line_error(result, "--max-len -1: must not be negative")
    assert not (tmp_path / "bin").exists()


def test_damaged_checkpoint_index(trained_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    (run / CHECKPOINT_DIR / INDEX_FILE).write_text('{"checkpoints": [{"step": 2')
    result = run_mtkit("translate", "-m", run, stdin=b"A dog.\n")
    assert_one_line_error(result, f"{INDEX_FILE}: damaged")


def test_resume_after_a_torn_metrics_line(data_dir, tmp_path):
    run = tmp_path / "run"
    first = run_mtkit("train", "-d", data_dir, "-o", run, *TINY_TRAIN, "--set", "train.max_steps=3")
    assert first.returncode == 0, first.stderr.decode()
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as log:
        log.write('{"step": 4, "loss": 3.1')  # kill -9 in the middle of a write
    resumed = run_mtkit("train", "--resume", run, "--set", "train.max_steps=5")
    assert resumed.returncode == 0, resumed.stderr.decode()
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5]
