"""What the simulator server prints: vLLM's log lines, with vLLM's wording and prefixes.

servelab's engine adapters read a server's memory budget from its startup log
(`servelab.engine.logparse`) and watch its periodic stats line; printing the same lines lets
them treat the simulator like vLLM. Figures come from the planner (`servelab plan`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from servelab.sim.serve.metrics import EngineCounters

BANNER = (
    "",
    "       █     █     █▄   ▄█",
    " ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}",
    "  █▄█▀ █     █     █     █  model   {model}",
    "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
    "",
)


class VllmLog:
    """Writes `(Process pid=N) LEVEL MM-DD HH:MM:SS [source] message` lines to `write`."""

    def __init__(self, write: Callable[[str], None], pid: int,
                 wall: Callable[[], float] = time.time) -> None:
        self._write = write
        self._pid = pid
        self._wall = wall

    def info(self, process: str, source: str, message: str) -> None:
        self._line("INFO", process, source, message)

    def warning(self, process: str, source: str, message: str) -> None:
        self._line("WARNING", process, source, message)

    def _line(self, level: str, process: str, source: str, message: str) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(self._wall()))
        self._write(f"({process} pid={self._pid}) {level} {stamp} [{source}] {message}")

    def plain(self, text: str) -> None:
        """A line without vLLM's prefix (uvicorn's own lines)."""
        self._write(text)


@dataclass(frozen=True, slots=True)
class StartupFacts:
    """The figures the startup lines state (sizes in GiB, times in seconds)."""

    version: str
    model: str
    served_model_name: str
    non_default_args: dict[str, object]
    max_model_len: int
    max_num_batched_tokens: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    quantization: str | None
    kv_cache_dtype: str
    enable_prefix_caching: bool
    weights_gib: float
    load_s: float
    kv_cache_gib: float
    kv_cache_tokens: int
    max_concurrency: float
    speculative_method: str | None = None
    async_scheduling: bool = True


def log_startup(log: VllmLog, f: StartupFacts) -> None:
    """The engine's startup, from the banner to the KV cache size, as vLLM 0.25 prints it."""
    for line in BANNER:
        log.info("APIServer", "api_utils.py:339", line.format(version=f.version, model=f.model))
    log.info("APIServer", "api_utils.py:273", f"non-default args: {f.non_default_args!r}")
    log.info("APIServer", "model.py:1776", f"Using max model len {f.max_model_len}")
    if f.speculative_method is not None and not f.async_scheduling:
        log.warning("APIServer", "vllm.py:1010", (
            f"Async scheduling not supported with {f.speculative_method}-based speculative "
            "decoding and will be disabled."))
    log.info("APIServer", "vllm.py:1042", "Asynchronous scheduling is "
             + ("enabled." if f.async_scheduling else "disabled."))
    log.info("APIServer", "scheduler.py:252",
             f"Chunked prefill is enabled with max_num_batched_tokens={f.max_num_batched_tokens}.")
    log.info("EngineCore", "core.py:114", (
        f"Initializing a V1 LLM engine (v{f.version}) with config: model={f.model!r}, "
        f"tokenizer={f.model!r}, max_seq_len={f.max_model_len}, load_format=dummy, "
        f"tensor_parallel_size={f.tensor_parallel_size}, "
        f"pipeline_parallel_size={f.pipeline_parallel_size}, quantization={f.quantization}, "
        f"kv_cache_dtype={f.kv_cache_dtype}, served_model_name={f.served_model_name}, "
        f"enable_prefix_caching={f.enable_prefix_caching}, enable_chunked_prefill=True"))
    log.info("EngineCore", "model_runner.py:302",
             f"Model loading took {f.weights_gib:.2f} GiB and {f.load_s:.6f} seconds")
    log.info("EngineCore", "gpu_worker.py:538", f"Available KV cache memory: {f.kv_cache_gib:.2f} GiB")
    log.info("EngineCore", "kv_cache_utils.py:2146", f"GPU KV cache size: {f.kv_cache_tokens:,} tokens")
    log.info("EngineCore", "kv_cache_utils.py:2147",
             f"Maximum concurrency for {f.max_model_len:,} tokens per request: {f.max_concurrency:.2f}x")


def log_listening(log: VllmLog, host: str, port: int) -> None:
    """The lines after which vLLM answers requests."""
    log.info("APIServer", "api_server.py:616", f"Starting vLLM server on http://{host}:{port}")
    log.plain("INFO:     Application startup complete.")


class StatsLine:
    """vLLM's periodic "Engine 000: Avg prompt throughput ..." line.

    Throughputs are tokens per simulated second over the interval since the last call;
    the hit rate is over the interval's prefix-cache queries. Like vLLM, an idle interval
    (no tokens, nothing running or waiting) prints nothing.
    """

    def __init__(self, stats: EngineCounters, now_s: float) -> None:
        self._prev = stats
        self._prev_s = now_s

    def next(self, stats: EngineCounters, waiting: int, now_s: float) -> str | None:
        """The line for the interval ending at `now_s` (simulated seconds), or None if idle."""
        prev, dt = self._prev, max(now_s - self._prev_s, 1e-9)
        self._prev, self._prev_s = stats, now_s
        prompt = (stats.prompt_tokens_total - prev.prompt_tokens_total) / dt
        gen = (stats.generation_tokens_total - prev.generation_tokens_total) / dt
        if prompt == 0 and gen == 0 and stats.running == 0 and waiting == 0:
            return None
        queries = stats.prefix_cache_queries_total - prev.prefix_cache_queries_total
        hits = stats.prefix_cache_hits_total - prev.prefix_cache_hits_total
        hit_pct = 100.0 * hits / queries if queries else 0.0
        return (f"Engine 000: Avg prompt throughput: {prompt:.1f} tokens/s, "
                f"Avg generation throughput: {gen:.1f} tokens/s, Running: {stats.running} reqs, "
                f"Waiting: {waiting} reqs, GPU KV cache usage: {100.0 * stats.kv_usage_frac:.1f}%, "
                f"Prefix cache hit rate: {hit_pct:.1f}%")
