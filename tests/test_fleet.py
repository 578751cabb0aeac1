"""The models behind one server (mtkit.serving.fleet), with stand-in services: routing by language and
through the pivot, loading on first use within --max-loaded, the least recently used idle model
unloaded, a model in use never, a model that fails named while the others serve, and no two requests
each holding a model the other waits for."""

import asyncio
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")

from mtkit.api.edge import answered  # noqa: E402
from mtkit.serving.calls import Reason, Refused  # noqa: E402
from mtkit.serving.fleet import Fleet, Slot  # noqa: E402
from mtkit.serving.pivot import Pivot, described  # noqa: E402
from mtkit.serving.settings import Languages, ModelInfo, ServeConfig  # noqa: E402
from mtkit.serving.turns import LoadBudget  # noqa: E402


class Batcher:
    def __init__(self, log: list, name: str):
        self.log, self.name, self.depth = log, name, 0

    def start(self) -> None:
        self.log.append(("start", self.name))

    def stop(self) -> None:
        self.log.append(("stop", self.name))


class StandIn:
    """What the fleet asks of a service: its batcher, a warm-up and its engines."""

    def __init__(self, name: str, log: list, source: str, target: str):
        self.name, self.batcher, self.ready = name, Batcher(log, name), True
        self.cfg, self.languages = ServeConfig(), Languages({}, source, target, None)
        self.info = ModelInfo(name, Path(name), "pytorch", source, target)

    def warm_up(self) -> Future:
        done: Future = Future()
        done.set_result(None)
        return done

    def engines_running(self) -> int:
        return 1

    def engines_ready(self) -> int:
        return 1


def slot(name: str, source: str, target: str, log: list, fails: str | None = None, gate=None) -> Slot:
    def build(metrics):
        if gate is not None:
            assert gate.wait(60), "the test never let the model load"
        if fails:
            raise RuntimeError(fails)
        return StandIn(name, log, source, target)

    return Slot(name, None, Languages({}, source, target, None), build)


def fleet_of(*slots: Slot, max_loaded: int = 0, load_timeout_s: float = 60.0, turn_s: float = 0.0) -> Fleet:
    return Fleet(list(slots), ServeConfig(), "en", max_loaded, load_timeout_s, turn_s=turn_s)


async def translated_by(fleet: Fleet, source, target, texts=(), owner=None) -> tuple:
    async with fleet.route(source, target, texts, owner) as (service, src, tgt):
        if isinstance(service, Pivot):
            return (service.first.name, service.second.name), src, tgt
        return service.name, src, tgt


async def until(condition) -> None:
    """Let the event loop run until the condition holds (each turn gives the loads' threads a chance)."""
    for _ in range(100_000):
        if condition():
            return
        await asyncio.sleep(0)
        await asyncio.to_thread(lambda: None)
    raise AssertionError("never happened")


def test_a_pair_goes_to_its_model_and_a_pair_no_model_has_through_the_pivot():
    log = []
    fleet = fleet_of(slot("de-en", "de", "en", log), slot("en-fr", "en", "fr", log), slot("en-cs", "en", "cs", log))

    async def main():
        fleet.start()
        assert await translated_by(fleet, "de", "en") == ("de-en", "de", "en")
        assert await translated_by(fleet, "de", "fr") == (("de-en", "en-fr"), "de", "fr")
        with pytest.raises(Refused, match=r"^target: give one of cs, en, fr$"):
            await translated_by(fleet, "de", None)
        with pytest.raises(Refused, match=r"^fr->de: no model translates it, directly or through en"):
            await translated_by(fleet, "fr", "de")
        with pytest.raises(Refused, match=r"^target: give one of cs, fr$"):
            await translated_by(fleet, "en", None)
        fleet.stop()

    asyncio.run(main())
    assert fleet.languages.directions() == [["de", "cs"], ["de", "en"], ["de", "fr"], ["en", "cs"], ["en", "fr"]]


