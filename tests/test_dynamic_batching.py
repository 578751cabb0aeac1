"""Dynamic batching, in-process with a recording stand-in for the engine."""

import math
import threading
import time
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mtkit.serving.dynamic_batching import Batcher
from mtkit.serving.waiting import Job, QueueFull, Waiting

NEVER_S = 10**6  # a max_wait_s that no test outlives: a batch that went anyway did not wait for it
HANG_S = 600  # how long a result may take before the test calls it a hang (not a speed bound)


class Recorder:
    """A translate function that records its batches and answers text -> TEXT."""

    def __init__(self):
        self.calls: list[tuple[list[str], str]] = []

    def __call__(self, texts, options, deliver):
        self.calls.append((list(texts), options))
        for i, text in enumerate(texts):
            deliver(i, text.upper())


def jobs(texts, options="a", tokens=2):
    return [Job(t, tokens, options) for t in texts]


def test_concurrent_sentences_share_a_batch_within_the_token_budget():
    engine = Recorder()
    batcher = Batcher(engine, max_batch_tokens=8, max_wait_s=0.3, max_queue=100)
    first = batcher.submit(jobs(["a", "b"]))
    second = batcher.submit(jobs(["c", "d", "e"]))  # 5 x 2 tokens: 4 fit one batch, the fifth waits
    batcher.start()
    assert [f.result(HANG_S) for f in first + second] == ["A", "B", "C", "D", "E"]
    batcher.stop()
    assert [texts for texts, _ in engine.calls] == [["a", "b", "c", "d"], ["e"]]


def test_owners_take_turns_in_a_batch_so_one_sentence_is_not_held_behind_a_thousand():
    engine = Recorder()
    batcher = Batcher(engine, max_batch_tokens=8, max_wait_s=0, max_queue=100)
    many = batcher.submit([Job(f"a{n}", 2, "x", owner="key a") for n in range(8)])
    one = batcher.submit([Job("b0", 2, "x", owner="key b")])  # came last: goes in the first batch
    batcher.start()
    assert [f.result(HANG_S) for f in one + many] == ["B0", *(f"A{n}" for n in range(8))]
    batcher.stop()
    assert [texts for texts, _ in engine.calls] == [["a0", "b0", "a1", "a2"], ["a3", "a4", "a5", "a6"], ["a7"]]


def test_a_client_holds_at_most_its_tokens_of_a_batch_while_another_waits_and_the_whole_budget_alone():
    engine = Recorder()
    batcher = Batcher(engine, max_batch_tokens=8, max_wait_s=0, max_queue=100, max_client_tokens=4)
    many = batcher.submit([Job(f"a{n}", 2, "x", owner="key a") for n in range(8)])
    one = batcher.submit([Job("b0", 2, "x", owner="key b")])
    batcher.start()
    assert [f.result(HANG_S) for f in one + many] == ["B0", *(f"A{n}" for n in range(8))]
    batcher.stop()
    assert [texts for texts, _ in engine.calls] == [["a0", "b0", "a1"], ["a2", "a3", "a4", "a5"], ["a6", "a7"]]


def test_a_sentence_longer_than_a_clients_share_still_goes_while_another_client_waits():
    engine = Recorder()
    batcher = Batcher(engine, max_batch_tokens=20, max_wait_s=0, max_queue=100, max_client_tokens=4)
    two = batcher.submit([Job("a-long", 10, "x", owner="key a"), Job("a2", 2, "x", owner="key a")])
    one = batcher.submit([Job("b0", 2, "x", owner="key b")])
    batcher.start()
    assert [f.result(HANG_S) for f in two + one] == ["A-LONG", "A2", "B0"]
    batcher.stop()
    assert [texts for texts, _ in engine.calls] == [["a-long", "b0"], ["a2"]]


def test_a_client_holds_at_most_its_tokens_of_the_running_search_while_another_searches():
    log: list = []
    batcher = streaming_batcher(log, max_client_tokens=6)
    many = batcher.submit([Job("aaa", 2, "a", owner="key a") for _ in range(10)])
    one = batcher.submit([Job("b", 2, "a", owner="key b")])  # finishes after one step
    batcher.start()
    assert [f.result(HANG_S) for f in one + many] == ["B"] + ["AAA"] * 10
    batcher.stop()
    adds = [entry[2:] for entry in log if entry[0] == "add"]
    assert adds == [(0, ["aaa", "b", "aaa", "aaa"]), (1, ["aaa"] * 7)]  # the rest once "b" has left


def waiting(jobs: list[Job]) -> Waiting:
    queued = Waiting()
    queued.add(jobs)
    return queued


