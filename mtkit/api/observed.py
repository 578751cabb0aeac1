"""Each request as the server saw it: its latency and status in the metrics, and one JSON log line on
stderr (an ASGI middleware)."""

import json
import sys
import time
from datetime import datetime, timezone

from mtkit.serving.metrics import Metrics


class ObservedApp:
    """ASGI middleware: per request, the latency and status metrics and one JSON log line on stderr.

    (Plain ASGI rather than Starlette's BaseHTTPMiddleware, which hides a client's disconnect
    from the endpoint.)"""

    def __init__(self, app, metrics: Metrics, routes: set[str], translating: set[str]):
        """routes: the paths metrics name (others count as "other"); translating: those whose
        requests count as in flight, from their arrival until their metrics and log line are written."""
        self.app, self.metrics, self.routes, self.translating = app, metrics, routes, translating

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 500  # unless the app answers
        scope.setdefault("state", {})
        in_flight = scope["path"] in self.translating
        if in_flight:
            self.metrics.in_flight.inc()

        async def observed_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            seconds = time.perf_counter() - start
            path = scope["path"] if scope["path"] in self.routes else "other"
            self.metrics.latency.labels(path).observe(seconds)
            self.metrics.requests.labels(path, str(status)).inc()
            state, client = scope["state"], scope.get("client")
            call = state.get("call")  # the engine's counts (mtkit.api.edge.call_of)
            record = {
                "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                "client": client[0] if client else None,
                "method": scope["method"],
                "path": scope["path"],
                "status": status,
                "ms": round(1000 * seconds, 1),
                "sentences": call.sentences if call else 0,
            }
            if state.get("key"):
                record["key"] = state["key"]  # the key's name from the key file, never the key
                self.metrics.key_requests.labels(state["key"], str(status)).inc()
            if call and call.long:
                record["long"] = call.long  # texts longer than --max-source-len: translated in pieces
            sys.stderr.write(json.dumps(record) + "\n")
            sys.stderr.flush()
            if in_flight:
                self.metrics.in_flight.dec()
