import copy
import html
import json
import re
import struct
import sys

import pytest
import torch
from conftest import random_sources, run_mtkit, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

from mtkit.core.errors import MtkitError
from mtkit.text.tokenizer import BOS_ID, EOS_ID, PAD_ID
from mtkit.translation.alignment import (
    alignment_layers,
    attention_modules,
    attention_weights,
    cross_attention_batch,
    cross_attention_batches,
    recording,
    word_alignment,
    word_starts,
)


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
    assert torch.equal(fast, slow)  # the usual kernel gives the output; the weights are computed beside it


def test_word_starts_and_alignment():
    assert word_starts(["▁A", "▁do", "g", "▁runs", "."]) == [0, 1, 1, 2, 2]
    assert word_starts(["▁", "<0xC3>", "<0x87>", "a", "▁va"]) == [0, 0, 0, 0, 1]
    # Rows: 3 target subwords + </s>; columns: 3 source subwords + </s>. Word to word (source subwords
    # summed, target subwords averaged): x -> (a 0.1, bc 0.6); yz -> (a 0.6, bc 0.3), so a goes with
    # yz and bc with x; subword by subword, y would have taken a and x only half of bc.
    weights = torch.tensor([[0.1, 0.3, 0.3, 0.3], [0.7, 0.1, 0.1, 0.1], [0.5, 0.2, 0.2, 0.1], [0.0, 0.0, 0.0, 1.0]])
    assert word_alignment(weights, ["▁a", "▁b", "c"], ["▁x", "▁y", "z"]) == [(0, 1), (1, 0)]
    assert word_alignment(weights[:, :1], [], ["▁x"]) == []


def subwords(starts: list[bool]) -> list[str]:
    """Subword strings whose word starts are the given flags (the first always starts one)."""
    return [("▁" if start or i == 0 else "") + f"s{i}" for i, start in enumerate(starts)]


@settings(deadline=None)  # any machine, any load
@given(
    src=st.lists(st.booleans(), min_size=1, max_size=12),
    tgt=st.lists(st.booleans(), min_size=1, max_size=12),
    seed=st.integers(0, 2**16),
)
def test_every_source_word_has_exactly_one_link_into_the_target_words(src, tgt, seed):
    weights = torch.rand(len(tgt) + 1, len(src) + 1, generator=torch.Generator().manual_seed(seed)).softmax(dim=1)
    src_tokens, tgt_tokens = subwords(src), subwords(tgt)
    links = word_alignment(weights, src_tokens, tgt_tokens)
    assert [i for i, _ in links] == list(range(max(word_starts(src_tokens)) + 1))
    assert all(0 <= j <= max(word_starts(tgt_tokens)) for _, j in links)


@pytest.fixture(scope="module")
def fp32_translator(trained_run):
    from mtkit.decoding.search import SearchConfig
    from mtkit.model.files import load_model_file
    from mtkit.translation.translate import Translator

    return Translator(load_model_file(trained_run), SearchConfig(beam=1), device="cpu", precision="fp32")


def test_alignment_layers_are_the_last_two():
    assert [alignment_layers(tiny_model(decoder_layers=n)) for n in (1, 2, 3, 6)] == [(0,), (0, 1), (1, 2), (4, 5)]


def test_the_kept_attention_of_several_layers_is_their_mean_as_a_second_pass_reads_it():
    from mtkit.data.batching import pad_batch
    from mtkit.decoding.search import SearchConfig, greedy_search

    model = tiny_model(vocab=30, decoder_layers=3, seed=1)
    sources = random_sources([5, 2, 9], vocab=30)
    cfg = SearchConfig(beam=1, max_len_a=0.0, max_len_b=6, loop_ngram=0, attention_layers=(1, 2))
    hypotheses = [nbest[0] for nbest in greedy_search(model, pad_batch(sources, suffix=EOS_ID), cfg)]
    expected = cross_attention_batch(model, sources, [h.tokens for h in hypotheses], (1, 2))
    for hypothesis, source, weights in zip(hypotheses, sources, expected):
        assert hypothesis.attention.shape == (len(hypothesis.tokens) + hypothesis.ended, len(source) + 1)
        assert torch.allclose(hypothesis.attention, weights[: hypothesis.attention.size(0)], atol=1e-5)
    assert all(m.keep_weights is False and m.weights is None for m in attention_modules(model, "cross"))


LINES = ["A dog runs on the beach.", "Two men talk.", "A girl in a red coat sings to an old man.", "Hi"]


def test_greedy_search_keeps_the_attention_a_second_pass_reads(fp32_translator):
    plain = fp32_translator.translate_hypotheses(LINES)
    keeping = copy.copy(fp32_translator)
    keeping.keep_attention()
    assert keeping.cfg.attention_layers == alignment_layers(keeping.model)
    kept = keeping.translate_hypotheses(LINES)
    assert [[(h.tokens, h.score) for h, _ in n] for n in kept] == [[(h.tokens, h.score) for h, _ in n] for n in plain]
    hypotheses = [nbest[0][0] for nbest in kept]
    src_rows = fp32_translator.src_tokenizer.encode_batch(LINES)
    second_pass = cross_attention_batches(keeping.model, src_rows, [h.tokens for h in hypotheses], batch_size=3)
    for hypothesis, row, expected in zip(hypotheses, src_rows, second_pass):
        assert hypothesis.attention.shape == (len(hypothesis.tokens) + hypothesis.ended, len(row) + 1)
        assert torch.allclose(hypothesis.attention, expected[: hypothesis.attention.size(0)], atol=1e-5)
        assert torch.allclose(hypothesis.attention.sum(dim=1), torch.ones(hypothesis.attention.size(0)), atol=1e-5)
    assert plain[0][0][0].attention is None  # only when asked
    assert keeping.alignments(LINES, hypotheses) == fp32_translator.alignments(LINES, [n[0][0] for n in plain])


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
    from mtkit.translation.inspection import pyplot

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MtkitError, match=r"pip install 'mtkit\[plot\]'"):
        pyplot()
