"""Shared fixtures: a generated English-German corpus, tiny tokenizers, datasets and models.

Everything runs on the corpus these fixtures generate; only tests that need the real Multi30k
corpus (the `multi30k` fixture) skip when it is absent, saying how to point them at it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from precision_plugin import pytest_addoption, pytest_configure  # noqa: F401  (the second pass of `make test`)

from mtkit.core.config import build_config
from mtkit.model.transformer import Transformer

torch.set_num_threads(1)  # tiny models gain nothing from more threads, and CI has two cores


REPO = Path(__file__).resolve().parents[1]
MULTI30K = Path(os.environ.get("MTKIT_MULTI30K", REPO.parent / "shared" / "data" / "multi30k"))

TINY_TRAIN = [
    "--set",
    "model.preset=transformer-tiny",
    "--set",
    "train.max_tokens=600",
    "--set",
    "train.warmup=5",
    "--set",
    "train.lr=5e-3",
    "--set",
    "train.log_every=1",
    "--set",
    "train.valid_every=1000",
    "--set",
    "train.save_every=1000",
    "--set",
    "train.valid_metric=loss",
    "--set",
    "train.threads=1",
]


# translate's options that give the model each line as it is (no sentence splitting, spans kept as
# text, casing as written): what a comparison with another implementation of the same model needs.
AS_GIVEN = ("--no-split-sentences", "--no-keep-spans", "--no-recase")


def as_given(translator):
    """The translator, giving the model each line as it is (see AS_GIVEN)."""
    translator.set_segmenter(split_sentences=False, keep_spans=False, recase=False)
    return translator


# The files whose tests run longest (each over a minute on 2 cores): run first, so that the workers of
# `pytest -n` finish together instead of one running a recipe alone at the end. `make test` prints the
# slowest tests (--durations) to keep this list true.
LONGEST_FIRST = ("test_recipes.py", "test_bench.py", "test_readme.py", "test_replicas.py", "test_line_stream.py",
                 "test_faults.py", "test_compile.py", "test_distributed.py", "test_page.py", "test_m2m100.py")  # fmt: skip


def pytest_collection_modifyitems(items):
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # (stable: the rest in their order)


def pytest_runtest_setup(item):
    """A test marked gpu("why") skips without CUDA, saying why; bench/gpu_check.py --all runs them on a GPU."""
    marker = item.get_closest_marker("gpu")
    if marker is not None and not torch.cuda.is_available():
        why = marker.args[0] if marker.args else "needs a CUDA GPU"
        pytest.skip(f"{why} (python bench/gpu_check.py --all runs it)")


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server of this test process (tests/postgres.py); skips where none can start."""
    from postgres import PostgresServer

    server = PostgresServer()
    yield server
    server.stop()


@pytest.fixture()
def postgres_url(postgres_server) -> str:
    """A new empty database on it: its URL."""
    return postgres_server.database()


@pytest.fixture(scope="session")
def multi30k() -> Path:
    if not (MULTI30K / "train.en").is_file():
        pytest.skip(f"needs the Multi30k corpus, not found at {MULTI30K}: set MTKIT_MULTI30K=/path/to/multi30k")
    return MULTI30K


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# A small grammar of English sentences and their German translations (number agreement included).
SUBJECTS = [  # English, German, plural
    ("a man", "ein Mann", False), ("a woman", "eine Frau", False), ("a dog", "ein Hund", False),
    ("a girl", "ein Mädchen", False), ("a boy", "ein Junge", False), ("two children", "zwei Kinder", True),
    ("three men", "drei Männer", True), ("the workers", "die Arbeiter", True),
]  # fmt: skip
VERBS = [  # English singular, plural, German singular, plural
    ("runs", "run", "läuft", "laufen"), ("plays", "play", "spielt", "spielen"), ("sits", "sit", "sitzt", "sitzen"),
    ("jumps", "jump", "springt", "springen"), ("waits", "wait", "wartet", "warten"),
]  # fmt: skip
PLACES = [
    ("on the street", "auf der Straße"), ("in the park", "im Park"), ("at the beach", "am Strand"),
    ("near the water", "am Wasser"), ("in front of a building", "vor einem Gebäude"), ("on the grass", "auf dem Gras"),
]  # fmt: skip
COLORS = [("red", "roten"), ("blue", "blauen"), ("green", "grünen"), ("white", "weißen"), ("black", "schwarzen")]
THINGS = [("ball", "Ball"), ("hat", "Hut"), ("backpack", "Rucksack"), ("toy", "Spielzeug")]


