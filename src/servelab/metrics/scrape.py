"""Sampling a target's Prometheus `/metrics` before, during and after a run.

vLLM (current and older metric names) and SGLang expose the engine's queue, KV-cache and
prefix-cache state there; `MetricsScraper` samples it on an interval and `ServerSeries`
condenses the samples (peak KV usage, longest and mean queue, mean batch, preemptions and
prefix-cache hit rate over the run). A target without `/metrics` is not an error: the series says
`available=False` and why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from servelab.errors import ServelabError
from servelab.metrics.result_file import StoredResult

# Snapshot field -> sample names, in order of preference (the first present wins, so a
# server exposing both a current and a deprecated name is not counted twice).
_SOURCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("num_requests_running", ("vllm:num_requests_running", "sglang:num_running_reqs")),
    ("num_requests_waiting", ("vllm:num_requests_waiting", "sglang:num_queue_reqs")),
    ("kv_cache_usage_perc",
     ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")),
    ("num_preemptions_total", ("vllm:num_preemptions_total",)),
    ("prefix_cache_queries_total",
     ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")),
    ("prefix_cache_hits_total",
     ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")),
    ("prompt_tokens_total", ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total")),
    ("generation_tokens_total",
     ("vllm:generation_tokens_total", "sglang:generation_tokens_total")),
    ("prefix_cache_hit_rate", ("sglang:cache_hit_rate",)),
    # The server's own TTFT histogram (from when the API server got the request), so the
    # client's TTFT can be split into the server's part and the rest.
    ("ttft_seconds_sum", ("vllm:time_to_first_token_seconds_sum",)),
    ("ttft_seconds_count", ("vllm:time_to_first_token_seconds_count",)),
    # Speculative decoding (vLLM's counters; absent without a speculative config).
    ("spec_num_drafts_total", ("vllm:spec_decode_num_drafts_total",)),
    ("spec_num_draft_tokens_total", ("vllm:spec_decode_num_draft_tokens_total",)),
    ("spec_num_accepted_tokens_total", ("vllm:spec_decode_num_accepted_tokens_total",)),
)
# Accepted draft tokens by position in the draft (label `position`), summed over engines.
_SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
# Fractions in [0, 1]: several engines' values are combined by max, not summed.
_FRACTIONS = frozenset({"kv_cache_usage_perc", "prefix_cache_hit_rate"})


@dataclass(frozen=True, slots=True)
class ServerSnapshot:
    """One reading of the server's state; None where the server does not expose it.

    Counts and counters are summed over label sets (engines, models); the fractions
    `kv_cache_usage_perc` (0..1, despite vLLM's name) and `prefix_cache_hit_rate`
    (SGLang's gauge) take the maximum over label sets.
    """

    num_requests_running: float | None = None
    num_requests_waiting: float | None = None
    kv_cache_usage_perc: float | None = None
    num_preemptions_total: float | None = None
    prefix_cache_queries_total: float | None = None
    prefix_cache_hits_total: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    prefix_cache_hit_rate: float | None = None
    ttft_seconds_sum: float | None = None
    ttft_seconds_count: float | None = None
    spec_num_drafts_total: float | None = None
    spec_num_draft_tokens_total: float | None = None
    spec_num_accepted_tokens_total: float | None = None
    spec_accepted_per_pos_total: tuple[float, ...] | None = None


def parse_server_metrics(text: str, source: str = "<text>") -> ServerSnapshot:
    """Read a `ServerSnapshot` from Prometheus exposition text (`source` names it in errors)."""
    values: dict[str, list[float]] = {}
    per_pos: dict[int, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                values.setdefault(sample.name, []).append(float(sample.value))
                if sample.name == _SPEC_PER_POS and sample.labels.get("position", "").isdigit():
                    k = int(sample.labels["position"])
                    per_pos[k] = per_pos.get(k, 0.0) + float(sample.value)
    except ValueError as exc:
        raise ServelabError(f"{source}: not Prometheus text ({exc})") from exc
    found: dict[str, Any] = {}
    for field_name, names in _SOURCES:
        name = next((n for n in names if n in values), None)
        if name is not None:
            combine = max if field_name in _FRACTIONS else sum
            found[field_name] = float(combine(values[name]))
    if per_pos:
        found["spec_accepted_per_pos_total"] = tuple(per_pos.get(k, 0.0) for k in range(max(per_pos) + 1))
    return ServerSnapshot(**found)


@dataclass(frozen=True, slots=True)
class TimedSnapshot:
    """A snapshot and when it was taken (`t_s`: seconds since the scraper's origin)."""

    t_s: float
    snapshot: ServerSnapshot


def _values(samples: tuple[TimedSnapshot, ...], name: str) -> list[float]:
    return [v for s in samples if (v := getattr(s.snapshot, name)) is not None]


def _steady_mean(samples: tuple[TimedSnapshot, ...], name: str) -> float | None:
    """Mean of `name` over the samples while the engine had work, after its start-up ramp.

    Idle readings before the first request and after the last would dilute it; and a closed
    loop starts with every client's request at once, so until the engine first had an empty
    queue or its fullest batch, the queue is that burst, not one that lasts."""
    def n(s: TimedSnapshot, field: str) -> float:
        return getattr(s.snapshot, field) or 0.0

    busy = [s for s in samples if n(s, "num_requests_running") > 0 or n(s, "num_requests_waiting") > 0]
    full = max((n(s, "num_requests_running") for s in busy), default=0.0)
    start = next((i for i, s in enumerate(busy) if n(s, "num_requests_waiting") == 0
                  or n(s, "num_requests_running") >= full), 0)
    vals = [v for s in busy[start:] if (v := getattr(s.snapshot, name)) is not None]
    return sum(vals) / len(vals) if vals else None


def _counter_delta(samples: tuple[TimedSnapshot, ...], name: str) -> float | None:
    """Last minus first reading; None if absent, or if the counter went down (restart)."""
    vals = _values(samples, name)
    if not vals or vals[-1] < vals[0]:
        return None
    return vals[-1] - vals[0]


@dataclass(frozen=True, slots=True)
class SpecDecodeStats:
    """Speculative decoding over a run, from vLLM's counters (deltas between the first and
    last samples): verification steps that carried drafts (`num_drafts`), draft tokens
    proposed and accepted, the acceptance rate (accepted / proposed, in %), the mean
    acceptance length (tokens per verification step: 1 + accepted / drafts) and, per
    position in the draft, the share of drafts whose token there was accepted (0..1). The
    figures and their definitions are vllm bench serve's."""

    num_drafts: int
    draft_tokens: int
    accepted_tokens: int
    acceptance_rate_pct: float
    acceptance_length: float
    per_position_acceptance: tuple[float, ...]


def _spec_decode(samples: tuple[TimedSnapshot, ...]) -> SpecDecodeStats | None:
    drafts = _counter_delta(samples, "spec_num_drafts_total")
    proposed = _counter_delta(samples, "spec_num_draft_tokens_total")
    accepted = _counter_delta(samples, "spec_num_accepted_tokens_total")
    if drafts is None or proposed is None or accepted is None or proposed <= 0:
        return None
    with_pos = [s.snapshot.spec_accepted_per_pos_total for s in samples
                if s.snapshot.spec_accepted_per_pos_total is not None]
    per_pos: tuple[float, ...] = ()
    if with_pos:
        first, last = with_pos[0], with_pos[-1]
        per_pos = tuple(last[k] - (first[k] if k < len(first) else 0.0) for k in range(len(last)))
    return spec_decode_stats(drafts, proposed, accepted, per_pos)


def stored_spec_decode(result: StoredResult, servers: list[dict[str, Any]]) -> SpecDecodeStats | None:
    """A stored cell's speculative decoding: its result's vLLM keys, else (cells stored
    before the result carried them) its server series' counters summed over replicas."""
    if result.spec_decode_num_drafts is not None:
        drafts = float(result.spec_decode_num_drafts)
        per_pos = tuple(float(x) * drafts for x in result.spec_decode_per_position_acceptance_rates or ())
        return spec_decode_stats(drafts, float(result.spec_decode_draft_tokens or 0),
                                 float(result.spec_decode_accepted_tokens or 0), per_pos)
    found = [s.get("spec_decode") for s in servers if isinstance(s, dict)]
    return combine_spec_decode([SpecDecodeStats(**{**d, "per_position_acceptance": tuple(d["per_position_acceptance"])})
                                for d in found if d])


def drafted_share(sd: SpecDecodeStats, total_output_tokens: float, completed: float) -> float | None:
    """The share of a run's decode steps that carried a draft: every output token after
    each request's first comes from a decode step, less the accepted drafts, which ride
    along in a verification step (n-gram drafting proposes only on a match). None when
    the run had no decode step."""
    steps = total_output_tokens - completed - sd.accepted_tokens
    return min(1.0, sd.num_drafts / steps) if steps > 0 else None


def combine_spec_decode(stats: list[SpecDecodeStats | None]) -> SpecDecodeStats | None:
    """Several replicas' speculative decoding as one engine's (counters summed)."""
    got = [s for s in stats if s is not None]
    if not got:
        return None
    k = max(len(s.per_position_acceptance) for s in got)
    per_pos = tuple(sum(s.per_position_acceptance[i] * s.num_drafts for s in got
                        if i < len(s.per_position_acceptance)) for i in range(k))
    return spec_decode_stats(sum(s.num_drafts for s in got), sum(s.draft_tokens for s in got),
                             sum(s.accepted_tokens for s in got), per_pos)


def spec_decode_stats(drafts: float, proposed: float, accepted: float,
                      accepted_per_pos: tuple[float, ...]) -> SpecDecodeStats | None:
    """`SpecDecodeStats` from counter deltas over a run (None when nothing was drafted)."""
    if proposed <= 0:
        return None
    per_pos = tuple(a / drafts for a in accepted_per_pos) if drafts > 0 else ()
    return SpecDecodeStats(
        num_drafts=int(drafts), draft_tokens=int(proposed), accepted_tokens=int(accepted),
        acceptance_rate_pct=accepted / proposed * 100.0,
        acceptance_length=1.0 + accepted / drafts if drafts > 0 else 0.0,
        per_position_acceptance=per_pos)


@dataclass(frozen=True, slots=True)
class ServerSeries:
    """The samples of one run and what they add up to."""

    url: str
    available: bool
    reason: str | None
    failed_scrapes: int
    samples: tuple[TimedSnapshot, ...]

    def _busy_peak(self, name: str) -> float | None:
        """Peak of a gauge, None unless some sample caught the engine with work: a run
        shorter than the scrape interval leaves only idle readings, and "0 running at
        most" would then be a figure about the scrapes, not the engine."""
        busy = any((s.snapshot.num_requests_running or 0) > 0 or (s.snapshot.num_requests_waiting or 0) > 0
                   for s in self.samples)
        vals = _values(self.samples, name)
        return max(vals) if vals and busy else None

    @property
    def peak_kv_cache_usage_perc(self) -> float | None:
        return self._busy_peak("kv_cache_usage_perc")

    @property
    def max_num_requests_waiting(self) -> float | None:
        return self._busy_peak("num_requests_waiting")

    @property
    def max_num_requests_running(self) -> float | None:
        return self._busy_peak("num_requests_running")

    @property
    def mean_num_requests_waiting(self) -> float | None:
        """The queue that lasts (see `_steady_mean`); the start-up burst sets the peak."""
        return _steady_mean(self.samples, "num_requests_waiting")

    @property
    def mean_num_requests_running(self) -> float | None:
        """The batch the engine ran, on average (over the same samples)."""
        return _steady_mean(self.samples, "num_requests_running")

    @property
    def preemptions_delta(self) -> float | None:
        return _counter_delta(self.samples, "num_preemptions_total")

    @property
    def prompt_tokens_delta(self) -> float | None:
        return _counter_delta(self.samples, "prompt_tokens_total")

    @property
    def generation_tokens_delta(self) -> float | None:
        return _counter_delta(self.samples, "generation_tokens_total")

    @property
    def prefix_cache_queries_delta(self) -> float | None:
        """Prompt tokens looked up in the prefix cache over the run (vLLM's counter)."""
        return _counter_delta(self.samples, "prefix_cache_queries_total")

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Hits / queries over the run (counter deltas); None when nothing was queried."""
        queries = _counter_delta(self.samples, "prefix_cache_queries_total")
        hits = _counter_delta(self.samples, "prefix_cache_hits_total")
        if queries is None or hits is None or queries <= 0:
            return None
        return hits / queries

    @property
    def mean_server_ttft_ms(self) -> float | None:
        """Mean TTFT the server measured over the run (ms): its histogram's sum over its
        count, both as deltas; None without the histogram or without requests."""
        total = _counter_delta(self.samples, "ttft_seconds_sum")
        count = _counter_delta(self.samples, "ttft_seconds_count")
        if total is None or not count:
            return None
        return total / count * 1000.0

    @property
    def spec_decode(self) -> SpecDecodeStats | None:
        """Speculative decoding over the run; None when the server reports none."""
        return _spec_decode(self.samples)

    def to_json_dict(self) -> dict[str, Any]:
        """Summary figures plus the series column by column (one list per field)."""
        names = [f.name for f in fields(ServerSnapshot)]
        return {
            "url": self.url,
            "available": self.available,
            "reason": self.reason,
            "failed_scrapes": self.failed_scrapes,
            "peak_kv_cache_usage_perc": self.peak_kv_cache_usage_perc,
            "max_num_requests_waiting": self.max_num_requests_waiting,
            "max_num_requests_running": self.max_num_requests_running,
            "mean_num_requests_waiting": self.mean_num_requests_waiting,
            "mean_num_requests_running": self.mean_num_requests_running,
            "preemptions_delta": self.preemptions_delta,
            "prefix_cache_hit_rate": self.prefix_cache_hit_rate,
            "prefix_cache_queries_delta": self.prefix_cache_queries_delta,
            "prompt_tokens_delta": self.prompt_tokens_delta,
            "generation_tokens_delta": self.generation_tokens_delta,
            "mean_server_ttft_ms": self.mean_server_ttft_ms,
            "spec_decode": asdict(sd) if (sd := self.spec_decode) is not None else None,
            "series": {
                "t_s": [s.t_s for s in self.samples],
                **{n: [getattr(s.snapshot, n) for s in self.samples] for n in names},
            },
        }


    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> ServerSeries:
        """The series back from `to_json_dict`'s output (its columns; summary keys are
        recomputed), so figures added later are computed for files stored before them."""
        cols = data.get("series") or {}
        times = cols.get("t_s") or []
        column = {f.name: cols.get(f.name) or [None] * len(times) for f in fields(ServerSnapshot)}
        column["spec_accepted_per_pos_total"] = [  # JSON keeps tuples as lists
            tuple(v) if v is not None else None for v in column["spec_accepted_per_pos_total"]]
        samples = tuple(TimedSnapshot(t_s=t, snapshot=ServerSnapshot(**{n: c[i] for n, c in column.items()}))
                        for i, t in enumerate(times))
        return cls(url=data["url"], available=data["available"], reason=data.get("reason"),
                   failed_scrapes=data.get("failed_scrapes", 0), samples=samples)


class MetricsScraper:
    """Samples ``{base_url}/metrics`` every `interval_s` seconds during a run.

    Times are seconds since `origin_s` on `clock` (default: the clock's reading at
    construction); pass the run's start on the same clock to line samples up with
    request records. A 404 means the target has no `/metrics`: sampling stops.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        interval_s: float = 1.0,
        *,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.perf_counter,
        origin_s: float | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ServelabError(f"metrics scrape interval must be > 0 s, got {interval_s}")
        self._session = session
        self._url = base_url.rstrip("/") + "/metrics"
        self._interval_s = interval_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._clock = clock
        self._origin_s = clock() if origin_s is None else origin_s
        self._samples: list[TimedSnapshot] = []
        self._failed = 0
        self._reason: str | None = None
        self._missing = False

    @property
    def url(self) -> str:
        return self._url

    async def scrape_once(self) -> ServerSnapshot | None:
        """Take one sample; None (with the reason kept for `series()`) if it failed."""
        t_s = self._clock() - self._origin_s
        try:
            async with self._session.get(self._url, timeout=self._timeout) as resp:
                if resp.status == 404:
                    self._missing = True
                    return self._fail(f"{self._url}: HTTP 404, the target has no /metrics")
                if resp.status != 200:
                    return self._fail(f"{self._url}: HTTP {resp.status}")
                text = await resp.text()
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            return self._fail(f"{self._url}: cannot fetch ({type(exc).__name__}: {exc})")
        try:
            snapshot = parse_server_metrics(text, source=self._url)
        except ServelabError as exc:
            return self._fail(str(exc))
        self._samples.append(TimedSnapshot(t_s=t_s, snapshot=snapshot))
        return snapshot

    def _fail(self, reason: str) -> None:
        self._failed += 1
        self._reason = reason
        return None

    async def run(self, stop_event: asyncio.Event) -> None:
        """Sample now, then every `interval_s` until `stop_event` is set, then once more."""
        next_due = self._clock()
        while not stop_event.is_set():
            await self.scrape_once()
            if self._missing:
                return
            next_due += self._interval_s
            delay = max(0.0, next_due - self._clock())
            try:
                await asyncio.wait_for(stop_event.wait(), timeout=delay)
            except asyncio.TimeoutError:
                continue
        await self.scrape_once()

    def series(self) -> ServerSeries:
        """The samples so far. `reason` is set when no sample succeeded, or notes the
        last failure when some did."""
        return ServerSeries(
            url=self._url,
            available=bool(self._samples),
            reason=self._reason,
            failed_scrapes=self._failed,
            samples=tuple(self._samples),
        )
