"""`servelab sim serve`: start the simulated engine as an OpenAI-compatible HTTP server.

`register_serve(sim_app)` adds the command to the `sim` group (`servelab.cli.sim`). The
engine flags are `servelab sim run`'s (vLLM's names), validated by the same function. The
server prints vLLM's startup lines (model loading, KV cache memory and size, maximum
concurrency) with the planner's figures, then serves until SIGTERM or SIGINT, on which it
aborts in-flight requests (their streams end with finish_reason "abort") and exits 0.

    python -m servelab.sim.server_cli --model Qwen/Qwen3-14B --gpu L40S --port 8000
runs the same command without the `servelab` CLI around it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from servelab.errors import ServelabError
from servelab.plan.args import VLLM_DEFAULT_GPU_MEMORY_UTILIZATION


def serve_cmd(
    model: str = typer.Option(..., "--model", help="Model name from the catalog (e.g. Qwen/Qwen3-14B)."),
    gpu: str = typer.Option(..., "--gpu", help="GPU name from the catalog (e.g. L40S, H200)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", help="Port to listen on (0: any free port, printed)."),
    served_model_name: Optional[str] = typer.Option(None, "--served-model-name", help="Model id clients send and /v1/models lists (default: --model)."),
    quantization: Optional[str] = typer.Option(None, "--quantization", help="Weight format: awq, gptq, fp8 (default: the model's)."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="tokenizer.json, a model directory holding one, or a cached HF name (default: the built-in servelab-bpe-32k)."),
    max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs", help="vLLM's --max-num-seqs (default: vLLM's for this GPU)."),
    max_num_batched_tokens: Optional[int] = typer.Option(None, "--max-num-batched-tokens", help="vLLM's token budget per step."),
    max_model_len: Optional[int] = typer.Option(None, "--max-model-len", help="Longest request (prompt + output tokens)."),
    gpu_memory_utilization: Optional[float] = typer.Option(None, "--gpu-memory-utilization", help=f"Fraction of GPU memory vLLM may use (default {VLLM_DEFAULT_GPU_MEMORY_UTILIZATION}, recent vLLM's)."),
    enable_prefix_caching: bool = typer.Option(True, "--enable-prefix-caching/--no-enable-prefix-caching", help="Automatic prefix caching."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp", help="GPUs, tensor parallel."),
    pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp", help="Pipeline stages."),
    block_size: Optional[int] = typer.Option(None, "--block-size", help="KV block size in tokens (default 16)."),
    kv_cache_dtype: Optional[str] = typer.Option(None, "--kv-cache-dtype", help="auto or fp8."),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help="Calibration JSON from `servelab sim calibrate` (default: shipped factors)."),
    time_scale: float = typer.Option(1.0, "--time-scale", help="Simulated seconds per wall second (> 1: faster than real time, for quick tests; timings and /metrics are in simulated seconds)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the generated token text."),
    stats_interval: float = typer.Option(10.0, "--stats-interval", help="Seconds between vLLM's 'Engine 000: Avg prompt throughput' lines."),
) -> None:
    """Serve the simulated engine over HTTP (OpenAI API, SSE, /metrics), streaming tokens
    on the simulated schedule. The simulator always generates max_tokens tokens (as with
    ignore_eos): it has no model to emit an end-of-sequence token."""
    from servelab.cli.sim import engine_options
    from servelab.sim.server_app import ServeOptions, run_server

    if not time_scale > 0:
        raise ServelabError(f"--time-scale {time_scale}: must be > 0")
    if not stats_interval > 0:
        raise ServelabError(f"--stats-interval {stats_interval}: must be > 0")
    if not 0 <= port < 65536:
        raise ServelabError(f"--port {port}: must be in 0..65535")
    opts = engine_options(
        model=model, gpu=gpu, quantization=quantization, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization, enable_prefix_caching=enable_prefix_caching,
        tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size,
        block_size=block_size, kv_cache_dtype=kv_cache_dtype, replicas=1,
        router_policy="round_robin", calibration=calibration)
    given = {"host": host, "port": port, "model": model, "gpu": gpu,
             "served_model_name": served_model_name, "quantization": quantization,
             "tokenizer": tokenizer, "max_num_seqs": max_num_seqs,
             "max_num_batched_tokens": max_num_batched_tokens, "max_model_len": max_model_len,
             "gpu_memory_utilization": gpu_memory_utilization,
             "tensor_parallel_size": tensor_parallel_size if tensor_parallel_size != 1 else None,
             "pipeline_parallel_size": pipeline_parallel_size if pipeline_parallel_size != 1 else None,
             "block_size": block_size, "kv_cache_dtype": kv_cache_dtype,
             "enable_prefix_caching": None if enable_prefix_caching else False}
    serve = ServeOptions(host=host, port=port, served_model_name=served_model_name or model,
                         tokenizer=tokenizer, time_scale=time_scale, seed=seed,
                         stats_interval_s=stats_interval)
    code = run_server(opts, serve, {k: v for k, v in given.items() if v is not None})
    raise typer.Exit(code)


def register_serve(sim_app: typer.Typer) -> None:
    """Add `serve` to the `servelab sim` command group."""
    sim_app.command("serve")(serve_cmd)


def main() -> None:
    """`python -m servelab.sim.server_cli`: the serve command on its own."""
    from rich.console import Console

    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
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
