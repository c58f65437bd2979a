"""One level's measurements: a point per repetition, their summary, and the saturation check.

Over-saturation (rate mode): in the second half of the arrival window, a server that keeps
up completes about as many requests as arrive (Little's law on a stationary queue); one that
fell behind completes fewer and its queue grows until the arrivals stop. That count holds
only while requests take less than half the window (the first half's p90 end-to-end
latency): the second half's completions then come from arrivals inside the window; with
longer requests (long outputs, short windows) completions trail arrivals on
any server, and the level is flagged only when TTFT doubled along the window. A level is flagged
when completions in that half fall short of arrivals by more than `SATURATION_MARGIN`
(with at least `MIN_ARRIVALS` arrivals to judge by) and the shortfall is beyond Poisson
noise (over 2 sqrt(arrivals)) or TTFT doubled along the window (a growing queue), when more than `MAX_FAILED_FRACTION`
of its requests failed, or when the client itself fell behind its schedule. A flagged level
is listed but enters no knee, peak or capacity as a steady value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import math

import numpy as np

from servelab.metrics.records import RequestRecord
from servelab.metrics.result import BenchResult
from servelab.metrics.server_figures import ServerFigures
from servelab.sweep.slo import Slo, SloLevel, breaches

SATURATION_MARGIN = 0.10
MIN_ARRIVALS = 20
MAX_FAILED_FRACTION = 0.05
TTFT_GROWTH = 2.0


def saturation_reason(records: Sequence[RequestRecord], result: BenchResult,
                      open_loop: bool) -> str | None:
    """Why this run is not a steady value, or None (see the module docstring)."""
    measured = [r for r in records if not r.warmup]
    if measured and result.failed > MAX_FAILED_FRACTION * len(measured):
        return f"{result.failed} of {len(measured)} requests failed"
    if result.client.client_fell_behind:
        return (f"the client fell behind its schedule (p99 lag {result.client.sched_lag.p99_ms:.1f} ms): "
                "the figures are the client's, not the server's")
    if not open_loop or not measured:
        return None
    end = max(r.intended_send_s for r in measured)
    start = end / 2
    arrivals = sum(1 for r in measured if start <= r.intended_send_s <= end)
    if arrivals < MIN_ARRIVALS:
        return None
    early = [r.e2el_ms / 1e3 for r in measured
             if r.success and r.e2el_ms is not None and r.intended_send_s < start]
    if early and float(np.percentile(early, 90)) > start:
        # Requests outlast half the window: completions in it trail its arrivals even on a
        # steady server, so only the queue's other sign, TTFT growing along it, can tell.
        growth = _ttft_growth(measured, start, end)
        if growth > TTFT_GROWTH:
            return (f"fell behind: the median TTFT grew {growth:.1f}x along the arrival window "
                    "(the queue was still growing)")
        return None
    done = sum(1 for r in measured if r.success and r.e2el_ms is not None
               and start <= r.send_s + r.e2el_ms / 1e3 <= end)
    deficit = arrivals - done
    if deficit <= SATURATION_MARGIN * arrivals:
        return None
    # Counts in a window are Poisson-noisy: a short deficit must also exceed 2 sigma, or come
    # with the queue's other sign, TTFT growing along the window.
    if deficit > 2 * math.sqrt(arrivals) or _ttft_growth(measured, start, end) > TTFT_GROWTH:
        return (f"fell behind: {done} completions for {arrivals} arrivals in the second half of "
                f"the arrival window ({100 * done / arrivals:.0f} %): the queue was still growing")
    return None


def _ttft_growth(measured: Sequence[RequestRecord], start: float, end: float) -> float:
    """Median TTFT of the window's last quarter over that of the first half's second quarter."""
    def med(a: float, b: float) -> float | None:
        vals = [r.ttft_ms for r in measured if a <= r.intended_send_s < b and r.ttft_ms is not None]
        return float(np.median(vals)) if vals else None

    early = med(start / 2, start)
    late = med(start + (end - start) / 2, end + 1e-9)
    if early is None or late is None or early <= 0:
        return 0.0
    return late / early


@dataclass(frozen=True, slots=True)
class LevelPoint:
    """One repetition at one level."""

    level: float
    repetition: int
    seed: int
    result: BenchResult
    server: ServerFigures
    saturated_reason: str | None

    @property
    def mean_context_tokens(self) -> float:
        r = self.result
        if not r.completed:
            return 0.0
        return (r.total_input_tokens + r.total_output_tokens / 2) / r.completed


def percentile_ms(result: BenchResult, metric: str, percentile: float) -> float:
    for pv in result.latency(metric).percentiles:  # type: ignore[arg-type]
        if pv.percentile == percentile:
            return pv.value_ms
    raise ValueError(f"the result has no p{percentile:g} of {metric}")


@dataclass(frozen=True, slots=True)
class LevelSummary:
    """A level over its repetitions: means, and the verdicts the sweep acts on."""

    level: float
    points: tuple[LevelPoint, ...]
    slo: Slo | None
    percentile: float

    @property
    def throughput(self) -> float:
        """Mean output throughput (tokens/s)."""
        return float(np.mean([p.result.output_throughput for p in self.points]))

    @property
    def request_throughput(self) -> float:
        return float(np.mean([p.result.request_throughput for p in self.points]))

    @property
    def goodput(self) -> float | None:
        vals = [p.result.request_goodput for p in self.points]
        return float(np.mean(vals)) if all(v is not None for v in vals) else None  # type: ignore[arg-type]

    @property
    def saturated(self) -> bool:
        return any(p.saturated_reason for p in self.points)

    @property
    def saturated_reason(self) -> str | None:
        return next((p.saturated_reason for p in self.points if p.saturated_reason), None)

    def latency_ms(self, metric: str, percentile: float | None = None) -> float:
        """Mean over repetitions of the metric's percentile (the SLO's by default)."""
        p = self.percentile if percentile is None else percentile
        return float(np.mean([percentile_ms(pt.result, metric, p) for pt in self.points]))

    def mean_ms(self, metric: str) -> float:
        return float(np.mean([pt.result.latency(metric).mean_ms for pt in self.points]))  # type: ignore[arg-type]

    def slo_level(self) -> SloLevel:
        return SloLevel(self.level, {m: self.latency_ms(m) for m in ("ttft", "tpot", "e2el")},
                        self.throughput, self.goodput, self.saturated)

    @property
    def meets_slo(self) -> bool | None:
        if self.slo is None:
            return None
        return not breaches(self.slo, self.slo_level()) and not self.saturated

    @property
    def server(self) -> ServerFigures:
        """Peaks of peaks and means of means over repetitions."""
        return ServerFigures.over_repetitions([p.server for p in self.points])

    @property
    def mean_context_tokens(self) -> float:
        return float(np.mean([p.mean_context_tokens for p in self.points]))
