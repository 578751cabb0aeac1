"""Several processes and several machines with torchrun (gloo on the CPU): the same updates as one
process, ranks that agree on their data, a rank that dies, and restarts that continue exactly.

Two "nodes" are two torchrun launches on this machine that meet at a c10d rendezvous store this
test hosts on a port the system chose (no free-port race), one process each."""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from conftest import TINY_TRAIN, losses, records, run_mtkit
from hypothesis import given, settings
from hypothesis import strategies as st

from mtkit.data.dataset import read_manifest
from mtkit.data.preprocess import preprocess
from mtkit.model.files import load_payload
from mtkit.training.rundir import STATE_FILE

COMMON = [*TINY_TRAIN, "--set", "train.max_steps=5", "--set", "train.valid_every=5", "--set", "train.valid_beam=2"]
LIMIT_S = 600  # turns a hang into a failure; every run here ends in seconds


def environment(**extra: str) -> dict:
    """This process's environment when a launch starts (a test's own settings included), one thread."""
    return {**os.environ, "OMP_NUM_THREADS": "1", **extra}


def torchrun(*launch: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *launch, "-m", "mtkit", "train"]


def start(command: list, extra_env: dict | None = None) -> subprocess.Popen:
    """A launch in a session of its own, so that a hang kills its workers too, not just torchrun."""
    return subprocess.Popen([str(c) for c in command], env=environment(**(extra_env or {})), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def finish(launch: subprocess.Popen) -> subprocess.CompletedProcess:
    try:
        out, err = launch.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(launch.pid, signal.SIGKILL)
        raise
    return subprocess.CompletedProcess(launch.args, launch.returncode, out, err)


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux's /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (command name)": state, ppid, ...
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue  # ended meanwhile
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def two_nodes(*per_node: tuple[list[str], dict]) -> list[subprocess.CompletedProcess]:
    """Run one torchrun launch per (mtkit train arguments, extra environment), each a node of one
    process, meeting at a rendezvous store hosted here; returns each launch's result."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=LIMIT_S))
    launch = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"127.0.0.1:{store.port}", "--rdzv-conf", "is_host=false", "--rdzv-id", "test"]  # fmt: skip
    nodes = [start([*torchrun(*launch), *args], extra) for args, extra in per_node]
    results = [finish(node) for node in nodes]
    del store
    return results


def assert_same_training(one, two) -> None:
    """Two runs made the same updates: weights, losses, batches and validation scores."""
    a_weights = load_payload(one / STATE_FILE, "mtkit-train-state")["model"]
    b_weights = load_payload(two / STATE_FILE, "mtkit-train-state")["model"]
    assert a_weights.keys() == b_weights.keys()
    for name in a_weights:
        a, b = a_weights[name], b_weights[name]
        if name.endswith("kv_proj.bias"):
            # The key half of this bias has a gradient of exactly zero in exact arithmetic (softmax is
            # invariant to adding the same q.b_k to every score), so Adam turns rounding noise into
            # +-lr steps there; only the value half carries a real gradient.
            a, b = a[a.numel() // 2 :], b[b.numel() // 2 :]
        assert torch.allclose(a, b, atol=1e-5), name
    one_log, two_log = losses(one), losses(two)
    assert [s for s, _ in one_log] == [s for s, _ in two_log] == [1, 2, 3, 4, 5]
    assert [loss for _, loss in one_log] == pytest.approx([loss for _, loss in two_log], rel=1e-5)
    tokens = [[r["target_tokens"] for r in records(run) if "target_tokens" in r] for run in (one, two)]
    assert tokens[0] == tokens[1]  # the same batches: an update of 2 processes is twice one process's batch
    # Validation is sharded over the ranks and gathered: the same scores as one process.
    one_valid, two_valid = ([r for r in records(run) if "valid_loss" in r] for run in (one, two))
    assert two_valid[0]["valid_bleu"] == pytest.approx(one_valid[0]["valid_bleu"], abs=1e-6)
    assert two_valid[0]["valid_loss"] == pytest.approx(one_valid[0]["valid_loss"], rel=1e-5)


@pytest.fixture(scope="module")
def one_process(data_dir, tmp_path_factory):
    """The reference: one process with update_freq 2."""
    run = tmp_path_factory.mktemp("one") / "run"
    single = run_mtkit("train", "-d", data_dir, "-o", run, *COMMON, "--set", "train.update_freq=2")
    assert single.returncode == 0, single.stderr.decode()
    return run


def two_processes(data_dir, run, *options: str, env: dict | None = None) -> subprocess.CompletedProcess:
    launch = torchrun("--standalone", "--nproc-per-node=2", *options)
    return finish(
        start([*launch, "-d", data_dir, "-o", run, *COMMON, "--set", "train.save_every=2", "--auto-resume"], env)
    )


@pytest.fixture(scope="module")
def two_process_run(data_dir, tmp_path_factory):
    run = tmp_path_factory.mktemp("two") / "run"
    double = two_processes(data_dir, run)
    assert double.returncode == 0, double.stderr.decode()[-3000:]
    assert "Warning" not in double.stderr.decode()  # torch's deprecation of DDP's broadcast_buffers, at every launch
    return run


def test_two_processes_match_one_process(one_process, two_process_run):
    """train.max_tokens is per process: torchrun with 2 CPU processes (gloo), each taking its own batches of
    up to max_tokens, makes the same updates as 1 process with update_freq 2 over the same batches."""
    assert_same_training(one_process, two_process_run)


@pytest.mark.parametrize("rank", [0, 1])
def test_torchrun_restarts_after_a_killed_rank_continue_exactly(tmp_path, data_dir, two_process_run, rank):
    """`torchrun --max-restarts 1 ... mtkit train ... --auto-resume`: one rank is killed after its
    third update; torchrun restarts both, which continue from the step-2 checkpoint and end with the
    uninterrupted run's losses and weights, bit for bit. Rank 0 is the one that saves; and its death
    used to leave the restarted processes connecting to the dead ones' addresses, forever."""
    run = tmp_path / "run"
    kill = {"MTKIT_KILL_AT": "update:3", "MTKIT_KILL_ONCE": str(tmp_path / "killed"), "MTKIT_KILL_RANK": str(rank)}
    restarted = two_processes(data_dir, run, "--max-restarts=1", env=kill)
    assert restarted.returncode == 0, restarted.stderr.decode()[-3000:]
    assert (tmp_path / "killed").exists()  # a rank was killed, and the job went on
    assert losses(run) == losses(two_process_run)
    weights = [load_payload(r / STATE_FILE, "mtkit-train-state")["model"] for r in (run, two_process_run)]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[1])