@given(st.lists(st.sampled_from("abc"), max_size=30))
def test_owners_take_turns_each_in_its_own_order(owners):
    queue = [Job(n, 1, "x", owner=owner, arrival=n) for n, owner in enumerate(owners)]
    ordered = list(waiting(queue).in_turns("x", Counter(), math.inf))
    assert sorted(job.source for job in ordered) == list(range(len(queue)))  # each job once
    for owner in set(owners):  # each owner's own jobs oldest first
        assert [j.source for j in ordered if j.owner == owner] == [j.source for j in queue if j.owner == owner]
    for end in range(len(ordered) + 1):  # no owner two turns ahead of one that still waits
        taken = {owner: sum(j.owner == owner for j in ordered[:end]) for owner in set(owners)}
        still = [owner for owner in taken if taken[owner] < owners.count(owner)]
        assert all(taken[owner] <= taken[other] + 1 for owner in taken for other in still)
    if len(set(owners)) <= 1:
        assert ordered == queue


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 9)), max_size=30), st.integers(1, 12))
def test_an_owner_takes_its_oldest_jobs_up_to_its_share_or_one_larger_alone(jobs, share):
    queue = [Job(n, tokens, "x", owner=owner, arrival=n) for n, (owner, tokens) in enumerate(jobs)]
    held: Counter = Counter()
    for job in waiting(queue).in_turns("x", held, share):
        held[job.owner] += job.tokens
    for owner in {owner for owner, _ in jobs}:
        own = [job.tokens for job in queue if job.owner == owner]
        first_past = next((k for k in range(len(own)) if k and sum(own[: k + 1]) > share), len(own))
        assert held[owner] == sum(own[:first_past])  # its oldest, up to the first past its share


def test_only_equal_options_share_a_batch_and_order_is_kept():
    engine = Recorder()
    batcher = Batcher(engine, max_batch_tokens=100, max_wait_s=0.2, max_queue=100)
    futures = batcher.submit(jobs(["x1"], "x")) + batcher.submit(jobs(["y1"], "y")) + batcher.submit(jobs(["x2"], "x"))
    batcher.start()
    assert [f.result(HANG_S) for f in futures] == ["X1", "Y1", "X2"]
    batcher.stop()
    assert engine.calls == [(["x1", "x2"], "x"), (["y1"], "y")]


def test_a_lone_sentence_waits_for_company_then_goes_alone():
    engine = Recorder()
    batcher = Batcher(engine, max_batch_tokens=100, max_wait_s=0.25, max_queue=100)
    batcher.start()
    start = time.monotonic()
    (future,) = batcher.submit(jobs(["alone"]))
    assert future.result(HANG_S) == "ALONE"  # no company came: it went once max_wait was over
    waited = time.monotonic() - start
    batcher.stop()
    assert waited >= 0.25 and engine.calls == [(["alone"], "a")]


def test_a_full_budget_goes_without_waiting():
    engine = Recorder()
    batcher = Batcher(engine, max_batch_tokens=4, max_wait_s=NEVER_S, max_queue=100)
    batcher.start()
    futures = batcher.submit(jobs(["a", "b"]))  # exactly the budget: no reason to wait for company
    assert [f.result(HANG_S) for f in futures] == ["A", "B"]  # which would never have come
    batcher.stop()


def test_the_queue_is_bounded_and_takes_all_of_a_request_or_nothing():
    batcher = Batcher(Recorder(), max_batch_tokens=100, max_wait_s=0.0, max_queue=3)
    batcher.submit(jobs(["a", "b"]))
    with pytest.raises(QueueFull, match="2 sentences are waiting; the queue holds 3"):
        batcher.submit(jobs(["c", "d"]))
    assert batcher.depth == 2
    batcher.submit(jobs(["c"]))
    assert batcher.depth == 3


def test_a_client_that_filled_the_queue_leaves_a_reserve_for_clients_with_few_sentences():
    batcher = Batcher(Recorder(), max_batch_tokens=100, max_wait_s=0.0, max_queue=8)  # a reserve of 2
    batcher.submit([Job(f"a{n}", 2, "x", owner="a") for n in range(8)])
    with pytest.raises(QueueFull, match="8 sentences are waiting; the queue holds 8"):
        batcher.submit([Job("a8", 2, "x", owner="a")])
    batcher.submit([Job("b0", 2, "x", owner="b")])
    with pytest.raises(QueueFull, match="9 sentences are waiting"):
        batcher.submit([Job(f"b{n}", 2, "x", owner="b") for n in (1, 2)])  # more than the reserve
    batcher.submit([Job("c0", 2, "x", owner="c")])
    with pytest.raises(QueueFull, match="10 sentences are waiting"):
        batcher.submit([Job("d0", 2, "x", owner="d")])  # the reserve is full
    assert batcher.depth == 10


