"""`servelab bench`: send a workload to an OpenAI-compatible target and measure it.

Flag names follow `vllm bench serve`. `--goodput` and `--metadata` take several values
after one flag, as vLLM's do (`--goodput ttft:250 tpot:100`, `--metadata a=1 b=2`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

import numpy as np
import typer

from servelab.cli.bench_refused import refused_flags
from servelab.cli.flags import load_flags, sampling_flags, workload_flags
from servelab.cli.output import make_console
from servelab.client.backends import SamplingParams, get_backend
from servelab.client.console import summary_lines, warnings_for
from servelab.client.run import RunPlan, bench_run, lora_sequence, rps_change_events
from servelab.client.sessions import detailed_columns
from servelab.client.target import TargetConfig
from servelab.client.workers import new_event_loop
from servelab.errors import ServelabError
from servelab.metrics.result import RunInfo, parse_metadata, write_result
from servelab.metrics.summary import (
    SummaryOptions,
    parse_goodput,
    parse_metric_percentiles,
    parse_percentile_metrics,
    summarize,
)
from servelab.metrics.traps import result_json
from servelab.storage import check_writable, check_writable_dir
from servelab.workload.arrivals import ArrivalOptions, rates_rps, schedule_s
from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.tokenizer import load_tokenizer

_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
# vLLM forces ignore_eos for these, so generation runs to the requested length.
_IGNORE_EOS_DATASETS = ("random", "random-mm", "timed_trace")


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


def _rps_word(rps: float | None) -> str:
    # vLLM's ramp-up rates are ints ("20"); servelab's may be fractional ("20.5").
    return f"{rps:g}" if rps is not None else "None"


def _result_path(result_dir: Path | None, filename: str | None, run: RunInfo) -> Path:
    """vLLM's result file name unless one is given: `{label}-{rate}qps[-concurrencyN]-
    {model}-{date}.json` (the rate as Python prints a float: "10.0", "inf"), or with a
    ramp-up `{label}-ramp-up-{strategy}-{start}qps-{end}qps[-concurrencyN]-{model}-
    {date}.json` (whole rates as ints, as vLLM's int flags print)."""
    if filename is None:
        label = run.label or run.backend
        if run.ramp_up_strategy is not None:
            rate = (f"ramp-up-{run.ramp_up_strategy}-{_rps_word(run.ramp_up_start_rps)}qps-"
                    f"{_rps_word(run.ramp_up_end_rps)}qps")
        else:
            rate = f"{float(run.request_rate)}qps"
        conc = f"-concurrency{run.max_concurrency}" if run.max_concurrency is not None else ""
        filename = f"{label}-{rate}{conc}-{run.model_id.split('/')[-1]}-{run.date}.json"
    return (result_dir or Path(".")) / filename


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
    opts = SummaryOptions(
        percentile_metrics=parse_percentile_metrics(percentile_metrics or "ttft,tpot,itl"),
        metric_percentiles=parse_metric_percentiles(metric_percentiles),
        goodput=parse_goodput(goodput_items) if goodput_items else None)
    meta = parse_metadata(metadata_items)
    if num_client_processes < 1:
        raise ServelabError(f"--num-client-processes {num_client_processes}: must be >= 1")
    if ray_workers < 0:
        raise ServelabError(f"--ray-workers {ray_workers}: must be >= 1 (0: no Ray)")
    if ray_workers and num_client_processes > 1:
        raise ServelabError("--ray-workers and --num-client-processes: give one (each Ray worker is one client process)")
    if tokenizer_mode not in ("auto", "hf"):
        raise ServelabError(f"--tokenizer-mode {tokenizer_mode}: servelab loads tokenizer.json "
                            "files with the tokenizers library (vLLM's 'hf' fast tokenizer); "
                            "use auto or hf")
    if lora_assignment not in ("random", "round-robin"):
        raise ServelabError(f"--lora-assignment {lora_assignment}: choose random or round-robin")
    if logprobs is not None and logprobs < 0:
        raise ServelabError(f"--logprobs {logprobs}: must be >= 0")
    if ready_check_timeout_sec < 0:
        raise ServelabError(f"--ready-check-timeout-sec {ready_check_timeout_sec}: must be >= 0")
    target = _target(base_url, host, port, endpoint, backend, served_model_name or model or "",
                     request_timeout_s, api_key)
    saving = save_result or append_result
    if saving:  # before any request: a bad path must not lose the run
        if result_filename is not None:
            check_writable((result_dir or Path(".")) / result_filename, "--result-dir/--result-filename")
        else:
            check_writable_dir(result_dir or Path("."), "--result-dir")
    err = make_console(stderr=True)

    def say(line: str) -> None:
        err.print(line, highlight=False, markup=False, soft_wrap=True)

    tok = load_tokenizer(dataset.tokenizer)
    work = build_workload(dataset, tok, seed)
    if not work.requests:
        raise ServelabError("the workload has no requests")
    for note in work.notes:
        say(f"note: {note}")  # plain: notes quote paths and names verbatim
    forced_eos = dataset.dataset_name in _IGNORE_EOS_DATASETS
    if sampling.temperature is None:
        say("note: no --temperature: the server's default applies (vLLM: the model's "
            "generation_config), as in vllm bench serve; --temperature 0 for greedy")
    rng = np.random.default_rng(seed)
    intended = schedule_s(work, arrivals, rng, sessions=True)
    target = dataclasses.replace(
        target, sampling=sampling, ignore_eos=ignore_eos or forced_eos,
        extra_headers=_headers(list(header or [])), extra_body=_extra_body(extra_body),
        logprobs=logprobs,
        request_id_prefix=request_id_prefix if request_id_prefix is not None else f"bench-{uuid.uuid4().hex[:8]}-",
        lora_models=lora_sequence(list(lora_modules or []), lora_assignment, len(work.requests),
                                  np.random.default_rng([seed, 1])),
        verify_tls=not insecure,
        # Texts only where a figure needs them: --save-detailed's generated_texts, the
        # history of multi-turn sessions, chat's reasoning tokens.
        keep_text=save_detailed or work.sessions is not None or target.backend.chat)
    remote = None
    if ray_workers:
        from servelab.distributed.raybench import RayClients

        remote = RayClients(ray, ray_workers)
        if urlsplit(target.base_url).hostname in _LOCAL_HOSTS:
            say(f"note: --ray-workers: workers on other nodes cannot reach {target.base_url}; give the "
                "server's address as the nodes see it")
    plan = RunPlan(max_concurrency=max_concurrency, num_warmups=num_warmups,
                   processes=num_client_processes, ready_check_timeout_s=float(ready_check_timeout_sec),
                   profile=profile, progress=not no_progress,
                   sample_gpu=urlsplit(target.base_url).hostname in _LOCAL_HOSTS, remote=remote)
    say(f"bench: {len(work.requests)} requests to {target.url}, seed {seed}")
    sent = _run_loop(bench_run(target, work.requests, intended, plan, say, work.sessions))
    target = sent.target
    result = summarize(sent.records, max(sent.t_end - sent.t0, 1e-9), opts)
    rps_events = (rps_change_events(rates_rps(len(work.requests), arrivals).tolist(), sent.records,
                                    sent.wall_t0) if arrivals.ramp_up_strategy else ())
    run = RunInfo.now(
        backend=target.backend.name, label=label or target.backend.name, model_id=model or target.model,
        tokenizer_id=work.tokenizer.name, num_prompts=len(work.requests), arrivals=arrivals,
        max_concurrency=max_concurrency, metadata=meta, seed=seed, tokenizer=work.tokenizer.source,
        sampling=sampling.fields(), ignore_eos=target.ignore_eos, rps_change_events=rps_events)
    result = result.with_run(run).with_server(sent.server)
    if sent.gpu is not None:
        result = result.with_gpu(sent.gpu)
    if sent.interrupted:
        result = result.as_partial()
    data = result_json(result, detailed=save_detailed)
    if save_detailed and work.sessions is not None:
        data["servelab"].update(detailed_columns(work.requests, work.sessions, sent.records))
    if remote is not None:
        data["servelab"]["client_workers"] = [share.to_json() for share in remote.shares]
    if saving:
        path = _result_path(result_dir, result_filename, run)
        write_result(path, data, append_result)
        say(f"result written to {path}")
    out = make_console(stderr=json_out)
    title = " Serving Benchmark Result " + ("(partial) " if sent.interrupted else "")
    for line in summary_lines(result, title):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    for line in warnings_for(result):
        out.print(f"warning: {line}", highlight=False, markup=False, soft_wrap=True)
    for share in remote.shares if remote is not None else ():
        out.print(f"client worker {share.worker} on node {share.node_id[:12]}: {share.requests} requests, "
                  f"scheduling lag mean {share.sched_lag_mean_ms:.2f} / p99 {share.sched_lag_p99_ms:.2f} / "
                  f"max {share.sched_lag_max_ms:.2f} ms", highlight=False, markup=False, soft_wrap=True)
    if json_out:
        sys.stdout.write(json.dumps(data) + "\n")
    if sent.interrupted:
        # sys.exit, not typer.Exit: in non-standalone mode click returns Exit's code
        # instead of exiting with it, and the CLI's main() does not pass it on.
        sys.exit(130)
    if result.completed == 0:
        first = next((r for r in sent.records if not r.warmup and r.error), None)
        why = f"; the first: {first.error_kind}: {first.error}" if first is not None else ""
        say(f"error: all {result.failed} requests failed{why}")
        sys.exit(1)


def _run_loop(coro):  # type: ignore[no-untyped-def]
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)


def register(app: typer.Typer) -> None:
    """Add `servelab bench` to the app."""
    app.command("bench")(bench)
