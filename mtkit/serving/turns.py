"""Fairness between the models of a server that holds fewer at once than it serves (serve --max-loaded):
whose request a model's room goes to, and how many loads one client may cause.

Turns: a model kept busy by a stream of requests would never be idle, so a request for a model that
needs its room would wait until --load-timeout and fail. Instead a loaded model has a turn (serve
--model-turn, TURN_S after its load) in which it is not unloaded and takes new requests; past it, a
request that arrived after the oldest one waiting for another model's room waits too, the model's
requests in flight finish, it unloads, and the waiting model loads. Requests are served in the order
they came, a model's requests batched within its turn, and each room changes model at most once a
turn however the requests alternate.

LoadBudget: a client (a key, or an address without keys) starts at most `per_minute` loads a minute
(serve --max-loads); past it, a request that would start one is refused (UNAVAILABLE, with the
seconds until the oldest of its loads leaves the window), while its requests for loaded models go on."""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable, Sequence

from mtkit.serving.calls import Reason, Refused
from mtkit.serving.settings import Slot

TURN_S = 5.0  # a loaded model's turn: how long it stays and takes new requests while others wait for its room
LOADS_PER_MINUTE = 12  # model loads one client may start a minute
WINDOW_S = 60.0


class Turns:
    """Room for the models (max_loaded at once) and the requests waiting for them, by the time they
    arrived."""

    def __init__(self, slots: Sequence[Slot], max_loaded: int, turn_s: float = TURN_S, clock=time.monotonic):
        self.slots, self.max_loaded, self.turn_s, self.clock = slots, max_loaded, turn_s, clock
        self._waiting: dict[Slot, list[float]] = {}  # a model's slot: its waiting requests' arrivals

    def arrive(self, slots: Sequence[Slot], arrived: float) -> None:
        for slot in slots:
            self._waiting.setdefault(slot, []).append(arrived)

    def leave(self, slots: Sequence[Slot], arrived: float) -> None:
        for slot in slots:
            waiting = self._waiting.get(slot, [])
            if arrived in waiting:
                waiting.remove(arrived)
            if not waiting:
                self._waiting.pop(slot, None)

    def waiting(self) -> dict[str, int]:
        """The requests waiting, by the model they wait for."""
        return {slot.name: len(times) for slot, times in self._waiting.items()}

    def free(self) -> int:
        """Models that may load without another unloading."""
        return self.max_loaded - sum(slot.state in ("loading", "loaded", "unloading") for slot in self.slots)

    def room_for(self, slots: Sequence[Slot]) -> tuple[bool, list[Slot]]:
        """Whether the slots' loads can start now, and else the idle models (least recently used first)
        whose unloading would make room for them."""
        if any(slot.state == "unloading" for slot in slots):
            return False, []
        needed, free = sum(slot.state == "unloaded" for slot in slots), self.free()
        if needed <= free:
            return True, []
        now = self.clock()
        idle = [s for s in self.slots if s.state == "loaded" and s.in_use == 0 and s not in slots
                and now - s.loaded_at >= self.turn_s]  # fmt: skip
        if free + len(idle) < needed:
            return False, []
        return False, sorted(idle, key=lambda s: s.last_used)[: needed - free]

    def wake_in(self) -> float | None:
        """Seconds until the next loaded model's turn ends (None: none is in its turn)."""
        now = self.clock()
        left = [s.loaded_at + self.turn_s - now for s in self.slots if s.state == "loaded"]
        return min((t for t in left if t > 0), default=None)

    def first_in_line(self, slots: Sequence[Slot], arrived: float) -> bool:
        """Whether no request that arrived before this one waits for room for another model."""
        return not self._older(slots, arrived, 0.0)

    def yields(self, slots: Sequence[Slot], arrived: float) -> bool:
        """Whether a request that arrived at `arrived` for the loaded slots waits instead: no room is
        free, their turn (since the latest load) is over, and a request for another model that needs
        room arrived before it and has waited a turn."""
        loaded_at = max(slot.loaded_at for slot in slots)
        if self.free() > 0 or self.clock() - loaded_at < self.turn_s:
            return False
        return self._older(slots, arrived, self.turn_s)

    def _older(self, slots: Sequence[Slot], arrived: float, waited: float) -> bool:
        now = self.clock()
        return any(
            slot not in slots and slot.state in ("unloaded", "unloading") and min(times) < arrived
            and now - min(times) >= waited
            for slot, times in self._waiting.items()
        )  # fmt: skip


class LoadBudget:
    """The model loads each client started in the last minute."""

    def __init__(self, per_minute: int = LOADS_PER_MINUTE, clock: Callable[[], float] = time.monotonic):
        self.per_minute, self.clock = per_minute, clock
        self._loads: dict[str, collections.deque[float]] = {}

    def check(self, owner: str | None, loads: int) -> None:
        """UNAVAILABLE where `loads` more loads would pass owner's budget (None: nobody's, never; a
        budget of 0: none)."""
        if owner is None or not loads or not self.per_minute:
            return
        now = self.clock()
        for times in self._loads.values():  # (loads are rare: a pass over the clients is cheap beside one)
            while times and now - times[0] >= WINDOW_S:
                times.popleft()
        for name in [name for name, times in self._loads.items() if not times]:
            del self._loads[name]
        started = self._loads.get(owner, ())
        if len(started) + loads > self.per_minute:
            wait = math.ceil(WINDOW_S - (now - started[0])) if started else math.ceil(WINDOW_S)
            raise Refused(
                Reason.UNAVAILABLE,
                f"models are loaded and unloaded for this client too often: {self.per_minute} loads a minute at "
                "most; retry later, or ask for a pair whose model is loaded (/v1/models)",
                retry_after=max(1, wait),
            )

    def charge(self, owner: str | None, loads: int) -> None:
        """Count `loads` loads started for owner, after check()."""
        self.check(owner, loads)
        if owner is not None and loads and self.per_minute:
            self._loads.setdefault(owner, collections.deque()).extend([self.clock()] * loads)
