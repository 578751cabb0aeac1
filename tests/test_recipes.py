"""The paper recipes cannot run here (they need GPUs and WMT14); check that they are ready to."""

import random
import subprocess

import pytest
from conftest import REPO, run_mtkit, write_lines

from mtkit.config import load_config
from mtkit.model import Transformer

RECIPES = REPO / "recipes"


def paper_size(d: int, ff: int, layers: int, vocab: int, pre_norm: bool = False) -> int:
    attention = 4 * (d * d + d)
    ffn = 2 * d * ff + ff + d
    final_norms = 2 * 2 * d if pre_norm else 0  # pre-norm adds a LayerNorm after each stack
    return vocab * d + layers * (attention + ffn + 4 * d) + layers * (2 * attention + ffn + 6 * d) + final_norms


@pytest.mark.parametrize(
    "config, expected",
    [
        ("wmt14_en_de/base.yaml", paper_size(512, 2048, 6, 37000)),  # 63.1M; the paper reports 65M
        ("wmt14_en_de/big.yaml", paper_size(1024, 4096, 6, 37000)),  # 214.2M; the paper reports 213M
        ("iwslt14_de_en/config.yaml", paper_size(512, 1024, 6, 10000)),
        ("multi30k_en_de/config.yaml", paper_size(256, 1024, 3, 8000, pre_norm=True)),  # 7,578,624
    ],
)
def test_recipe_configs_parse_and_build_the_expected_model(config, expected):
    vocab = 37000 if "wmt14" in config else 10000 if "iwslt" in config else 8000
    cfg = load_config(
        RECIPES / config, [f"model.src_vocab_size={vocab}", f"model.tgt_vocab_size={vocab}", "model.joint_vocab=true"]
    )
    assert Transformer(cfg.model).num_parameters() == expected


def test_paper_settings():
    base = load_config(RECIPES / "wmt14_en_de/base.yaml", [])
    big = load_config(RECIPES / "wmt14_en_de/big.yaml", [])
    assert (base.model.d_model, base.model.ffn_dim, base.model.heads, base.model.dropout) == (512, 2048, 8, 0.1)
    assert (big.model.d_model, big.model.ffn_dim, big.model.heads, big.model.dropout) == (1024, 4096, 16, 0.3)
    for cfg in (base, big):
        assert cfg.train.warmup == 4000 and cfg.train.label_smoothing == 0.1 and cfg.model.norm == "post"
        assert cfg.train.lr == pytest.approx(cfg.model.d_model**-0.5 * 4000**-0.5, rel=0.01)
    assert (base.train.keep_last, big.train.keep_last) == (5, 20)


@pytest.fixture(scope="module")
def made_up_data(tmp_path_factory, tokenizer_path):
    """A few dozen pairs of made-up 'translations': digit words and their reversal."""
    from mtkit.preprocess import preprocess

    root = tmp_path_factory.mktemp("madeup")
    words = "zero one two three four five six seven eight nine".split()
    rng = random.Random(0)
    src = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 6))) for _ in range(40)]
    write_lines(root / "c.en", src)
    write_lines(root / "c.de", [" ".join(reversed(s.split())) for s in src])
    preprocess("en", "de", {"train": root / "c", "valid": root / "c"}, tokenizer_path, root / "bin")
    return root / "bin"


@pytest.mark.parametrize("config", ["wmt14_en_de/base.yaml", "wmt14_en_de/big.yaml", "iwslt14_de_en/config.yaml"])
def test_paper_recipes_take_training_steps_on_cpu(config, made_up_data, tmp_path):
    result = run_mtkit(
        "train",
        "-d",
        made_up_data,
        "-o",
        tmp_path / "run",
        "-c",
        RECIPES / config,
        "--set",
        "train.max_steps=2",
        "--set",
        "train.max_tokens=200",
        "--set",
        "train.log_every=1",
        "--set",
        "train.threads=1",
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert "stopped at step 2" in result.stderr.decode()


@pytest.mark.parametrize("script", sorted(str(p.relative_to(RECIPES)) for p in RECIPES.glob("*/*.sh")))
def test_recipe_scripts_are_valid_bash(script):
    assert subprocess.run(["bash", "-n", RECIPES / script]).returncode == 0
