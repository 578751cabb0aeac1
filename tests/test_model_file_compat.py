"""Model files outlive the code that wrote them: tests/data/model_file_v1/tiny.pt was written by mtkit
0.x at commit 4bfb28a (a 1+1-layer model of d_model 32 trained for 2,000 updates on the generated
corpus), before the package was split into subpackages. Its greedy and beam translations and its
forced-decoding scores were recorded then; it must load and give them still. Each recording names the
precision it was made in (`score.bf16.txt`), and the test computes in that precision, never in
`auto`, whose choice depends on the CPU. A model file holds tensors, numbers and strings only
(torch.load with weights_only=True), so no module path inside it can go stale."""

import pickletools
import zipfile

import pytest
from conftest import REPO, run_mtkit

FIXTURE = REPO / "tests" / "data" / "model_file_v1"
MODEL = FIXTURE / "tiny.pt"


RECORDINGS = sorted(path.name for path in FIXTURE.iterdir() if path.name not in ("tiny.pt", "test.en", "test.de"))


def recorded(name: str) -> str:
    return (FIXTURE / name).read_text(encoding="utf-8")


def precision_of(recording: str) -> str:
    """The precision a recording was made in, from its name: greedy.fp32.de -> fp32."""
    return recording.split(".")[1]


def test_every_recording_names_the_precision_it_was_made_in():
    assert len(RECORDINGS) == 4
    assert all(precision_of(name) in ("fp32", "bf16") for name in RECORDINGS), RECORDINGS


def test_the_model_file_pickles_no_global_of_mtkit():
    with zipfile.ZipFile(MODEL) as archive:
        pickle_bytes = next(archive.read(name) for name in archive.namelist() if name.endswith("data.pkl"))
    globals_named = {arg for op, arg, _ in pickletools.genops(pickle_bytes) if op.name == "GLOBAL"}
    assert globals_named == {"torch._utils _rebuild_tensor_v2", "torch FloatStorage", "collections OrderedDict"}
    strings = [arg for op, arg, _ in pickletools.genops(pickle_bytes) if isinstance(arg, str)]
    assert "src_tokenizer" in strings and not [text for text in strings if text.startswith("mtkit.")]


@pytest.mark.parametrize(
    ("options", "expected"),
    [(["--beam", "1"], "greedy.fp32.de"), (["--beam", "4", "--nbest", "2"], "beam4_nbest2.fp32.de")],
)
def test_an_old_model_file_translates_as_it_did(options, expected):
    precision = precision_of(expected)
    result = run_mtkit("translate", "-m", MODEL, "-i", FIXTURE / "test.en", "--precision", precision, *options)
    assert result.returncode == 0, result.stderr.decode()
    got, want = result.stdout.decode().splitlines(), recorded(expected).splitlines()
    assert [line.split("\t")[-1] for line in got] == [line.split("\t")[-1] for line in want]
    if options[-1] == "2":  # n-best lines: index, score, translation
        assert [line.split("\t")[0] for line in got] == [line.split("\t")[0] for line in want]
        got_scores = [float(line.split("\t")[1]) for line in got]
        assert got_scores == pytest.approx([float(line.split("\t")[1]) for line in want], abs=2e-4)


@pytest.mark.parametrize("expected", ["score.fp32.txt", "score.bf16.txt"])
def test_an_old_model_file_scores_as_it_did(expected):
    """bf16 too (emulated on a CPU without bf16 instructions), within bf16's rounding: the CPU kinds'
    kernels may sum in other orders. Its numbers are 0.010 to 0.072 from fp32's."""
    result = run_mtkit("score", "-m", MODEL, "--src", FIXTURE / "test.en", "--tgt", FIXTURE / "test.de",
                       "--precision", precision_of(expected))  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    got = [float(value) for value in result.stdout.decode().split()]
    tolerance = {"fp32": 1e-4, "bf16": 5e-3}[precision_of(expected)]
    assert got == pytest.approx([float(value) for value in recorded(expected).split()], abs=tolerance)
