"""The models behind one server (`mtkit serve -m A -m B ...`): each request's languages routed to a
model that translates them, or through a pivot language to two (mtkit.serving.pivot.Pivot), and the
models loaded on first use within --max-loaded (the least recently used idle one unloaded first).

A model's languages are read from its file when the server starts; the model itself (its engine
thread or processes, mtkit.serving.service) is loaded in a thread of its own, so that a load never
stalls the requests of models already loaded. A request waits for its models within --load-timeout;
a model in use is never unloaded, but a busy one gives way after its turn to requests that came first
(mtkit.serving.turns: fair turns, and a budget of loads per client). A model that fails to load is
named in /ready, /v1/models and its requests' errors, and the others serve on. A request starts
loading only when room for all its models can be made at once, so two requests never each hold one
model of the two the other needs. A loaded model whose file is written
again (`mtkit adapt -o` the served file) is swapped for the new version: loaded beside the old one, then
put in its place, the old one stopped when the last request it holds is answered."""

import asyncio
import time
from collections.abc import Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mtkit.core.console import info, warn
from mtkit.core.errors import MtkitError
from mtkit.memory.owners import OwnedMemories
from mtkit.model.files import file_stamp
from mtkit.serving.calls import Reason, Refused
from mtkit.serving.metrics import Metrics, ModelMetrics
from mtkit.serving.pivot import Pivot, Reachable, described, detected_language
from mtkit.serving.service import Service
from mtkit.serving.settings import ServeConfig, Slot
from mtkit.serving.turns import LOADS_PER_MINUTE, TURN_S, LoadBudget, Turns

STATES = ("unloaded", "loading", "loaded", "unloading", "failed")
FILE_CHECK_S = 1.0  # how often the served files are looked at for a new version


