"""Reading text files line by line (JSON lines too), and writing files so that nothing is left half-written."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import itertools
import json
import math
import os
import random
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from mtkit.core import faults
from mtkit.core.errors import MtkitError


def check_input_file(path: Path) -> None:
    """Refuse a missing input or a directory; pipes such as <(...) and FIFOs are fine."""
    path = Path(path)
    if path.is_dir():
        raise MtkitError(f"{path}: is a directory, not a file")
    if not path.exists():
        raise MtkitError(f"{path}: no such file")


def open_binary(path: Path) -> BinaryIO:
    """Open a plain or gzip-compressed file for reading bytes."""
    path = Path(path)
    check_input_file(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def decode_line(raw: bytes, source: str, lineno: int) -> str:
    """Decode one line of UTF-8, naming the file and line when it is not valid."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise MtkitError(f"{source}:{lineno}: invalid UTF-8 (byte {err.start + 1} of the line)") from None


def iter_lines(path: Path) -> Iterator[str]:
    """Yield the lines of a plain or .gz UTF-8 file without their line ending."""
    with open_binary(path) as handle:
        yield from decode_stream(handle, str(path))


def decode_stream(handle: Iterable[bytes], source: str) -> Iterator[str]:
    """Yield decoded lines of a binary stream; `source` names it in errors."""
    for lineno, raw in enumerate(handle, start=1):
        yield decode_line(raw, source, lineno).rstrip("\r\n")


def sample_lines(lines: Iterable[str], size: int, seed: int = 0) -> list[str]:
    """A uniform random sample of `size` lines (all of them if there are fewer), in their order,
    from one pass over `lines`: reservoir sampling with Li's Algorithm L, which draws random
    numbers only for the lines it keeps, so a corpus of 100M lines costs little more than reading it."""
    rng = random.Random(seed)
    stream = enumerate(lines)
    reservoir = list(itertools.islice(stream, size))
    if len(reservoir) == size and size > 0:
        weight = math.exp(math.log(_open_unit(rng)) / size)
        while True:
            skip = math.floor(math.log(_open_unit(rng)) / math.log1p(-weight))
            chosen = next(itertools.islice(stream, skip, None), None)
            if chosen is None:
                break
            reservoir[rng.randrange(size)] = chosen
            weight *= math.exp(math.log(_open_unit(rng)) / size)
    return [line for _, line in sorted(reservoir, key=lambda pair: pair[0])]


def _open_unit(rng: random.Random) -> float:
    """A uniform draw from the open interval (0, 1)."""
    while (u := rng.random()) == 0.0:
        pass
    return u


def progress_size(path: Path) -> int | None:
    """The byte size of a regular, uncompressed file, for a progress bar that advances by bytes read.

    None for pipes, FIFOs and .gz files: their size is unknown without reading them, and every input
    is read exactly once.
    """
    path = Path(path)
    if path.suffix == ".gz" or not path.is_file():
        return None
    return path.stat().st_size


def line_bytes(line: str) -> int:
    """How many bytes a line (as iter_lines yields it) took in the file, its line ending included."""
    return len(line.encode("utf-8")) + 1


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_output_file(path: Path) -> None:
    """Refuse an output path that cannot become a file, before any long work starts."""
    path = Path(path)
    if path.is_dir():
        raise MtkitError(f"{path}: is a directory (give a file name)")
    parent = next((p for p in path.parents if p.exists()), Path("."))
    if not parent.is_dir():
        raise MtkitError(f"{path}: {parent} is not a directory")


def fsync_path(path: Path) -> None:
    """Flush a file's (or a directory's) data to the disk, so a power loss cannot leave it empty."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; fsync it and rename it to `path` only if the block succeeds."""
    path = Path(path)
    check_output_file(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        faults.reached("tempfile")
        yield tmp
        faults.reached("rename")
        if tmp.exists():
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes files private; give them the usual mode
            fsync_path(tmp)
        os.replace(tmp, path)
        fsync_path(path.parent)  # the rename itself
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def atomic_directory(path: Path, force: bool) -> Iterator[Path]:
    """Yield a temporary directory that replaces `path` only when the block succeeds.

    An existing `path` is refused unless `force`; it is removed only after the new one is complete.
    """
    path = Path(path)
    if path.exists() and not force:
        raise MtkitError(f"{path}: already exists (use --force to replace it)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        faults.reached("tempfile")
        yield tmp
        faults.reached("rename")
        for file in sorted(tmp.rglob("*")):
            fsync_path(file)
        fsync_path(tmp)
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
        fsync_path(path.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records (objects with a step) of a JSON-lines file such as metrics.jsonl; a torn last line
    (a process killed while writing it) is left out."""
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "step" in record:
            records.append(record)
    return records
