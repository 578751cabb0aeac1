import html
import json
import re
import struct
import sys

import pytest
import torch
from conftest import run_mtkit, tiny_model

from mtkit.core.errors import MtkitError
from mtkit.text.tokenizer import BOS_ID, EOS_ID, PAD_ID
from mtkit.translation.alignment import attention_weights, recording, word_alignment, word_starts


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_weights_are_distributions_and_decoder_is_causal(norm):
    model = tiny_model(vocab=20, norm=norm, decoder_layers=2, encoder_layers=2)
    weights = attention_weights(model, [5, 6, 7], [8, 9, 10, 11])
    assert weights["encoder"].shape == (2, 2, 4, 4)
    assert weights["decoder"].shape == (2, 2, 5, 5) and weights["cross"].shape == (2, 2, 5, 4)
    for kind, w in weights.items():
        assert torch.allclose(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-6), kind
    assert torch.equal(weights["decoder"].triu(1), torch.zeros_like(weights["decoder"]))  # exactly 0 above the diagonal


def test_source_padding_receives_no_weight():
    model = tiny_model(vocab=20)
    src = torch.tensor([[5, 6, 7, EOS_ID], [5, EOS_ID, PAD_ID, PAD_ID]])
    tgt = torch.tensor([[BOS_ID, 8, 9], [BOS_ID, 8, 9]])
    with recording(model):
        model(src, tgt)
        encoder = model.encoder_layers[0].self_attn.weights
        cross = model.decoder_layers[0].cross_attn.weights
    for weights in (encoder, cross):
        assert torch.equal(weights[1, :, :, 2:], torch.zeros_like(weights[1, :, :, 2:]))
        assert (weights[0] > 0).all()
    assert model.decoder_layers[0].cross_attn.weights is None  # recording is switched off again


def test_recording_weights_does_not_change_outputs():
    model = tiny_model(vocab=20)
    src, tgt = torch.tensor([[5, 6, EOS_ID]]), torch.tensor([[BOS_ID, 8]])
    fast = model(src, tgt)
    with recording(model):
        slow = model(src, tgt)
    assert torch.allclose(fast, slow, atol=1e-6)


def test_word_starts_and_alignment():
    assert word_starts(["▁A", "▁do", "g", "▁runs", "."]) == [0, 1, 1, 2, 2]
    assert word_starts(["▁", "<0xC3>", "<0x87>", "a", "▁va"]) == [0, 0, 0, 0, 1]
    # one layer, one head; rows: 3 target subwords + </s>; columns: 3 source subwords + </s>
    cross = torch.tensor([[[[0.1, 0.8, 0.05, 0.05], [0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.7, 0.1], [0.0, 0.0, 0.0, 1.0]]]])
    assert word_alignment(cross, ["▁a", "▁b", "c"], ["▁x", "▁y", "▁z"]) == [(0, 1), (1, 0), (1, 2)]


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_attention_png_of_the_requested_size(trained_run, tmp_path):
    result = run_mtkit(
        "attention",
        "-m",
        trained_run,
        "--src",
        "A dog runs.",
        "--head",
        "all",
        "--size",
        "640x300",
        "-o",
        tmp_path / "a.png",
    )
    assert result.returncode == 0, result.stderr.decode()
    assert png_size(tmp_path / "a.png") == (640, 300)


def test_attention_json_svg_and_html(trained_run, tmp_path):
    result = run_mtkit(
        "attention",
        "-m",
        trained_run,
        "--src",
        "A dog runs.",
        "--tgt",
        "Ein Hund rennt.",
        "--kind",
        "decoder",
        "--layer",
        "all",
        "--head",
        "all",
    )
    payload = json.loads(result.stdout)
    assert payload["rows"] == payload["columns"] and payload["rows"][0] == "<s>"
    assert len(payload["maps"]) == 2  # tiny model: 1 layer x 2 heads
    for entry in payload["maps"]:
        w = torch.tensor(entry["weights"])
        assert torch.equal(w.triu(1), torch.zeros_like(w))
    cross = json.loads(run_mtkit("attention", "-m", trained_run, "--src", "A dog.", "--format", "json").stdout)
    assert run_mtkit("attention", "-m", trained_run, "--src", "A dog.", "-o", tmp_path / "a.svg").returncode == 0
    svg = (tmp_path / "a.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and svg.rstrip().endswith("</svg>")
    # matplotlib draws text as paths, and names each label in a comment: every token is on the image
    for label in {*cross["rows"], *cross["columns"]}:
        assert f"<!-- {html.escape(label, quote=False)} -->" in svg, label
    assert run_mtkit("attention", "-m", trained_run, "--src", "A dog.", "-o", tmp_path / "a.html").returncode == 0
    page = (tmp_path / "a.html").read_text()
    (weights,) = [entry["weights"] for entry in cross["maps"]]
    cells = [float(value) for value in re.findall(r"title='([0-9.]+)'", page)]
    assert cells == pytest.approx([w for row in weights for w in row], abs=5e-4)  # every weight, in order
    headers = re.findall(r"<th>([^<]*)</th>", page)[1:]  # after the empty corner
    assert headers == [html.escape(label) for label in cross["columns"] + cross["rows"]]
    bad = run_mtkit("attention", "-m", trained_run, "--src", "A dog.", "--layer", "7")
    assert bad.returncode == 1 and "--layer 7: the model has layers 1..1" in bad.stderr.decode()


def test_translate_with_alignment(trained_run):
    result = run_mtkit(
        "translate", "-m", trained_run, "--alignment", "--beam", "2", stdin=b"A dog runs fast.\n\nTwo men.\n"
    )
    lines = result.stdout.decode().split("\n")[:-1]
    assert len(lines) == 3 and lines[1] == "\t"
    for line, source in ((lines[0], "A dog runs fast."), (lines[2], "Two men.")):
        text, links = line.split("\t")
        assert re.fullmatch(r"(\d+-\d+( \d+-\d+)*)?", links)
        for link in links.split():
            i, j = map(int, link.split("-"))
            assert i < len(source.split()) and j < len(text.split())


def test_plot_of_a_tiny_run(trained_run, tmp_path):
    result = run_mtkit("plot", trained_run, "-o", tmp_path / "curves.png")
    assert result.returncode == 0, result.stderr.decode()
    width, height = png_size(tmp_path / "curves.png")
    assert (width, height) == (800, 1200)


def test_without_matplotlib_the_message_says_how_to_install(monkeypatch, tmp_path):
    from mtkit.translation.plots import pyplot

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MtkitError, match=r"pip install 'mtkit\[plot\]'"):
        pyplot()
