"""The backends' live state: health, in-flight counts, error streaks, telemetry, EWMAs.

The proxy owns one `BackendPool`; it turns the state into the `ReplicaView`s policies
read. Ejection and re-admission are decided here; the checks that feed them run in
`health.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servelab.metrics.scrape import ServerSnapshot
from servelab.routing.records import ReplicaView
from servelab.routing.signals import Ewma


@dataclass(slots=True)
class BackendState:
    """One backend. Times are seconds on the router's monotonic clock."""

    index: int
    url: str
    healthy: bool = True
    in_flight: int = 0
    consecutive_errors: int = 0
    consecutive_ok_checks: int = 0
    health_checks: int = 0  # active checks done: how far the checker has got, for observers
    telemetry: ServerSnapshot | None = None
    telemetry_at_s: float | None = None
    ewma_ttft: Ewma = field(default_factory=lambda: Ewma(0.2))
    ewma_itl: Ewma = field(default_factory=lambda: Ewma(0.2))

    def view(self, now_s: float) -> ReplicaView:
        t = self.telemetry
        running = waiting = None
        kv = age = None
        if t is not None and self.telemetry_at_s is not None:
            age = now_s - self.telemetry_at_s
            running = None if t.num_requests_running is None else int(t.num_requests_running)
            waiting = None if t.num_requests_waiting is None else int(t.num_requests_waiting)
            kv = t.kv_cache_usage_perc
        return ReplicaView(
            index=self.index, healthy=self.healthy, in_flight=self.in_flight,
            running=running, waiting=waiting, kv_usage_frac=kv, telemetry_age_s=age,
            ewma_ttft_ms=self.ewma_ttft.value, ewma_itl_ms=self.ewma_itl.value,
        )


class BackendPool:
    """All configured backends; the only place their health changes."""

    def __init__(self, urls: list[str], eject_after_errors: int, readmit_after_checks: int):
        self.backends = [BackendState(i, u) for i, u in enumerate(urls)]
        self._eject_after = eject_after_errors
        self._readmit_after = readmit_after_checks

    def __getitem__(self, index: int) -> BackendState:
        return self.backends[index]

    def __len__(self) -> int:
        return len(self.backends)

    @property
    def in_flight(self) -> int:
        return sum(b.in_flight for b in self.backends)

    def views(self, now_s: float, exclude: frozenset[int] = frozenset()) -> list[ReplicaView]:
        """Views for the policy. Backends in `exclude` (already tried for this request)
        are shown unhealthy, unless that would leave none healthy."""
        views = [b.view(now_s) for b in self.backends]
        if exclude and any(v.healthy and v.index not in exclude for v in views):
            views = [
                ReplicaView(v.index, False, v.in_flight, v.running, v.waiting, v.kv_usage_frac,
                            v.telemetry_age_s, v.ewma_ttft_ms, v.ewma_itl_ms)
                if v.index in exclude else v
                for v in views
            ]
        return views

    def first_healthy(self) -> BackendState | None:
        return next((b for b in self.backends if b.healthy), None)

    def record_ok(self, index: int) -> None:
        """A request to `index` succeeded: its error streak ends."""
        self.backends[index].consecutive_errors = 0

    def record_error(self, index: int) -> bool:
        """A request to `index` failed (connect error, 5xx, broken stream). True when this
        error ejects it (passive ejection after `eject_after_errors` in a row)."""
        b = self.backends[index]
        b.consecutive_errors += 1
        b.consecutive_ok_checks = 0
        if b.healthy and b.consecutive_errors >= self._eject_after:
            b.healthy = False
            return True
        return False

    def record_check(self, index: int, ok: bool) -> str | None:
        """An active health check's result; returns "ejected" / "readmitted" on a change."""
        b = self.backends[index]
        b.health_checks += 1
        if not ok:
            b.consecutive_ok_checks = 0
            if b.healthy:
                b.healthy = False
                return "ejected"
            return None
        b.consecutive_ok_checks += 1
        if not b.healthy and b.consecutive_ok_checks >= self._readmit_after:
            b.healthy = True
            b.consecutive_errors = 0
            return "readmitted"
        return None

    def record_telemetry(self, index: int, snapshot: ServerSnapshot, now_s: float) -> None:
        b = self.backends[index]
        b.telemetry = snapshot
        b.telemetry_at_s = now_s
