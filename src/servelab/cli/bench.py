"""`servelab bench`: send a workload to an OpenAI-compatible target and measure it.

Flag names follow `vllm bench serve`. `--goodput` and `--metadata` take several values
after one flag, as vLLM's do (`--goodput ttft:250 tpot:100`, `--metadata a=1 b=2`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

import aiohttp
import numpy as np
import typer
from servelab.cli.output import make_console

from servelab.cli.flags import load_flags, sampling_flags, workload_flags
from servelab.client.backends import SamplingParams, get_backend
from servelab.client.console import LiveProgress, summary_table, warnings_for
from servelab.client.sender import send_schedule
from servelab.client.target import TargetConfig, check_reachable
from servelab.client.workers import new_event_loop, send_schedule_processes
from servelab.errors import ServelabError
from servelab.metrics.gpu import GpuSampler
from servelab.metrics.records import RequestRecord
from servelab.metrics.result import RunInfo, parse_metadata, write_result
from servelab.storage import check_writable, check_writable_dir
from servelab.metrics.scrape import MetricsScraper
from servelab.metrics.summary import (
    SummaryOptions,
    parse_goodput,
    parse_metric_percentiles,
    parse_percentile_metrics,
)
from servelab.workload.arrivals import ArrivalOptions, arrival_times_s
from servelab.workload.datasets import DatasetOptions, Workload, build_workload
from servelab.workload.tokenizer import load_tokenizer

SCRAPE_INTERVAL_S = 1.0
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True, slots=True)
class Sent:
    """What a send produced: the records, the run's t0 and end (s, perf_counter), and
    whether it was interrupted."""

    records: list[RequestRecord]
    t0: float
    t_end: float
    interrupted: bool


def _split_extras(extras: list[str], goodput: list[str], metadata: list[str]) -> None:
    """Values given after one `--goodput`/`--metadata` (vLLM's nargs='+') arrive as extras."""
    for item in extras:
        key = item.partition(":")[0]
        if key in ("ttft", "tpot", "e2el") and ":" in item:
            goodput.append(item)
        elif "=" in item and not item.startswith("-"):
            metadata.append(item)
        else:
            raise ServelabError(f"unexpected argument {item!r} (see servelab bench --help)")


def _target(base_url: str | None, host: str, port: int, endpoint: str | None, backend: str,
            model: str, ignore_eos: bool, timeout_s: float, api_key: str | None) -> TargetConfig:
    be = get_backend(backend)
    url = (base_url or f"http://{host}:{port}").rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServelabError(f"--base-url {url!r} must look like http://HOST:PORT")
    if not timeout_s > 0:
        raise ServelabError(f"--request-timeout-s {timeout_s}: must be > 0")
    return TargetConfig(base_url=url, endpoint=endpoint or be.default_endpoint, backend=be,
                        model=model, ignore_eos=ignore_eos, request_timeout_s=timeout_s,
                        api_key=api_key or os.environ.get("OPENAI_API_KEY") or None)


async def _send(target: TargetConfig, work: Workload, intended: list[float],
                max_concurrency: int | None, num_warmups: int, processes: int,
                progress: LiveProgress, scraper: MetricsScraper | None) -> Sent:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    scrape_stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    started: list[float] = []
    scraping: list[asyncio.Future[None]] = []

    def on_start(t0: float) -> None:
        started.append(t0)
        if scraper is not None:
            async def sample_later() -> None:
                # The "before" sample was taken already; keep the first burst free of it.
                await asyncio.sleep(SCRAPE_INTERVAL_S)
                await scraper.run(scrape_stop)
            scraping.append(asyncio.ensure_future(sample_later()))

    # The "before" sample follows the warm-ups, so the server's counters leave them out.
    before_t0 = scraper.scrape_once if scraper is not None else None
    try:
        if processes > 1:
            records = await send_schedule_processes(
                target, work.requests, intended, processes, max_concurrency, num_warmups,
                progress.update, stop, on_start=on_start, before_t0=before_t0)
        else:
            records = await send_schedule(
                target, work.requests, intended, max_concurrency, num_warmups,
                progress.update, stop=stop, on_start=on_start, before_t0=before_t0)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    t_end = time.perf_counter()
    scrape_stop.set()
    for task in scraping:
        await task
    if scraper is not None:
        await scraper.scrape_once()  # the "after" sample
    return Sent(records, started[0] if started else t_end, t_end, stop.is_set())


async def _run(target: TargetConfig, work: Workload, intended: list[float],
               max_concurrency: int | None, num_warmups: int, processes: int,
               progress_on: bool, local: bool) -> tuple[Sent, object, object, TargetConfig]:
    models = await check_reachable(target.base_url, target.headers())
    if not target.model:
        if not models:
            raise ServelabError(f"--model not given and {target.base_url}/v1/models lists none")
        target = dataclasses.replace(target, model=models[0])
    gpu = GpuSampler(SCRAPE_INTERVAL_S) if local else None
    async with aiohttp.ClientSession() as session:
        scraper = MetricsScraper(session, target.base_url, SCRAPE_INTERVAL_S)
        if gpu is not None:
            gpu.start()
        with LiveProgress(len(work.requests), progress_on) as progress:
            sent = await _send(target, work, intended, max_concurrency, num_warmups,
                               processes, progress, scraper)
    gpu_series = gpu.stop() if gpu is not None else None
    return sent, scraper.series(), gpu_series, target


def _result_path(result_dir: Path | None, filename: str | None, run: RunInfo) -> Path:
    if filename is None:
        rate = "inf" if math.isinf(run.request_rate) else f"{run.request_rate:g}"
        conc = f"-concurrency{run.max_concurrency}" if run.max_concurrency else ""
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        filename = f"{run.backend}-{rate}qps{conc}-{run.model_id.split('/')[-1]}-{stamp}.json"
    return (result_dir or Path(".")) / filename


@workload_flags
@load_flags
@sampling_flags
def bench(
    ctx: typer.Context,
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
    backend: str = typer.Option("vllm", "--backend", help="openai, openai-chat, vllm or sglang."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name (default: the first of /v1/models)."),
    served_model_name: Optional[str] = typer.Option(None, "--served-model-name", help="Name sent in requests (default: --model)."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="Ask for exactly max_tokens tokens."),
    percentile_metrics: str = typer.Option("ttft,tpot,itl", "--percentile-metrics"),
    metric_percentiles: str = typer.Option("99", "--metric-percentiles"),
    goodput: Optional[list[str]] = typer.Option(None, "--goodput", help="SLOs in ms: ttft:MS tpot:MS e2el:MS."),
    save_result: bool = typer.Option(False, "--save-result"),
    result_dir: Optional[Path] = typer.Option(None, "--result-dir"),
    result_filename: Optional[str] = typer.Option(None, "--result-filename"),
    append_result: bool = typer.Option(False, "--append-result"),
    metadata: Optional[list[str]] = typer.Option(None, "--metadata", help="KEY=VALUE pairs recorded in the result."),
    save_detailed: bool = typer.Option(False, "--save-detailed", help="Per-request lengths, TTFTs, ITLs, errors, lags."),
    request_timeout_s: float = typer.Option(600.0, "--request-timeout-s"),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="Bearer token (default: $OPENAI_API_KEY); never written anywhere."),
    num_client_processes: int = typer.Option(1, "--num-client-processes", help="Client processes sharing the schedule."),
    label: Optional[str] = typer.Option(None, "--label"),
    no_progress: bool = typer.Option(False, "--no-progress", help="No live progress bar."),
    json_out: bool = typer.Option(False, "--json", help="Print the result JSON on stdout."),
) -> None:
    """Send a workload to an OpenAI-compatible server and measure TTFT, TPOT, ITL, throughput."""
    goodput_items, metadata_items = list(goodput or []), list(metadata or [])
    _split_extras(list(ctx.args), goodput_items, metadata_items)
    opts = SummaryOptions(
        percentile_metrics=parse_percentile_metrics(percentile_metrics),
        metric_percentiles=parse_metric_percentiles(metric_percentiles),
        goodput=parse_goodput(goodput_items) if goodput_items else None)
    meta = parse_metadata(metadata_items)
    if num_client_processes < 1:
        raise ServelabError(f"--num-client-processes {num_client_processes}: must be >= 1")
    target = _target(base_url, host, port, endpoint, backend, served_model_name or model or "",
                     ignore_eos, request_timeout_s, api_key)
    target = dataclasses.replace(target, sampling=sampling)
    saving = save_result or append_result or result_filename is not None or result_dir is not None
    if saving:  # before any request: a bad path must not lose the run
        if result_filename is not None:
            check_writable((result_dir or Path(".")) / result_filename, "--result-dir/--result-filename")
        else:
            check_writable_dir(result_dir or Path("."), "--result-dir")
    err = make_console(stderr=True)
    tok = load_tokenizer(dataset.tokenizer)
    work = build_workload(dataset, tok, seed)
    for note in work.notes:
        err.print(f"[yellow]note:[/] {note}", highlight=False)
    intended = arrival_times_s(len(work.requests), arrivals, np.random.default_rng(seed)).tolist()
    local = urlsplit(target.base_url).hostname in _LOCAL_HOSTS
    err.print(f"bench: {len(work.requests)} requests to {target.url}, seed {seed}", highlight=False)
    sent, server, gpu, target = _run_loop(_run(target, work, intended, max_concurrency, num_warmups,
                                       num_client_processes, not no_progress, local))
    from servelab.metrics.summary import summarize

    result = summarize(sent.records, max(sent.t_end - sent.t0, 1e-9), opts)
    run = RunInfo(
        date=datetime.now().strftime("%Y%m%d-%H%M%S"), backend=target.backend.name, label=label,
        model_id=model or target.model, tokenizer_id=work.tokenizer.name,
        num_prompts=len(work.requests), request_rate=arrivals.request_rate,
        burstiness=arrivals.burstiness, max_concurrency=max_concurrency,
        ramp_up_strategy=arrivals.ramp_up_strategy, ramp_up_start_rps=arrivals.ramp_up_start_rps,
        ramp_up_end_rps=arrivals.ramp_up_end_rps, metadata=meta, seed=seed,
        tokenizer=work.tokenizer.source, sampling=sampling.fields())
    result = result.with_run(run).with_server(server)  # type: ignore[arg-type]
    if gpu is not None:
        result = result.with_gpu(gpu)  # type: ignore[arg-type]
    if sent.interrupted:
        result = result.as_partial()
    data = result.to_json_dict(detailed=save_detailed)
    if saving:
        path = _result_path(result_dir, result_filename, run)
        write_result(path, data, append_result)
        err.print(f"result written to {path}", highlight=False)
    out = make_console(stderr=json_out)
    out.print(summary_table(result, "servelab bench" + (" (partial)" if sent.interrupted else "")))
    for line in warnings_for(result):
        out.print(f"[bold yellow]warning:[/] {line}", highlight=False)
    if json_out:
        sys.stdout.write(json.dumps(data) + "\n")
    if sent.interrupted:
        # sys.exit, not typer.Exit: in non-standalone mode click returns Exit's code
        # instead of exiting with it, and the CLI's main() does not pass it on.
        sys.exit(130)


def _run_loop(coro):  # type: ignore[no-untyped-def]
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)


def register(app: typer.Typer) -> None:
    """Add `servelab bench` to the app."""
    app.command(
        "bench",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": False},
    )(bench)
