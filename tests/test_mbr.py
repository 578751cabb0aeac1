"""Minimum Bayes risk decoding: the utilities equal sacrebleu's sentence scores for every pair, the choice
is the candidate of the highest expected utility whatever the candidates' order, epsilon sampling
draws what it may, several samples a sentence are each a translation the model scores as the search
did, and --mbr from the command line (N = 1 is the plain search)."""

import itertools
import json

import pytest
import torch
import torch.nn.functional as F
from conftest import random_sources, run_mtkit, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st
from sacrebleu.metrics import BLEU, CHRF
from test_sampling import PROBS, draws

from mtkit.data.batching import pad_batch
from mtkit.decoding.sampling import sample, uniforms
from mtkit.decoding.search import SearchConfig, greedy_search, sample_search, search
from mtkit.text.tokenizer import BOS_ID, EOS_ID
from mtkit.translation.mbr import MbrConfig, candidate_searches, mbr_ranking, pairwise_utilities

# Letters of several scripts, digits, punctuation and several kinds of space: what translations hold.
ALPHABET = "abcdeéüßABCZ xyzабвгджЖ日本語中文한국어ابتثअआइ०१२!?.,;:-'\"()  \t"
TEXTS = st.lists(st.text(alphabet=ALPHABET, max_size=40), min_size=1, max_size=6)


@settings(deadline=None, max_examples=60)
@given(groups=st.lists(st.tuples(TEXTS, TEXTS), min_size=1, max_size=3))
def test_pairwise_chrf_and_bleu_are_sacrebleus_sentence_scores_for_every_pair(groups):
    """Hypotheses against other pseudo-references, several sentences at once; chrf+bleu is their mean."""
    hypotheses, references = [h for h, _ in groups], [r for _, r in groups]
    chrf, bleu = CHRF(), BLEU(effective_order=True)
    scored = {u: pairwise_utilities(hypotheses, references, u) for u in ("chrf", "bleu", "chrf+bleu")}
    for i, (hyps, refs) in enumerate(groups):
        expected_chrf = [chrf.sentence_score(h, [r]).score for h in hyps for r in refs]
        expected_bleu = [bleu.sentence_score(h, [r]).score for h in hyps for r in refs]
        assert scored["chrf"][i].shape == (len(hyps), len(refs))
        assert scored["chrf"][i].flatten().tolist() == pytest.approx(expected_chrf, abs=1e-9)
        assert scored["bleu"][i].flatten().tolist() == pytest.approx(expected_bleu, abs=1e-9)
        mean = [(c + b) / 2 for c, b in zip(expected_chrf, expected_bleu)]
        assert scored["chrf+bleu"][i].flatten().tolist() == pytest.approx(mean, abs=1e-9)


def test_the_choice_has_the_highest_mean_utility_against_every_candidate():
    texts = ["a b c d", "a b c e", "a b c d", "x y z"]
    utilities = pairwise_utilities([texts], [texts], "bleu")[0]
    ranking = mbr_ranking(texts, utilities)
    assert [texts[i] for i, _ in ranking] == ["a b c d", "a b c e", "x y z"]  # distinct texts, the best first
    assert [u for _, u in ranking] == pytest.approx([utilities[0].mean(), utilities[1].mean(), utilities[3].mean()])
    assert ranking[0][1] == pytest.approx((100 + 100 + utilities[0, 1] + 0) / 4)  # it counts itself, drawn twice


@settings(deadline=None, max_examples=40)
@given(texts=TEXTS, order=st.randoms(use_true_random=False))
def test_the_choice_does_not_depend_on_the_candidates_order(texts, order):
    shuffled = texts[:]
    order.shuffle(shuffled)
    ranked = [[group[i] for i, _ in mbr_ranking(group, pairwise_utilities([group], [group], "chrf")[0])]
              for group in (texts, shuffled)]  # fmt: skip
    assert ranked[0] == ranked[1]


