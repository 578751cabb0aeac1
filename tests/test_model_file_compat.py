"""Model files outlive the code that wrote them: tests/data/model_file_v1/tiny.pt was written by mtkit
0.x at commit 4bfb28a (a 1+1-layer model of d_model 32 trained for 2,000 updates on the generated
corpus), before the package was split into subpackages. Its greedy and beam translations and its
forced-decoding scores were recorded then, in fp32; it must load and give them still. A model file
holds tensors, numbers and strings only (torch.load with weights_only=True), so no module path
inside it can go stale."""

import pickletools
import zipfile

import pytest
from conftest import REPO, run_mtkit

FIXTURE = REPO / "tests" / "data" / "model_file_v1"
MODEL = FIXTURE / "tiny.pt"


def recorded(name: str) -> str:
    return (FIXTURE / name).read_text(encoding="utf-8")


def test_the_model_file_pickles_no_global_of_mtkit():
    with zipfile.ZipFile(MODEL) as archive:
        pickle_bytes = next(archive.read(name) for name in archive.namelist() if name.endswith("data.pkl"))
    globals_named = {arg for op, arg, _ in pickletools.genops(pickle_bytes) if op.name == "GLOBAL"}
    assert globals_named == {"torch._utils _rebuild_tensor_v2", "torch FloatStorage", "collections OrderedDict"}
    strings = [arg for op, arg, _ in pickletools.genops(pickle_bytes) if isinstance(arg, str)]
    assert "src_tokenizer" in strings and not [text for text in strings if text.startswith("mtkit.")]


@pytest.mark.parametrize(
    ("options", "expected"),
    [(["--beam", "1"], "greedy.de"), (["--beam", "4", "--nbest", "2"], "beam4_nbest2.de")],
)
def test_an_old_model_file_translates_as_it_did(options, expected):
    result = run_mtkit("translate", "-m", MODEL, "-i", FIXTURE / "test.en", "--precision", "fp32", *options)
    assert result.returncode == 0, result.stderr.decode()
    got, want = result.stdout.decode().splitlines(), recorded(expected).splitlines()
    assert [line.split("\t")[-1] for line in got] == [line.split("\t")[-1] for line in want]
    if options[-1] == "2":  # n-best lines: index, score, translation
        assert [line.split("\t")[0] for line in got] == [line.split("\t")[0] for line in want]
        got_scores = [float(line.split("\t")[1]) for line in got]
        assert got_scores == pytest.approx([float(line.split("\t")[1]) for line in want], abs=2e-4)


def test_an_old_model_file_scores_as_it_did():
    result = run_mtkit("score", "-m", MODEL, "--src", FIXTURE / "test.en", "--tgt", FIXTURE / "test.de")
    assert result.returncode == 0, result.stderr.decode()
    got = [float(value) for value in result.stdout.decode().split()]
    assert got == pytest.approx([float(value) for value in recorded("score.txt").split()], abs=1e-4)
