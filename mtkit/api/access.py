"""Who may use `mtkit serve`, and how much: API keys from a file, and requests per minute per key or,
without keys, per client address.

The key file holds one key a line, optionally followed by its limit in requests per minute, a
name for the metrics and the request log (default: `key-` and the first 8 hex digits of the key's
SHA-256) and a quota of characters to translate (DeepL's API reports and enforces it: 456 once it is
used up; counted since the server started, or kept with --state-dir: several servers given one
postgresql:// URL count together), with `#` comments and blank lines ignored:

    # key                               limit  name      characters
    3f9c2d7e-aa41-4c0e-9d55-ffc1e2d0b8a1  60     newsroom  500000
    a8d1c0b6-77e2-4f39-a1c4-0bd2e9f7c351

It is read again when it changes (checked at each request) or on SIGHUP; a file that no longer
reads keeps the keys it had and says why on stderr. Keys are looked up by their SHA-256 and
compared in constant time, and never logged. A limit is a sliding window of 60 seconds: a request
over it is refused with 429 and Retry-After, the seconds until the window has room again.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mtkit.api.edge import RequestError
from mtkit.core.database import Database
from mtkit.core.errors import MtkitError

WINDOW_S = 60.0
NO_LIMIT = 2**62  # the bound of a key without a quota: no count reaches it (and it fits a BIGINT)


@dataclass(frozen=True)
class ApiKey:
    name: str
    digest: bytes  # the key's SHA-256: the key itself is not kept
    per_minute: int  # 0: no limit
    characters: int = 0  # characters it may have translated (DeepL's character_limit); 0: no limit


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def parse_key_file(text: str, source: str) -> dict[bytes, ApiKey]:
    """The keys of a key file, by digest; a line that does not read is a one-line error naming it."""
    keys: dict[bytes, ApiKey] = {}
    names: set[str] = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        numbers = [fields[i] for i in (1, 3) if i < len(fields)]
        if len(fields) > 4 or not all(number.isdigit() for number in numbers):
            raise MtkitError(f"{source}:{lineno}: expected KEY [REQUESTS_PER_MINUTE [NAME [CHARACTERS]]]")
        digest = _digest(fields[0])
        name = fields[2] if len(fields) >= 3 else f"key-{digest.hex()[:8]}"
        if digest in keys or name in names:
            raise MtkitError(f"{source}:{lineno}: the {'key' if digest in keys else 'name ' + name} is given twice")
        keys[digest] = ApiKey(
            name, digest, int(numbers[0]) if numbers else 0, int(numbers[1]) if len(numbers) > 1 else 0
        )
        names.add(name)
    if not keys:
        raise MtkitError(f"{source}: no keys (one a line: KEY [REQUESTS_PER_MINUTE [NAME [CHARACTERS]]])")
    return keys


class KeyFile:
    """The keys of a file, read again when its size, time or inode changes, or when asked (SIGHUP)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp, self.keys = self._read()  # a bad file at start is an error, not a warning

    def _read(self) -> tuple[tuple, dict[bytes, ApiKey]]:
        try:
            stat = self.path.stat()
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise MtkitError(
                f"{self.path}: cannot read the key file ({getattr(err, 'strerror', None) or err})"
            ) from None
        return (stat.st_size, stat.st_mtime_ns, stat.st_ino), parse_key_file(text, str(self.path))

    def current(self, force: bool = False) -> dict[bytes, ApiKey]:
        with self._lock:
            try:
                stat = os.stat(self.path)
                stamp = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
            except OSError:
                stamp = None
            if force or stamp != self._stamp:
                self._stamp = stamp  # a broken file is reported once, until it changes again
                try:
                    self._stamp, self.keys = self._read()
                    print(f"api keys: read {len(self.keys)} from {self.path}", file=sys.stderr, flush=True)
                except MtkitError as err:
                    print(f"api keys: kept the {len(self.keys)} read before: {err}", file=sys.stderr, flush=True)
        return self.keys


class SlidingWindow:
    """At most `limit` events per WINDOW_S seconds per name, on a monotonic clock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._events: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def admit(self, name: str, limit: int) -> float:
        """0 when the event fits (and is counted), else the seconds until it would."""
        now = self.clock()
        with self._lock:
            events = self._events.setdefault(name, deque())
            while events and events[0] <= now - WINDOW_S:
                events.popleft()
            if len(events) >= limit:
                return events[len(events) - limit] + WINDOW_S - now
            events.append(now)
            if len(self._events) > 4096:  # forget the names whose windows are empty
                self._events = {n: e for n, e in self._events.items() if e and e[-1] > now - WINDOW_S}
            return 0.0


class Usage:
    """Characters translated by each key (by name; "" without keys), in the server's state database."""

    def __init__(self, db: Database | None = None):
        self.db = db or Database(":memory:", "--state-dir", "mtkit's server state")
        self.db.script("CREATE TABLE IF NOT EXISTS usage (name TEXT PRIMARY KEY, used BIGINT NOT NULL)")

    def of(self, name: str | None) -> int:
        return self.db.value("SELECT used FROM usage WHERE name = ?", (name or "",)) or 0

    def fits(self, name: str | None, characters: int, limit: int = 0) -> bool:
        """Whether the characters would fit within limit (0: no limit), counting nothing."""
        return not limit or self.of(name) + characters <= limit

    def add(self, name: str | None, characters: int, limit: int = 0) -> bool:
        """Count the characters, in one statement (servers sharing the database cannot both pass the
        limit); False, counting nothing, where they would take the total past limit (0: no limit)."""
        if limit and characters > limit:
            return False
        row = self.db.one(
            "INSERT INTO usage (name, used) VALUES (?, ?) ON CONFLICT (name) DO UPDATE"
            " SET used = usage.used + excluded.used WHERE usage.used + excluded.used <= ? RETURNING used",
            (name or "", characters, limit or NO_LIMIT),
        )
        return row is not None


