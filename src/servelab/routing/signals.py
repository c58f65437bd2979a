"""Policies driven by measured signals: latency (EWMA of TTFT and ITL, learned from
finished requests) and kv_aware (replica telemetry scraped from `/metrics`)."""

from __future__ import annotations

from collections.abc import Sequence

from servelab.errors import ServelabError
from servelab.routing.records import (
    ReplicaView,
    RouteDecision,
    RouteRequest,
    argmin_rotating,
    healthy_replicas,
    NoFeedback,
    ReadsNoPrompt,
)


class Ewma:
    """Exponentially weighted moving average; `value` is None until the first sample."""

    __slots__ = ("alpha", "value")

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha
        self.value: float | None = None

    def add(self, x: float) -> None:
        self.value = x if self.value is None else self.value + self.alpha * (x - self.value)


class LatencyAware(ReadsNoPrompt):
    """The replica with the lowest expected latency, (TTFT + itl_tokens x ITL) x (1 + in
    flight), from per-replica EWMAs (weight `alpha`) of successful requests. A replica
    without samples is scored with the best known EWMA, so new replicas get tried; with no
    samples anywhere this is least_requests."""

    name = "latency"

    def __init__(self, *, alpha: float = 0.2, itl_tokens: int = 32) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ServelabError(f"latency: alpha must be in (0, 1], got {alpha}")
        if itl_tokens < 0:
            raise ServelabError(f"latency: itl_tokens must be >= 0, got {itl_tokens}")
        self._alpha = alpha
        self._itl_tokens = itl_tokens
        self._ttft: dict[int, Ewma] = {}
        self._itl: dict[int, Ewma] = {}
        self._turn = 0

    def expected_ms(self, index: int) -> float | None:
        """The EWMA latency of one request on `index` (ms), None without samples."""
        ttft = self._ttft.get(index)
        if ttft is None or ttft.value is None:
            return None
        itl = self._itl.get(index)
        itl_ms = itl.value if itl is not None and itl.value is not None else 0.0
        return ttft.value + self._itl_tokens * itl_ms

    def choose(
        self, req: RouteRequest, replicas: Sequence[ReplicaView], now_s: float
    ) -> RouteDecision:
        healthy = healthy_replicas(replicas)
        known = [e for r in healthy if (e := self.expected_ms(r.index)) is not None]
        default = min(known) if known else 1.0

        def score(r: ReplicaView) -> float:
            e = self.expected_ms(r.index)
            return (default if e is None else e) * (1 + r.in_flight)

        self._turn += 1
        pick = argmin_rotating(healthy, score, self._turn)
        e = self.expected_ms(pick.index)
        seen = "no samples yet" if e is None else f"EWMA {e:.1f} ms per request"
        return RouteDecision(pick.index, f"latency: {seen}, {pick.in_flight} in flight")

    def on_finished(
        self, index: int, req: RouteRequest, ttft_ms: float | None, itl_ms: float | None,
        ok: bool, now_s: float,
    ) -> None:
        if not ok:
            return
        if ttft_ms is not None:
            self._ttft.setdefault(index, Ewma(self._alpha)).add(ttft_ms)
        if itl_ms is not None:
            self._itl.setdefault(index, Ewma(self._alpha)).add(itl_ms)


class KvAware(NoFeedback, ReadsNoPrompt):
    """The replica with the lowest load, where load is

        max(in_flight, running + waiting) + kv_weight x kv_usage_frac

    when the replica's telemetry is at most `max_telemetry_age_s` old, else just
    `in_flight`. Taking the max means telemetry can make a replica look busier than the
    router's own count but never idler: a scrape that predates a burst cannot attract it.
    """

    name = "kv_aware"

    def __init__(self, *, max_telemetry_age_s: float = 2.0, kv_weight: float = 8.0) -> None:
        if not max_telemetry_age_s > 0:
            raise ServelabError(
                f"kv_aware: max_telemetry_age_s must be > 0, got {max_telemetry_age_s}"
            )
        if kv_weight < 0:
            raise ServelabError(f"kv_aware: kv_weight must be >= 0, got {kv_weight}")
        self._max_age_s = max_telemetry_age_s
        self._kv_weight = kv_weight
        self._turn = 0

    def fresh(self, r: ReplicaView) -> bool:
        """Whether `r`'s telemetry may be used."""
        return r.telemetry_age_s is not None and r.telemetry_age_s <= self._max_age_s

    def load(self, r: ReplicaView) -> float:
        """The load score described in the class docstring."""
        if not self.fresh(r):
            return float(r.in_flight)
        queued = (r.running or 0) + (r.waiting or 0)
        return max(r.in_flight, queued) + self._kv_weight * (r.kv_usage_frac or 0.0)

    def choose(
        self, req: RouteRequest, replicas: Sequence[ReplicaView], now_s: float
    ) -> RouteDecision:
        healthy = healthy_replicas(replicas)
        self._turn += 1
        pick = argmin_rotating(healthy, self.load, self._turn)
        if self.fresh(pick):
            why = (
                f"running {pick.running}, waiting {pick.waiting}, KV {pick.kv_usage_frac}, "
                f"{pick.in_flight} in flight"
            )
        else:
            why = f"telemetry stale or absent, {pick.in_flight} in flight"
        stale = sum(1 for r in healthy if not self.fresh(r))
        return RouteDecision(
            pick.index, f"kv_aware: load {self.load(pick):.2f} ({why}); {stale} stale"
        )
