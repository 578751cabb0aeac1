"""train.ema_decay: the moving average of the weights, its arithmetic, its file and its resume."""

from fractions import Fraction

import pytest
import torch
from conftest import TINY_TRAIN, run_mtkit
from torch import nn

from mtkit.core.config import build_config, parse_overrides
from mtkit.core.errors import MtkitError
from mtkit.model.files import load_model_file, load_payload
from mtkit.model.transformer import Transformer
from mtkit.training.ema import WeightAverage
from mtkit.training.rundir import EMA_FILE


def test_the_arithmetic_exactly_on_a_toy_sequence():
    """Decay 3/4 and dyadic weights are exact in float32, so the average equals exact rational arithmetic."""
    model = nn.Linear(2, 1, bias=True)
    sequence = [[[1.0, -2.0], [0.5]], [[3.0, 0.0], [-1.5]], [[-4.0, 8.0], [2.0]], [[0.25, 1.0], [0.0]]]
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[2.0, 4.0]]))
        model.bias.copy_(torch.tensor([-1.0]))
    average = WeightAverage(model, 0.75)
    expected = [Fraction(2), Fraction(4), Fraction(-1)]  # starts at the initial weights
    for weight, bias in sequence:
        with torch.no_grad():
            model.weight.copy_(torch.tensor([weight]))
            model.bias.copy_(torch.tensor(bias))
        average.update()
        expected = [Fraction(3, 4) * e + Fraction(1, 4) * Fraction(w) for e, w in zip(expected, weight + bias)]
        state = average.model_state(model)
        assert state["weight"].flatten().tolist() + state["bias"].tolist() == [float(e) for e in expected]
    assert model.weight.flatten().tolist() == [0.25, 1.0]  # the model's own weights are untouched


def test_tied_weights_stay_one_tensor():
    config = build_config(parse_overrides(["model.preset=transformer-tiny", "model.tie_embeddings=true"])).model
    config.src_vocab_size = config.tgt_vocab_size = 20
    config.joint_vocab = True  # the source embedding, the target embedding and the output: one tensor
    model = Transformer(config)
    state = WeightAverage(model, 0.9).model_state(model)
    tied = [name for name, t in model.state_dict().items() if t.data_ptr() == model.tgt_embed.tokens.weight.data_ptr()]
    assert len(tied) >= 2
    assert len({state[name].data_ptr() for name in tied}) == 1


@pytest.mark.parametrize("decay", ["1.0", "-0.1", "1.5"])
def test_invalid_decay(decay):
    with pytest.raises(MtkitError, match=r"train.ema_decay must be in \[0, 1\)"):
        build_config(parse_overrides([f"train.ema_decay={decay}"]))


def test_training_saves_the_average_and_resumes_it_exactly(tmp_path, data_dir, corpus):
    """The average saved in ema.pt equals one recomputed from every step's weights; stopping and
    resuming gives the same ema.pt, bit for bit, as a run that was never interrupted."""
    common = [*TINY_TRAIN, "--set", "train.ema_decay=0.5", "--set", "train.save_every=1", "--set", "train.keep_last=10"]
    straight = run_mtkit("train", "-d", data_dir, "-o", tmp_path / "straight", *common, "--set", "train.max_steps=6")
    assert straight.returncode == 0, straight.stderr.decode()
    first = run_mtkit("train", "-d", data_dir, "-o", tmp_path / "resumed", *common, "--set", "train.max_steps=3")
    assert first.returncode == 0, first.stderr.decode()
    resumed = run_mtkit("train", "--resume", tmp_path / "resumed", "--set", "train.max_steps=6")
    assert resumed.returncode == 0, resumed.stderr.decode()

    ema = load_model_file(tmp_path / "straight" / EMA_FILE)
    assert ema.meta["ema_decay"] == 0.5 and ema.meta["step"] == 6
    again = load_payload(tmp_path / "resumed" / EMA_FILE, "mtkit-model")["model"]
    assert all(torch.equal(ema.weights[name], again[name]) for name in ema.weights)

    torch.manual_seed(1)  # the run's seed: the initial weights, where the average starts
    expected = {name: t.clone() for name, t in Transformer(ema.config).state_dict().items()}
    for step in range(1, 7):
        weights = load_model_file(tmp_path / "straight" / "checkpoints" / f"step_{step:08d}.pt").weights
        expected = {name: 0.5 * expected[name] + 0.5 * weights[name] for name in expected}
    for name, value in expected.items():
        assert torch.allclose(ema.weights[name], value, atol=1e-7), name
    final = load_model_file(tmp_path / "straight" / "checkpoints" / "step_00000006.pt")
    assert not torch.equal(ema.weights["tgt_embed.tokens.weight"], final.weights["tgt_embed.tokens.weight"])

    translated = run_mtkit("translate", "-m", tmp_path / "straight" / EMA_FILE, "--beam", "2", stdin=b"A dog runs.\n")
    assert translated.returncode == 0 and len(translated.stdout.decode().splitlines()) == 1
