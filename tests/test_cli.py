import json
import pickle
import signal
import subprocess
import sys

import pytest
import torch
from conftest import run_mtkit, write_lines

from mtkit.cli.app import one_line_paragraphs
from mtkit.model.files import MODEL_FORMAT, load_model_file, load_payload, read_index, save_model_file
from mtkit.training.average import average_checkpoints

COMMANDS = ["train-tokenizer", "preprocess", "train", "average", "translate", "evaluate", "attention", "plot"]


def test_help_lists_every_command_and_each_shows_an_example():
    result = run_mtkit("--help")
    assert result.returncode == 0
    for command in COMMANDS:
        assert command in result.stdout.decode()
        sub = run_mtkit(command, "--help")
        assert sub.returncode == 0 and "Example" in sub.stdout.decode(), command


@pytest.mark.parametrize(("command", "extra"), [("serve", "mtkit[serve]"), ("export", "mtkit[hf]")])
def test_help_names_the_extra_to_install(command, extra):
    """Square brackets are rich markup in help texts: an unescaped [serve] would vanish."""
    help_text = " ".join(run_mtkit(command, "--help").stdout.decode().split())
    assert f"pip install '{extra}'" in help_text


def test_help_paragraphs_wrap_at_the_terminal_not_at_the_source_lines():
    """A docstring paragraph spans several source lines: the help fills each line up to COLUMNS, where
    keeping the source's breaks left short lines such as "cross-attention" alone."""
    lines = run_mtkit("translate", "--help", env={"COLUMNS": "80"}).stdout.decode().splitlines()
    start = next(i for i, line in enumerate(lines) if "With --alignment" in line)
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    paragraph = [line.strip() for line in lines[start:end]]
    assert paragraph[-1].endswith("continues as the model's best completion (both engines).")
    assert len(paragraph) == 5 and all(len(line) > 70 for line in paragraph[:-1]), paragraph
    assert max(len(line.rstrip()) for line in lines) <= 80


def test_one_line_paragraphs():
    doc = """Summary line.

    First paragraph,
    wrapped in the source.

    Example: [bold]mtkit x[/bold]
    """
    expected = "Summary line.\n\nFirst paragraph, wrapped in the source.\n\nExample: [bold]mtkit x[/bold]"
    assert one_line_paragraphs(doc) == expected
    assert one_line_paragraphs(None) is None


def test_version():
    from mtkit import __version__

    result = run_mtkit("--version")
    assert result.stdout.decode().strip() == f"mtkit {__version__}"


def test_tokenizer_and_preprocess_commands(tmp_path, corpus):
    result = run_mtkit(
        "train-tokenizer",
        "-i",
        corpus / "train.en",
        "-i",
        corpus / "train.de",
        "-o",
        tmp_path / "tok.json",
        "--vocab-size",
        "400",
    )
    assert result.returncode == 0 and "vocabulary of 400 from 800 lines" in result.stderr.decode()
    result = run_mtkit(
        "preprocess",
        "-s",
        "en",
        "-t",
        "de",
        "--train",
        corpus / "train",
        "--valid",
        corpus / "valid",
        "--tokenizer",
        tmp_path / "tok.json",
        "-o",
        tmp_path / "bin",
    )
    assert result.returncode == 0 and "train: kept 400 of 400 pairs" in result.stderr.decode()
    again = run_mtkit(
        "preprocess",
        "-s",
        "en",
        "-t",
        "de",
        "--train",
        corpus / "train",
        "--tokenizer",
        tmp_path / "tok.json",
        "-o",
        tmp_path / "bin",
    )
    assert again.returncode == 1 and "already exists (use --force" in again.stderr.decode()


WITHOUT_TORCH = """
import sys
from mtkit.cli import main
try:
    main()
except SystemExit as end:
    print(end.code, "torch" in sys.modules)
"""


def test_commands_that_need_no_model_start_without_torch(tmp_path, corpus):
    """train-tokenizer, preprocess and evaluate --hyp never load torch (2 of a CLI call's 2.5 s)."""
    commands = [
        ["train-tokenizer", "-i", corpus / "train.en", "-o", tmp_path / "tok.json", "--vocab-size", "300"],
        ["preprocess", "-s", "en", "-t", "de", "--train", corpus / "train", "--tokenizer", tmp_path / "tok.json",
         "-o", tmp_path / "bin"],
        ["evaluate", "--hyp", corpus / "valid.de", "--ref", corpus / "valid.de", "--json"],
        ["--help"],
    ]  # fmt: skip
    for args in commands:
        result = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *map(str, args)], capture_output=True)
        assert result.stdout.decode().splitlines()[-1] == "0 False", (args, result.stderr.decode()[-2000:])