@pytest.mark.parametrize("utility", ["chrf", "bleu"])
def test_one_candidate_or_identical_candidates_give_that_candidate(utility):
    for texts in (["Ein Hund läuft."], ["Ein Hund läuft."] * 5):
        [(chosen, expected)] = mbr_ranking(texts, pairwise_utilities([texts], [texts], utility)[0])
        assert (chosen, expected) == (0, pytest.approx(100.0))


def test_epsilon_sampling_draws_no_token_below_epsilon_but_the_likeliest():
    got = draws(SearchConfig(beam=1, sample=True, epsilon=0.1)).tolist()  # 0.05 is out
    assert got[3] == 0.0 and got[:3] == pytest.approx([0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95], abs=0.01)
    assert draws(SearchConfig(beam=1, sample=True, epsilon=0.6)).tolist() == [1.0, 0.0, 0.0, 0.0]  # only the likeliest
    assert PROBS.sum() == pytest.approx(1.0)


@torch.no_grad()
def teacher_forced_log_prob(model, src: list[int], tokens: list[int], ended: bool) -> float:
    """The model's log-probability of `tokens` (and </s> where it ended), one forward pass."""
    target = tokens + [EOS_ID] * ended
    logits = model(torch.tensor([src + [EOS_ID]]), torch.tensor([[BOS_ID] + target[:-1]]))
    return float(F.log_softmax(logits.float(), dim=-1)[0].gather(1, torch.tensor(target)[:, None]).sum())


def test_each_of_several_samples_is_a_translation_the_model_scores_as_the_search_did():
    model = tiny_model(vocab=24, seed=3)
    sources = random_sources([3, 7, 5, 1], vocab=24, seed=1)
    src = pad_batch(sources, torch.device("cpu"), suffix=EOS_ID)
    cfg = SearchConfig(beam=1, sample=True, samples=6, max_len_b=8, loop_ngram=0, lenpen=0.6)
    results = sample_search(model, src, cfg)
    assert [len(hyps) for hyps in results] == [6, 6, 6, 6]
    assert len({tuple(h.tokens) for hyps in results for h in hyps}) > 12  # they differ
    for source, hyps in zip(sources, results):
        for h in hyps:
            assert h.ended or len(h.tokens) == 8 + int(1.0 * len(source))  # cut only at the length limit
            assert h.log_prob == pytest.approx(teacher_forced_log_prob(model, source, h.tokens, h.ended), abs=1e-4)
            assert h.score == pytest.approx(h.log_prob / ((5 + len(h.tokens) + h.ended) / 6) ** 0.6)
    assert [[h.tokens for h in hyps] for hyps in sample_search(model, src, cfg)] == [
        [h.tokens for h in hyps] for hyps in results
    ]  # a seed repeats the draws


def test_one_sample_a_sentence_draws_what_sampling_draws():
    model = tiny_model(vocab=24, seed=3)
    src = pad_batch(random_sources([3, 7, 5, 1], vocab=24, seed=1), torch.device("cpu"), suffix=EOS_ID)
    cfg = SearchConfig(beam=1, sample=True, samples=1, max_len_b=8, epsilon=0.02, seed=5)
    one = [[(h.tokens, h.log_prob) for h in hyps] for hyps in sample_search(model, src, cfg)]
    assert one == [[(h.tokens, h.log_prob) for h in hyps] for hyps in greedy_search(model, src, cfg)]
    assert one == [[(h.tokens, h.log_prob) for h in hyps] for hyps in search(model, src, cfg)]


def test_the_candidate_searches_are_the_n_best_the_samples_or_both():
    cfg = SearchConfig(beam=5, lenpen=0.6, seed=3)
    beam, sample = candidate_searches(cfg, MbrConfig(8, "both", epsilon=0.05))
    assert (beam.beam, beam.nbest, beam.sample, beam.lenpen) == (8, 8, False, 0.6)
    assert (sample.beam, sample.sample, sample.samples, sample.epsilon, sample.seed) == (1, True, 8, 0.05, 3)
    assert candidate_searches(cfg, MbrConfig(8, "beam")) == [beam]
    assert candidate_searches(cfg, MbrConfig(8, "sample", epsilon=0.05)) == [sample]