def synthetic_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    """`count` distinct English-German sentence pairs such as "A dog runs at the beach with a red ball."

    The grammar has 5,040 distinct pairs: `count` may not exceed that."""
    assert count <= 5040, "the grammar has 5,040 distinct sentence pairs"
    rng = random.Random(seed)
    pairs: dict[str, str] = {}
    while len(pairs) < count:
        (subj_en, subj_de, plural), verb, (place_en, place_de) = (
            rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(PLACES)
        )  # fmt: skip
        en = f"{subj_en} {verb[1] if plural else verb[0]} {place_en}"
        de = f"{subj_de} {verb[3] if plural else verb[2]} {place_de}"
        if rng.random() < 0.5:
            (color_en, color_de), (thing_en, thing_de) = rng.choice(COLORS), rng.choice(THINGS)
            en, de = f"{en} with a {color_en} {thing_en}", f"{de} mit einem {color_de} {thing_de}"
        pairs[en[0].upper() + en[1:] + "."] = de[0].upper() + de[1:] + "."
    return list(pairs.items())


def write_corpus(root: Path, splits: dict[str, int], seed: int = 0) -> Path:
    """PREFIX.en / PREFIX.de for each split name with its number of pairs; no pair is in two splits."""
    pairs = synthetic_pairs(sum(splits.values()), seed)
    start = 0
    for name, count in splits.items():
        chunk = pairs[start : start + count]
        write_lines(root / f"{name}.en", [en for en, _ in chunk])
        write_lines(root / f"{name}.de", [de for _, de in chunk])
        start += count
    return root


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """A generated 400-pair training set and 20-pair valid/test sets, as PREFIX.en/PREFIX.de."""
    return write_corpus(tmp_path_factory.mktemp("corpus"), {"train": 400, "valid": 20, "test": 20})


@pytest.fixture(scope="session")
def tokenizer_path(corpus: Path, tmp_path_factory) -> Path:
    from mtkit.text.tokenizer import train_tokenizer

    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    train_tokenizer([corpus / "train.en", corpus / "train.de"], path, vocab_size=500)
    return path


@pytest.fixture(scope="session")
def data_dir(corpus: Path, tokenizer_path: Path, tmp_path_factory) -> Path:
    from mtkit.data.preprocess import preprocess

    out = tmp_path_factory.mktemp("data") / "bin"
    splits = {"train": corpus / "train", "valid": corpus / "valid", "test": corpus / "test"}
    preprocess("en", "de", splits, tokenizer_path, out)
    return out


@pytest.fixture(scope="session")
def sampled(corpus: Path, tokenizer_path: Path, tmp_path_factory) -> Path:
    """The corpus with 3 BPE-dropout (0.2) samples of its training pairs, and its valid split."""
    from mtkit.data.preprocess import Sampling, preprocess

    out = tmp_path_factory.mktemp("sampled") / "bin"
    splits = {"train": corpus / "train", "valid": corpus / "valid"}
    preprocess("en", "de", splits, tokenizer_path, out, sampling=Sampling(bpe_dropout=0.2, samples=3))
    return out


def run_mtkit(
    *args: str,
    stdin: bytes | None = None,
    env: dict | None = None,
    timeout: float = 300,
    in_process: bool | None = None,
) -> subprocess.CompletedProcess:
    """Run the real CLI (no terminal: quiet, line-oriented output) and return its exit code and output.

    In this process by default, through Click's test runner: the same command-line parsing, error
    handling and exit codes as `python -m mtkit`, without a 3-second interpreter start-up each time.
    A subprocess where the test sets environment variables (or asks for one with in_process=False)."""
    if in_process is None:
        in_process = env is None
    if in_process:
        return _invoke_mtkit([str(a) for a in args], stdin)
    return subprocess.run(
        [sys.executable, "-m", "mtkit", *map(str, args)],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def _invoke_mtkit(args: list[str], stdin: bytes | None) -> subprocess.CompletedProcess:
    """`mtkit ARGS` in this process. What a command changes globally (torch's thread count and random
    state) is put back afterwards, so that tests stay independent of each other's order."""
    import traceback

    from typer.testing import CliRunner

    from mtkit.cli import app

    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    try:
        result = CliRunner().invoke(app, args, input=stdin)
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)
    stderr = result.stderr_bytes
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        # What the interpreter would print for an uncaught exception, so tests can look for it
        stderr += "".join(traceback.format_exception(result.exception)).encode()
    return subprocess.CompletedProcess(["mtkit", *args], result.exit_code, result.stdout_bytes, stderr)


