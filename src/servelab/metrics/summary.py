"""Records -> summary: the one metrics calculator (client and simulator runs alike).

Definitions follow `vllm bench serve` so figures compare one to one; docs/metrics.md
states each. Warm-up records are dropped first; failed requests are counted and grouped
by `error_kind` but enter no latency or throughput figure.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, field_validator

from servelab.errors import ServelabError
from servelab.metrics.records import RequestRecord
from servelab.metrics.result import (
    METRIC_NAMES,
    BenchResult,
    ClientHealth,
    GoodputSLO,
    LagStats,
    LatencyStats,
    MeasurementTraps,
    MetricName,
    QUEUE_METRIC_NAMES,
    QueueMetricName,
    PercentileValue,
    RequestDetails,
    SlotWaitStats,
)

# The client "fell behind" when the p99 scheduling lag exceeds
# min(LAG_LIMIT_MS, max(LAG_FLOOR_MS, LAG_GAP_FRACTION x mean intended gap)).
LAG_LIMIT_MS = 10.0
LAG_FLOOR_MS = 1.0
LAG_GAP_FRACTION = 0.05
UNKNOWN_ERROR_KIND = "unknown"


class SummaryOptions(BaseModel):
    """How to summarise: which metrics get percentiles, which percentiles, which SLOs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    percentile_metrics: tuple[MetricName | QueueMetricName, ...] = ("ttft", "tpot", "itl")
    metric_percentiles: tuple[float, ...] = (99.0,)
    goodput: GoodputSLO | None = None

    @field_validator("metric_percentiles")
    @classmethod
    def _percentiles_in_range(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        for p in value:
            if not 0.0 <= p <= 100.0:
                raise ValueError(f"percentile {p} is outside [0, 100]")
        return value


def parse_goodput(items: list[str]) -> GoodputSLO:
    """Parse ``--goodput ttft:MS tpot:MS e2el:MS`` (any non-empty subset, values in ms)."""
    if not items:
        raise ServelabError("--goodput: give at least one KEY:MS pair (ttft, tpot, e2el)")
    values: dict[str, float] = {}
    for item in items:
        key, sep, raw = item.partition(":")
        key = key.strip().lower()
        if not sep:
            raise ServelabError(f"--goodput: {item!r} is not KEY:MS (e.g. ttft:250)")
        if key not in ("ttft", "tpot", "e2el"):
            raise ServelabError(
                f"--goodput: unknown metric {key!r} in {item!r}; use ttft, tpot or e2el"
            )
        if key in values:
            raise ServelabError(f"--goodput: {key} given twice")
        try:
            value = float(raw)
        except ValueError:
            raise ServelabError(
                f"--goodput: {raw!r} in {item!r} is not a number of milliseconds"
            ) from None
        if not math.isfinite(value) or value < 0:
            raise ServelabError(f"--goodput: {item!r} must be a finite number >= 0 ms")
        values[key] = value
    return GoodputSLO(**{f"{k}_ms": v for k, v in values.items()})


def parse_percentile_metrics(text: str) -> tuple[MetricName | QueueMetricName, ...]:
    """Parse ``--percentile-metrics ttft,tpot,itl,e2el[,client_queue_time,...]``."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    known = ", ".join((*METRIC_NAMES, *QUEUE_METRIC_NAMES))
    if not names:
        raise ServelabError(f"--percentile-metrics: give at least one of {known}")
    chosen: list[MetricName | QueueMetricName] = []
    for name in names:
        matched = next((m for m in (*METRIC_NAMES, *QUEUE_METRIC_NAMES) if m == name), None)
        if matched is None:
            raise ServelabError(f"--percentile-metrics: unknown metric {name!r}; use {known}")
        if matched not in chosen:
            chosen.append(matched)
    return tuple(chosen)


def parse_metric_percentiles(text: str) -> tuple[float, ...]:
    """Parse ``--metric-percentiles 50,90,99.9`` (each in [0, 100])."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise ServelabError("--metric-percentiles: give at least one percentile, e.g. 99")
    values: list[float] = []
    for part in parts:
        try:
            p = float(part)
        except ValueError:
            raise ServelabError(f"--metric-percentiles: {part!r} is not a number") from None
        if not 0.0 <= p <= 100.0:
            raise ServelabError(f"--metric-percentiles: {part} is outside [0, 100]")
        values.append(p)
    return tuple(values)


def summarize(
    records: Sequence[RequestRecord], duration_s: float, opts: SummaryOptions
) -> BenchResult:
    """Summarise one run's records over its wall-clock `duration_s` (seconds, > 0).

    Rates are per second of `duration_s`; latencies in ms. Empty metric lists give 0,
    as vLLM's do.
    """
    if not duration_s > 0:
        raise ServelabError(f"run duration must be > 0 s, got {duration_s}")
    measured = sorted((r for r in records if not r.warmup), key=lambda r: r.index)
    ok = [r for r in measured if r.success]
    for r in ok:
        if r.e2el_ms is None:
            raise ValueError(f"request {r.index} succeeded but has no e2el_ms")
    failed_by_reason = Counter(r.error_kind or UNKNOWN_ERROR_KIND for r in measured if not r.success)

    ttfts = [_req(r.ttft_ms) for r in ok]
    tpots = [t for t in (r.tpot_ms for r in ok) if t is not None]
    itls = [gap for r in ok for gap in r.itl_ms]
    e2els = [_req(r.e2el_ms) for r in ok]
    total_in = sum(r.prompt_len for r in ok)
    total_out = sum(r.output_len for r in ok)
    pct = opts.metric_percentiles
    peak_tokens, peak_conc = _peak_buckets(ok)
    good = _count_good(ok, opts.goodput) if opts.goodput is not None else None

    return BenchResult(
        duration_s=duration_s,
        completed=len(ok),
        failed=len(measured) - len(ok),
        failed_by_reason=dict(sorted(failed_by_reason.items())),
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=len(ok) / duration_s,
        request_goodput=None if good is None else good / duration_s,
        output_throughput=total_out / duration_s,
        total_token_throughput=(total_in + total_out) / duration_s,
        max_output_tokens_per_s=peak_tokens,
        max_concurrent_requests=peak_conc,
        peak_in_flight_requests=_peak_in_flight(ok),
        ttft=_latency_stats(ttfts, pct),
        tpot=_latency_stats(tpots, pct),
        itl=_latency_stats(itls, pct),
        e2el=_latency_stats(e2els, pct),
        client_queue=_latency_stats([r.queue_ms for r in ok], pct),
        e2el_incl_queue=_latency_stats([_req(r.e2el_ms) + r.queue_ms for r in ok], pct),
        traps=_traps(ok, pct),
        percentile_metrics=opts.percentile_metrics,
        goodput_slo=opts.goodput,
        client=_client_health(measured),
        details=_details(measured),
    )


# Requests whose TPOT is one or two gaps: "short" for the TPOT-skew trap.
SHORT_TPOT_MAX_TOKENS = 3


def _traps(ok: list[RequestRecord], pct: tuple[float, ...]) -> MeasurementTraps:
    reasoning = sum(r.reasoning_tokens for r in ok)
    reasoned = [r for r in ok if r.reasoning_tokens > 0]
    answer_ttfts = [r.answer_ttft_ms for r in reasoned if r.answer_ttft_ms is not None]
    firsts = [r.itl_ms[0] for r in ok if r.itl_ms]
    later = [g for r in ok for g in r.itl_ms[1:]]
    tpots = [(r.output_len, t) for r in ok if (t := r.tpot_ms) is not None]
    tpot_sum = sum(t for _, t in tpots)
    short = [t for n, t in tpots if n <= SHORT_TPOT_MAX_TOKENS]
    return MeasurementTraps(
        reasoning_tokens=reasoning,
        answer_tokens=sum(r.output_len for r in ok) - reasoning,
        reasoning_requests=len(reasoned),
        mean_answer_ttft_ms=float(np.mean(answer_ttfts)) if answer_ttfts else None,
        mean_first_itl_ms=float(np.mean(firsts)) if firsts else None,
        mean_later_itl_ms=float(np.mean(later)) if later else None,
        itl_excl_first=_latency_stats(later, pct),
        tokens_beyond_one_per_chunk=sum(r.output_len - r.chunks for r in ok if r.chunks is not None),
        short_outputs=sum(1 for r in ok if r.expected_output_len is not None
                          and r.output_len < r.expected_output_len),
        short_tpot_requests=len(short),
        short_tpot_share=sum(short) / tpot_sum if tpot_sum > 0 else 0.0,
    )


def _req(value: float | None) -> float:
    assert value is not None  # guaranteed for successful records (checked above)
    return value


def _latency_stats(values_ms: list[float], percentiles: tuple[float, ...]) -> LatencyStats:
    # vLLM feeds numpy `values or 0`: an empty list yields 0 for every statistic.
    arr = np.asarray(values_ms if values_ms else [0.0], dtype=np.float64)
    return LatencyStats(
        mean_ms=float(np.mean(arr)),
        median_ms=float(np.median(arr)),
        std_ms=float(np.std(arr)),
        percentiles=tuple(
            PercentileValue(percentile=p, value_ms=float(np.percentile(arr, p)))
            for p in percentiles
        ),
    )


def _count_good(ok: list[RequestRecord], slo: GoodputSLO) -> int:
    """Requests meeting every SLO given (value <= SLO). A one-token request's TPOT counts
    as 0, as in vLLM."""
    good = 0
    for r in ok:
        if slo.ttft_ms is not None and _req(r.ttft_ms) > slo.ttft_ms:
            continue
        if slo.tpot_ms is not None and (r.tpot_ms or 0.0) > slo.tpot_ms:
            continue
        if slo.e2el_ms is not None and _req(r.e2el_ms) > slo.e2el_ms:
            continue
        good += 1
    return good


def _peak_buckets(ok: list[RequestRecord]) -> tuple[float, int]:
    """vLLM's peak figures over 1-second buckets from the first successful send.

    Returns (most output tokens completed in one bucket, most requests active in one
    bucket). A token's time is send + TTFT + the ITLs before it; a request is active in
    every bucket from the one holding its send to the one holding its last token.
    """
    if not ok:
        return 0.0, 0
    start = min(r.send_s for r in ok)
    end = max(r.send_s + _req(r.e2el_ms) / 1000.0 for r in ok)
    n_buckets = int(np.ceil(end - start)) + 1
    tokens = np.zeros(n_buckets)
    active = np.zeros(n_buckets, dtype=np.int64)
    for r in ok:
        offsets_ms = np.cumsum([_req(r.ttft_ms), *r.itl_ms])
        buckets = (r.send_s + offsets_ms / 1000.0 - start).astype(np.int64)
        buckets = buckets[(buckets >= 0) & (buckets < n_buckets)]
        np.add.at(tokens, buckets, 1)
        first = int(r.send_s - start)
        last = int(r.send_s + _req(r.e2el_ms) / 1000.0 - start)
        active[first : last + 1] += 1
    return float(tokens.max()), int(active.max())


_SAME_INSTANT_S = 1e-6


def _peak_in_flight(ok: list[RequestRecord]) -> int:
    """Most successful requests in flight at one instant (send to last token). A request
    ending at the instant another is sent does not overlap it; "the instant" allows
    `_SAME_INSTANT_S`, because an end is rebuilt as send + E2EL and the simulator's sends
    into a freed slot then differ from it by float rounding."""
    events: list[tuple[float, int]] = []
    for r in ok:
        events.append((r.send_s, 1))
        events.append((r.send_s + _req(r.e2el_ms) / 1000.0 - _SAME_INSTANT_S, -1))
    events.sort()  # at equal times -1 sorts before +1: finish before start
    peak = level = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def _client_health(measured: list[RequestRecord]) -> ClientHealth:
    lags = np.asarray([r.sched_lag_ms for r in measured] or [0.0])
    waits = np.asarray([r.slot_wait_ms for r in measured] or [0.0])
    gap_ms = _mean_intended_gap_ms(measured)
    threshold = LAG_LIMIT_MS
    if gap_ms is not None:
        threshold = min(LAG_LIMIT_MS, max(LAG_FLOOR_MS, LAG_GAP_FRACTION * gap_ms))
    p99 = float(np.percentile(lags, 99))
    return ClientHealth(
        sched_lag=LagStats(mean_ms=float(lags.mean()), p99_ms=p99, max_ms=float(lags.max())),
        slot_wait=SlotWaitStats(mean_ms=float(waits.mean()), max_ms=float(waits.max())),
        mean_intended_gap_ms=gap_ms,
        sched_lag_threshold_ms=threshold,
        client_fell_behind=p99 > threshold,
    )


def _mean_intended_gap_ms(measured: list[RequestRecord]) -> float | None:
    """Mean gap between intended sends (ms); None when all were meant to go at once."""
    if len(measured) < 2:
        return None
    times = [r.intended_send_s for r in measured]
    span_s = max(times) - min(times)
    if span_s <= 0:
        return None
    return span_s * 1000.0 / (len(measured) - 1)


def _details(measured: list[RequestRecord]) -> RequestDetails:
    return RequestDetails(
        input_lens=tuple(r.prompt_len for r in measured),
        output_lens=tuple(r.output_len if r.success else 0 for r in measured),
        ttfts_s=tuple((r.ttft_ms or 0.0) / 1000.0 for r in measured),
        itls_s=tuple(tuple(g / 1000.0 for g in r.itl_ms) for r in measured),
        latencies_s=tuple((r.e2el_ms or 0.0) / 1000.0 if r.success else 0.0 for r in measured),
        start_times_s=tuple(r.send_s for r in measured),
        queue_times_s=tuple(r.queue_ms / 1000.0 for r in measured),
        generated_texts=tuple(r.generated_text or "" for r in measured),
        errors=tuple(r.error or "" for r in measured),
        error_kinds=tuple(
            None if r.success else (r.error_kind or UNKNOWN_ERROR_KIND) for r in measured
        ),
        sched_lags_ms=tuple(r.sched_lag_ms for r in measured),
        slot_waits_ms=tuple(r.slot_wait_ms for r in measured),
    )


__all__ = [
    "GoodputSLO",
    "LAG_FLOOR_MS",
    "LAG_GAP_FRACTION",
    "LAG_LIMIT_MS",
    "SummaryOptions",
    "parse_goodput",
    "parse_metric_percentiles",
    "parse_percentile_metrics",
    "summarize",
]
