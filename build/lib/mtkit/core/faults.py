"""Test-only fault injection: kill -9 at an exact moment, whatever the machine's speed.

With MTKIT_KILL_AT="POINT:N" in its environment, a process kills itself with SIGKILL the N-th
time it reaches POINT (N = 1 when left out). The points:
  tempfile  an atomic write has made its temporary file (or folder), nothing in it yet
  rename    an atomic write has written and closed its temporary file, not yet renamed it
  update    a training update was applied, before it is logged or saved
With MTKIT_KILL_ONCE=FILE as well, only the first process to get there dies: it creates FILE
first, and a process that finds FILE lives on (a restarted process); with MTKIT_KILL_RANK=R, only
torchrun's rank R; with MTKIT_FAULT=hang, the process stops there without dying (it waits forever).
Without MTKIT_KILL_AT, reached() returns at once.
"""

from __future__ import annotations

import os
import signal
import threading

POINTS = ("tempfile", "rename", "update")
_arrivals: dict[str, int] = {}


def reached(point: str) -> None:
    spec = os.environ.get("MTKIT_KILL_AT")
    if not spec:
        return
    name, _, count = spec.partition(":")
    if name != point or os.environ.get("MTKIT_KILL_RANK", os.environ.get("RANK")) != os.environ.get("RANK"):
        return
    _arrivals[point] = _arrivals.get(point, 0) + 1
    if _arrivals[point] == int(count or 1) and _first_to_die(os.environ.get("MTKIT_KILL_ONCE")):
        if os.environ.get("MTKIT_FAULT") == "hang":
            threading.Event().wait()  # never set: alive, and of no more use to the others
        os.kill(os.getpid(), signal.SIGKILL)


def _first_to_die(marker: str | None) -> bool:
    if not marker:
        return True
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True