def translate(trained_run, corpus, *options):
    result = run_mtkit("translate", "-m", trained_run, "-i", corpus / "test.en", "--precision", "fp32", *options)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode().splitlines()


def test_mbr_over_one_beam_candidate_is_greedy_search(trained_run, corpus):
    assert translate(trained_run, corpus, "--mbr", "1", "--mbr-source", "beam") == translate(
        trained_run, corpus, "--beam", "1"
    )


@pytest.mark.parametrize("utility", ["chrf", "bleu"])
def test_mbr_chooses_among_the_n_best_by_expected_utility(trained_run, corpus, utility):
    """--mbr 4 over the beam's 4-best: its n-best are those texts, ordered as the utility ranks them."""
    options = ["--mbr", "4", "--mbr-source", "beam", "--mbr-utility", utility]
    chosen = translate(trained_run, corpus, *options, "--nbest", "4")
    beam = translate(trained_run, corpus, "--beam", "4", "--nbest", "4")
    lines = len(beam) // 4
    for i in range(lines):
        candidates = [line.split("\t")[2] for line in beam[4 * i : 4 * i + 4]]
        ranked = [line.split("\t")[2] for line in chosen[4 * i : 4 * i + 4]]
        order = [
            candidates[j]
            for j, _ in mbr_ranking(candidates, pairwise_utilities([candidates], [candidates], utility)[0])
        ]
        assert ranked == (order + order[-1:] * 4)[:4]  # distinct texts, the last repeated where fewer
    assert translate(trained_run, corpus, *options) == [chosen[4 * i].split("\t")[2] for i in range(lines)]


def test_mbr_from_both_chooses_among_the_n_best_with_the_samples_as_references(trained_run, corpus):
    chosen = translate(trained_run, corpus, "--mbr", "4", "--mbr-source", "both", "--mbr-utility", "chrf+bleu")
    beam = translate(trained_run, corpus, "--beam", "4", "--nbest", "4")
    assert len(chosen) == len(beam) // 4
    for i, line in enumerate(chosen):
        assert line in [candidate.split("\t")[2] for candidate in beam[4 * i : 4 * i + 4]]


def test_mbr_with_samples_repeats_with_its_seed_and_evaluate_scores_what_translate_gives(trained_run, corpus):
    options = ["--mbr", "6", "--mbr-source", "both", "--epsilon", "0.05", "--seed", "2"]
    first = translate(trained_run, corpus, *options)
    assert first == translate(trained_run, corpus, *options)
    scored = run_mtkit("evaluate", "-m", trained_run, "--src", corpus / "test.en", "--ref", corpus / "test.de",
                       "--precision", "fp32", "--metrics", "chrf", "--json", *options)  # fmt: skip
    references = (corpus / "test.de").read_text().splitlines()
    assert json.loads(scored.stdout)["chrf"]["score"] == pytest.approx(
        CHRF().corpus_score(first, [references]).score, abs=1e-4
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--mbr", "-1"], "--mbr -1: the number of candidates must be at least 1"),
        (["--mbr", "4", "--mbr-source", "lattice"], "--mbr-source lattice: must be one of beam, sample, both"),
        (["--mbr", "4", "--mbr-utility", "comet"], "--mbr-utility comet: must be one of chrf, bleu, chrf+bleu"),
        (["--mbr", "4", "--epsilon", "1"], "--epsilon 1: must be at least 0 and below 1"),
        (["--mbr", "4", "--sample", "--beam", "1"], "--mbr draws its own samples (--mbr-source): leave out --sample"),
    ],
)
def test_bad_mbr_options_are_one_line(trained_run, corpus, options, message):
    result = run_mtkit("translate", "-m", trained_run, "-i", corpus / "test.en", *options)
    assert (result.returncode, result.stderr.decode(), result.stdout) == (1, f"error: {message}\n", b"")


