"""From validated options to a running simulator server: engine, startup lines, signals.

`run_server` builds the engine (`build_engine`, the planner's KV pool), prints vLLM's
startup lines with the planner's figures, serves until SIGTERM or SIGINT, then aborts
in-flight requests and returns the exit code (0).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass

from servelab.errors import ServelabError
from servelab.sim.engine import SimEngine, build_engine
from servelab.sim.serve.metrics import CacheConfig
from servelab.sim.serve.server import SIM_VERSION, ServerConfig, SimServer
from servelab.sim.serve.log import StartupFacts, VllmLog, log_listening, log_startup
from servelab.sim.setup import SimOptions
from servelab.workload.tokenizer import load_tokenizer


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """What `serve` needs besides the engine: where to listen and how to present itself."""

    host: str
    port: int
    served_model_name: str
    tokenizer: str | None
    time_scale: float
    seed: int
    stats_interval_s: float


def startup_facts(opts: SimOptions, engine: SimEngine, served_model_name: str, load_s: float,
                  non_default_args: dict[str, object]) -> StartupFacts:
    """The figures of the startup lines: the planner's memory plan and the engine's limits."""
    mem, cfg, args = engine.memory, engine.config, opts.engine_args
    tokens = int(mem.kv_cache_tokens)
    return StartupFacts(
        version=SIM_VERSION, model=opts.model, served_model_name=served_model_name,
        non_default_args=non_default_args, max_model_len=cfg.max_model_len,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        tensor_parallel_size=int(args.tensor_parallel_size),
        pipeline_parallel_size=int(args.pipeline_parallel_size),
        quantization=opts.quantization, kv_cache_dtype=str(args.kv_cache_dtype),
        enable_prefix_caching=cfg.enable_prefix_caching, weights_gib=float(mem.weights_gib),
        load_s=load_s, kv_cache_gib=float(mem.kv_cache_gib), kv_cache_tokens=tokens,
        max_concurrency=float(mem.max_concurrency),
        speculative_method=cfg.speculative.method if cfg.speculative is not None else None,
        async_scheduling=cfg.async_scheduling)


def cache_config(opts: SimOptions, engine: SimEngine) -> CacheConfig:
    """`vllm:cache_config_info`'s labels for this engine."""
    mem, cfg, args = engine.memory, engine.config, opts.engine_args
    return CacheConfig(
        block_size=cfg.block_size, num_gpu_blocks=int(mem.num_gpu_blocks),
        kv_cache_size_tokens=int(mem.kv_cache_tokens),
        kv_cache_max_concurrency=round(float(mem.max_concurrency), 2),
        kv_cache_memory_bytes=int(float(mem.kv_cache_gib) * 2**30),
        gpu_memory_utilization=float(mem.gpu_memory_utilization),
        enable_prefix_caching=cfg.enable_prefix_caching, cache_dtype=str(args.kv_cache_dtype))


async def _serve(server: SimServer, log: VllmLog, host: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        port = await server.start()
    except OSError as exc:
        await server.stop()
        raise ServelabError(f"--host {host} --port {server.config.port}: cannot listen "
                            f"({exc.strerror or exc})") from None
    log_listening(log, host, port)
    try:
        await stop.wait()
    finally:
        log.info("APIServer", "launcher.py:80", "Shutting down FastAPI HTTP server.")
        await server.stop()


def run_server(opts: SimOptions, serve: ServeOptions, non_default_args: dict[str, object]) -> int:
    """Build, announce and serve until a signal; return the process exit code."""
    log = VllmLog(lambda line: print(line, flush=True), os.getpid())
    t0 = time.monotonic()
    engine = build_engine(opts.model, opts.gpu, opts.quantization, opts.engine_args, opts.calibration,
                          opts.async_scheduling, opts.profile, opts.speculative, layout=opts.nodes)
    load_s = time.monotonic() - t0
    tokenizer = load_tokenizer(serve.tokenizer)
    log_startup(log, startup_facts(opts, engine, serve.served_model_name, load_s, non_default_args))
    config = ServerConfig(served_model_name=serve.served_model_name, model=opts.model,
                          max_model_len=engine.config.max_model_len, host=serve.host,
                          port=serve.port, time_scale=serve.time_scale, seed=serve.seed,
                          stats_interval_s=serve.stats_interval_s)
    server = SimServer(engine, tokenizer, tokenizer.info.vocab_size, cache_config(opts, engine),
                       config, log)
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(_serve(server, log, serve.host))
    return 0
