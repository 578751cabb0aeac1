"""A confidence for every translation: the signals are what the model computes (the log-probability is
`mtkit score --normalize`'s, the entropy the distribution's own), dropout passes are seeded, the
calibration is monotone and in [0, 1], `mtkit calibrate` picks the signal of the highest Spearman
correlation on its validation set, and translate --confidence and the server give the same numbers."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import random_sources, run_mtkit, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

from mtkit.decoding.ensemble import Ensemble
from mtkit.text.tokenizer import BOS_ID, EOS_ID
from mtkit.translation.confidence import Calibration, isotonic_points, spearman
from mtkit.translation.forced_decoding import forced_log_probs, token_statistics

VALUES = st.lists(st.floats(-50, 50, allow_nan=False), min_size=2, max_size=40)


@settings(deadline=None, max_examples=80)
@given(data=st.lists(st.tuples(st.integers(-8, 8), st.floats(0, 1)), min_size=1, max_size=40))
def test_the_isotonic_fit_is_monotone_keeps_the_mean_and_leaves_monotone_data_alone(data):
    x, y = np.array([float(a) for a, _ in data]), np.array([b for _, b in data])
    points = isotonic_points(x, y)
    xs, ys = zip(*points)
    assert list(xs) == sorted(xs) and list(ys) == sorted(ys)  # non-decreasing, x in order
    fitted = np.interp(x, xs, ys)
    assert fitted.mean() == pytest.approx(y.mean(), abs=1e-9)  # pooling keeps the mean
    ties = {}
    for xi, fi in zip(x, fitted):
        ties.setdefault(xi, set()).add(round(fi, 12))
    assert all(len(v) == 1 for v in ties.values())  # equal signals, one confidence
    order = np.argsort(x, kind="stable")
    distinct = len(set(x)) == len(x)
    if distinct and all(np.diff(y[order]) >= 0):
        assert fitted.tolist() == pytest.approx(y.tolist())


def test_the_isotonic_fit_pools_what_runs_against_the_order():
    assert isotonic_points(np.array([1.0, 2.0, 3.0]), np.array([0.2, 0.6, 0.4])) == [(1.0, 0.2), (2.0, 0.5), (3.0, 0.5)]


def brute_spearman(a, b) -> float:
    def average_ranks(values):
        return [sum(v < x for v in values) + (sum(v == x for v in values) - 1) / 2 for x in values]

    ra, rb = average_ranks(list(a)), average_ranks(list(b))
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((p - ma) * (q - mb) for p, q in zip(ra, rb))
    return cov / math.sqrt(sum((p - ma) ** 2 for p in ra) * sum((q - mb) ** 2 for q in rb))


@settings(deadline=None, max_examples=80)
@given(pairs=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=3, max_size=30))
def test_spearman_is_pearson_of_average_ranks(pairs):
    a, b = np.array([float(p) for p, _ in pairs]), np.array([float(q) for _, q in pairs])
    if len(set(a)) < 2 or len(set(b)) < 2:
        return  # undefined without spread
    assert spearman(a, b) == pytest.approx(brute_spearman(a, b), abs=1e-9)
    assert spearman(a, a) == pytest.approx(1.0) and spearman(a, -a) == pytest.approx(-1.0)


@settings(deadline=None, max_examples=60)
@given(values=VALUES, data=st.lists(st.tuples(st.floats(-5, 5), st.floats(0, 1)), min_size=1, max_size=30))
def test_a_confidence_lies_in_0_1_and_grows_with_the_signal(values, data):
    x, y = np.array([a for a, _ in data]), np.array([b for _, b in data])
    for calibration in (Calibration("logprob+agreement", isotonic_points(x, y), {"logprob": (0, 1)}), Calibration()):
        ordered = np.sort(np.array(values))
        confidence = calibration(ordered)
        assert ((0 <= confidence) & (confidence <= 1)).all()
        assert (np.diff(confidence) >= -1e-12).all()
    assert Calibration()(np.array([math.nan, math.log(0.5)])).tolist() == pytest.approx([1.0, 0.5])


def test_a_calibration_file_round_trips_and_a_bad_one_is_one_line(tmp_path):
    calibration = Calibration("logprob+dropout", [(-3.0, 0.2), (-0.5, 0.7)], {"logprob": (-1.2, 0.4), "dropout": (-1.5, 0.5)},
                              {"sentences": 10})  # fmt: skip
    calibration.save(tmp_path / "c.json")
    assert Calibration.load(tmp_path / "c.json") == calibration
    (tmp_path / "bad.json").write_text(
        json.dumps({"format": "mtkit-confidence-1", "signal": "vibes", "points": [], "scales": {}})
    )
    for path, message in [(tmp_path / "bad.json", "not a calibration file of mtkit calibrate"),
                          (tmp_path / "none.json", "no such calibration file")]:  # fmt: skip
        with pytest.raises(Exception, match=message):
            Calibration.load(path)


def test_token_statistics_are_the_models_log_probability_and_entropy():
    model = tiny_model(vocab=20, seed=2)
    pairs = [(s, t) for s, t in zip(random_sources([4, 2, 6], 20, seed=1), random_sources([3, 5, 1], 20, seed=2))]
    found = token_statistics(model, pairs, torch.device("cpu"))
    reference = forced_log_probs(model, pairs, torch.device("cpu"))
    for (src, tgt), stats, (log_prob, length) in zip(pairs, found, reference):
        assert (stats.log_prob, stats.length) == (pytest.approx(log_prob, abs=1e-5), length)
        with torch.no_grad():
            logits = model(torch.tensor([src + [EOS_ID]]), torch.tensor([[BOS_ID] + tgt]))
        probs = F.softmax(logits.float(), dim=-1)[0]
        assert stats.entropy == pytest.approx(float(-(probs * probs.log()).sum()), abs=1e-4)
    both = token_statistics(Ensemble([model, model]), pairs, torch.device("cpu"))  # an ensemble of one model twice
    assert [s.log_prob for s in both] == pytest.approx([s.log_prob for s in found], abs=1e-5)


def test_dropout_passes_are_seeded_and_leave_the_model_in_eval_mode():
    model = tiny_model(vocab=20, seed=2, dropout=0.3)
    pairs = list(zip(random_sources([5, 3], 20, seed=3), random_sources([4, 6], 20, seed=4)))
    state = torch.get_rng_state()
    runs = [token_statistics(model, pairs, torch.device("cpu"), dropout_seed=seed) for seed in (7, 7, 8)]
    assert torch.equal(torch.get_rng_state(), state)  # the caller's random state untouched
    assert not model.training
    plain = token_statistics(model, pairs, torch.device("cpu"))
    assert [s.log_prob for s in runs[0]] == [s.log_prob for s in runs[1]]
    assert [s.log_prob for s in runs[0]] != [s.log_prob for s in runs[2]] != [s.log_prob for s in plain]


@pytest.fixture(scope="module")
def calibrated(trained_run, corpus, tmp_path_factory):
    """A calibration fitted on the valid split, with every signal tried; its report."""
    path = tmp_path_factory.mktemp("calibrated") / "model.confidence.json"
    result = run_mtkit("calibrate", "-m", trained_run, "--src", corpus / "valid.en", "--ref", corpus / "valid.de",
                       "-o", path, "--precision", "fp32", "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    return path, json.loads(result.stdout)


def test_calibrate_chooses_the_signal_of_the_highest_spearman_and_writes_its_map(calibrated):
    path, report = calibrated
    signals = {entry["signal"]: entry for entry in report["signals"]}
    assert list(signals) == ["logprob", "entropy", "agreement", "dropout", "logprob+agreement", "logprob+entropy",
                             "logprob+dropout"]  # fmt: skip
    assert report["chosen"] == max(signals.values(), key=lambda entry: entry["spearman"])["signal"]
    calibration = Calibration.load(path)
    assert calibration.signal == report["chosen"] and calibration.points
    assert set(calibration.scales) == (set(report["chosen"].split("+")) if "+" in report["chosen"] else set())
    assert calibration.fitted_on["sentences"] == 20
    for entry in signals.values():
        assert -1 <= entry["spearman"] <= 1 and 0 <= entry["lowest_chrf"] <= 100


def test_translate_with_confidence_prints_the_translation_and_the_calibrated_signal(trained_run, corpus, calibrated):
    path, _ = calibrated
    options = ["-m", trained_run, "-i", corpus / "test.en", "--precision", "fp32"]
    plain = run_mtkit("translate", *options).stdout.decode().splitlines()
    scored = run_mtkit("translate", *options, "--confidence", "--calibration", path)
    assert scored.returncode == 0, scored.stderr.decode()
    rows = [line.split("\t") for line in scored.stdout.decode().splitlines()]
    assert [text for _, text in rows] == plain
    assert all(0 <= float(c) <= 1 for c, _ in rows)
    assert scored.stdout == run_mtkit("translate", *options, "--confidence", "--calibration", path).stdout  # seeded


def test_without_a_calibration_the_confidence_is_exp_of_score_normalize(trained_run, corpus, tmp_path):
    """The baseline: the geometric mean of the tokens' probabilities, as `mtkit score --normalize` scores
    the model's own translation (a blank line: 1)."""
    (tmp_path / "in.en").write_text(
        "".join(line + "\n" for line in (corpus / "test.en").read_text().splitlines()[:5]) + "\n"
    )
    result = run_mtkit("translate", "-m", trained_run, "-i", tmp_path / "in.en", "--confidence", "--precision", "fp32")
    rows = [line.split("\t") for line in result.stdout.decode().splitlines()]
    assert rows[-1] == ["1.0000", ""]
    (tmp_path / "out.de").write_text("".join(text + "\n" for _, text in rows[:-1]))
    (tmp_path / "src.en").write_text("".join((tmp_path / "in.en").read_text().splitlines(True)[:5]))
    scores = run_mtkit("score", "-m", trained_run, "--src", tmp_path / "src.en", "--tgt", tmp_path / "out.de",
                       "--normalize", "--precision", "fp32")  # fmt: skip
    expected = [math.exp(float(v)) for v in scores.stdout.decode().split()]
    assert [float(c) for c, _ in rows[:-1]] == pytest.approx(expected, abs=2e-4)


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["translate", "--confidence", "--nbest", "2", "--beam", "2"], "--confidence is for one plain-text translation a line"),
        (["translate", "--confidence", "--calibration", "NOWHERE"], "NOWHERE: no such calibration file (mtkit calibrate writes one)"),
        (["calibrate", "--signals", "logprob+vibes", "--ref", "REF"], "signal 'logprob+vibes': one of logprob, entropy, agreement, dropout"),
    ],
)  # fmt: skip
def test_bad_confidence_options_are_one_line(trained_run, corpus, tmp_path, command, message):
    command = [
        str(tmp_path / "none.json") if c == "NOWHERE" else str(corpus / "valid.de") if c == "REF" else c
        for c in command
    ]
    inputs = ["--src", corpus / "valid.en"] if command[0] == "calibrate" else ["-i", corpus / "test.en"]
    result = run_mtkit(command[0], "-m", trained_run, *inputs, *command[1:])
    assert result.returncode == 1
    stderr = result.stderr.decode().replace(str(tmp_path / "none.json"), "NOWHERE")
    assert message in stderr and stderr.count("\n") == 1