def test_permutations_of_three_candidates_rank_alike():
    texts = ["Ein Hund rennt.", "Ein Hund läuft.", "Zwei Hunde laufen."]
    rankings = {tuple(sorted_texts[i] for i, _ in mbr_ranking(list(sorted_texts), pairwise_utilities([list(sorted_texts)], [list(sorted_texts)], "chrf")[0]))
                for sorted_texts in itertools.permutations(texts)}  # fmt: skip
    assert len(rankings) == 1


def test_epsilon_sampling_over_a_large_vocabulary_draws_among_the_tokens_above_epsilon():
    """With 100 tokens, epsilon 0.02 can keep at most 51: the draw is among the likeliest, as over all."""
    probs = torch.cat([torch.tensor([0.5, 0.3, 0.15]), torch.full((97,), 0.05 / 97)])
    lprobs = probs.log().expand(20000, -1).clone()
    tokens = sample(lprobs, SearchConfig(beam=1, sample=True, epsilon=0.02), uniforms(torch.arange(20000), step=0))
    got = (torch.bincount(tokens, minlength=100).float() / 20000).tolist()
    assert got[3:] == [0.0] * 97
    assert got[:3] == pytest.approx([0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95], abs=0.01)


def test_serve_and_distill_translate_with_mbr_as_translate_does(trained_run, corpus, tmp_path):
    """MBR over the beam's candidates is deterministic: the server's answers and a teacher's corpus are
    translate --mbr's lines."""
    from test_serve import Server, offline

    options = ("--mbr", "4", "--mbr-source", "beam", "--mbr-utility", "bleu")
    lines = (corpus / "test.en").read_text().splitlines()[:6]
    expected = offline(trained_run, lines, *options)
    with Server(trained_run, tmp_path / "serve.log", *options) as server:
        answers = server.post("/v1/translate", json={"text": lines}).json()["translations"]
    assert answers == expected
    (tmp_path / "src.en").write_text("".join(line + "\n" for line in lines))
    result = run_mtkit("distill", "-m", trained_run, "--src", tmp_path / "src.en", "-o", tmp_path / "out.de",
                       "--beam", "1", "--precision", "fp32", *options)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    assert (tmp_path / "out.de").read_text().splitlines() == expected


def test_a_sentences_samples_do_not_depend_on_its_batch():
    """The same source alone, first or last in a batch of others, with other padding: the same draws."""
    model = tiny_model(vocab=24, seed=3)
    one = random_sources([5], vocab=24, seed=7)[0]
    others = random_sources([9, 2, 6], vocab=24, seed=8)
    cfg = SearchConfig(beam=1, sample=True, samples=4, max_len_b=8, epsilon=0.02, seed=1)
    draws = []
    for batch, index in (([one], 0), ([one, *others], 0), ([*others, one], 3)):
        src = pad_batch(batch, torch.device("cpu"), suffix=EOS_ID)
        draws.append([h.tokens for h in sample_search(model, src, cfg)[index]])
        greedy = SearchConfig(beam=1, sample=True, max_len_b=8, seed=1)
        draws[-1].append(greedy_search(model, src, greedy)[index][0].tokens)
    assert draws[0] == draws[1] == draws[2]
    assert len({tuple(tokens) for tokens in draws[0][:4]}) > 1  # the draws differ among themselves
    other_seed = sample_search(model, pad_batch([one], torch.device("cpu"), suffix=EOS_ID), SearchConfig(beam=1, sample=True, samples=4, max_len_b=8, epsilon=0.02, seed=2))  # fmt: skip
    assert [h.tokens for h in other_seed[0]] != draws[0][:4]


@settings(deadline=None, max_examples=30)
@given(keys=st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=50, unique=True), step=st.integers(0, 1000))
def test_the_numbers_are_in_0_1_and_differ_between_keys(keys, step):
    numbers = uniforms(torch.tensor(keys), step).flatten().tolist()
    assert all(0 <= u < 1 for u in numbers)
    assert len(set(numbers)) == len(numbers)