@pytest.mark.parametrize("split", [True, False])
def test_train_tokenizer_split_punctuation_option(tmp_path, corpus, split):
    from mtkit.text.tokenizer import Tokenizer

    flag = "--split-punctuation" if split else "--no-split-punctuation"
    result = run_mtkit(
        "train-tokenizer", "-i", corpus / "train.de", "-o", tmp_path / "t.json", "--vocab-size", "400", flag
    )
    assert result.returncode == 0, result.stderr.decode()
    tokenizer = Tokenizer.load(tmp_path / "t.json")
    with_full_stop = {token for token in tokenizer.vocabulary() if "." in token}
    # Every corpus line ends with "."; only without the split may a subword join it to a word.
    assert (with_full_stop == {"."}) is split, with_full_stop


@pytest.mark.parametrize(
    "args, message",
    [
        (["train-tokenizer", "-i", "missing.txt", "-o", "t.json"], "missing.txt: no such file"),
        (["train-tokenizer", "-i", "{src}", "-o", "t.json", "--vocab-size", "100"], "--vocab-size 100 is too small"),
        (
            ["preprocess", "-s", "en", "-t", "de", "--train", "nowhere", "--tokenizer", "t.json", "-o", "x"],
            "nowhere.en: no such file",
        ),
    ],
)
def test_bad_input_is_one_line_without_traceback(tmp_path, corpus, args, message):
    args = [a.replace("{src}", str(corpus / "train.en")) for a in args]
    result = run_mtkit(*args)
    stderr = result.stderr.decode()
    assert result.returncode == 1 and message in stderr and "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_translate_keeps_lines_order_and_blanks(trained_run):
    text = "A dog runs.\n\nTwo men are talking in a park.\nA girl.\n"
    result = run_mtkit("translate", "-m", trained_run, "--beam", "2", stdin=text.encode())
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().split("\n")
    assert len(lines) == 5 and lines[1] == "" and lines[4] == ""
    # Each line is translated independently of its neighbours and of the batching.
    one = run_mtkit("translate", "-m", trained_run, "--beam", "2", stdin=b"A girl.\n")
    assert one.stdout.decode().strip() == lines[3]


def test_translate_file_to_file_equals_stdin(trained_run, corpus, tmp_path):
    piped = run_mtkit("translate", "-m", trained_run, "--beam", "1", stdin=(corpus / "test.en").read_bytes())
    written = run_mtkit(
        "translate",
        "-m",
        trained_run,
        "--beam",
        "1",
        "-i",
        corpus / "test.en",
        "-o",
        tmp_path / "out.de",
        "--batch-size",
        "3",
    )
    assert written.returncode == 0 and written.stdout == b""
    assert (tmp_path / "out.de").read_bytes() == piped.stdout
    assert len(piped.stdout.decode().splitlines()) == 20


def test_nbest_output_format(trained_run):
    result = run_mtkit("translate", "-m", trained_run, "--beam", "3", "--nbest", "3", stdin=b"A dog.\nA cat.\n")
    rows = [line.split("\t") for line in result.stdout.decode().splitlines()]
    assert [r[0] for r in rows] == ["0", "0", "0", "1", "1", "1"]
    scores = [float(r[1]) for r in rows[:3]]
    assert scores == sorted(scores, reverse=True)


def test_translate_bad_inputs(trained_run, tmp_path):
    cases = [
        (["-m", tmp_path / "nothing.pt"], b"x\n", "nothing.pt: no such model file or run directory"),
        (["-m", trained_run, "--beam", "0"], b"x\n", "--beam 0: must be at least 1"),
        (["-m", trained_run], b"good line\nbad \xff line\n", "<stdin>:2: invalid UTF-8"),
        (["-m", trained_run / "config.yaml"], b"x\n", "config.yaml: not an mtkit model file"),
    ]
    for args, stdin, message in cases:
        result = run_mtkit("translate", *args, stdin=stdin)
        stderr = result.stderr.decode()
        assert result.returncode == 1 and message in stderr and "Traceback" not in stderr, stderr


def test_a_very_long_line_is_translated(trained_run):
    long_line = " ".join(["A dog runs across the green field."] * 120)  # ~1000 subwords, past the 256-entry table
    result = run_mtkit(
        "translate",
        "-m",
        trained_run,
        "--beam",
        "1",
        "--max-len-a",
        "0",
        "--max-len-b",
        "5",
        stdin=(long_line + "\nA cat.\n").encode(),
    )
    assert result.returncode == 0, result.stderr.decode()
    assert len(result.stdout.decode().split("\n")) == 3


