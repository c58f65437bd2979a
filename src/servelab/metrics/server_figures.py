"""The engine's state over a run, combined over replicas: what the diagnosis reads.

Per replica the figures come from its `ServerSeries` (live, or rebuilt from a stored
`to_json_dict` so files written before a figure existed still get it). Over replicas the
gauges' peaks take the largest, the means (per replica: `max_num_seqs` is a per-engine
cap) take the average, preemptions are summed, and the prefix-cache hit rate is pooled:
hits over queries of all replicas (weighted by each one's queried tokens; the plain
average where a replica's query count is unknown, e.g. SGLang's hit-rate gauge), since
a replica that thrashes also re-queries more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from servelab.metrics.scrape import ServerSeries


def _peak(vals: Sequence[float | None]) -> float | None:
    got = [v for v in vals if v is not None]
    return max(got) if got else None


def _mean(vals: Sequence[float | None]) -> float | None:
    got = [v for v in vals if v is not None]
    return sum(got) / len(got) if got else None


def _sum(vals: Sequence[float | None]) -> float | None:
    got = [v for v in vals if v is not None]
    return sum(got) if got else None


@dataclass(frozen=True, slots=True)
class ServerFigures:
    """Queue, batch, KV and prefix-cache figures of one run; None where the target does
    not expose them (or, for the means, where a stored file lacks the series)."""

    max_waiting: float | None = None
    mean_waiting: float | None = None
    max_running: float | None = None
    mean_running: float | None = None
    peak_kv_usage: float | None = None  # fraction 0..1
    preemptions: float | None = None
    prefix_hit_rate: float | None = None  # fraction 0..1
    prefix_queries: float | None = None  # tokens looked up in the prefix cache
    prompt_tokens: float | None = None  # prompt tokens of the requests served

    @classmethod
    def of_series(cls, s: ServerSeries) -> ServerFigures:
        """One replica's figures (all None when it was not available)."""
        if not s.available:
            return cls()
        return cls(max_waiting=s.max_num_requests_waiting, mean_waiting=s.mean_num_requests_waiting,
                   max_running=s.max_num_requests_running, mean_running=s.mean_num_requests_running,
                   peak_kv_usage=s.peak_kv_cache_usage_perc, preemptions=s.preemptions_delta,
                   prefix_hit_rate=s.prefix_cache_hit_rate,
                   prefix_queries=s.prefix_cache_queries_delta,
                   prompt_tokens=s.prompt_tokens_delta)

    @classmethod
    def of_stored(cls, data: dict[str, Any]) -> ServerFigures:
        """One replica's figures from a stored `ServerSeries.to_json_dict`: recomputed from
        its columns where it has them, else read from its summary keys."""
        if data.get("series"):
            return cls.of_series(ServerSeries.from_json_dict(data))
        if not data.get("available"):
            return cls()
        return cls(max_waiting=data.get("max_num_requests_waiting"),
                   mean_waiting=data.get("mean_num_requests_waiting"),
                   max_running=data.get("max_num_requests_running"),
                   mean_running=data.get("mean_num_requests_running"),
                   peak_kv_usage=data.get("peak_kv_cache_usage_perc"),
                   preemptions=data.get("preemptions_delta"),
                   prefix_hit_rate=data.get("prefix_cache_hit_rate"),
                   prefix_queries=data.get("prefix_cache_queries_delta"),
                   prompt_tokens=data.get("prompt_tokens_delta"))

    @classmethod
    def over_replicas(cls, replicas: Sequence[ServerFigures],
                      preemptions: float | None = None) -> ServerFigures:
        """Combined over the replicas of one run; `preemptions`, where the engine counted
        them exactly (the offline simulator), replaces the counters' sum."""
        figs = _combine(replicas, _sum)
        return figs if preemptions is None else replace(figs, preemptions=preemptions)

    @classmethod
    def of_run(cls, series: Sequence[ServerSeries], preemptions: float | None = None) -> ServerFigures:
        """A live run's figures over its replicas' series."""
        return cls.over_replicas([cls.of_series(s) for s in series], preemptions)

    @classmethod
    def over_repetitions(cls, runs: Sequence[ServerFigures]) -> ServerFigures:
        """Repetitions of one level: peaks (preemptions too) of peaks, means of means."""
        return _combine(runs, _peak)


def _combine(figs: Sequence[ServerFigures],
             counters: Callable[[Sequence[float | None]], float | None]) -> ServerFigures:
    """`counters` combines the counter deltas (preemptions, lookups, prompt tokens)."""
    return ServerFigures(
        max_waiting=_peak([f.max_waiting for f in figs]),
        mean_waiting=_mean([f.mean_waiting for f in figs]),
        max_running=_peak([f.max_running for f in figs]),
        mean_running=_mean([f.mean_running for f in figs]),
        peak_kv_usage=_peak([f.peak_kv_usage for f in figs]),
        preemptions=counters([f.preemptions for f in figs]),
        prefix_hit_rate=pooled_hit_rate(figs),
        prefix_queries=counters([f.prefix_queries for f in figs]),
        prompt_tokens=counters([f.prompt_tokens for f in figs]))


def lookups_per_prompt_token(f: ServerFigures) -> float | None:
    """Prefix-cache lookups (tokens) per prompt token served; None where either is unknown.
    Above 1, the engine counted some requests' lookups more than once: vLLM 0.25 records a
    lookup each time the scheduler tries a waiting request, so while the KV pool is full a
    request that waits is counted again every step (newer vLLM counts it once)."""
    if f.prefix_queries is None or not f.prompt_tokens:
        return None
    return f.prefix_queries / f.prompt_tokens


def pooled_hit_rate(figs: Sequence[ServerFigures]) -> float | None:
    """Hits / queries (fraction 0..1) over all of `figs` (a run's replicas, a workload's
    cells); the plain mean where a query count is missing; None where none counted."""
    rated = [f for f in figs if f.prefix_hit_rate is not None]
    if not rated:
        return None
    if any(f.prefix_queries is None for f in rated):
        return _mean([f.prefix_hit_rate for f in rated])
    queries = sum(f.prefix_queries or 0.0 for f in rated)
    if queries <= 0:
        return _mean([f.prefix_hit_rate for f in rated])
    return sum((f.prefix_hit_rate or 0.0) * (f.prefix_queries or 0.0) for f in rated) / queries

