"""A request as the engine sees it (this stage knows nothing of HTTP): what it asks (Asked: its texts,
languages, format, options, glossary, and its Call: the signal that its client has gone and the counts
the request log and the answer need, filled as it is served); what it gets back (Translated); and
Refused, why the engine will not translate it, which each API answers with its own status
(mtkit.api.edge)."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mtkit.serving.engine import Options


class Reason(enum.Enum):
    INVALID = "invalid"  # a value of the request that cannot be (a language no model has, text that does not parse)
    TOO_LARGE = "too large"  # past one of the server's bounds
    UNUSABLE = "unusable"  # a value this model or server cannot use (an option, a glossary, a format)
    UNAVAILABLE = "unavailable"  # busy, stopping, or a model that is not loaded: worth retrying
    CANCELLED = "cancelled"  # its client has gone


class Refused(Exception):
    """A request the engine does not translate, and why; retry_after: the seconds worth waiting."""

    def __init__(self, reason: Reason, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.reason, self.message, self.retry_after = reason, message, retry_after


async def _never() -> None:
    await asyncio.Event().wait()


@dataclass
class Call:
    """One request's life in the engine. gone(): returns when its client has left (the work is then
    dropped; by default never: a document translated after its upload was answered); sentences, long
    and missed_terms: what serving it took (pieces queued, texts cut for length, each text's terms not
    found in its translation); owner: whose request (a key, an address: clients take turns in a batch)."""

    gone: Callable[[], Awaitable[None]] = _never
    owner: str | None = None
    sentences: int = 0
    long: int = 0
    missed_terms: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Asked:
    """What one request asks of a route (a model's Service, or a Pivot): its texts into target from
    source (None: the route's defaults), in format text, html or xml (kept: more elements whose text
    is not translated), sentence by sentence where split (None: the server's default), with the
    request's glossary (its [source term, target term] pairs) and search options. checked: the texts
    are held to --max-chars (not a pivot's own translations)."""

    call: Call
    texts: Sequence[str]
    options: Options
    source: str | None = None
    target: str | None = None
    format: str = "text"
    split: bool | None = None
    glossary: Any = None
    kept: frozenset[str] = frozenset()
    checked: bool = True


@dataclass
class Translated:
    """What a request gets: each text's answer (a string, or its n-best with scores and alignments),
    each text's confidence where asked, and where each came from (with a memory: "tm 100", "mt", ...)."""

    texts: list[Any]
    confidences: list[float] | None = None
    origins: list[str] | None = None