def test_crafted_pickle_is_refused(tmp_path):
    class Exploit:
        def __reduce__(self):
            return (print, ("this would run code",))

    path = tmp_path / "evil.pt"
    torch.save({"format": MODEL_FORMAT, "model": Exploit()}, path)
    result = run_mtkit("translate", "-m", path, stdin=b"x\n")
    stderr = result.stderr.decode()
    assert (
        result.returncode == 1 and "refused to load" in stderr and "this would run code" not in result.stdout.decode()
    )
    with open(tmp_path / "raw.pt", "wb") as handle:
        pickle.dump(Exploit(), handle)
    assert run_mtkit("translate", "-m", tmp_path / "raw.pt", stdin=b"x\n").returncode == 1


def test_average_of_itself_is_identity_and_of_two_is_the_mean(trained_run, tmp_path):
    paths = [trained_run / "checkpoints" / e["file"] for e in read_index(trained_run)]
    first, second = load_model_file(paths[0]), load_model_file(paths[1])
    same = average_checkpoints([paths[0], paths[0]])
    for name, tensor in first.weights.items():
        assert torch.equal(same.weights[name], tensor)
    mean = average_checkpoints(paths)
    for name, tensor in first.weights.items():
        assert torch.equal(mean.weights[name], (tensor.float() + second.weights[name].float()) / 2)
    save_model_file(tmp_path / "avg.pt", mean)
    reloaded = load_model_file(tmp_path / "avg.pt")
    assert reloaded.meta["averaged"] == [str(p) for p in paths]


def test_average_command_and_translate_with_it(trained_run, tmp_path):
    result = run_mtkit("average", trained_run, "--last", "2", "-o", tmp_path / "avg.pt")
    assert result.returncode == 0, result.stderr.decode()
    assert "average of 2 checkpoints" in result.stderr.decode()
    assert run_mtkit("translate", "-m", tmp_path / "avg.pt", stdin=b"A dog.\n").returncode == 0
    too_many = run_mtkit("average", trained_run, "--last", "9", "-o", tmp_path / "x.pt")
    assert too_many.returncode == 1 and "asked for 9 checkpoints but it keeps 2" in too_many.stderr.decode()


def test_average_refuses_different_architectures(trained_run, tmp_path):
    path = trained_run / "checkpoints" / read_index(trained_run)[0]["file"]
    payload = load_payload(path, MODEL_FORMAT)
    payload["config"]["ffn_dim"] = 64
    torch.save(payload, tmp_path / "other.pt")
    result = run_mtkit("average", path, tmp_path / "other.pt", "-o", tmp_path / "avg.pt")
    assert result.returncode == 1 and "different model architecture" in result.stderr.decode()