def test_cancelled_sentences_are_never_translated():
    engine = Recorder()
    batcher = Batcher(engine, max_batch_tokens=100, max_wait_s=0.2, max_queue=100)
    gone = batcher.submit(jobs(["gone1", "gone2"]))
    kept = batcher.submit(jobs(["kept"]))
    for future in gone:
        assert future.cancel()
    batcher.start()
    assert kept[0].result(HANG_S) == "KEPT"
    batcher.stop()
    assert engine.calls == [(["kept"], "a")]


def test_an_engine_error_reaches_that_batch_only():
    def engine(texts, options, deliver):
        if "bad" in texts:
            raise RuntimeError("engine failed")
        for i, text in enumerate(texts):
            deliver(i, text)

    batcher = Batcher(engine, max_batch_tokens=100, max_wait_s=0.0, max_queue=100)
    bad = batcher.submit(jobs(["bad"], "p"))
    good = batcher.submit(jobs(["good"], "q"))
    batcher.start()
    with pytest.raises(RuntimeError, match="engine failed"):
        bad[0].result(HANG_S)
    assert good[0].result(HANG_S) == "good"
    batcher.stop()


def test_stop_translates_what_is_queued_then_refuses():
    engine = Recorder()
    batcher = Batcher(engine, max_batch_tokens=100, max_wait_s=10.0, max_queue=100)
    futures = batcher.submit(jobs(["a", "b"]))
    batcher.start()
    batcher.stop()  # does not wait the 10 s: stopping sends what is queued at once
    assert [f.result(0) for f in futures] == ["A", "B"]
    with pytest.raises(QueueFull, match="shutting down"):
        batcher.submit(jobs(["c"]))


def test_a_failed_setup_fails_every_request_instead_of_hanging():
    def setup():
        raise RuntimeError("no model")

    batcher = Batcher(Recorder(), max_batch_tokens=100, max_wait_s=0.0, max_queue=100, setup=setup)
    futures = batcher.submit(jobs(["a", "b"]))
    batcher.start()
    for future in futures:
        with pytest.raises(RuntimeError, match="no model"):
            future.result(HANG_S)
    batcher.stop()


def test_a_finished_sentence_is_answered_before_its_batch_ends():
    release = threading.Event()

    def engine(texts, options, deliver):
        deliver(1, "second, early")
        assert release.wait(5)
        deliver(0, "first, late")

    batcher = Batcher(engine, max_batch_tokens=100, max_wait_s=0.0, max_queue=100)
    first, second = batcher.submit(jobs(["a", "b"]))
    batcher.start()
    assert second.result(HANG_S) == "second, early"
    assert not first.done()  # still in the batch
    release.set()
    assert first.result(HANG_S) == "first, late"
    batcher.stop()


def test_sentences_the_engine_leaves_out_or_fails_after_delivering_others_get_an_error():
    def engine(texts, options, deliver):
        deliver(0, "done")
        if options == "fail":
            raise RuntimeError("engine failed")

    batcher = Batcher(engine, max_batch_tokens=100, max_wait_s=0.0, max_queue=100)
    silent = batcher.submit(jobs(["a", "b"], "silent"))
    failing = batcher.submit(jobs(["c", "d"], "fail"))
    batcher.start()
    assert silent[0].result(HANG_S) == "done" and failing[0].result(HANG_S) == "done"
    with pytest.raises(RuntimeError, match="no result"):
        silent[1].result(HANG_S)
    with pytest.raises(RuntimeError, match="engine failed"):
        failing[1].result(HANG_S)
    batcher.stop()


class CountdownStream:
    """A stand-in for a running search: a text finishes after as many steps as it has characters,
    answered in upper case. Every stream records ("add", step, texts) and ("step", step, searching)."""

    def __init__(self, log, options, deliver, fail_at=None, pause=None):
        self.log, self.options, self.deliver, self.fail_at = log, options, deliver, fail_at
        self.pause = pause  # (step, paused, resume): at that step, set paused and wait for resume
        self.left: dict[int, list] = {}
        self.steps = 0

    def add(self, keys, texts):
        self.log.append(("add", self.options, self.steps, list(texts)))
        self.left.update((key, [len(text), text]) for key, text in zip(keys, texts))

    def step(self):
        self.steps += 1
        self.log.append(("step", self.options, self.steps, len(self.left)))
        if self.steps == self.fail_at:
            raise RuntimeError("search failed")
        if self.pause and self.steps == self.pause[0]:
            self.pause[1].set()
            assert self.pause[2].wait(5)
        for key, entry in list(self.left.items()):
            entry[0] -= 1
            if entry[0] == 0:
                del self.left[key]
                self.deliver(key, entry[1].upper())


