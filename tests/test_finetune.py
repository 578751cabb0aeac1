"""Fine-tuning: `mtkit train --init-from MODEL` starts from a model's weights with a fresh optimizer."""

import torch
from conftest import TINY_TRAIN, run_mtkit, write_lines

from mtkit.core.config import build_config
from mtkit.data.dataset import ParallelDataset
from mtkit.model.files import MODEL_FORMAT, load_model_file, load_payload, read_index
from mtkit.training.validation import validate

# TINY_TRAIN without its model.* settings: the architecture comes from the model.
FINE_TUNE = [arg for pair in zip(TINY_TRAIN[::2], TINY_TRAIN[1::2]) if not pair[1].startswith("model.") for arg in pair]


def last_checkpoint(run_dir):
    return run_dir / "checkpoints" / read_index(run_dir)[-1]["file"]


def test_with_lr_0_the_fine_tuned_model_is_the_model(trained_run, data_dir, corpus, tmp_path):
    run = tmp_path / "ft"
    result = run_mtkit("train", "-d", data_dir, "-o", run, "--init-from", trained_run, *FINE_TUNE,
                       "--set", "train.lr=0", "--set", "train.max_steps=3")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    before, after = load_model_file(trained_run).weights, load_payload(last_checkpoint(run), MODEL_FORMAT)["model"]
    assert all(torch.equal(before[name], after[name]) for name in before)
    lines = (corpus / "test.en").read_bytes()
    original = run_mtkit("translate", "-m", trained_run, "--beam", "2", stdin=lines)
    tuned = run_mtkit("translate", "-m", last_checkpoint(run), "--beam", "2", stdin=lines)
    assert tuned.stdout == original.stdout and len(tuned.stdout.decode().splitlines()) == 20


def test_fine_tuning_lowers_the_in_domain_loss(trained_run, corpus, tokenizer_path, tmp_path):
    from mtkit.data.preprocess import preprocess

    domain = tmp_path / "domain"
    for lang in ("en", "de"):  # the sentences about dogs
        pairs = zip(*((corpus / f"train.{side}").read_text().splitlines() for side in ("en", "de")))
        write_lines(domain.with_suffix(f".{lang}"), [en if lang == "en" else de for en, de in pairs if "dog" in en])
    preprocess("en", "de", {"train": domain, "valid": domain}, tokenizer_path, tmp_path / "bin")
    run = tmp_path / "ft"
    result = run_mtkit("train", "-d", tmp_path / "bin", "-o", run, "--init-from", trained_run, *FINE_TUNE,
                       "--set", "train.lr=2e-3", "--set", "train.warmup=1", "--set", "train.max_steps=30")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    cfg = build_config({}).train
    valid = ParallelDataset(tmp_path / "bin", "valid")

    def loss(path):
        model_file = load_model_file(path)
        model = model_file.build_model()
        return validate(model, valid, model_file.tgt_tokenizer, cfg, torch.device("cpu"), "fp32")["valid_loss"]

    assert loss(last_checkpoint(run)) < loss(trained_run) - 0.1


def test_a_dataset_of_another_tokenizer_is_refused(trained_run, corpus, tmp_path):
    from mtkit.data.preprocess import preprocess
    from mtkit.text.tokenizer import train_tokenizer

    train_tokenizer([corpus / "train.en"], tmp_path / "other.json", vocab_size=300)
    preprocess("en", "de", {"train": corpus / "train"}, tmp_path / "other.json", tmp_path / "bin")
    result = run_mtkit("train", "-d", tmp_path / "bin", "-o", tmp_path / "ft", "--init-from", trained_run, *FINE_TUNE)
    stderr = result.stderr.decode()
    assert result.returncode == 1 and "built with a different tokenizer than the --init-from model" in stderr
    assert not (tmp_path / "ft").exists()


def test_the_architecture_comes_from_the_model(trained_run, data_dir, tmp_path):
    result = run_mtkit("train", "-d", data_dir, "-o", tmp_path / "ft", "--init-from", trained_run,
                       "--set", "model.d_model=32")  # fmt: skip
    assert result.returncode == 1
    assert "model.d_model: comes from the --init-from model" in result.stderr.decode()
    dropout = run_mtkit("train", "-d", data_dir, "-o", tmp_path / "ft2", "--init-from", trained_run, *FINE_TUNE,
                        "--set", "model.dropout=0.25", "--set", "train.max_steps=1")  # fmt: skip
    assert dropout.returncode == 0, dropout.stderr.decode()
    assert load_model_file(tmp_path / "ft2").config.dropout == 0.25
