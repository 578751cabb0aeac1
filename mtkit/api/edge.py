"""What crosses the edge between the HTTP APIs and the engine (mtkit.serving): RequestError, what an API
answers (a status, a message, headers); the engine's refusals as statuses; and each request's Call,
made at its first use and kept with the request, where its log line reads the counts."""

from __future__ import annotations

from collections.abc import Sequence

from mtkit.serving.calls import Call, Reason, Refused

STATUS = {
    Reason.INVALID: 400,
    Reason.TOO_LARGE: 413,
    Reason.UNUSABLE: 422,
    Reason.UNAVAILABLE: 503,
    Reason.CANCELLED: 499,  # nginx's "client closed request": nobody reads it but the log
}


class RequestError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def answered(refused: Refused) -> RequestError:
    """The engine's refusal as the API answers it."""
    headers = {"Retry-After": str(refused.retry_after)} if refused.retry_after else {}
    return RequestError(STATUS[refused.reason], refused.message, headers)


def owner_of(request, key=None) -> str:
    """Whose share of a store, or budget of model loads, a request draws on: its key's (by name; by
    default the key it was admitted with), or without keys its client address's."""
    name = key.name if key is not None else key_name(request)
    if name:
        return f"key {name}"
    client = request.scope.get("client")
    return f"address {client[0] if client else ''}"


def key_name(request) -> str | None:
    """The name of the key the request was admitted with (None: keys are off)."""
    return request.scope.get("state", {}).get("key")


def call_of(request) -> Call:
    """The request's Call (made once it is admitted): its client's going away cancels its work."""
    state = request.scope.setdefault("state", {})
    if "call" not in state:
        state["call"] = Call(gone=lambda: _disconnect(request), owner=owner_of(request))
    return state["call"]


async def _disconnect(request) -> None:
    """Returns when the client has gone: once the body is read, the server's next message is that."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def described(errors: Sequence[dict]) -> str:
    """Pydantic's validation errors as one line: `field: problem; ...`."""
    parts = []
    for err in errors:
        if err.get("type") == "json_invalid":
            return "the body is not valid JSON"
        location = ".".join(str(part) for part in err.get("loc", ()) if part != "body") or "body"
        parts.append(f"{location}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)