@dataclass
class AccessRules:
    keys: KeyFile | None = None
    per_address: int = 0  # requests per minute per client address, without keys (0: no limit)
    protect_status: bool = False  # /health, /ready and /metrics need a key too

    def validate(self) -> None:
        if self.per_address < 0:
            raise MtkitError(f"--req-limit {self.per_address}: must be at least 0")
        if self.per_address and self.keys is not None:
            raise MtkitError("--req-limit is for servers without --api-keys: each key has its limit in the key file")
        if self.protect_status and self.keys is None:
            raise MtkitError("--private-status needs --api-keys: without keys there is nothing to ask for")


class Gate:
    """Whether a request may go on: its key (403 without a valid one), then its limit (429)."""

    def __init__(self, rules: AccessRules, clock: Callable[[], float] = time.monotonic):
        self.rules, self.windows = rules, SlidingWindow(clock)
        self._reload = threading.Event()
        self.usage = Usage()  # characters translated, by key name: the server keeps them with its state

    def reload_soon(self) -> None:
        """SIGHUP: read the key file again at the next request."""
        self._reload.set()
        if self.rules.keys is not None:
            print("api keys: SIGHUP, the key file is read again at the next request", file=sys.stderr, flush=True)

    def identify(self, presented: str | None) -> ApiKey | None:
        """The key presented (None where the server has no keys); 403 without a valid one."""
        if self.rules.keys is None:
            return None
        force = self._reload.is_set()
        self._reload.clear()
        digest = _digest(presented or "")
        key = self.rules.keys.current(force).get(digest)
        if presented is None or key is None or not hmac.compare_digest(key.digest, digest):
            raise RequestError(403, "a valid API key is needed: api_key in the body, or Authorization: Bearer KEY")
        return key

    def limit(self, key: ApiKey | None, address: str | None) -> None:
        """429 where the key, or without keys the client address, is over its requests per minute."""
        if key is not None and key.per_minute:
            self._check(key.name, key.per_minute)
        elif key is None and self.rules.keys is None and self.rules.per_address:
            self._check(f"address {address}", self.rules.per_address)

    def charge(
        self, key: ApiKey | None, characters: int, check: bool = True, count: bool = True, status: int = 456
    ) -> None:
        """Count characters against the key's quota (count), after checking that they fit (check);
        `status` where they do not (DeepL's 456 "quota exceeded"; 429 on the other APIs)."""
        name = key and key.name
        limit = key.characters if check and key is not None else 0
        fits = self.usage.add(name, characters, limit) if count else self.usage.fits(name, characters, limit)
        if not fits:
            used = self.usage.of(name)
            raise RequestError(status, f"quota exceeded: {used:,} of {limit:,} characters used")

    @contextlib.contextmanager
    def charged(self, key: ApiKey | None, characters: int, status: int = 429) -> Iterator[None]:
        """The one place every route that translates pays: the characters counted against the key's
        quota before the work (`status` where they do not fit), and given back if the work fails."""
        self.charge(key, characters, status=status)
        try:
            yield
        except BaseException:
            self.charge(key, -characters, check=False)
            raise

    def _check(self, name: str, limit: int) -> None:
        wait = self.windows.admit(name, limit)
        if wait:
            raise RequestError(
                429, f"over the limit of {limit} requests per minute", {"Retry-After": str(max(1, math.ceil(wait)))}
            )


def bearer_key(authorization: str | None) -> str | None:
    """The key of an `Authorization: Bearer KEY` header."""
    scheme, _, key = (authorization or "").partition(" ")
    return (key.strip() or None) if scheme.lower() == "bearer" else None


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes is answered 413 as soon as its
    Content-Length says so, or as its chunks pass the limit, without holding the rest in memory."""

    def __init__(self, app, limit: int, by_path: dict[str, int] | None = None):
        """by_path: other limits for some paths (an uploaded file's)."""
        self.app, self.limit, self.by_path = app, limit, by_path or {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.by_path.get(scope["path"], self.limit)
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > limit:
            return await _too_large(send, limit, scope["path"])
        received, over = 0, False

        async def counted():  # past the limit the app is told the client left, and its answer is dropped
            nonlocal received, over
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                over = True
                return {"type": "http.disconnect"}
            return message

        async def sending(message):
            if not over:
                await send(message)

        try:
            await self.app(scope, counted, sending)
        except Exception:
            if not over:
                raise
        if over:
            await _too_large(send, limit, scope["path"])


async def _too_large(send, limit: int, path: str) -> None:
    field = "message" if path.startswith("/v2/") else "error"  # DeepL's shape on its routes
    body = f'{{"{field}": "the request body is over {limit:,} bytes"}}'.encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]  # fmt: skip
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def max_body_bytes(max_chars: int) -> int:
    """The largest request body read: room for --max-chars characters at 12 bytes each (a JSON
    escape of a character outside the BMP), and 64 KiB for the rest."""
    return 12 * max_chars + (64 << 10)