def streaming_batcher(log, max_batch_tokens=100, fail_at=None, pause=None, max_wait_s=0.0, max_client_tokens=None):
    def open_stream(options, deliver):
        return CountdownStream(log, options, deliver, fail_at, pause)

    return Batcher(Recorder(), max_batch_tokens, max_wait_s=max_wait_s, max_queue=100, open_stream=open_stream,
                   max_client_tokens=max_client_tokens)  # fmt: skip


def test_a_running_search_starts_without_waiting_for_company():
    log: list = []
    batcher = streaming_batcher(log, max_wait_s=NEVER_S)  # batches would wait for company forever
    batcher.start()
    (future,) = batcher.submit(jobs(["ab"]))
    assert future.result(HANG_S) == "AB"  # later sentences would have joined the search instead
    batcher.stop()
    assert log == [("add", "a", 0, ["ab"]), ("step", "a", 1, 1), ("step", "a", 2, 1)]


def test_sentences_join_the_running_search_between_steps():
    log: list = []
    paused, resume = threading.Event(), threading.Event()
    batcher = streaming_batcher(log, pause=(3, paused, resume))
    (long,) = batcher.submit(jobs(["a" * 30]))  # 30 steps
    batcher.start()
    assert paused.wait(5)  # in step 3
    joiners = batcher.submit(jobs(["bb", "ccc"]))
    resume.set()
    assert [f.result(HANG_S) for f in joiners] == ["BB", "CCC"]
    assert long.result(HANG_S) == "A" * 30
    batcher.stop()
    adds = [entry for entry in log if entry[0] == "add"]
    assert adds == [("add", "a", 0, ["a" * 30]), ("add", "a", 3, ["bb", "ccc"])]  # joined after step 3
    assert max(entry[3] for entry in log if entry[0] == "step") == 3  # all three searched together
    assert [entry[2] for entry in log if entry[0] == "step"] == list(range(1, 31))  # one stream, 30 steps


@pytest.mark.parametrize(
    ("texts", "max_wait_s", "max_batch_tokens", "joined_after"),
    [
        (["bb"], 0.02, 100, 4),  # arrived during step 3: joins after step 4
        (["bb", "ccc"], 0.02, 100, 4),
        (["bb", "ccc"], 0.02, 6, 3),  # they fill the budget (2 + 2 + 2 tokens): no reason to wait
        (["bb"], 0.0, 100, 3),  # --max-wait-ms 0: no waiting for company
    ],
)
def test_sentences_join_once_they_have_waited_a_whole_step(texts, max_wait_s, max_batch_tokens, joined_after):
    log: list = []
    paused, resume = threading.Event(), threading.Event()
    batcher = streaming_batcher(log, max_batch_tokens, pause=(3, paused, resume), max_wait_s=max_wait_s)
    (long,) = batcher.submit(jobs(["a" * 10]))
    batcher.start()
    assert paused.wait(5)  # in step 3: what arrives now arrived during it
    joiners = batcher.submit(jobs(texts))
    resume.set()
    assert [f.result(HANG_S) for f in joiners] == [text.upper() for text in texts]
    assert long.result(HANG_S) == "A" * 10
    batcher.stop()
    assert [entry[2:] for entry in log if entry[0] == "add"] == [(0, ["a" * 10]), (joined_after, texts)]


def test_joining_keeps_the_token_budget_and_other_options_wait_for_the_search_to_drain():
    log: list = []
    batcher = streaming_batcher(log, max_batch_tokens=6)  # 3 sentences of 2 tokens
    futures = batcher.submit(jobs(["xxxx", "xx", "x", "xxx"], "x"))
    futures += batcher.submit(jobs(["y"], "y")) + batcher.submit(jobs(["xx"], "x"))
    batcher.start()
    assert [f.result(HANG_S) for f in futures] == ["XXXX", "XX", "X", "XXX", "Y", "XX"]
    batcher.stop()
    adds = [entry[1:] for entry in log if entry[0] == "add"]
    # "xxx" joins when "x" leaves (after step 1); "y" heads the queue then, so the second "xx"
    # waits behind it: the x-search drains, the y-search runs, then a new x-search.
    assert adds == [("x", 0, ["xxxx", "xx", "x"]), ("x", 1, ["xxx"]), ("y", 0, ["y"]), ("x", 0, ["xx"])]
    assert max(entry[3] for entry in log if entry[0] == "step") == 3


def test_a_failing_search_fails_its_sentences_only():
    log: list = []
    batcher = streaming_batcher(log, fail_at=2)
    done, failing = batcher.submit(jobs(["a", "bbb"]))
    batcher.start()
    assert done.result(HANG_S) == "A"
    with pytest.raises(RuntimeError, match="search failed"):
        failing.result(HANG_S)
    (later,) = batcher.submit(jobs(["c"]))
    assert later.result(HANG_S) == "C"  # a new search
    batcher.stop()
