"""What the engine reports about itself: Prometheus metrics of its requests, batches, queue and models
(the API's middleware, mtkit.api.observed, adds each request's latency, status and log line). Needs
prometheus-client (pip install 'mtkit[serve]')."""

import threading
import time
from collections import deque
from collections.abc import Callable

from mtkit.serving.dynamic_batching import BatchStats

THROUGHPUT_WINDOW_S = 10.0


class Metrics:
    """The service's Prometheus metrics, in a registry of its own."""

    def __init__(
        self, depth: Callable[[], int], engines: Callable[[], int] = lambda: 1, ready: Callable[[], int] = lambda: 1
    ):
        """depth(): sentences waiting; engines(): engine replicas running; ready(): those warmed up."""
        import prometheus_client as prom

        self.registry = prom.CollectorRegistry()
        self.latency = prom.Histogram(
            "mtkit_request_seconds", "Request latency, by endpoint.", ["path"], registry=self.registry
        )
        self.requests = prom.Counter(
            "mtkit_requests", "Requests answered, by endpoint and status code.", ["path", "status"],
            registry=self.registry,
        )  # fmt: skip
        self.key_requests = prom.Counter(
            "mtkit_key_requests", "Requests admitted with an API key, by the key's name and status code.",
            ["key", "status"], registry=self.registry,
        )  # fmt: skip
        self.queue = prom.Gauge("mtkit_queue_sentences", "Sentences waiting for a batch.", registry=self.registry)
        self.in_flight = prom.Gauge(
            "mtkit_requests_in_flight", "Translation requests received and not yet answered and logged.",
            registry=self.registry,
        )  # fmt: skip
        self.queue.set_function(depth)
        self.engines = prom.Gauge(
            "mtkit_engine_replicas", "Engine processes running (serve --replicas; 1 with the engine in the server).",
            registry=self.registry,
        )  # fmt: skip
        self.engines.set_function(engines)
        self.engines_ready = prom.Gauge(
            "mtkit_engine_replicas_ready", "Engines running whose warm-up translation came back.",
            registry=self.registry,
        )  # fmt: skip
        self.engines_ready.set_function(ready)
        buckets = [2**i for i in range(15)]
        self.batch_sentences = prom.Histogram(
            "mtkit_batch_sentences",
            "Sentences per batch (continuous batching: per decoding step).",
            buckets=buckets,
            registry=self.registry,
        )
        self.batch_tokens = prom.Histogram(
            "mtkit_batch_tokens",
            "Source subwords per batch (continuous batching: per decoding step).",
            buckets=buckets,
            registry=self.registry,
        )
        self.batch_seconds = prom.Histogram(
            "mtkit_batch_seconds", "Time to translate a batch (continuous batching: a decoding step).",
            buckets=[0.01 * 2**i for i in range(12)], registry=self.registry,
        )  # fmt: skip
        self.sentences = prom.Counter("mtkit_sentences", "Sentences translated.", registry=self.registry)
        self.throughput = prom.Gauge(
            "mtkit_sentences_per_second", f"Sentences translated per second over the last {THROUGHPUT_WINDOW_S:g} s.",
            registry=self.registry,
        )  # fmt: skip
        # The batches of the window: appended on the engine's thread, read on the server's (a lock: a
        # scrape summing them while a batch was appended once failed with "deque mutated")
        self._recent: deque[tuple[float, int]] = deque()
        self._recent_lock = threading.Lock()
        self.throughput.set_function(self._sentences_per_second)

    def observe_batch(self, stats: BatchStats) -> None:
        self.batch_sentences.observe(stats.sentences)
        self.batch_tokens.observe(stats.tokens)
        self.batch_seconds.observe(stats.seconds)
        self.sentences.inc(stats.finished)
        with self._recent_lock:
            self._recent.append((time.monotonic(), stats.finished))
            self._forget_old()  # (bounded without a scrape too)

    def _sentences_per_second(self) -> float:
        with self._recent_lock:
            self._forget_old()
            return sum(n for _, n in self._recent) / THROUGHPUT_WINDOW_S

    def _forget_old(self) -> None:
        horizon = time.monotonic() - THROUGHPUT_WINDOW_S
        while self._recent and self._recent[0][0] < horizon:
            self._recent.popleft()


class ModelMetrics:
    """Each served model's state, loads, swaps and unloads (mtkit.serving.fleet), in the server's registry."""

    def __init__(self, registry, slots, states: tuple[str, ...]):
        import prometheus_client as prom

        state = prom.Gauge("mtkit_model_state", "Each model's state (1: the one it is in).", ["model", "state"],
                           registry=registry)  # fmt: skip
        for slot in slots:
            for name in states:
                state.labels(slot.name, name).set_function(lambda slot=slot, name=name: float(slot.state == name))
        self.loads = prom.Counter("mtkit_model_loads", "Models loaded, by model.", ["model"], registry=registry)
        self.unloads = prom.Counter("mtkit_model_unloads", "Models unloaded, by model.", ["model"], registry=registry)
        self.swaps = prom.Counter(
            "mtkit_model_swaps", "Models replaced by their file's new version while serving, by model.", ["model"],
            registry=registry,
        )  # fmt: skip
        self.load_seconds = prom.Histogram(
            "mtkit_model_load_seconds", "Time to load a model and translate its warm-up sentence.",
            buckets=[0.25 * 2**i for i in range(12)], registry=registry,
        )  # fmt: skip
