"""The simulator server's `/metrics`: vLLM's metric names, labels and histogram buckets.

Counters and gauges are read from the engine at scrape time (one source of truth, nothing
to keep in sync); latency histograms are observed by the server as requests progress. Each
server owns a private `CollectorRegistry`, so several servers in one process (tests, a
router in front of replicas) never share or clash over metrics.

Names, help texts, label sets (`model_name`, `engine="0"`; `vllm:cache_config_info` carries
`engine` and the cache settings but no `model_name`) and bucket bounds are those of vLLM
0.32.0's `/metrics`. Latencies are in simulated seconds (equal to wall seconds unless the
server runs with `--time-scale`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from servelab.sim.speculative import SpecCounters

# vLLM 0.32.0's bucket bounds (seconds).
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                  2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                     50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")

CONTENT_TYPE = CONTENT_TYPE_LATEST


class EngineCounters(Protocol):
    """What `/metrics` reads from the engine at each scrape (the engine's `stats`)."""

    @property
    def running(self) -> int: ...
    @property
    def waiting(self) -> int: ...
    @property
    def kv_usage_frac(self) -> float: ...
    @property
    def num_preemptions_total(self) -> int: ...
    @property
    def prefix_cache_queries_total(self) -> int: ...
    @property
    def prefix_cache_hits_total(self) -> int: ...
    @property
    def prompt_tokens_total(self) -> int: ...
    @property
    def generation_tokens_total(self) -> int: ...
    @property
    def spec_decode(self) -> SpecCounters | None: ...


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """The labels of `vllm:cache_config_info` (vLLM prints them as strings)."""

    block_size: int
    num_gpu_blocks: int
    kv_cache_size_tokens: int
    kv_cache_max_concurrency: float
    kv_cache_memory_bytes: int
    gpu_memory_utilization: float
    enable_prefix_caching: bool
    cache_dtype: str

    def labels(self) -> dict[str, str]:
        return {
            "block_size": str(self.block_size),
            "cache_dtype": self.cache_dtype,
            "enable_prefix_caching": str(self.enable_prefix_caching),
            "gpu_memory_utilization": str(self.gpu_memory_utilization),
            "kv_cache_max_concurrency": str(self.kv_cache_max_concurrency),
            "kv_cache_memory_bytes": str(self.kv_cache_memory_bytes),
            "kv_cache_size_tokens": str(self.kv_cache_size_tokens),
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(self.num_gpu_blocks),
            "sliding_window": "None",
        }


@dataclass(frozen=True, slots=True)
class RequestTimes:
    """One finished request's phases in simulated seconds (for the latency histograms).

    `scheduled_s` is the start of the step that produced the first token (the engine does
    not report when a chunked prefill's first chunk ran, so queue time includes earlier
    chunks); `first_token_s`/`last_token_s` are when tokens were emitted.
    """

    arrival_s: float
    scheduled_s: float
    first_token_s: float
    last_token_s: float


class _EngineCollector:
    """Yields the engine-state families at scrape time."""

    def __init__(self, read: Callable[[], EngineCounters], extra_waiting: Callable[[], int],
                 labels: list[str], cache: CacheConfig) -> None:
        self._read = read
        self._extra_waiting = extra_waiting
        self._labels = labels
        self._cache = cache

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=["model_name", "engine"])
        g.add_metric(self._labels, value)
        return g

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        c = CounterMetricFamily(name, doc, labels=["model_name", "engine"])
        c.add_metric(self._labels, value)
        return c

    def collect(self) -> Iterator[Metric]:
        s = self._read()
        yield self._gauge("vllm:num_requests_running",
                          "Number of requests in model execution batches.", s.running)
        yield self._gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                          s.waiting + self._extra_waiting())
        yield self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                          s.kv_usage_frac)
        yield self._counter("vllm:prefix_cache_queries",
                            "Prefix cache queries, in terms of number of queried tokens.",
                            s.prefix_cache_queries_total)
        yield self._counter("vllm:prefix_cache_hits",
                            "Prefix cache hits, in terms of number of cached tokens.",
                            s.prefix_cache_hits_total)
        yield self._counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                            s.num_preemptions_total)
        yield self._counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                            s.prompt_tokens_total)
        yield self._counter("vllm:generation_tokens", "Number of generation tokens processed.",
                            s.generation_tokens_total)
        sd = s.spec_decode
        if sd is not None:  # vLLM exports these only with a speculative config
            yield self._counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
                                sd.num_drafts)
            yield self._counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
                                sd.num_draft_tokens)
            yield self._counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                                sd.num_accepted_tokens)
            pos = CounterMetricFamily("vllm:spec_decode_num_accepted_tokens_per_pos",
                                      "Accepted tokens per draft position.",
                                      labels=["model_name", "engine", "position"])
            for i, n in enumerate(sd.accepted_per_pos):
                pos.add_metric([*self._labels, str(i)], n)
            yield pos
        info = self._cache.labels()
        info["engine"] = self._labels[1]
        g = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                              labels=sorted(info))
        g.add_metric([info[k] for k in sorted(info)], 1.0)
        yield g