def test_two_nodes_each_with_its_own_copy_of_the_data_match_one_process(tmp_path, data_dir, one_process):
    """Multi-node torchrun (c10d rendezvous, gloo): two machines, one process each, no shared copy of
    the dataset, train the weights of one process with update_freq 2."""
    copy = shutil.copytree(data_dir, tmp_path / "node1-data")
    run = tmp_path / "run"
    results = two_nodes((["-d", data_dir, "-o", run, *COMMON], {}), (["-d", copy, "-o", run, *COMMON], {}))
    assert [r.returncode for r in results] == [0, 0], [r.stderr.decode()[-3000:] for r in results]
    assert_same_training(one_process, run)


def test_nodes_with_different_data_refuse_to_train(tmp_path, corpus, tokenizer_path, data_dir):
    """The ranks compare their datasets' digests before the first update. The other node's corpus has
    two lines swapped: the same sentences, counts and token totals, another order."""
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    for lang in ("en", "de"):
        lines = (corpus / f"train.{lang}").read_text().splitlines()
        lines[0], lines[1] = lines[1], lines[0]
        (swapped / f"train.{lang}").write_text("\n".join(lines) + "\n")
    for split in ("valid", "test"):
        for lang in ("en", "de"):
            shutil.copy(corpus / f"{split}.{lang}", swapped / f"{split}.{lang}")
    other = tmp_path / "other-data"
    splits = {"train": swapped / "train", "valid": swapped / "valid", "test": swapped / "test"}
    report = preprocess("en", "de", splits, tokenizer_path, other)
    assert report["splits"] == read_manifest(data_dir)["splits"]  # nothing but the order tells them apart
    run = tmp_path / "run"
    results = two_nodes((["-d", data_dir, "-o", run, *COMMON], {}), (["-d", other, "-o", run, *COMMON], {}))
    for result in results:
        assert result.returncode != 0
        errors = [line for line in result.stderr.decode().splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "differs between processes: rank 1's (digest" in errors[0], errors
        assert "every node must hold the same data" in errors[0]
    assert not (run / STATE_FILE).exists()


@pytest.mark.parametrize(
    "args", [["--version"], ["train", "-d", "no-such-dir", "-o", "run"], ["train", "--no-such-option"]]
)
def test_a_torchrun_worker_ends_as_the_command_does_without_finalizing(tmp_path, args):
    """Under torchrun (WORLD_SIZE > 1) mtkit ends its process without finalizing the interpreter, where
    gloo's threads could abort a run that finished well: the same exit code and output as an ordinary
    process (a result, a one-line error, a usage error), and no exit handler runs."""
    script = (
        "import atexit, sys; atexit.register(lambda: print('finalized', file=sys.stderr)); "
        f"sys.argv = ['mtkit', *{[str(a) for a in args]!r}]; from mtkit.cli import main; main()"
    )
    ordinary, worker = (
        subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, env=environment(**world))
        for world in ({"WORLD_SIZE": "1"}, {"WORLD_SIZE": "2"})
    )
    assert ordinary.stderr.decode().endswith("finalized\n")
    assert (worker.returncode, worker.stdout, worker.stderr.decode()) == (
        ordinary.returncode, ordinary.stdout, ordinary.stderr.decode().removesuffix("finalized\n")
    )  # fmt: skip
    assert worker.returncode == (0 if args == ["--version"] else 1 if args[1] == "-d" else 2)