def start_mtkit(*args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) -> subprocess.Popen:
    """Start the real CLI in the background (for tests that signal or kill it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "mtkit", *map(str, args)], stdout=stdout, stderr=stderr,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip


def records(run_dir: Path) -> list[dict]:
    """A run's metrics.jsonl."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def losses(run_dir: Path) -> list[tuple[int, float]]:
    """(step, training loss) of every logged step."""
    return [(r["step"], r["loss"]) for r in records(run_dir) if "loss" in r]


@pytest.fixture(scope="session")
def trained_run(data_dir: Path, tmp_path_factory) -> Path:
    """A tiny model trained for 40 updates, with checkpoints at steps 20 and 40; in fp32, so that the
    model most tests share is the same on every kind of CPU."""
    run_dir = tmp_path_factory.mktemp("run") / "run"
    result = run_mtkit(
        "train",
        "-d",
        data_dir,
        "-o",
        run_dir,
        *TINY_TRAIN,
        "--set",
        "train.max_steps=40",
        "--set",
        "train.save_every=20",
        "--set",
        "train.precision=fp32",
    )
    assert result.returncode == 0, result.stderr.decode()
    return run_dir


def random_sources(lengths: list[int], vocab: int, seed: int = 0) -> list[list[int]]:
    """Source id sequences of these lengths, drawn from the words (ids 4 on) of a vocabulary."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(4, vocab, (n,), generator=generator).tolist() for n in lengths]


def run_joining_stream(decoder, cfg, schedule: dict, prefixes: dict, sync_every: int | None = None) -> dict:
    """Sentences joining a running beam search (mtkit.decoding.beam.BeamStream, on the CPU) at the steps
    `schedule` gives ({step: [(name, source ids)]}), some with target prefixes ({name: ids}):
    name -> (n-best, the step at which the stream returned it)."""
    from mtkit.data.batching import pad_batch
    from mtkit.decoding.beam import BeamStream
    from mtkit.decoding.search import prefix_tensor
    from mtkit.text.tokenizer import EOS_ID

    cpu = torch.device("cpu")
    stream, results, step = BeamStream(decoder, cfg, cpu, sync_every=sync_every), {}, 0
    while step <= max(schedule) or len(stream):
        for name, src_ids in schedule.get(step, []):
            forced = prefix_tensor([prefixes.get(name, [])], 1, cpu)
            stream.add(pad_batch([src_ids], suffix=EOS_ID), [name], forced)
        results.update((name, (hyps, step)) for name, hyps in (stream.step() if len(stream) else []))
        step += 1
    return results


@torch.no_grad()
def perturb_layer_norms(model: torch.nn.Module) -> None:
    """LayerNorm weights and biases drawn away from 1 and 0, so that a mapping that drops or swaps
    one of them shows (transformers' models built for the import tests)."""
    for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.weight.uniform_(0.5, 1.5)
            module.bias.normal_(0, 0.1)


def tiny_model(vocab: int = 12, seed: int = 0, **overrides) -> Transformer:
    """A randomly initialised tiny model over a vocabulary of `vocab` ids, in eval mode."""
    torch.manual_seed(seed)
    values = {
        "preset": "transformer-tiny",
        "src_vocab_size": vocab,
        "tgt_vocab_size": vocab,
        "joint_vocab": True,
        **overrides,
    }
    return Transformer(build_config({"model": values}).model).eval()


def variant(model_file, **changes):
    """A copy of a model file with its config changed (norm, activation, output_bias, ...): the
    weights it shares with the new shape kept, every LayerNorm and the output bias drawn at random
    (1, 0 and no bias would hide one exported to the wrong place)."""
    config = dataclasses.replace(model_file.config, **changes)
    model = Transformer(config)
    model.load_state_dict({**model.state_dict(), **model_file.weights})
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(0.5 + torch.rand(module.weight.shape, generator=generator))
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=generator))
        if model.output.bias is not None:
            model.output.bias.copy_(torch.randn(model.output.bias.shape, generator=generator))
    return dataclasses.replace(model_file, config=config, weights=model.state_dict())


def with_output_vocab(model_file, ids: list[int]):
    """A copy of a model file whose output layer scores only `ids`, <unk> and </s> (model.output_vocab = target)."""
    config = dataclasses.replace(model_file.config, output_vocab="target")
    model = Transformer(config)
    model.load_state_dict({**model_file.weights, "output.mask": model.output.mask})
    model.output.set_vocab(torch.tensor(ids))
    return dataclasses.replace(model_file, config=config, weights=model.state_dict())