def test_the_least_recently_used_idle_model_is_unloaded_and_one_in_use_never():
    log = []
    a, b, c = slot("a", "de", "en", log), slot("b", "en", "fr", log), slot("c", "en", "cs", log)
    fleet = fleet_of(a, b, c, max_loaded=2)

    async def main():
        fleet.start()  # a and b load
        await until(lambda: fleet.unready() is None)
        assert fleet.states() == {"a": "loaded", "b": "loaded", "c": "unloaded"}
        async with fleet.route("de", "en") as _:  # a is in use, and the least recently used
            await translated_by(fleet, "en", "fr")  # b used after a
            await translated_by(fleet, "en", "cs")  # room for c: b goes, a is in use
            assert fleet.states() == {"a": "loaded", "b": "unloaded", "c": "loaded"}
        await translated_by(fleet, "en", "fr")  # b again: c, used before a was done with, goes
        assert fleet.states() == {"a": "loaded", "b": "loaded", "c": "unloaded"}
        fleet.stop()

    asyncio.run(main())
    assert log.index(("stop", "b")) < log.index(("start", "c"))  # a model's memory back before another's
    assert log[:2] == [("start", "a"), ("start", "b")] and ("stop", "a") not in log[:-3]


def test_a_request_for_a_model_without_room_waits_for_the_one_in_use_to_finish():
    log = []
    fleet = fleet_of(slot("a", "de", "en", log), slot("b", "en", "fr", log), max_loaded=1)

    async def main():
        fleet.start()
        await until(lambda: fleet.unready() is None)
        holding = fleet.route("de", "en")
        await holding.__aenter__()
        waiting = asyncio.ensure_future(translated_by(fleet, "en", "fr"))
        await until(lambda: not waiting.done() and fleet.states() == {"a": "loaded", "b": "unloaded"})
        for _ in range(100):
            await asyncio.sleep(0)
        assert not waiting.done() and ("stop", "a") not in log  # the request in flight keeps its model
        await holding.__aexit__(None, None, None)
        assert await waiting == ("b", "en", "fr")
        assert fleet.states() == {"a": "unloaded", "b": "loaded"}
        with pytest.raises(Refused, match=r"^this pair needs 2 models loaded at once: --max-loaded is 1$"):
            await translated_by(fleet, "de", "fr")
        fleet.stop()

    asyncio.run(main())


def test_two_pivots_that_need_all_the_room_both_finish():
    """Each needs two of four models with room for two: neither holds one while waiting for the other's."""
    log = []
    slots = [slot("de-en", "de", "en", log), slot("en-fr", "en", "fr", log), slot("cs-en", "cs", "en", log),
             slot("en-uk", "en", "uk", log)]  # fmt: skip
    fleet = fleet_of(*slots, max_loaded=2)

    async def main():
        fleet.start()
        answers = await asyncio.gather(*[translated_by(fleet, s, t) for s, t in [("de", "fr"), ("cs", "uk")] * 5])
        fleet.stop()
        return answers

    answers = asyncio.run(main())
    assert answers == [(("de-en", "en-fr"), "de", "fr"), (("cs-en", "en-uk"), "cs", "uk")] * 5


def test_a_model_that_fails_to_load_is_named_and_the_others_serve():
    log = []
    fleet = fleet_of(slot("de-en", "de", "en", log), slot("en-fr", "en", "fr", log, fails="bad weights"))

    async def main():
        fleet.start()
        await until(lambda: fleet.unready() is None)
        assert fleet.states() == {"de-en": "loaded", "en-fr": "failed"}
        assert await translated_by(fleet, "de", "en") == ("de-en", "de", "en")
        with pytest.raises(Refused, match=r"^model en-fr could not be loaded: RuntimeError: bad weights$") as failed:
            await translated_by(fleet, "en", "fr")
        assert failed.value.reason == Reason.UNAVAILABLE and answered(failed.value).status == 503
        fleet.stop()

    asyncio.run(main())
    assert described(fleet.slots[1]) == {"id": "en-fr", "state": "failed", "error": "RuntimeError: bad weights"}