def test_the_server_gives_the_confidences_translate_gives(trained_run, corpus, tmp_path):
    """With the agreement's samples, whose draws do not depend on the batch (dropout's masks do)."""
    from test_serve import Server

    path = tmp_path / "calibration.json"
    fitted = run_mtkit("calibrate", "-m", trained_run, "--src", corpus / "valid.en", "--ref", corpus / "valid.de",
                       "-o", path, "--precision", "fp32", "--signals", "logprob+agreement")  # fmt: skip
    assert fitted.returncode == 0, fitted.stderr.decode()
    lines = (corpus / "test.en").read_text().splitlines()[:6]
    (tmp_path / "in.en").write_text("".join(line + "\n" for line in lines))
    offline = run_mtkit("translate", "-m", trained_run, "-i", tmp_path / "in.en", "--confidence", "--calibration", path,
                        "--precision", "fp32").stdout.decode().splitlines()  # fmt: skip
    expected = [(float(c), text) for c, text in (line.split("\t") for line in offline)]
    with Server(trained_run, tmp_path / "serve.log", "--confidence", "--calibration", path) as server:
        answer = server.post("/v1/translate", json={"text": lines}).json()
        assert list(zip(answer["confidences"], answer["translations"])) == [
            (pytest.approx(c, abs=1e-4), t) for c, t in expected
        ]
        assert "confidences" not in server.post("/v1/translate", json={"text": lines, "confidence": False}).json()
        libre = server.post("/translate", json={"q": lines[0], "source": "en", "target": "de"}).json()
        assert (libre["translatedText"], libre["confidence"]) == (
            expected[0][1],
            pytest.approx(expected[0][0], abs=1e-4),
        )
        refused = server.post("/v1/translate", json={"text": "<p>A dog.</p>", "format": "html", "confidence": True})
        assert refused.status_code == 422 and "confidence is for plain text" in refused.json()["error"]
    refused = run_mtkit("serve", "-m", trained_run, "--engine", "ctranslate2", "--confidence")
    assert (refused.returncode, refused.stderr.decode()) == (
        1, "error: --confidence needs --engine pytorch: its signals come from the model\n"
    )  # fmt: skip
