"""Sequence-level distillation's first step: a training corpus translated by a teacher, in shards
that survive a killed run.

The source is read once, in shards of `shard_lines` lines. Each shard's translations are written
to OUTPUT.shards/NNNNNN.txt through a temporary file, fsynced and renamed, so a shard file is
whole or absent; a run that is started again with the same settings skips the shards that exist
and translates the rest. When every shard is there, OUTPUT is written the same way and the shards
go. The settings (the teacher's files, the search, the source's size and time) are kept in
OUTPUT.shards/settings.json: resuming with other settings is refused, naming what differs.
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from mtkit.core import console
from mtkit.core.errors import MtkitError
from mtkit.core.textio import atomic_path, iter_lines, line_bytes, progress_size, write_text_atomic

SETTINGS_FILE = "settings.json"


def shard_dir(output: Path) -> Path:
    return output.with_name(output.name + ".shards")


def source_stamp(path: Path) -> dict[str, Any]:
    """What identifies the source between runs without reading it twice: its path, size and time."""
    stat = path.stat()
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _check_settings(shards: Path, settings: dict[str, Any]) -> None:
    path = shards / SETTINGS_FILE
    if not path.is_file():
        shards.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(settings, indent=1) + "\n")
        return
    before = json.loads(path.read_text(encoding="utf-8"))
    changed = [
        f"{key} {settings.get(key)!r} against {before.get(key)!r}"
        for key in settings
        if before.get(key) != settings[key]
    ]
    if changed:
        raise MtkitError(
            f"{shards}: started with other settings ({'; '.join(changed)}); give them again, or remove {shards}"
        )


def _shards(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    while shard := list(itertools.islice(lines, size)):
        yield shard


def distill(
    translate: Callable[[Sequence[str]], list[str]],
    source: Path,
    output: Path,
    settings: dict[str, Any],
    shard_lines: int = 10_000,
) -> tuple[int, int, int]:
    """Translate `source` into `output` shard by shard, resuming where an earlier run stopped;
    returns (lines, shards, shards that an earlier run had done)."""
    if shard_lines < 1:
        raise MtkitError(f"--shard-lines {shard_lines}: must be at least 1")
    shards = shard_dir(output)
    _check_settings(shards, {**settings, "shard_lines": shard_lines, "source": source_stamp(source)})
    for stray in shards.glob(".*.tmp"):  # what a killed run was writing: never a shard
        stray.unlink()
    total, done, lines = progress_size(source), 0, 0
    with console.progress("distilling", total=total, unit="bytes" if total else "") as bar:
        for index, shard in enumerate(_shards(iter_lines(source), shard_lines)):
            path = shards / f"{index:06d}.txt"
            if path.is_file():
                done += 1
            else:
                write_text_atomic(path, "".join(line + "\n" for line in translate(shard)))
            lines += len(shard)
            bar.advance(sum(line_bytes(line) for line in shard) if total else len(shard))
    count = -(-lines // shard_lines)
    with atomic_path(output) as tmp, open(tmp, "wb") as out:
        for index in range(count):
            with open(shards / f"{index:06d}.txt", "rb") as part:
                shutil.copyfileobj(part, out)
    shutil.rmtree(shards)
    return lines, count, done
