"""model.output_vocab = target: the output layer scores only the training data's target-side ids."""

import dataclasses

import pytest
import torch
from conftest import TINY_TRAIN, run_mtkit

from mtkit.data.dataset import TrainingSamples
from mtkit.decoding.search import SearchConfig, search
from mtkit.model.files import load_model_file, save_model_file
from mtkit.model.transformer import Transformer
from mtkit.text.tokenizer import EOS_ID, PAD_ID, UNK_ID

FINE_TUNE = [arg for pair in zip(TINY_TRAIN[::2], TINY_TRAIN[1::2]) if not pair[1].startswith("model.") for arg in pair]


def target_side_ids(data_dir) -> set[int]:
    """What the training data's target side holds, every sample's, read sentence by sentence."""
    data = TrainingSamples(data_dir)
    return {int(i) for sample in data.samples for pair in range(len(sample)) for i in sample[pair][1]}


def scored_ids(model_file) -> set[int]:
    return set(model_file.weights["output.mask"].nonzero().squeeze(1).tolist())


@pytest.fixture(scope="module")
def target_run(sampled, tmp_path_factory):
    run = tmp_path_factory.mktemp("target") / "run"
    result = run_mtkit("train", "-d", sampled, "-o", run, *TINY_TRAIN,
                       "--set", "model.output_vocab=target", "--set", "train.max_steps=6")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    return run


@pytest.mark.parametrize("chunk", [7, 1 << 24])
def test_target_ids_are_the_target_side_of_every_sample_whatever_the_chunk(sampled, chunk):
    ids = TrainingSamples(sampled).target_ids(vocab_size=500, chunk=chunk)  # the tiny tokenizer's
    assert ids.tolist() == sorted(target_side_ids(sampled))


def test_training_scores_exactly_the_target_side_of_every_sample(target_run, sampled, data_dir):
    expected = target_side_ids(sampled) | {UNK_ID, EOS_ID}
    assert scored_ids(load_model_file(target_run)) == expected
    assert len(expected) < load_model_file(target_run).config.tgt_vocab_size  # the source side has ids of its own
    assert expected > target_side_ids(data_dir)  # the samples add ids the plain segmentation lacks


@pytest.mark.parametrize("seed", [0, 1])
def test_beam_search_produces_only_scored_ids(target_run, corpus, seed):
    """Seeded random weights with the trained set, the unscored ids' output rows scaled up 20-fold so that they
    win every argmax they can: the same model without its mask produces them, with it none.

    (The 6-step model's own output is too degenerate for this: a handful of ids, which ones depends on the CPU.)
    """
    model_file = load_model_file(target_run)
    torch.manual_seed(seed)
    masked = Transformer(model_file.config).eval()
    masked.output.mask.copy_(model_file.weights["output.mask"])
    with torch.no_grad():
        masked.output.projection()[~masked.output.mask] *= 20
    unmasked = Transformer(dataclasses.replace(model_file.config, output_vocab="all")).eval()
    unmasked.load_state_dict({name: w for name, w in masked.state_dict().items() if name != "output.mask"})
    lines = model_file.src_tokenizer.encode_batch((corpus / "test.en").read_text().splitlines())
    src = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(line + [EOS_ID]) for line in lines], batch_first=True, padding_value=PAD_ID
    )
    config = SearchConfig(beam=3, nbest=3, max_len_a=0, max_len_b=8)
    produced = {i for hypotheses in search(masked, src, config) for h in hypotheses for i in h.tokens}
    unconstrained = {i for hypotheses in search(unmasked, src, config) for h in hypotheses for i in h.tokens}
    assert produced and produced <= scored_ids(model_file)
    assert len(unconstrained - scored_ids(model_file)) > len(unconstrained) / 2


def test_fine_tuning_scores_what_the_model_scored_and_the_new_data(target_run, data_dir, tmp_path):
    model_file = load_model_file(target_run)
    source_only = sorted(set(range(model_file.config.tgt_vocab_size)) - scored_ids(model_file))[0]
    model_file.weights["output.mask"][source_only] = True
    save_model_file(tmp_path / "start.pt", model_file)
    run = tmp_path / "ft"
    result = run_mtkit("train", "-d", data_dir, "-o", run, "--init-from", tmp_path / "start.pt", *FINE_TUNE,
                       "--set", "train.max_steps=1")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    assert scored_ids(load_model_file(run, "last")) == scored_ids(model_file) | target_side_ids(data_dir)