def test_a_model_still_loading_past_the_timeout_is_a_503_to_retry():
    log, gate = [], threading.Event()
    fleet = fleet_of(slot("de-en", "de", "en", log), slot("en-fr", "en", "fr", log, gate=gate), load_timeout_s=0.05)

    async def main():
        fleet.start()
        with pytest.raises(Refused, match=r"^model en-fr is not loaded yet \(--load-timeout\); retry$") as late:
            await translated_by(fleet, "en", "fr")
        assert (late.value.reason, late.value.retry_after) == (Reason.UNAVAILABLE, 5)
        assert (answered(late.value).status, answered(late.value).headers) == (503, {"Retry-After": "5"})
        assert fleet.unready() == "loading en-fr"
        gate.set()
        await until(lambda: fleet.unready() is None)
        fleet.load_timeout_s = 60
        assert await translated_by(fleet, "en", "fr") == ("en-fr", "en", "fr")
        fleet.stop()

    asyncio.run(main())


def test_a_server_whose_every_model_is_unreadable_does_not_start():
    from mtkit.core.errors import MtkitError

    bad = [Slot("x", None, None, lambda metrics: None, error="no such file"), Slot("y", None, None, lambda m: None,
                                                                                   error="not a model")]  # fmt: skip
    with pytest.raises(MtkitError, match=r"^no model could be read: x: no such file; y: not a model$"):
        fleet_of(*bad)


def test_a_model_whose_file_changes_is_swapped_and_the_old_one_stops_after_its_last_request(tmp_path, monkeypatch):
    """The file says which version it is; each build reads it (as loading a model file would)."""
    import mtkit.serving.fleet as fleet_module

    monkeypatch.setattr(fleet_module, "FILE_CHECK_S", 0.0)  # the file looked at on every request
    log, path = [], tmp_path / "model.pt"

    def write(version: str) -> None:  # a new file renamed over the old one, as mtkit adapt -o writes it
        (tmp_path / "new").write_text(version)
        (tmp_path / "new").replace(path)

    def build(metrics):
        version = path.read_text()
        if version == "bad":
            raise RuntimeError("damaged")
        return StandIn(f"a:{version}", log, "de", "fr" if version == "french" else "en")

    write("v1")
    fleet = fleet_of(Slot("a", None, Languages({}, "de", "en", None), build, path=str(path)))

    async def main():
        fleet.start()
        await until(lambda: fleet.unready() is None)
        holding = fleet.route("de", "en")
        assert (await holding.__aenter__())[0].name == "a:v1"  # a request in flight on v1
        write("v2")
        assert await translated_by(fleet, "de", "en") == ("a:v1", "de", "en")  # starts the swap
        await until(lambda: fleet.slots[0].service.name == "a:v2")
        assert await translated_by(fleet, "de", "en") == ("a:v2", "de", "en")
        assert ("stop", "a:v1") not in log  # the request on v1 is not answered yet
        await holding.__aexit__(None, None, None)
        await until(lambda: ("stop", "a:v1") in log)
        for version in ("bad", "french"):  # a damaged file, a model of other languages
            write(version)
            await translated_by(fleet, "de", "en")
            await until(lambda: not fleet.slots[0].swapping)
            assert await translated_by(fleet, "de", "en") == ("a:v2", "de", "en")  # the version before serves on
        assert fleet.counted.swaps.labels("a")._value.get() == 1
        fleet.stop()

    asyncio.run(main())
    assert log == [("start", "a:v1"), ("start", "a:v2"), ("stop", "a:v1"), ("start", "a:french"), ("stop", "a:french"),
                   ("stop", "a:v2")]  # fmt: skip


