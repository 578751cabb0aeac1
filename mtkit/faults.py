"""Test-only fault injection: kill -9 at an exact moment, whatever the machine's speed.

With MTKIT_KILL_AT="POINT:N" in its environment, a process kills itself with SIGKILL the N-th
time it reaches POINT (N = 1 when left out). The points:
  tempfile  an atomic write has made its temporary file (or folder), nothing in it yet
  rename    an atomic write has written and closed its temporary file, not yet renamed it
  update    a training update was applied, before it is logged or saved
Without the variable, reached() returns at once.
"""

from __future__ import annotations

import os
import signal

POINTS = ("tempfile", "rename", "update")
_arrivals: dict[str, int] = {}


def reached(point: str) -> None:
    spec = os.environ.get("MTKIT_KILL_AT")
    if not spec:
        return
    name, _, count = spec.partition(":")
    if name != point:
        return
    _arrivals[point] = _arrivals.get(point, 0) + 1
    if _arrivals[point] == int(count or 1):
        os.kill(os.getpid(), signal.SIGKILL)
