"""One line in, one line out: no engine, search or output mode ever writes a line break inside a
translation, even with a model pushed to emit one."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import run_mtkit, write_lines
from hypothesis import given, settings
from hypothesis import strategies as st

from mtkit.core.config import build_config
from mtkit.decoding.constraints import without_line_breaks
from mtkit.decoding.search import SearchConfig, search
from mtkit.model.files import ModelFile, save_model_file
from mtkit.model.transformer import Transformer
from mtkit.text.tokenizer import BOS_ID, BYTE_TOKENS, EOS_ID, LINE_BREAKS, Tokenizer, train_tokenizer
from mtkit.translation.translate import Translator

SOURCES = ["A man runs on the street.", "", "Two children sit near the water.", "A dog waits."]


def byte_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    return [tokenizer.token_to_id(f"<0x{byte:02X}>") for byte in text.encode("utf-8")]


def has_line_break(text: str) -> bool:
    return any(char in LINE_BREAKS for char in text)


@pytest.fixture(scope="module")
def tokenizer(tokenizer_path) -> Tokenizer:
    return Tokenizer.load(tokenizer_path)


def test_line_breaks_are_every_character_that_splits_a_line():
    text = "a" + "b".join(LINE_BREAKS) + "c"
    assert len(text.splitlines()) == len(LINE_BREAKS) + 1
    assert all(len(f"x{char}y".splitlines()) == 2 for char in LINE_BREAKS)


def test_the_sequences_spell_every_line_break_with_byte_tokens(tokenizer):
    sequences = tokenizer.line_break_sequences()
    for char in LINE_BREAKS:
        assert byte_ids(tokenizer, char) in sequences, repr(char)
    assert all(has_line_break(tokenizer.decode_batch([sequence])[0]) for sequence in sequences)


def test_a_learned_subword_holding_a_line_break_is_banned(tmp_path):
    corpus = write_lines(tmp_path / "text", ["one\u2028two three", "one\u2028two four"] * 50 + ["five six"] * 50)
    train_tokenizer([corpus], tmp_path / "tok.json", vocab_size=300)
    tokenizer = Tokenizer.load(tmp_path / "tok.json")
    learned = [token for token in tokenizer.vocabulary() if "\u2028" in token and token not in BYTE_TOKENS]
    assert learned, "the tokenizer should have learned a subword with U+2028"
    for token in learned:
        assert [tokenizer.token_to_id(token)] in tokenizer.line_break_sequences()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_ids_without_a_banned_sequence_decode_to_one_line(tokenizer, data):
    """Whatever ids a search may choose, avoiding the banned sequences keeps the text on one line."""
    sequences = tokenizer.line_break_sequences()
    interesting = sorted({i for s in sequences for i in s} | set(byte_ids(tokenizer, "\u00e9\u2027\u2030")))
    pick = st.one_of(st.sampled_from(interesting), st.integers(0, tokenizer.vocab_size - 1))
    ids = data.draw(st.lists(pick, max_size=12))
    contains_banned = any(ids[i : i + len(s)] == s for s in sequences for i in range(len(ids)))
    assert contains_banned or not has_line_break(tokenizer.decode_batch([ids])[0])


class ScriptedTransformer(Transformer):
    """A real model whose next-token scores depend only on the last token, by a fixed table:
    after <s> it prefers the first token of `path`, after each token of `path` the next one, then </s>."""

    def __init__(self, vocab: int, path: list[int]):
        super().__init__(build_config({"model": tiny_config(vocab)}).model)
        self.table = torch.zeros(vocab, vocab)
        self.table[:, EOS_ID] = float("-inf")  # no other beam ends before this path does
        for before, after in zip([BOS_ID, *path], [*path, EOS_ID]):
            self.table[before, after] = 20.0

    def decode_step(self, tokens, state):
        super().decode_step(tokens, state)  # advances the cache as a real decoder does
        return self.table[tokens]


def tiny_config(vocab: int, **overrides) -> dict:
    return {"preset": "transformer-tiny", "src_vocab_size": vocab, "tgt_vocab_size": vocab, "joint_vocab": True,
            **overrides}  # fmt: skip


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("breaking", ["\n", "\r", "\x85", "\u2028", "\u2029"])
def test_a_search_pushed_towards_a_line_break_never_completes_it(tokenizer, beam, breaking):
    path = [tokenizer.token_to_id("▁Ein"), *byte_ids(tokenizer, breaking), tokenizer.token_to_id("▁Mann")]
    model = ScriptedTransformer(tokenizer.vocab_size, path).eval()
    src = torch.tensor([[tokenizer.token_to_id("▁A"), EOS_ID]])
    cfg = SearchConfig(beam=beam, lenpen=1.0, nbest=beam)
    pushed = tokenizer.decode_batch([search(model, src, cfg)[0][0].tokens])[0]
    assert breaking in pushed  # the model does want the line break
    for hypothesis in search(model, src, without_line_breaks(cfg, tokenizer))[0]:
        text = tokenizer.decode_batch([hypothesis.tokens])[0]
        assert not has_line_break(text), repr(text)


def pushed_model_file(tokenizer: Tokenizer, favourites: list[str]) -> ModelFile:
    """A pre-norm model whose output distribution is the same at every step: favourites[0] the most
    likely token, then favourites[1], and so on; every other token alike and far behind."""
    torch.manual_seed(0)
    model = Transformer(build_config({"model": tiny_config(tokenizer.vocab_size, norm="pre")}).model)
    direction = torch.randn(model.cfg.d_model)
    direction /= direction.norm()
    with torch.no_grad():
        model.decoder_norm.weight.zero_()
        model.decoder_norm.bias.copy_(direction)  # every decoder output is `direction`
        embedding = model.tgt_embed.tokens.weight  # tied: the output layer
        embedding -= (embedding @ direction)[:, None] * direction  # every logit 0
        for rank, token in enumerate(favourites):
            embedding[tokenizer.token_to_id(token)] += (20.0 - 2 * rank) * direction
    return ModelFile(model.cfg, model.state_dict(), tokenizer, tokenizer, {})


@pytest.fixture(scope="module")
def pushed(tokenizer, tmp_path_factory):
    """A model file that puts "\\n", then "\\r", then "Ein", then </s> first, and the source lines."""
    root = tmp_path_factory.mktemp("pushed")
    model_file = pushed_model_file(tokenizer, ["<0x0A>", "<0x0D>", "▁Ein", "</s>"])
    save_model_file(root / "model.pt", model_file)
    return model_file, root / "model.pt", write_lines(root / "src.en", SOURCES)


def test_the_pushed_model_wants_line_breaks_and_gets_none(pushed):
    model_file, _, _ = pushed
    translator = Translator(model_file, SearchConfig(beam=1), "cpu", "fp32")
    banned = translator.cfg
    translator.cfg = dataclasses.replace(banned, banned=())
    assert translator.translate(SOURCES[:1])[0].startswith("\n\n\n")
    translator.cfg = banned
    ein = model_file.tgt_tokenizer.token_to_id("▁Ein")
    for line, nbest in zip(SOURCES, translator.translate_hypotheses(SOURCES)):
        assert [set(h.tokens) for h, _ in nbest] == ([{ein}] if line else [])


@pytest.mark.parametrize(
    "options",
    [
        ["--beam", "1"],
        ["--beam", "4"],
        ["--beam", "4", "--nbest", "3"],
        ["--beam", "1", "--alignment"],
        ["--beam", "2", "--nbest", "2", "--alignment"],
        ["--beam", "1", "--sample", "--seed", "3"],
    ],
)
def test_translate_writes_one_line_per_input_line(pushed, options):
    _, model, source = pushed
    result = run_mtkit("translate", "-m", model, "-i", source, "--precision", "fp32", *options)
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().split("\n")
    nbest = int(options[options.index("--nbest") + 1]) if "--nbest" in options else 1
    non_blank = sum(1 for line in SOURCES if line)
    assert lines[-1] == "" and len(lines) - 1 == nbest * non_blank + (len(SOURCES) - non_blank)
    assert not any(has_line_break(line) for line in lines[:-1])
    if nbest == 1:
        assert lines[1] in ("", "\t") and all(line.startswith("Ein") for i, line in enumerate(lines[:-1]) if i != 1)


def test_ctranslate2_and_evaluate_write_the_same_single_lines(pushed, tmp_path):
    pytest.importorskip("ctranslate2")
    _, model, source = pushed
    assert run_mtkit("export", "-m", model, "-o", tmp_path / "ct2").returncode == 0
    outputs = []
    for engine, path in (("pytorch", model), ("ctranslate2", tmp_path / "ct2")):
        result = run_mtkit("translate", "-m", path, "--engine", engine, "-i", source, "--beam", "1",
                           "--precision", "fp32", "--loop-ngram", "0")  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
        outputs.append(result.stdout.decode())
        out = tmp_path / f"{engine}.de"
        result = run_mtkit("evaluate", "-m", path, "--engine", engine, "--src", source, "--ref", source,
                           "--beam", "1", "--precision", "fp32", "--loop-ngram", "0", "-o", out)  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
        assert out.read_text(encoding="utf-8") == outputs[-1]
    assert outputs[0] == outputs[1]
    assert outputs[0].count("\n") == len(SOURCES) and not has_line_break(outputs[0].replace("\n", ""))


def test_the_server_answers_what_translate_prints(pushed, tmp_path):
    pytest.importorskip("fastapi")
    from test_serve import Server

    _, model, source = pushed
    offline = run_mtkit("translate", "-m", model, "-i", source, "--beam", "2", "--precision", "fp32")
    server = Server(model, tmp_path / "serve.log", "--beam", "2", "--precision", "fp32")
    try:
        answer = server.post("/v1/translate", json={"text": SOURCES}).json()["translations"]
        nbest = server.post("/v1/translate", json={"text": SOURCES[0], "beam": 3, "nbest": 3}).json()["translations"][0]
    finally:
        assert server.stop() == 0
    assert answer == offline.stdout.decode().split("\n")[:-1]
    assert len(nbest) == 3 and not any(has_line_break(h["text"]) for h in nbest)


def test_a_prefix_with_a_line_break_is_forced_as_one_line(pushed):
    model_file, _, _ = pushed
    translator = Translator(model_file, SearchConfig(beam=2), "cpu", "fp32")
    (nbest,) = translator.translate_hypotheses(["A dog."], prefixes=["Ein\u2028Hund\r"])
    assert all(not has_line_break(text) and text.startswith("Ein Hund") for _, text in nbest)
