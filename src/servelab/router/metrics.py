"""The router's own Prometheus metrics, on a private registry (served at `/metrics`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from servelab.router.hotspot import HotspotWindow

_LATENCY_BUCKETS_S = (1e-4, 2.5e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)
_PREFIX_BUCKETS_CHARS = (0, 64, 256, 1024, 4096, 16384)


class RouterMetrics:
    """Counters and gauges labelled by backend URL and policy."""

    def __init__(
        self, backends: list[str], policy: str, window_s: float, clock: Callable[[], float]
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._backends = backends
        self._policy = policy
        self.hotspot = HotspotWindow(len(backends), window_s)
        self._clock = clock
        self.requests = Counter(
            "servelab_router_requests", "Requests forwarded, by backend and HTTP status.",
            ["backend", "status"], registry=r)
        self.errors = Counter(
            "servelab_router_errors", "Backend failures, by kind (connect, timeout, http_5xx, "
            "http_429, stream_broken).", ["backend", "kind"], registry=r)
        self.client_errors = Counter(
            "servelab_router_rejected", "Requests refused by the router itself, by reason.",
            ["reason"], registry=r)
        self.retries = Counter("servelab_router_retries", "Retries sent.", registry=r)
        self.retry_budget_exhausted = Counter(
            "servelab_router_retry_budget_exhausted", "Retries refused by the budget.", registry=r)
        self.in_flight = Gauge(
            "servelab_router_in_flight", "Requests in flight, by backend.", ["backend"], registry=r)
        self.healthy = Gauge(
            "servelab_router_backend_healthy", "1 if the backend is in rotation.", ["backend"],
            registry=r)
        self.ejections = Counter(
            "servelab_router_ejections", "Backends taken out of rotation, by cause.",
            ["backend", "cause"], registry=r)
        self.decisions = Counter(
            "servelab_router_decisions", "Routing decisions, by policy and backend.",
            ["policy", "backend"], registry=r)
        self.prefix_match = Histogram(
            "servelab_router_prefix_match_chars", "Prompt characters the chosen backend was "
            "believed to hold (cache_aware).", buckets=_PREFIX_BUCKETS_CHARS, registry=r)
        self.added_latency = Histogram(
            "servelab_router_added_latency_seconds", "Time to first byte at the client minus "
            "the backend's own time to first byte.", buckets=_LATENCY_BUCKETS_S, registry=r)
        hot = Gauge(
            "servelab_router_hotspot_factor", "Backends x the largest backend's share of "
            f"decisions over the last {window_s:g} s (1 = even).", registry=r)
        hot.set_function(lambda: self.hotspot.factor(self._clock()))
        self._decision_children = [self.decisions.labels(policy, b) for b in backends]
        self._answered: dict[tuple[int, int], Any] = {}  # (backend index, status) -> child
        for b in backends:
            self.healthy.labels(b).set(1)

    def decided(self, index: int, prefix_match_chars: int | None, now_s: float) -> None:
        self._decision_children[index].inc()
        self.hotspot.add(index, now_s)
        if prefix_match_chars is not None:
            self.prefix_match.observe(prefix_match_chars)

    def answered(self, index: int, status: int) -> None:
        """A backend answered with HTTP `status` (children cached: labels() takes a lock)."""
        child = self._answered.get((index, status))
        if child is None:
            child = self._answered[index, status] = self.requests.labels(
                self._backends[index], str(status))
        child.inc()

    def watch_in_flight(self, in_flight: Callable[[int], int]) -> None:
        """Read the in-flight gauges at scrape time: `in_flight(index)` is backend index's
        live count (no gauge update per request)."""
        for i, b in enumerate(self._backends):
            self.in_flight.labels(b).set_function(lambda i=i: in_flight(i))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