class Fleet:
    def __init__(
        self,
        slots: list[Slot],
        cfg: ServeConfig,
        pivot: str = "en",
        max_loaded: int = 0,
        load_timeout_s: float = 300.0,
        metrics: Metrics | None = None,
        turn_s: float = TURN_S,
        max_loads: int = LOADS_PER_MINUTE,
    ):
        """max_loaded: models loaded at once at most (0: all); metrics: the server's (default: made here,
        over the loaded models' queues and engines); turn_s: a model's turn when others wait for room,
        max_loads: the loads a client may start a minute (0: any; mtkit.serving.turns)."""
        if not any(slot.error is None for slot in slots):
            raise MtkitError(f"no model could be read: {'; '.join(f'{s.name}: {s.error}' for s in slots)}")
        self.slots, self.cfg, self.pivot = slots, cfg, pivot
        self.memory = OwnedMemories(cfg.tm) if cfg.tm else None  # serve --tm: /suggest's corrections, and found
        self.max_loaded = max_loaded or len(slots)
        self.load_timeout_s, self.several = load_timeout_s, len(slots) > 1
        self.metrics = metrics or Metrics(
            lambda: sum(s.batcher.depth for s in self._services()),
            lambda: sum(s.engines_running() for s in self._services()),
            lambda: sum(s.engines_ready() for s in self._services()),
        )
        self.counted = ModelMetrics(self.metrics.registry, slots, STATES)
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._preloading: list[Slot] = []
        self._stopping = False
        self._reachable: Reachable | None = None
        self._holding: dict[Service, int] = {}  # requests holding each service (an old one stops at 0)
        self._retired: set[Service] = set()
        self._files_checked = 0.0
        self.turns, self.load_budget = Turns(slots, self.max_loaded, turn_s), LoadBudget(max_loads)

    @classmethod
    def single(cls, service: Service, load_timeout_s: float = 300.0, path: Path | None = None, rebuild=None) -> "Fleet":
        """A server of one model, made already (loaded and warmed up when the server starts); with its
        path and rebuild(metrics), swapped for its file's new version when that changes."""
        made = [service]
        slot = Slot(service.info.name, service.info, service.languages,
                    lambda metrics: made.pop() if made else rebuild(metrics), path=str(path) if path else None)  # fmt: skip
        return cls([slot], service.cfg, load_timeout_s=load_timeout_s, metrics=service.metrics)

    def _services(self) -> list[Service]:
        return [slot.service for slot in self.slots if slot.service is not None]

    # Starting and stopping

    def start(self) -> None:
        """Load the first --max-loaded models (every one by default); /ready waits for them."""
        self._preloading = [slot for slot in self.slots if slot.state == "unloaded"][: self.max_loaded]
        for slot in self._preloading:
            self._begin_load(slot)

    def stop(self) -> None:
        self._stopping = True
        for service in [*self._services(), *self._retired]:  # an old version still answering included
            service.batcher.stop()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _spawn(self, work) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _begin_load(self, slot: Slot) -> None:
        slot.state = "loading"
        self._spawn(self._load(slot))

    async def _started(self, slot: Slot) -> Service:
        """The slot's service built from its file, its engines started and warmed up."""
        slot.stamp, service = file_stamp(slot.path), None
        try:
            service = await asyncio.to_thread(slot.build, self.metrics)
            await asyncio.to_thread(service.batcher.start)
            await asyncio.wrap_future(service.warm_up())
            return service
        except BaseException:
            if service is not None:
                await asyncio.to_thread(service.batcher.stop)
            raise

    async def _load(self, slot: Slot) -> None:
        started = time.monotonic()
        try:
            service = await self._started(slot)
        except Exception as err:  # noqa: BLE001 - any failure of one model is that model's, named
            slot.state, slot.error = "failed", slot.failure(err)
            warn(
                f"model {slot.name} could not be loaded: {slot.error}" + ("; the others serve" if self.several else "")
            )
        else:
            slot.service, slot.state, slot.loaded_at = service, "loaded", time.monotonic()
            self.counted.loads.labels(slot.name).inc()
            self.counted.load_seconds.observe(time.monotonic() - started)
            if self._stopping:
                service.batcher.stop()
        self._notify()

    def _begin_unload(self, slot: Slot) -> None:
        slot.state = "unloading"

        async def unload() -> None:
            service, slot.service = slot.service, None
            await asyncio.to_thread(service.batcher.stop)  # its engine thread or processes end
            slot.state = "unloaded"
            self.counted.unloads.labels(slot.name).inc()
            self._notify()

        self._spawn(unload())

    # A model swapped for its file's new version (mtkit adapt -o the served file), no request dropped

    def _check_files(self) -> None:
        """Start swapping each loaded model whose file changed since it was loaded (looked at once a second)."""
        if time.monotonic() < self._files_checked + FILE_CHECK_S:
            return
        self._files_checked = time.monotonic()
        for slot in self.slots:
            if slot.state == "loaded" and slot.path and not slot.swapping and file_stamp(slot.path) != slot.stamp:
                slot.swapping = True
                self._spawn(self._swap(slot))

    async def _swap(self, slot: Slot) -> None:
        """The new version loaded beside the old, then put in its place; the old one stops when the last
        request holding it is answered. A new version that cannot be loaded leaves the old one serving."""
        try:
            service = await self._started(slot)
        except Exception as err:  # noqa: BLE001 - the old version serves on
            warn(f"model {slot.name}: its file changed and could not be loaded ({slot.failure(err)}); "
                 "the version loaded before serves on")  # fmt: skip
        else:
            if slot.languages is not None and service.languages.directions() != slot.languages.directions():
                warn(f"model {slot.name}: its file changed to a model of other languages; the version loaded before "
                     "serves on (restart the server to serve the new one)")  # fmt: skip
                await asyncio.to_thread(service.batcher.stop)
            elif slot.state == "loaded":  # not unloaded meanwhile
                old, slot.service = slot.service, service
                self.counted.swaps.labels(slot.name).inc()
                info(f"model {slot.name}: swapped for its file's new version")
                self._retire(old)
            else:
                await asyncio.to_thread(service.batcher.stop)
        finally:
            slot.swapping = False
            self._notify()

    def _retire(self, service: Service) -> None:
        if self._holding.get(service, 0):
            self._retired.add(service)
        else:
            self._retired.discard(service)
            self._spawn(asyncio.to_thread(service.batcher.stop))

    def _hold(self, services: list[Service], change: int) -> None:
        for service in services:
            self._holding[service] = self._holding.get(service, 0) + change
            if not self._holding[service]:
                del self._holding[service]
                if service in self._retired:
                    self._retire(service)

    # Routing

    @asynccontextmanager
    async def route(self, source: str | None, target: str | None, texts: Sequence[str] = (), owner: str | None = None):
        """What translates a request from source into target (None: the server's default, or with
        several models the language the texts are in): (its service or pivot, source, target), its
        models loaded and held until the request is done; owner: whose budget of loads a load it
        starts is charged to (mtkit.serving.turns)."""
        source, target, slots = self.plan(source, target, texts)
        self._check_files()
        await self._acquire(slots, owner)
        services = [slot.service for slot in slots]
        self._hold(services, 1)
        try:
            yield (services[0] if len(slots) == 1 else Pivot(*services, self.pivot)), source, target
        finally:
            self._hold(services, -1)
            for slot in slots:
                slot.in_use -= 1
                slot.last_used = time.monotonic()
            self._notify()

    def plan(self, source: str | None, target: str | None, texts: Sequence[str]) -> tuple[Any, Any, list[Slot]]:
        """The request's languages and the models that translate it: one, or two through the pivot."""
        if not self.several:
            return source, target, self.slots
        source = source or detected_language(texts, self.languages.sources())
        if target is None:
            reachable = sorted({t for s, t in self.languages.directions() if s == source})
            if len(reachable) != 1:
                raise Refused(Reason.INVALID, f"target: give one of {', '.join(reachable) or 'none (see /languages)'}")
            target = reachable[0]
        if source == target:
            raise Refused(Reason.INVALID, f"source and target are both {source}")
        if direct := self._covering(source, target):
            return source, target, [direct]
        first, second = self._covering(source, self.pivot), self._covering(self.pivot, target)
        if first and second and self.pivot not in (source, target):
            return source, target, [first, second]
        raise Refused(
            Reason.INVALID,
            f"{source}->{target}: no model translates it, directly or through {self.pivot} (see /languages)",
        )

    def _covering(self, source: str, target: str) -> Slot | None:
        """A model that translates source into target: a loaded one first, one that failed last."""
        found = [slot for slot in self.slots if slot.languages is not None and slot.languages.covers(source, target)]
        return min(found, key=lambda slot: (slot.state == "failed", slot.state != "loaded"), default=None)

    async def _acquire(self, slots: list[Slot], owner: str | None = None) -> None:
        """Wait until every one of the slots is loaded (starting their loads when room for all of them can
        be made, in the order requests came), then hold them, unless their turn is over
        (mtkit.serving.turns); UNAVAILABLE if one fails or the wait passes --load-timeout."""
        if len(slots) > self.max_loaded:
            raise Refused(
                Reason.UNAVAILABLE,
                f"this pair needs {len(slots)} models loaded at once: --max-loaded is {self.max_loaded}",
            )
        arrived = time.monotonic()
        deadline, reserved = arrived + self.load_timeout_s, False
        self.turns.arrive(slots, arrived)
        try:
            while True:
                if failed := [slot for slot in slots if slot.state == "failed"]:
                    raise Refused(Reason.UNAVAILABLE, f"model {failed[0].name} could not be loaded: {failed[0].error}")
                if all(slot.state == "loaded" for slot in slots):
                    if reserved or not self.turns.yields(slots, arrived):
                        break
                elif not reserved and self.turns.first_in_line(slots, arrived) and self._room_for(slots, owner):
                    for slot in slots:
                        slot.in_use += 1
                        if slot.state == "unloaded":
                            self._begin_load(slot)
                    reserved = True
                changed, remaining = self._changed, deadline - time.monotonic()
                if remaining <= 0:
                    names = ", ".join(slot.name for slot in slots if slot.state != "loaded")
                    raise Refused(
                        Reason.UNAVAILABLE, f"model {names} is not loaded yet (--load-timeout); retry", retry_after=5
                    )
                try:  # (or a turn's end, which makes room)
                    await asyncio.wait_for(changed.wait(), min(remaining, self.turns.wake_in() or remaining))
                except asyncio.TimeoutError:  # (TimeoutError itself from Python 3.11)
                    pass
        except BaseException:
            if reserved:
                for slot in slots:
                    slot.in_use -= 1
                self._notify()
            raise
        finally:
            self.turns.leave(slots, arrived)
            self._notify()  # a request that waited no longer holds back another's
        for slot in slots:
            slot.in_use += 0 if reserved else 1
            slot.last_used = time.monotonic()

    def _room_for(self, slots: list[Slot], owner: str | None) -> bool:
        """Whether the slots' loads can start now (charged to owner's budget); else idle models unload to
        make room, a model's memory given back before another's is taken (the slots' loads wait for it)."""
        loads = sum(slot.state == "unloaded" for slot in slots)
        self.load_budget.check(owner, loads)  # refused before any other model is unloaded for it
        room, idle = self.turns.room_for(slots)
        for slot in idle:
            self._begin_unload(slot)
        if room:
            self.load_budget.charge(owner, loads)
        return room

    # What the server says of its models

    @property
    def languages(self):
        """Languages' listing: one model's own, or every pair the models reach (Reachable)."""
        if not self.several:
            return self.slots[0].languages
        if self._reachable is None:  # the models' languages are read once, when the server starts
            self._reachable = Reachable(self)
        return self._reachable

    def unready(self) -> str | None:
        """Why /ready is 503 (None: ready)."""
        if not self.several:
            slot = self.slots[0]
            if slot.state == "failed":
                return f"the model could not be loaded: {slot.error}"
            if slot.service is None or not slot.service.ready:
                return "warming up"
        if loading := [slot.name for slot in self._preloading if slot.state == "loading"]:
            return f"loading {', '.join(loading)}"
        for slot in self.slots:
            if slot.service is not None and not slot.service.engines_ready():
                running = slot.service.engines_running()
                why = (
                    f"{running} starting" if running else "every engine replica has stopped (the server's log says why)"
                )
                return f"no engine is ready: {why}" + (f" (model {slot.name})" if self.several else "")
        return None

    def states(self) -> dict[str, str]:
        return {slot.name: slot.state for slot in self.slots}

    def models(self) -> list[dict[str, Any]]:
        """/v1/models: each model with its languages and state, and where loaded its details."""
        return [described(slot) for slot in self.slots]
