"""Sampling (--sample, --temperature, --top-k, --top-p, --seed): which tokens may be drawn, at which
rates, and that a seed makes a run repeatable. Draws come from seeded generators, so every count
below is the same on every machine."""

import pytest
import torch
from conftest import run_mtkit

from mtkit.decoding.sampling import sample, uniforms
from mtkit.decoding.search import SearchConfig

PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05])


def draws(cfg: SearchConfig, n: int = 20000, seed: int = 0) -> torch.Tensor:
    """Relative frequencies of each token over n draws from PROBS (one row per draw)."""
    lprobs = PROBS.log().expand(n, -1).clone()
    tokens = sample(lprobs, cfg, uniforms(torch.arange(n) + seed * n, step=0))
    return torch.bincount(tokens, minlength=len(PROBS)).float() / n


def test_plain_sampling_follows_the_model():
    assert draws(SearchConfig(beam=1, sample=True)).tolist() == pytest.approx(PROBS.tolist(), abs=0.01)


def test_temperature_sharpens_and_flattens():
    for temperature in (0.5, 2.0):
        tempered = PROBS.log() / temperature
        expected = (tempered.exp() / tempered.exp().sum()).tolist()
        got = draws(SearchConfig(beam=1, sample=True, temperature=temperature)).tolist()
        assert got == pytest.approx(expected, abs=0.01)


def test_top_k_draws_only_among_the_k_likeliest():
    got = draws(SearchConfig(beam=1, sample=True, top_k=2)).tolist()
    assert got[2:] == [0.0, 0.0]
    assert got[:2] == pytest.approx([0.5 / 0.8, 0.3 / 0.8], abs=0.01)
    assert draws(SearchConfig(beam=1, sample=True, top_k=1)).tolist() == [1.0, 0.0, 0.0, 0.0]  # greedy


def test_top_p_keeps_the_smallest_set_with_that_much_probability():
    got = draws(SearchConfig(beam=1, sample=True, top_p=0.75)).tolist()  # 0.5 < 0.75 <= 0.5 + 0.3
    assert got[2:] == [0.0, 0.0]
    assert got[:2] == pytest.approx([0.5 / 0.8, 0.3 / 0.8], abs=0.01)
    assert draws(SearchConfig(beam=1, sample=True, top_p=0.96)).tolist()[3] == pytest.approx(0.05, abs=0.01)
    assert draws(SearchConfig(beam=1, sample=True, top_p=1e-6)).tolist() == [1.0, 0.0, 0.0, 0.0]


def test_top_k_and_top_p_together_keep_what_both_keep():
    got = draws(SearchConfig(beam=1, sample=True, top_k=3, top_p=0.75)).tolist()  # k keeps 3, p keeps 2
    assert got[2:] == [0.0, 0.0]
    assert got[:2] == pytest.approx([0.5 / 0.8, 0.3 / 0.8], abs=0.01)


def test_a_seed_repeats_a_sampled_translation_and_another_seed_draws_another(trained_run, corpus):
    source = corpus / "test.en"

    def sampled(seed: int, *options: str) -> bytes:
        result = run_mtkit("translate", "-m", trained_run, "-i", source, "--beam", "1", "--sample", "--seed", seed,
                           "--temperature", "1.5", "--precision", "fp32", *options)  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
        return result.stdout

    first = sampled(1)
    assert sampled(1) == first
    assert sampled(2) != first
    # fp32: bf16 logits (a CPU's auto) tie often enough that argmax and top-1 may break a tie apart
    greedy = run_mtkit("translate", "-m", trained_run, "-i", source, "--beam", "1", "--precision", "fp32").stdout
    assert sampled(1, "--top-k", "1") == greedy