def test_a_rank_that_dies_stops_the_others_with_one_line(tmp_path, data_dir):
    """Node 1's process is killed (SIGKILL) after its third update; node 0's process, waiting for it
    in the next gradient all-reduce, exits at once with one line that says so, not a hang."""
    run = tmp_path / "run"
    args = ["-d", data_dir, "-o", run, *TINY_TRAIN, "--set", "train.max_steps=50"]
    survivor, killed = two_nodes((args, {}), (args, {"MTKIT_KILL_AT": "update:3"}))
    assert killed.returncode != 0 and "SIGKILL" in killed.stderr.decode()
    assert survivor.returncode != 0
    errors = [line for line in survivor.stderr.decode().splitlines() if line.startswith("error:")]
    assert len(errors) == 1, survivor.stderr.decode()[-3000:]
    assert "lost another process of the job" in errors[0] and "--auto-resume" in errors[0]
    assert not re.search(r'File "[^"]*mtkit/[^"]*", line', survivor.stderr.decode())  # no traceback of mtkit's


def test_a_rank_that_hangs_stops_the_others_within_the_timeout(tmp_path, data_dir):
    """Node 1's process stops after its third update without dying; node 0's process, waiting for it
    in the next all-reduce, gives up after train.collective_timeout with one line, not a hang."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=LIMIT_S))
    launch = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"127.0.0.1:{store.port}", "--rdzv-conf", "is_host=false", "--rdzv-id", "hang"]  # fmt: skip
    args = ["-d", data_dir, "-o", tmp_path / "run", *TINY_TRAIN, "--set", "train.max_steps=50",
            "--set", "train.collective_timeout=10"]  # fmt: skip
    survivor = start([*torchrun(*launch), *args])
    hung = start([*torchrun(*launch), *args], {"MTKIT_KILL_AT": "update:3", "MTKIT_FAULT": "hang"})
    lines = []
    try:  # until the survivor's process says why it stopped (its torchrun then waits for the other node's)
        for line in iter(survivor.stderr.readline, b""):
            lines.append(line.decode())
            if line.startswith(b"error:"):
                break
    finally:  # SIGTERM: torchrun stops its workers, which run in sessions of their own, before it exits;
        for worker in children(hung.pid):  # the hung one ignores it (torchrun would wait 30 s): SIGKILL
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGKILL)
        for launch in (survivor, hung):
            os.killpg(launch.pid, signal.SIGTERM)
        for launch in (survivor, hung):
            finish(launch)
        del store
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, "".join(lines)[-3000:]
    assert "lost another process of the job" in errors[0]
    assert not re.search(r'File "[^"]*mtkit/[^"]*", line', "".join(lines))


class LengthsOnly:
    """A training set reduced to what the batch plan reads: each pair's source and target length."""

    def __init__(self, lengths: list[tuple[int, int]]):
        self.src_lengths = np.array([s for s, _ in lengths], dtype=np.int64)
        self.tgt_lengths = np.array([t for _, t in lengths], dtype=np.int64)

    def epoch_sample(self, epoch: int, seed: int) -> tuple[int, None, np.ndarray, np.ndarray]:
        return 0, None, self.src_lengths, self.tgt_lengths


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.tuples(st.integers(1, 30), st.integers(1, 30)), min_size=1, max_size=80),
    world_size=st.integers(1, 4),
    update_freq=st.integers(1, 3),
    max_tokens=st.integers(62, 300),
)
def test_every_rank_takes_the_same_number_of_batches_in_every_update(lengths, world_size, update_freq, max_tokens):
    """No rank can wait for a collective that another never joins: in every update, each rank, planning
    on its own, takes exactly update_freq batches of one shared list, and updates run on across epoch
    boundaries without dropping or repeating a batch (whatever the number of batches in an epoch)."""
    from mtkit.core.config import TrainConfig
    from mtkit.core.distributed import Distributed
    from mtkit.data.batching import BatchStream

    data = LengthsOnly(lengths)
    cfg = TrainConfig(max_tokens=max_tokens, update_freq=update_freq, seed=3)
    streams = [
        BatchStream(data, cfg, Distributed(r, world_size), torch.device("cpu"), (0, 0)) for r in range(world_size)
    ]
    positions = [(0, 0)] * world_size
    taken = []
    for _ in range(10):
        updates = []
        for rank, stream in enumerate(streams):
            micro, positions[rank] = stream.upcoming(positions[rank])
            assert len(micro[rank::world_size]) == update_freq  # this rank's share of the update
            updates.append(micro)
        assert all(len(u) == len(updates[0]) and all(map(np.array_equal, u, updates[0])) for u in updates)
        assert len(set(positions)) == 1
        taken += updates[0]
    expected = []
    epoch = 0
    while len(expected) < len(taken):
        expected += streams[0].epoch_batches(epoch)
        epoch += 1
    assert all(np.array_equal(a, b) for a, b in zip(taken, expected[: len(taken)]))
