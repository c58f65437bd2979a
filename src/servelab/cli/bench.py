"""`servelab bench`: send a workload to an OpenAI-compatible target and measure it.

Flag names follow `vllm bench serve`. `--goodput` and `--metadata` take several values
after one flag, as vLLM's do (`--goodput ttft:250 tpot:100`, `--metadata a=1 b=2`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

import typer

from servelab.benchmark import BenchOutcome, BenchRequest, SaveTo, run_bench
from servelab.cli.bench_refused import refused_flags
from servelab.cli.flags import load_flags, sampling_flags, workload_flags
from servelab.cli.output import make_console
from servelab.client.backends import SamplingParams, get_backend
from servelab.client.console import summary_lines, warnings_for
from servelab.client.target import TargetConfig
from servelab.errors import ServelabError
from servelab.metrics.result import parse_metadata
from servelab.metrics.summary import (
    SummaryOptions,
    parse_goodput,
    parse_metric_percentiles,
    parse_percentile_metrics,
)
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DatasetOptions



def _headers(items: list[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ServelabError(f"--header {item!r}: expected KEY=VALUE")
        out.append((key.strip(), value.strip()))
    return tuple(out)


def _extra_body(text: str | None) -> dict[str, object]:
    if text is None:
        return {}
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise ServelabError(f"--extra-body: not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise ServelabError("--extra-body: expected a JSON object, e.g. '{\"top_k\": 20}'")
    return body


def _target(base_url: str | None, host: str, port: int, endpoint: str | None, backend: str,
            model: str, timeout_s: float, api_key: str | None) -> TargetConfig:
    be = get_backend(backend)
    url = (base_url or f"http://{host}:{port}").rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServelabError(f"--base-url {url!r} must look like http://HOST:PORT")
    if not timeout_s > 0:
        raise ServelabError(f"--request-timeout-s {timeout_s}: must be > 0")
    return TargetConfig(base_url=url, endpoint=endpoint or be.default_endpoint, backend=be,
                        model=model, request_timeout_s=timeout_s,
                        api_key=api_key or os.environ.get("OPENAI_API_KEY") or None)


@refused_flags
@workload_flags
@load_flags
@sampling_flags
def bench(
    *,
    dataset: DatasetOptions,
    seed: int,
    arrivals: ArrivalOptions,
    max_concurrency: Optional[int],
    num_warmups: int,
    sampling: SamplingParams,
    base_url: Optional[str] = typer.Option(None, "--base-url", help="Target URL, e.g. http://127.0.0.1:8000 (overrides --host/--port)."),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port"),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="Path requests go to (default: the backend's)."),
    backend: str = typer.Option("openai", "--backend", help="openai (vllm bench serve's default), openai-chat, vllm or sglang (these two also ask for per-chunk token counts)."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name (default: the first of /v1/models)."),
    served_model_name: Optional[str] = typer.Option(None, "--served-model-name", help="Name sent in requests (default: --model)."),
    lora_modules: Optional[list[str]] = typer.Option(None, "--lora-modules", help="LoRA adapter names served by the server; each request asks for one."),
    lora_assignment: str = typer.Option("random", "--lora-assignment", help="random (seeded by --seed) or round-robin."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="Ask for exactly max_tokens tokens (always on for random and timed_trace, as in vLLM)."),
    logprobs: Optional[int] = typer.Option(None, "--logprobs", help="Log-probabilities per token to ask for (default: none)."),
    header: Optional[list[str]] = typer.Option(None, "--header", help="KEY=VALUE headers sent with every request (after the defaults: they override them)."),
    extra_body: Optional[str] = typer.Option(None, "--extra-body", help="JSON object merged into every request body, e.g. '{\"chat_template_kwargs\":{\"enable_thinking\":false}}'."),
    request_id_prefix: Optional[str] = typer.Option(None, "--request-id-prefix", help="Request i carries x-request-id PREFIX<i> (default: bench-<8 hex>-)."),
    ready_check_timeout_sec: int = typer.Option(0, "--ready-check-timeout-sec", help="Retry the initial test request up to this long (s) while the server is starting; 0: one attempt."),
    profile: bool = typer.Option(False, "--profile", help="POST /start_profile before and /stop_profile after the run (vLLM started with --profiler-config)."),
    insecure: bool = typer.Option(False, "--insecure", help="Accept any TLS certificate (self-signed https servers)."),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code", help="Accepted for vLLM's command lines; servelab's tokenizer.json loader runs no model code, so it changes nothing."),
    tokenizer_mode: str = typer.Option("auto", "--tokenizer-mode", help="auto or hf (both: the tokenizer.json fast tokenizer); slow, mistral and custom are refused."),
    percentile_metrics: Optional[str] = typer.Option(None, "--percentile-metrics", help="Comma-separated: ttft, tpot, itl, e2el (default: ttft,tpot,itl)."),
    metric_percentiles: str = typer.Option("99", "--metric-percentiles"),
    goodput: Optional[list[str]] = typer.Option(None, "--goodput", help="SLOs in ms: ttft:MS tpot:MS e2el:MS."),
    save_result: bool = typer.Option(False, "--save-result"),
    result_dir: Optional[Path] = typer.Option(None, "--result-dir"),
    result_filename: Optional[str] = typer.Option(None, "--result-filename"),
    append_result: bool = typer.Option(False, "--append-result"),
    metadata: Optional[list[str]] = typer.Option(None, "--metadata", help="KEY=VALUE pairs recorded in the result."),
    save_detailed: bool = typer.Option(False, "--save-detailed", help="Per-request lengths, TTFTs, ITLs, texts, errors, lags."),
    request_timeout_s: float = typer.Option(600.0, "--request-timeout-s"),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="Bearer token (default: $OPENAI_API_KEY); never written anywhere."),
    num_client_processes: int = typer.Option(1, "--num-client-processes", help="Client processes sharing the schedule."),
    ray_workers: int = typer.Option(0, "--ray-workers", help="Client actors on a Ray cluster sharing the schedule, spread over its nodes, with one start time (needs servelab[ray]; the server's URL must be reachable from every node)."),
    ray: str = typer.Option("auto", "--ray", help="Ray cluster for --ray-workers: HOST:PORT or auto."),
    label: Optional[str] = typer.Option(None, "--label", help="Result file name prefix and label (default: --backend)."),
    no_progress: bool = typer.Option(False, "--no-progress", "--disable-tqdm", help="No live progress bar."),
    json_out: bool = typer.Option(False, "--json", help="Print the result JSON on stdout."),
) -> None:
    """Send a workload to an OpenAI-compatible server and measure TTFT, TPOT, ITL, throughput."""
    del trust_remote_code  # accepted for vLLM's command lines; see its help
    # vLLM's several-values flags (`--goodput ttft:250 tpot:100`) arrive repeated, one value
    # each: the CLI's entry expands them (servelab.cli.flags.expand_nargs).
    goodput_items, metadata_items = list(goodput or []), list(metadata or [])
    if tokenizer_mode not in ("auto", "hf"):
        raise ServelabError(f"--tokenizer-mode {tokenizer_mode}: servelab loads tokenizer.json "
                            "files with the tokenizers library (vLLM's 'hf' fast tokenizer); "
                            "use auto or hf")
    if ray_workers < 0:
        raise ServelabError(f"--ray-workers {ray_workers}: must be >= 1 (0: no Ray)")
    target = dataclasses.replace(_target(base_url, host, port, endpoint, backend, served_model_name or model or "",
                                         request_timeout_s, api_key), verify_tls=not insecure)
    remote = None
    if ray_workers:
        from servelab.distributed.raybench import RayClients

        remote = RayClients(ray, ray_workers)
    req = BenchRequest(
        target=target, dataset=dataset, seed=seed, arrivals=arrivals, sampling=sampling,
        summary=SummaryOptions(percentile_metrics=parse_percentile_metrics(percentile_metrics or "ttft,tpot,itl"),
                               metric_percentiles=parse_metric_percentiles(metric_percentiles),
                               goodput=parse_goodput(goodput_items) if goodput_items else None,
                               per_request_itls=save_detailed),  # only a detailed result holds them
        max_concurrency=max_concurrency, num_warmups=num_warmups, model=model, label=label,
        metadata=parse_metadata(metadata_items), lora_modules=tuple(lora_modules or ()),
        lora_assignment=lora_assignment, ignore_eos=ignore_eos, logprobs=logprobs,
        headers=_headers(list(header or [])), extra_body=_extra_body(extra_body),
        request_id_prefix=request_id_prefix, ready_check_timeout_s=float(ready_check_timeout_sec),
        profile=profile, progress=not no_progress,
        save=SaveTo(result_dir, result_filename, append_result) if save_result or append_result else None,
        save_detailed=save_detailed, processes=num_client_processes, remote=remote)
    err = make_console(stderr=True)
    done = run_bench(req, lambda line: err.print(line, highlight=False, markup=False, soft_wrap=True))
    _print(done, json_out)


def _print(done: BenchOutcome, json_out: bool) -> None:
    """vLLM's summary block, warnings, each remote client's share; the exit code."""
    result, sent = done.result, done.sent
    out = make_console(stderr=json_out)
    title = " Serving Benchmark Result " + ("(partial) " if sent.interrupted else "")
    for line in summary_lines(result, title):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    for line in warnings_for(result):
        out.print(f"warning: {line}", highlight=False, markup=False, soft_wrap=True)
    for share in done.data["servelab"].get("client_workers", ()):
        lag = share["sched_lag_ms"]
        out.print(f"client worker {share['worker']} on node {share['node_id'][:12]}: {share['requests']} requests, "
                  f"scheduling lag mean {lag['mean']:.2f} / p99 {lag['p99']:.2f} / max {lag['max']:.2f} ms",
                  highlight=False, markup=False, soft_wrap=True)
    if json_out:
        sys.stdout.write(json.dumps(done.data) + "\n")
    if sent.interrupted:
        # sys.exit, not typer.Exit: in non-standalone mode click returns Exit's code
        # instead of exiting with it, and the CLI's main() does not pass it on.
        sys.exit(130)
    if result.completed == 0:
        first = next((r for r in sent.records if not r.warmup and r.error), None)
        why = f"; the first: {first.error_kind}: {first.error}" if first is not None else ""
        make_console(stderr=True).print(f"error: all {result.failed} requests failed{why}", highlight=False,
                                        markup=False, soft_wrap=True)
        sys.exit(1)


def register(app: typer.Typer) -> None:
    """Add `servelab bench` to the app."""
    app.command("bench")(bench)
