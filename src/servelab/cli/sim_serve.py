"""`servelab sim serve`: start the simulated engine as an OpenAI-compatible HTTP server.

`register_serve(sim_app)` adds the command to the `sim` group (`servelab.cli.sim`). The
engine flags are `servelab sim run`'s (vLLM's names), validated by the same function. The
server prints vLLM's startup lines (model loading, KV cache memory and size, maximum
concurrency) with the planner's figures, then serves until SIGTERM or SIGINT, on which it
aborts in-flight requests (their streams end with finish_reason "abort") and exits 0.

    python -m servelab.cli.sim_serve --model Qwen/Qwen3-14B --gpu L40S --port 8000
runs the same command without the `servelab` CLI around it.
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from servelab.cli.engine_flags import EngineFlags, sim_engine_flags
from servelab.errors import ServelabError


# raw: the startup lines echo the flags as given. No --async-scheduling: the server's
# engine (`run_server`) does not model it.
@sim_engine_flags(raw=True, async_scheduling=False)
def serve_cmd(
    *,
    engine: EngineFlags,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", help="Port to listen on (0: any free port, printed)."),
    served_model_name: Optional[str] = typer.Option(None, "--served-model-name", help="Model id clients send and /v1/models lists (default: --model)."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="tokenizer.json, a model directory holding one, or a cached HF name (default: the built-in servelab-bpe-32k)."),
    time_scale: float = typer.Option(1.0, "--time-scale", help="Simulated seconds per wall second (> 1: faster than real time, for quick tests; timings and /metrics are in simulated seconds)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the generated token text."),
    stats_interval: float = typer.Option(10.0, "--stats-interval", help="Seconds between vLLM's 'Engine 000: Avg prompt throughput' lines."),
) -> None:
    """Serve the simulated engine over HTTP (OpenAI API, SSE, /metrics), streaming tokens
    on the simulated schedule. The simulator always generates max_tokens tokens (as with
    ignore_eos): it has no model to emit an end-of-sequence token."""
    from servelab.sim.serve.app import ServeOptions, run_server

    if not time_scale > 0:
        raise ServelabError(f"--time-scale {time_scale}: must be > 0")
    if not stats_interval > 0:
        raise ServelabError(f"--stats-interval {stats_interval}: must be > 0")
    if not 0 <= port < 65536:
        raise ServelabError(f"--port {port}: must be in 0..65535")
    opts = engine.options()
    given = {"host": host, "port": port, "model": engine.model, "gpu": engine.gpu,
             "served_model_name": served_model_name, "quantization": engine.quantization,
             "tokenizer": tokenizer, "max_num_seqs": engine.max_num_seqs,
             "max_num_batched_tokens": engine.max_num_batched_tokens,
             "max_model_len": engine.max_model_len,
             "gpu_memory_utilization": engine.gpu_memory_utilization,
             "tensor_parallel_size": engine.tensor_parallel_size if engine.tensor_parallel_size != 1 else None,
             "pipeline_parallel_size": engine.pipeline_parallel_size if engine.pipeline_parallel_size != 1 else None,
             "block_size": engine.block_size, "kv_cache_dtype": engine.kv_cache_dtype,
             "enable_prefix_caching": None if engine.enable_prefix_caching else False}
    serve = ServeOptions(host=host, port=port, served_model_name=served_model_name or opts.model,
                         tokenizer=tokenizer, time_scale=time_scale, seed=seed,
                         stats_interval_s=stats_interval)
    code = run_server(opts, serve, {k: v for k, v in given.items() if v is not None})
    raise typer.Exit(code)


def register_serve(sim_app: typer.Typer) -> None:
    """Add `serve` to the `servelab sim` command group."""
    sim_app.command("serve")(serve_cmd)


def main() -> None:
    """`python -m servelab.cli.sim_serve`: the serve command on its own."""
    from rich.console import Console

    # click's plain help, as the servelab CLI's: the sim adapter reads the flags off it
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    register_serve(app)
    try:
        app(standalone_mode=False)
    except ServelabError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