def test_a_busy_model_gives_way_after_its_turn_to_a_request_that_came_first():
    """One model's room (--max-loaded 1): a request for b waits for a, in use; a request for a that came
    after it waits too, instead of keeping a busy, and is served after b's (in the order they came)."""
    log, done = [], []
    fleet = fleet_of(slot("a", "de", "en", log), slot("b", "en", "fr", log), max_loaded=1, turn_s=0.0)

    async def main():
        fleet.start()
        await until(lambda: fleet.unready() is None)
        holding = fleet.route("de", "en")
        await holding.__aenter__()
        for_b = asyncio.ensure_future(translated_by(fleet, "en", "fr"))
        await until(lambda: fleet.turns.waiting() == {"b": 1})
        later_a = asyncio.ensure_future(translated_by(fleet, "de", "en"))
        for task in (for_b, later_a):
            task.add_done_callback(lambda t: done.append(t.result()[0]))
        await until(lambda: fleet.turns.waiting() == {"b": 1, "a": 1})  # the later one waits its turn
        assert not later_a.done()
        await holding.__aexit__(None, None, None)
        await asyncio.gather(for_b, later_a)
        fleet.stop()

    asyncio.run(main())
    assert done == ["b", "a"]
    assert log == [("start", "a"), ("stop", "a"), ("start", "b"), ("stop", "b"), ("start", "a"), ("stop", "a")]


def test_a_client_that_keeps_swapping_models_is_refused_past_its_budget_of_loads():
    log = []
    fleet = fleet_of(slot("a", "de", "en", log), slot("b", "en", "fr", log), max_loaded=1, turn_s=0.0)
    fleet.load_budget = LoadBudget(per_minute=3)
    pairs = [("de", "en"), ("en", "fr")]

    async def main():
        fleet.start()  # a loads at start: nobody's load
        await until(lambda: fleet.unready() is None)
        for k in range(3):  # b, a, b: three loads
            await translated_by(fleet, *pairs[(k + 1) % 2], owner="address 1")
        with pytest.raises(Refused) as refused:  # a fourth
            await translated_by(fleet, *pairs[0], owner="address 1")
        assert refused.value.reason is Reason.UNAVAILABLE and 1 <= refused.value.retry_after <= 60
        assert "3 loads a minute at most" in refused.value.message
        assert await translated_by(fleet, *pairs[1], owner="address 1") == ("b", "en", "fr")  # loaded: served
        assert await translated_by(fleet, *pairs[0], owner="address 2") == ("a", "de", "en")  # another client's
        fleet.stop()

    asyncio.run(main())
    assert [event for event in log if event[0] == "start"] == [("start", m) for m in "ababa"]


def test_a_budget_of_loads_counts_each_client_s_last_minute():
    now = [1000.0]
    budget = LoadBudget(per_minute=2, clock=lambda: now[0])
    budget.charge("x", 1)
    now[0] += 10
    budget.charge("x", 1)
    with pytest.raises(Refused) as refused:
        budget.charge("x", 1)
    assert refused.value.retry_after == 50  # the first load leaves the window 60 s after it began
    with pytest.raises(Refused):
        budget.charge("y", 3)  # more than a minute's at once: refused, counting nothing
    budget.charge("y", 2)
    budget.charge(None, 5)  # nobody's (a server's own loads): not counted
    now[0] += 50
    budget.charge("x", 1)  # the first has left the window
    with pytest.raises(Refused):
        budget.charge("x", 1)


def test_a_model_is_not_unloaded_within_its_turn():
    log = []
    fleet = fleet_of(slot("a", "de", "en", log), slot("b", "en", "fr", log), max_loaded=1, turn_s=3600.0)

    async def main():
        fleet.start()
        await until(lambda: fleet.unready() is None)
        assert await translated_by(fleet, "de", "en") == ("a", "de", "en")  # a is idle again, in its turn
        for_b = asyncio.ensure_future(translated_by(fleet, "en", "fr"))
        await until(lambda: fleet.turns.waiting() == {"b": 1})
        for _ in range(100):
            await asyncio.sleep(0)
        assert not for_b.done() and fleet.states() == {"a": "loaded", "b": "unloaded"}
        assert 3590 < fleet.turns.wake_in() <= 3600  # b's request wakes when a's turn ends
        fleet.turns.turn_s = 0.0  # a's turn ends
        fleet._notify()
        assert await for_b == ("b", "en", "fr")
        fleet.stop()

    asyncio.run(main())
    assert log == [("start", "a"), ("stop", "a"), ("start", "b"), ("stop", "b")]
