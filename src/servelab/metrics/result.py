"""The one result schema: a bench run's figures, and its JSON form.

`BenchResult` holds typed figures (latencies in ms, throughputs per second of run
duration). `BenchResult.to_json_dict()` flattens them into the keys `vllm bench serve`
writes, so scripts written for vLLM's result files read ours unchanged; servelab's own
figures go under the single key ``"servelab"``. See docs/metrics.md for every key.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from servelab import __version__
from servelab.errors import ServelabError
from servelab.metrics.gpu import GpuSeries
from servelab.metrics.result_file import StoredResult, load_results, read_result, read_results, write_result
from servelab.metrics.scrape import ServerSeries, SpecDecodeStats
from servelab.rate import rate_to_json

__all__ = [
    "METRIC_NAMES",
    "BenchResult",
    "ClientHealth",
    "GoodputSLO",
    "LagStats",
    "LatencyStats",
    "MeasurementTraps",
    "MetricName",
    "QUEUE_METRIC_NAMES",
    "QueueMetricName",
    "PercentileValue",
    "RequestDetails",
    "RpsChange",
    "RunInfo",
    "SlotWaitStats",
    "StoredResult",
    "load_results",
    "read_result",
    "read_results",
    "parse_metadata",
    "write_result",
]

MetricName = Literal["ttft", "tpot", "itl", "e2el"]
METRIC_NAMES: tuple[MetricName, ...] = ("ttft", "tpot", "itl", "e2el")
# vLLM's client-queue metrics: reported when named in --percentile-metrics and a
# concurrency cap was set (the second only at a finite rate too).
QueueMetricName = Literal["client_queue_time", "e2el_including_client_queue"]
QUEUE_METRIC_NAMES: tuple[QueueMetricName, ...] = ("client_queue_time", "e2el_including_client_queue")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GoodputSLO(_Record):
    """Service-level objectives for goodput (ms); a request is good when it meets each one
    given (value <= SLO)."""

    ttft_ms: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    tpot_ms: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    e2el_ms: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    def as_ms_by_metric(self) -> dict[str, float]:
        """The SLOs that are set, keyed by metric name (``ttft``, ``tpot``, ``e2el``)."""
        pairs = (("ttft", self.ttft_ms), ("tpot", self.tpot_ms), ("e2el", self.e2el_ms))
        return {name: value for name, value in pairs if value is not None}


class PercentileValue(_Record):
    """One percentile of a latency metric: `percentile` in [0, 100], `value_ms` in ms."""

    percentile: float
    value_ms: float

    @property
    def key_word(self) -> str:
        """The percentile as vLLM spells it in keys: 99.0 -> "99", 99.9 -> "99.9"."""
        p = self.percentile
        return str(int(p)) if int(p) == p else str(p)


class LatencyStats(_Record):
    """Mean, median, population std and chosen percentiles of one latency metric (ms)."""

    mean_ms: float
    median_ms: float
    std_ms: float
    percentiles: tuple[PercentileValue, ...]


class LagStats(_Record):
    """Client scheduling lag over the measured requests (ms)."""

    mean_ms: float
    p99_ms: float
    max_ms: float


class SlotWaitStats(_Record):
    """Time requests waited for a `--max-concurrency` slot (ms)."""

    mean_ms: float
    max_ms: float


class ClientHealth(_Record):
    """Whether the client kept to its own arrival schedule (see docs/metrics.md)."""

    sched_lag: LagStats
    slot_wait: SlotWaitStats
    mean_intended_gap_ms: float | None
    sched_lag_threshold_ms: float
    client_fell_behind: bool


class MeasurementTraps(_Record):
    """What can make a run's headline figures mislead, counted over its successful requests.

    Reasoning: tokens in reasoning-only chunks (they count toward TTFT and output, as in
    vLLM) vs the rest, and the mean time to the first answer token of requests that
    reasoned. First ITL: each request's first inter-token gap (which can carry the rest of
    a chunked prefill or another request's prefill) vs its later gaps, and ITL without
    the first gaps. Multi-token chunks: output tokens beyond one per chunk (a chunk of k
    tokens adds k - 1: speculative decoding, stream batching), whose ITLs are the chunk's
    gap split evenly.
    Short outputs: answers that stopped before the max_tokens asked for. Short TPOT:
    requests with 2 or 3 output tokens, whose TPOT is one or two gaps, and their share of
    the summed TPOT (how much they pull the mean).
    """

    reasoning_tokens: int
    answer_tokens: int
    reasoning_requests: int
    mean_answer_ttft_ms: float | None
    mean_first_itl_ms: float | None
    mean_later_itl_ms: float | None
    itl_excl_first: LatencyStats
    tokens_beyond_one_per_chunk: int
    short_outputs: int
    short_tpot_requests: int
    short_tpot_share: float


class RequestDetails(_Record):
    """Per-request lists, in request order (failed requests included, warm-ups not).

    Units follow vLLM's detailed result: TTFT, ITL, latency, start and client queue
    times in seconds (start times from the run's t0, where vLLM's are perf_counter
    readings; only differences between them mean anything in either). A request with no
    first token has TTFT 0.0 and latency 0.0, a successful one the error "" (vLLM's
    defaults); `generated_texts` are "" when the client kept no text. `itls_s` is None when
    the summary was told not to keep them (`SummaryOptions.per_request_itls`); such a
    result has no detailed JSON form.
    """

    input_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    ttfts_s: tuple[float, ...]
    # Not validated: only the metrics calculator writes it, as tuples of Python floats, and
    # pydantic would check every gap (200 M at a million requests: tens of seconds) and
    # copy every tuple.
    itls_s: SkipValidation[tuple[tuple[float, ...], ...] | None]
    latencies_s: tuple[float, ...]
    start_times_s: tuple[float, ...]
    queue_times_s: tuple[float, ...]
    generated_texts: tuple[str, ...]
    errors: tuple[str, ...]
    error_kinds: tuple[str | None, ...]
    sched_lags_ms: tuple[float, ...]
    slot_waits_ms: tuple[float, ...]


class RpsChange(_Record):
    """vLLM's ramp-up record: when the sending rate first reached `rps` (an integer
    req/s), as an ISO wall-clock timestamp."""

    rps: int
    timestamp: str


class RunArrivals(Protocol):
    """The traffic keys a run records (`servelab.workload.arrivals.ArrivalOptions` has them)."""

    @property
    def request_rate(self) -> float: ...
    @property
    def burstiness(self) -> float: ...
    @property
    def ramp_up_strategy(self) -> str | None: ...
    @property
    def ramp_up_start_rps(self) -> float | None: ...
    @property
    def ramp_up_end_rps(self) -> float | None: ...


class RunInfo(_Record):
    """What was run: vLLM's set-up and traffic keys plus servelab's seed and tokenizer.

    `request_rate` is requests/s (``inf`` = all at once); `metadata` holds
    ``--metadata KEY=VALUE`` pairs, merged into the JSON's top level as vLLM does.
    """

    date: str
    backend: str
    label: str | None = None
    model_id: str
    tokenizer_id: str
    num_prompts: int
    request_rate: float
    burstiness: float = 1.0
    max_concurrency: int | None = None
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    seed: int | None = None
    tokenizer: str | None = None
    sampling: dict[str, float] = Field(default_factory=dict)
    ignore_eos: bool = False
    rps_change_events: tuple[RpsChange, ...] = ()

    @classmethod
    def now(cls, *, backend: str, model_id: str, tokenizer_id: str, num_prompts: int,
            arrivals: RunArrivals, max_concurrency: int | None, label: str | None = None,
            seed: int | None = None, tokenizer: str | None = None,
            metadata: Mapping[str, str] | None = None, sampling: Mapping[str, float] | None = None,
            ignore_eos: bool = False, rps_change_events: tuple[RpsChange, ...] = (),
            date: str | None = None) -> RunInfo:
        """The one way a run is described: dated now (vLLM's ``%Y%m%d-%H%M%S``; `date` when
        the caller stamped the run already), its traffic keys (rate in requests/s,
        burstiness, ramp-up) taken from `arrivals`."""
        return cls(date=date or dt.datetime.now().strftime("%Y%m%d-%H%M%S"), backend=backend, label=label,
                   model_id=model_id, tokenizer_id=tokenizer_id, num_prompts=num_prompts,
                   request_rate=arrivals.request_rate, burstiness=arrivals.burstiness,
                   max_concurrency=max_concurrency, ramp_up_strategy=arrivals.ramp_up_strategy,
                   ramp_up_start_rps=arrivals.ramp_up_start_rps, ramp_up_end_rps=arrivals.ramp_up_end_rps,
                   metadata=dict(metadata or {}), seed=seed, tokenizer=tokenizer,
                   sampling=dict(sampling or {}), ignore_eos=ignore_eos,
                   rps_change_events=rps_change_events)


class BenchResult(_Record):
    """A summarised bench run. Build it with `servelab.metrics.summary.summarize`, attach
    run information with `with_run`, server/GPU series with `with_server`/`with_gpu`."""

    duration_s: float
    completed: int
    failed: int
    failed_by_reason: dict[str, int]
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    request_goodput: float | None
    output_throughput: float
    total_token_throughput: float
    max_output_tokens_per_s: float
    max_concurrent_requests: int
    peak_in_flight_requests: int
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2el: LatencyStats
    client_queue: LatencyStats
    e2el_incl_queue: LatencyStats
    traps: MeasurementTraps
    percentile_metrics: tuple[MetricName | QueueMetricName, ...]
    goodput_slo: GoodputSLO | None
    client: ClientHealth
    details: RequestDetails
    partial: bool = False
    run: RunInfo | None = None
    server: ServerSeries | None = None
    gpu: GpuSeries | None = None
    engine_spec_decode: SpecDecodeStats | None = None  # the measurement's own (replicas combined)

    @property
    def spec_decode(self) -> SpecDecodeStats | None:
        """Speculative decoding over the run: the server's counters (scraped), else those
        the measurement combined (an experiment's replicas, the offline simulator's
        engines); None without drafts."""
        if self.server is not None and self.server.spec_decode is not None:
            return self.server.spec_decode
        return self.engine_spec_decode

    def latency(self, metric: MetricName) -> LatencyStats:
        """The stats of one latency metric by name."""
        return {"ttft": self.ttft, "tpot": self.tpot, "itl": self.itl, "e2el": self.e2el}[metric]

    def with_run(self, run: RunInfo) -> BenchResult:
        return self.model_copy(update={"run": run})

    def with_server(self, server: ServerSeries) -> BenchResult:
        return self.model_copy(update={"server": server})

    def with_gpu(self, gpu: GpuSeries) -> BenchResult:
        return self.model_copy(update={"gpu": gpu})

    def as_partial(self) -> BenchResult:
        """The same figures marked as from an interrupted run."""
        return self.model_copy(update={"partial": True})

    def to_json_dict(self, detailed: bool = False) -> dict[str, Any]:
        """The result file's JSON object: vLLM's keys in vLLM's order, then ``servelab``.

        `detailed` adds vLLM's per-request lists (``--save-detailed``) and servelab's
        per-request scheduling lag and slot wait; it raises ValueError on a result
        summarised without per-request ITLs (`SummaryOptions(per_request_itls=False)`).
        """
        if detailed and self.details.itls_s is None:
            raise ValueError("a detailed result needs per-request ITLs, and this one was "
                             "summarised without them: summarise with "
                             "SummaryOptions(per_request_itls=True) to write it detailed")
        out: dict[str, Any] = {}
        if self.run is not None:
            _put_run_keys(out, self.run)
        out["duration"] = self.duration_s
        out["completed"] = self.completed
        out["failed"] = self.failed
        out["total_input_tokens"] = self.total_input_tokens
        out["total_output_tokens"] = self.total_output_tokens
        out["request_throughput"] = self.request_throughput
        out["request_goodput"] = self.request_goodput
        out["output_throughput"] = self.output_throughput
        out["total_token_throughput"] = self.total_token_throughput
        d = self.details
        if detailed:
            out["input_lens"] = list(d.input_lens)
            out["output_lens"] = list(d.output_lens)
            out["ttfts"] = list(d.ttfts_s)
            out["itls"] = [list(x) for x in d.itls_s or ()]
        # vLLM keeps these two lists even without --save-detailed.
        out["latencies"] = list(d.latencies_s)
        if detailed:
            out["start_times"] = list(d.start_times_s)
        out["queue_times"] = list(d.queue_times_s)
        if detailed:
            out["generated_texts"] = list(d.generated_texts)
            out["errors"] = list(d.errors)
        out["max_output_tokens_per_s"] = self.max_output_tokens_per_s
        out["max_concurrent_requests"] = self.max_concurrent_requests
        out["rtfx"] = 0.0  # vLLM's audio figure: no audio here
        if self.run is not None and self.run.rps_change_events:
            out["rps_change_events"] = [e.model_dump() for e in self.run.rps_change_events]
        sd = self.spec_decode
        if sd is not None:  # vLLM's keys, in vLLM's order
            out["spec_decode_acceptance_rate"] = sd.acceptance_rate_pct
            out["spec_decode_acceptance_length"] = sd.acceptance_length
            out["spec_decode_num_drafts"] = sd.num_drafts
            out["spec_decode_draft_tokens"] = sd.draft_tokens
            out["spec_decode_accepted_tokens"] = sd.accepted_tokens
            out["spec_decode_per_position_acceptance_rates"] = list(sd.per_position_acceptance)
        for metric in METRIC_NAMES:
            if metric in self.percentile_metrics:
                _put_latency_keys(out, metric, self.latency(metric))
        for key, stats in self.queue_metrics():
            _put_latency_keys(out, key, stats)
        out["servelab"] = self._servelab_dict(detailed)
        return out

    def queue_metrics(self) -> list[tuple[str, LatencyStats]]:
        """vLLM's client-queue metrics as (key, stats), those named in
        --percentile-metrics: the time requests waited in the client (for a
        --max-concurrency slot, or behind its own schedule) when a cap was set, and E2E
        latency including it when the rate was finite too."""
        run = self.run
        if run is None or run.max_concurrency is None:
            return []
        out = []
        if "client_queue_time" in self.percentile_metrics:
            out.append(("client_queue_time", self.client_queue))
        if "e2el_including_client_queue" in self.percentile_metrics and not math.isinf(run.request_rate):
            out.append(("e2el_including_client_queue", self.e2el_incl_queue))
        return out

    def _servelab_dict(self, detailed: bool) -> dict[str, Any]:
        c = self.client
        extras: dict[str, Any] = {
            "version": __version__,
            "tokenizer": self.run.tokenizer if self.run else None,
            "seed": self.run.seed if self.run else None,
            # The sampling fields every request carried ({}: none, the server's defaults).
            "sampling": dict(self.run.sampling) if self.run else None,
            "partial": self.partial,
            "failed_by_reason": dict(self.failed_by_reason),
            "goodput_slo_ms": self.goodput_slo.as_ms_by_metric() if self.goodput_slo else None,
            "peak_in_flight_requests": self.peak_in_flight_requests,
            "sched_lag_ms": {
                "mean": c.sched_lag.mean_ms,
                "p99": c.sched_lag.p99_ms,
                "max": c.sched_lag.max_ms,
            },
            "slot_wait_ms": {"mean": c.slot_wait.mean_ms, "max": c.slot_wait.max_ms},
            "mean_intended_gap_ms": c.mean_intended_gap_ms,
            "sched_lag_threshold_ms": c.sched_lag_threshold_ms,
            "client_fell_behind": c.client_fell_behind,
            "ignore_eos": self.run.ignore_eos if self.run else None,
            "traps": self.traps.model_dump(),
            "server_metrics": self.server.to_json_dict() if self.server else None,
            "gpu": self.gpu.to_json_dict() if self.gpu else None,
        }
        if detailed:
            extras["sched_lags_ms"] = list(self.details.sched_lags_ms)
            extras["slot_waits_ms"] = list(self.details.slot_waits_ms)
            extras["error_kinds"] = list(self.details.error_kinds)
        return extras


def _put_run_keys(out: dict[str, Any], run: RunInfo) -> None:
    # vLLM's order: set-up keys, then --metadata (which may overwrite them), then traffic.
    out["date"] = run.date
    out["endpoint_type"] = run.backend
    out["backend"] = run.backend
    out["label"] = run.label
    out["model_id"] = run.model_id
    out["tokenizer_id"] = run.tokenizer_id
    out["num_prompts"] = run.num_prompts
    for key, value in run.metadata.items():
        out[key] = value
    out["request_rate"] = rate_to_json(run.request_rate)
    out["burstiness"] = run.burstiness
    out["max_concurrency"] = run.max_concurrency
    if run.ramp_up_strategy is not None:
        out["ramp_up_strategy"] = run.ramp_up_strategy
        out["ramp_up_start_rps"] = run.ramp_up_start_rps
        out["ramp_up_end_rps"] = run.ramp_up_end_rps


def _put_latency_keys(out: dict[str, Any], metric: str, stats: LatencyStats) -> None:
    out[f"mean_{metric}_ms"] = stats.mean_ms
    out[f"median_{metric}_ms"] = stats.median_ms
    out[f"std_{metric}_ms"] = stats.std_ms
    for pv in stats.percentiles:
        out[f"p{pv.key_word}_{metric}_ms"] = pv.value_ms


def parse_metadata(items: list[str]) -> dict[str, str]:
    """Parse ``--metadata KEY=VALUE ...`` (split at the first ``=``, both sides stripped)."""
    parsed: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ServelabError(f"--metadata: {item!r} is not KEY=VALUE")
        parsed[key.strip()] = value.strip()
    return parsed

