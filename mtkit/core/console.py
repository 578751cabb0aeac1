"""Where people-facing output goes: a rich console on stderr, and progress that suits it.

On a terminal, long steps show a rich progress bar; when stderr is piped or redirected,
they print a plain line now and then instead, so logs stay line-oriented.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

console = Console(stderr=True, highlight=False)


def info(message: str) -> None:
    console.print(message, soft_wrap=True)


def warn(message: str) -> None:
    console.print(f"[yellow]warning:[/yellow] {escape(message)}", soft_wrap=True)


def clock(seconds: float) -> str:
    """Whole seconds as M:SS, or H:MM:SS from an hour on."""
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class LineProgress:
    """The piped twin of a rich progress bar: one line every `every_s` seconds at most."""

    def __init__(self, description: str, total: float | None, every_s: float = 30.0, unit: str = ""):
        self.description = description
        self.total = total
        self.unit = unit
        self.every_s = every_s
        self.completed = 0.0
        self.fields = ""
        self._last = time.monotonic()

    def advance(self, amount: float = 1.0, fields: str = "") -> None:
        self.set(self.completed + amount, fields)

    def set(self, completed: float, fields: str = "") -> None:
        self.completed = completed
        self.fields = fields or self.fields
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            if self.unit == "bytes":
                done = f"{100 * self.completed / self.total:.0f}%" if self.total else f"{self.completed:,.0f} bytes"
            elif self.unit == "share":
                done = ""  # the fields say what is done
            else:
                done = f"{self.completed:g}" + (f"/{self.total:g}" if self.total else "")
            console.print(f"{self.description}: " + " ".join(part for part in (done, self.fields) if part))


class BarProgress:
    def __init__(self, progress: Progress, task_id: int):
        self._progress = progress
        self._task = task_id

    def advance(self, amount: float = 1.0, fields: str = "") -> None:
        self._progress.update(self._task, advance=amount, fields=fields)

    def set(self, completed: float, fields: str = "") -> None:
        self._progress.update(self._task, completed=completed, fields=fields)


@contextmanager
def progress(description: str, total: float | None = None, unit: str = "") -> Iterator[LineProgress | BarProgress]:
    """A progress reporter with `advance(amount, fields)` and `set(completed, fields)`: a bar on a
    terminal, lines otherwise.

    unit "bytes" shows amounts as file sizes (for inputs read once, advancing by bytes read); unit
    "share": a share of a total of 1, whose fields say what it is (training's budget).
    """
    if not console.is_terminal:
        yield LineProgress(description, total, unit=unit)
        return
    counter = {"bytes": DownloadColumn(), "share": TextColumn("")}.get(unit, MofNCompleteColumn())
    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        counter if total else TextColumn("{task.completed:,.0f}"),
        TaskProgressColumn() if total else TextColumn(""),
        TimeElapsedColumn(),
        TimeRemainingColumn() if total else TextColumn(""),
        TextColumn("{task.fields[fields]}"),
    ]
    with Progress(*columns, console=console, transient=False) as bar:
        task_id = bar.add_task(description, total=total, fields="")
        yield BarProgress(bar, task_id)