def test_evaluate_json_and_table(trained_run, corpus, tmp_path):
    result = run_mtkit(
        "evaluate",
        "-m",
        trained_run,
        "--src",
        corpus / "test.en",
        "--ref",
        corpus / "test.de",
        "--json",
        "--beam",
        "2",
        "-o",
        tmp_path / "hyp.de",
    )
    assert result.returncode == 0, result.stderr.decode()
    scores = json.loads(result.stdout)
    assert set(scores) == {"bleu", "chrf", "ter", "sentences", "seconds", "sentences_per_s"}
    assert scores["sentences"] == 20 and scores["bleu"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    rescored = json.loads(
        run_mtkit(
            "evaluate", "--hyp", tmp_path / "hyp.de", "--ref", corpus / "test.de", "--json", "--metrics", "bleu"
        ).stdout
    )
    assert rescored["bleu"] == scores["bleu"] and "chrf" not in rescored
    table = run_mtkit("evaluate", "--hyp", tmp_path / "hyp.de", "--ref", corpus / "test.de", "--lowercase")
    assert "BLEU" in table.stdout.decode() and "case:lc" in table.stdout.decode()


def test_evaluate_scores_match_sacrebleu(corpus, tmp_path):
    import sacrebleu

    hyps = (corpus / "test.de").read_text().splitlines()
    hyps = [" ".join(h.split()[::-1]) for h in hyps]  # a poor system with a known score
    write_lines(tmp_path / "hyp.de", hyps)
    refs = (corpus / "test.de").read_text().splitlines()
    result = json.loads(
        run_mtkit("evaluate", "--hyp", tmp_path / "hyp.de", "--ref", corpus / "test.de", "--json").stdout
    )
    assert result["bleu"]["score"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 4)
    assert result["ter"]["score"] == round(sacrebleu.corpus_ter(hyps, [refs]).score, 4)


def test_evaluate_line_count_mismatch_names_both(corpus, tmp_path):
    write_lines(tmp_path / "short.de", ["only one line"])
    result = run_mtkit("evaluate", "--hyp", tmp_path / "short.de", "--ref", corpus / "test.de")
    stderr = result.stderr.decode()
    assert result.returncode == 1 and "short.de has 1 lines" in stderr and "test.de has 20 lines" in stderr


def test_a_line_typed_on_a_terminal_is_translated_at_once(trained_run):
    """With a terminal on stdin, each line is answered before the next is typed (no end of input)."""
    import os
    import pty
    import select
    import subprocess
    import sys

    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mtkit", "translate", "-m", str(trained_run), "--beam", "1"],
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        os.write(controller, b"A dog runs.\n")
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "no translation while the input stays open"
        first = proc.stdout.readline()
        assert first.endswith(b"\n")
        assert proc.poll() is None  # still waiting for more input
    finally:
        os.close(controller)
        os.close(terminal)
        proc.kill()
        proc.wait()


def test_average_keeps_tied_embeddings_shared(trained_run, tmp_path):
    paths = [trained_run / "checkpoints" / e["file"] for e in read_index(trained_run)]
    save_model_file(tmp_path / "avg.pt", average_checkpoints(paths))
    weights = load_model_file(tmp_path / "avg.pt").weights
    assert weights["src_embed.tokens.weight"].data_ptr() == weights["tgt_embed.tokens.weight"].data_ptr()
    assert (tmp_path / "avg.pt").stat().st_size < 1.2 * paths[0].stat().st_size


def test_help_lists_the_commands_in_the_order_of_the_data_path():
    from mtkit.cli import app

    names = [c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands]
    assert names == ["train-tokenizer", "preprocess", "distill", "train", "average", "choose", "import", "trim-vocab", "export", "translate",
                     "translate-file", "evaluate", "score", "calibrate", "serve", "adapt", "attention", "plot"]  # fmt: skip


def test_ctrl_c_exits_130_with_one_line(trained_run):
    """SIGINT once the first line is translated (an event, not a delay): exit 130, no traceback."""
    # As typed at a terminal: SIGINT not ignored, whatever this test inherited (a shell's background
    # job starts with SIGINT ignored, and an ignored SIGINT is kept by Python and its children).
    process = subprocess.Popen([sys.executable, "-m", "mtkit", "translate", "-m", str(trained_run), "--buffer-size", "1"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    process.stdin.write(b"A dog runs.\n")
    process.stdin.flush()
    assert process.stdout.readline()  # translated: the command is in its loop, waiting for input
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    said = [line for line in stderr.decode().splitlines() if not line.startswith("translating: ")]  # progress
    assert (process.returncode, said) == (130, ["interrupted"])


def test_a_closed_pipe_ends_quietly_with_exit_0(trained_run, corpus, tmp_path):
    many = write_lines(tmp_path / "many.en", (corpus / "train.en").read_text().splitlines() * 3)
    command = f"set -o pipefail; {sys.executable} -m mtkit translate -m {trained_run} -i {many} --beam 1 | head -1"
    result = subprocess.run(["bash", "-c", command], capture_output=True, timeout=600)
    assert result.returncode == 0, result.stderr.decode()
    assert len(result.stdout.decode().splitlines()) == 1
    # quiet: no error and no traceback; only progress lines, which a slow machine prints every 30 s
    assert all(line.startswith("translating: ") for line in result.stderr.decode().splitlines()), result.stderr


def test_several_references_score_as_sacrebleu_with_all_of_them(corpus, tmp_path):
    import sacrebleu

    hyp = (corpus / "test.de").read_text().splitlines()
    second = [line.replace("Mann", "Herr") for line in hyp]
    first = [line.replace("Hund", "Köter") for line in hyp]
    write_lines(tmp_path / "hyp.de", hyp)
    write_lines(tmp_path / "ref1.de", first)
    write_lines(tmp_path / "ref2.de", second)
    result = run_mtkit("evaluate", "--hyp", tmp_path / "hyp.de", "--ref", tmp_path / "ref1.de", "--ref",
                       tmp_path / "ref2.de", "--json", "--metrics", "bleu,chrf")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    scores = json.loads(result.stdout)
    assert scores["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(hyp, [first, second]).score, abs=1e-4)
    assert scores["chrf"]["score"] == pytest.approx(sacrebleu.corpus_chrf(hyp, [first, second]).score, abs=1e-4)
    assert scores["bleu"]["signature"].startswith("nrefs:2|")
    one = json.loads(
        run_mtkit("evaluate", "--hyp", tmp_path / "hyp.de", "--ref", tmp_path / "ref1.de", "--json").stdout
    )
    assert scores["bleu"]["score"] > one["bleu"]["score"]