class VllmMetrics:
    """One server's Prometheus registry with vLLM's names.

    `read_stats` returns the engine's counters at scrape time; `extra_waiting` counts
    requests the server holds that the engine has not seen yet (they arrived during a step
    and join the next one), which vLLM would count as waiting too.
    """

    def __init__(self, model_name: str, read_stats: Callable[[], EngineCounters],
                 extra_waiting: Callable[[], int], cache: CacheConfig, engine_index: int = 0) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._labels = [model_name, str(engine_index)]
        self.registry.register(_EngineCollector(read_stats, extra_waiting, self._labels, cache))
        names = ["model_name", "engine"]

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            h = Histogram(name, doc, names, registry=self.registry, buckets=buckets)
            return h.labels(*self._labels)

        self._ttft = hist("vllm:time_to_first_token_seconds",
                          "Histogram of time to first token in seconds.", TTFT_BUCKETS_S)
        self._itl = hist("vllm:inter_token_latency_seconds",
                         "Histogram of inter-token latency in seconds.", ITL_BUCKETS_S)
        self._e2e = hist("vllm:e2e_request_latency_seconds",
                         "Histogram of e2e request latency in seconds.", REQUEST_BUCKETS_S)
        self._queue = hist("vllm:request_queue_time_seconds",
                           "Histogram of time spent in WAITING phase for request.", REQUEST_BUCKETS_S)
        self._prefill = hist("vllm:request_prefill_time_seconds",
                             "Histogram of time spent in PREFILL phase for request.", REQUEST_BUCKETS_S)
        self._decode = hist("vllm:request_decode_time_seconds",
                            "Histogram of time spent in DECODE phase for request.", REQUEST_BUCKETS_S)
        success = Counter("vllm:request_success", "Count of successfully processed requests.",
                          ["model_name", "engine", "finished_reason"], registry=self.registry)
        self._success = {r: success.labels(*self._labels, r) for r in FINISHED_REASONS}

    def observe_first_token(self, ttft_s: float) -> None:
        """A request's first token was emitted `ttft_s` simulated seconds after arrival."""
        self._ttft.observe(ttft_s)

    def observe_inter_token(self, gap_s: float) -> None:
        """Tokens of one request were emitted `gap_s` after its previous ones."""
        self._itl.observe(gap_s)

    def observe_finished(self, times: RequestTimes, finished_reason: str) -> None:
        """A request finished normally (its phases feed the request histograms)."""
        self._e2e.observe(times.last_token_s - times.arrival_s)
        self._queue.observe(times.scheduled_s - times.arrival_s)
        self._prefill.observe(times.first_token_s - times.scheduled_s)
        self._decode.observe(times.last_token_s - times.first_token_s)
        self._success.get(finished_reason, self._success["length"]).inc()

    def observe_aborted(self) -> None:
        """A request was aborted (client gone, server shutting down)."""
        self._success["abort"].inc()

    def render(self) -> bytes:
        """The exposition text of every metric (Prometheus text format 0.0.4)."""
        return generate_latest(self.registry)
