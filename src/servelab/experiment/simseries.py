"""The offline simulator's engine state as a `ServerSeries`, so diagnosis reads one schema.

An HTTP run samples `/metrics` once a second; the offline simulator sees every step. The
series here holds one snapshot per `interval_s` of virtual time per replica, max-pooled:
the gauges (running, waiting, KV usage) are the largest seen in the interval and the
counters their value at its end, so the peaks the report quotes are the true peaks, not
whatever a 1 s sampler happened to catch.
"""

from __future__ import annotations

from servelab.metrics.scrape import ServerSeries, ServerSnapshot, TimedSnapshot
from servelab.sim.engine import SimEngine
from servelab.sim.scheduler import ScheduledStep

SIM_URL = "sim://offline/replica{}"


class _Bucket:
    __slots__ = ("t_s", "running", "waiting", "kv", "stats")

    def __init__(self, t_s: float) -> None:
        self.t_s = t_s
        self.running = 0
        self.waiting = 0
        self.kv = 0.0
        self.stats: object = None


class SimSeriesRecorder:
    """A `StepObserver` for `servelab.sim.offline.simulate` that builds one series per replica.

    Times are seconds of virtual time since the measured run's start. `simulate` reports
    warm-up steps first, on their own clock from 0; the measured phase's clock starts at 0
    again, so a step earlier than the last one seen marks the end of the warm-ups and
    drops what was recorded for them."""

    def __init__(self, replicas: int, interval_s: float = 0.5) -> None:
        self._interval_s = interval_s
        self._buckets: list[list[_Bucket]] = [[] for _ in range(replicas)]
        self._last_t = 0.0

    def __call__(self, replica: int, start_s: float, duration_s: float, step: ScheduledStep,
                 engine: SimEngine) -> None:
        if start_s < self._last_t:
            self._buckets = [[] for _ in self._buckets]
        self._last_t = start_s
        t = start_s + duration_s
        buckets = self._buckets[replica]
        slot = int(t // self._interval_s) * self._interval_s
        if not buckets or buckets[-1].t_s != slot:
            buckets.append(_Bucket(slot))
        b = buckets[-1]
        s = engine.scheduler
        b.running = max(b.running, len(step.reqs))
        b.waiting = max(b.waiting, len(s.waiting))
        b.kv = max(b.kv, engine.pool.usage_frac)
        b.stats = engine.stats

    def series(self) -> list[ServerSeries]:
        """One series per replica (`available=False` for a replica that never stepped)."""
        out: list[ServerSeries] = []
        for k, buckets in enumerate(self._buckets):
            samples = tuple(TimedSnapshot(t_s=b.t_s, snapshot=_snapshot(b)) for b in buckets)
            out.append(ServerSeries(url=SIM_URL.format(k), available=bool(samples),
                                    reason=None if samples else "the replica ran no step",
                                    failed_scrapes=0, samples=samples))
        return out


def _snapshot(b: _Bucket) -> ServerSnapshot:
    st = b.stats
    return ServerSnapshot(
        num_requests_running=float(b.running),
        num_requests_waiting=float(b.waiting),
        kv_cache_usage_perc=b.kv,
        num_preemptions_total=float(st.num_preemptions_total),  # type: ignore[attr-defined]
        prefix_cache_queries_total=float(st.prefix_cache_queries_total),  # type: ignore[attr-defined]
        prefix_cache_hits_total=float(st.prefix_cache_hits_total),  # type: ignore[attr-defined]
        prompt_tokens_total=float(st.prompt_tokens_total),  # type: ignore[attr-defined]
        generation_tokens_total=float(st.generation_tokens_total),  # type: ignore[attr-defined]
    )
