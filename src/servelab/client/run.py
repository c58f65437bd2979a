"""One bench run against a live target: the ready check, the send, the server scrapes.

`servelab bench` parses its flags and calls `bench_run`; everything between "the flags are
valid" and "here are the records" happens here, in vLLM bench serve's order:

1. `GET /v1/models` (the target is reachable; the model name defaults to its first);
2. the initial single prompt test run: the workload's first request, sent once, or until
   it succeeds within `--ready-check-timeout-sec` while the server answers as one that is
   still starting (connection refused, 502/503/504). Any other failure, such as vLLM's 404
   for a model it does not serve, ends the run before the workload is sent, with the
   server's message, so a misconfigured run sends one request, not thousands;
3. warm-ups; then `--profile`'s `POST /start_profile` and the "before" scrape of
   `/metrics`; t0, the schedule, scrapes every second, the "after" scrape; then
   `POST /stop_profile`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

import aiohttp
import numpy as np

from servelab.client.console import LiveProgress
from servelab.client.sender import ScheduleSender, SendControls, send_schedule
from servelab.client.sessions import send_sessions
from servelab.client.target import TargetConfig, check_reachable, tls_connector
from servelab.client.workers import send_schedule_processes
from servelab.errors import ServelabError
from servelab.metrics.gpu import GpuSampler, GpuSeries
from servelab.metrics.records import RequestRecord
from servelab.metrics.result import RpsChange
from servelab.metrics.scrape import MetricsScraper, ServerSeries
from servelab.workload.request import RequestSpec
from servelab.workload.sessions import Session

SCRAPE_INTERVAL_S = 1.0
READY_RETRY_S = 5.0  # vLLM's ready checker retries every 5 s
# Failures a server that is still starting gives; anything else will not go away by waiting.
_NOT_READY_KINDS = frozenset({"connect", "http_502", "http_503", "http_504"})


class RemoteClients(Protocol):
    """Clients elsewhere that each send a share of the schedule from one shared start (Ray
    actors on several nodes: `servelab.distributed.raybench`). Like
    `send_schedule_processes`: request i to client i mod n, the cap split, warm-ups shared;
    the records come back merged, with times relative to the shared t0."""

    async def send(self, target: TargetConfig, requests: Sequence[RequestSpec], intended_s: Sequence[float],
                   max_concurrency: int | None, num_warmups: int, controls: SendControls) -> list[RequestRecord]:
        ...

    def shares_json(self) -> list[dict[str, object]]:
        """After `send`: each client's part (where it ran, its requests, its lag), for the
        result file."""
        ...


@dataclass(frozen=True, slots=True)
class RunPlan:
    """How to send: the concurrency cap, warm-ups, client processes, the ready-check
    timeout (s; 0: the test request is sent once and /v1/models asked once, no waiting), whether to drive the
    server's profiler, the progress bar, whether to sample the local GPUs, and the remote
    clients that send the schedule instead of this process (None: this machine sends)."""

    max_concurrency: int | None
    num_warmups: int
    processes: int
    ready_check_timeout_s: float
    profile: bool
    progress: bool
    sample_gpu: bool
    remote: RemoteClients | None = None


@dataclass(frozen=True, slots=True)
class Sent:
    """What a run produced: the records, the run's t0 and end (s, perf_counter), the
    wall-clock time at t0, whether it was interrupted, the server and GPU series, and the
    target as used (its model name filled in from /v1/models when none was given)."""

    records: list[RequestRecord]
    t0: float
    t_end: float
    wall_t0: datetime
    interrupted: bool
    server: ServerSeries
    gpu: GpuSeries | None
    target: TargetConfig


def rps_change_events(rates_rps: Sequence[float], records: Sequence[RequestRecord],
                      wall_t0: datetime) -> tuple[RpsChange, ...]:
    """vLLM's `rps_change_events` for a ramp-up: one event per whole req/s the target rate
    reaches, stamped with the wall-clock time of the first request sent at that rate
    (the first event, at the start rate, when the first request was sent)."""
    if not len(rates_rps):
        return ()
    sent = {r.index: r.send_s for r in records if not r.warmup}
    events: list[RpsChange] = []
    last = int(rates_rps[0])
    first_s = min(sent.values(), default=0.0)
    events.append(RpsChange(rps=last, timestamp=(wall_t0 + timedelta(seconds=first_s)).isoformat()))
    for i, rate in enumerate(rates_rps):
        now = int(rate)
        if now > last and i in sent:
            stamp = (wall_t0 + timedelta(seconds=sent[i])).isoformat()
            events.extend(RpsChange(rps=v, timestamp=stamp) for v in range(last + 1, now + 1))
            last = now
    return tuple(events)


async def initial_test(target: TargetConfig, spec: RequestSpec, timeout_s: float,
                       clock: Callable[[], float] = time.perf_counter,
                       say: Callable[[str], None] = lambda _line: None) -> RequestRecord:
    """Send `spec` once (vLLM's initial test run) and return its record; retry every
    `READY_RETRY_S` while the server looks like it is starting, until `timeout_s` (s)
    has passed. Raise ServelabError with the server's answer when it does not succeed."""
    deadline = clock() + timeout_s
    while True:
        async with ScheduleSender(target, 1, clock=clock) as sender:
            rec = await sender.single(spec, tag="test-")  # a refused connection: "connect"
        if rec.success:
            return rec
        left = deadline - clock()
        if rec.error_kind not in _NOT_READY_KINDS or left <= 0:
            raise ServelabError(
                f"initial test request to {target.url} failed ({rec.error_kind}): "
                f"{rec.error}; check --model/--served-model-name, --endpoint and --backend")
        say(f"endpoint not ready ({rec.error_kind}); retrying, {left:.0f} s left")
        await asyncio.sleep(min(READY_RETRY_S, left))


async def _reachable(target: TargetConfig, timeout_s: float, say: Callable[[str], None],
                     clock: Callable[[], float] = time.perf_counter) -> list[str]:
    """`GET /v1/models` (the model ids listed), retried every `READY_RETRY_S` for up to
    `timeout_s` (s) while the server refuses connections: one that is still starting."""
    deadline = clock() + timeout_s
    while True:
        try:
            return await check_reachable(target.base_url, target.headers(),
                                         verify_tls=target.verify_tls)
        except ServelabError as exc:
            left = deadline - clock()
            if left <= 0:
                raise
            say(f"{exc}; retrying, {left:.0f} s left")
            await asyncio.sleep(min(READY_RETRY_S, left))


async def _server_call(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> str | None:
    """POST `url`; None on HTTP 200, else why not (for the profiler endpoints)."""
    try:
        async with session.post(url, headers=headers) as resp:
            if resp.status == 200:
                return None
            return f"HTTP {resp.status} {(await resp.text())[:200]}"
    except (aiohttp.ClientError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"


async def bench_run(target: TargetConfig, requests: Sequence[RequestSpec],
                    intended_s: Sequence[float], plan: RunPlan,
                    say: Callable[[str], None], sessions: Sequence[Session] | None = None) -> Sent:
    """Run the whole sequence of the module docstring; `say` prints a progress line.
    With `sessions`, `intended_s` are the sessions' start times (`client.sessions`)."""
    target.backend.check_sendable(requests)
    if sessions is not None and (plan.processes > 1 or plan.remote is not None):
        raise ServelabError("--num-client-processes / --ray-workers: multi-turn sessions are sent by "
                            "one client process (each turn waits for the answer before it)")
    models = await _reachable(target, plan.ready_check_timeout_s, say)
    if not target.model:
        if not models:
            raise ServelabError(f"--model not given and {target.base_url}/v1/models lists none")
        target = dataclasses.replace(target, model=models[0])
    say("Starting initial single prompt test run...")
    # vLLM's test request asks for the base model, not request 0's LoRA adapter.
    await initial_test(dataclasses.replace(target, lora_models=()), requests[0],
                       plan.ready_check_timeout_s, say=say)
    say("Initial test run completed.")
    gpu = GpuSampler(SCRAPE_INTERVAL_S) if plan.sample_gpu else None
    headers = target.headers()
    async with aiohttp.ClientSession(connector=tls_connector(target.verify_tls)) as session:
        scraper = MetricsScraper(session, target.base_url, SCRAPE_INTERVAL_S)

        async def before_t0() -> None:
            # After the warm-ups, as vLLM: the profile and the "before" sample leave them out.
            if plan.profile:
                why = await _server_call(session, target.base_url + "/start_profile", headers)
                if why is not None:
                    raise ServelabError(f"--profile: {target.base_url}/start_profile answered "
                                        f"{why}; start vLLM with --profiler-config to enable it")
                say("Profiler started")
            await scraper.scrape_once()

        if gpu is not None:
            gpu.start()
        say("Starting main benchmark run...")
        with LiveProgress(len(requests), plan.progress) as progress:
            records, t0, t_end, interrupted = await _send(target, requests, intended_s, plan,
                                                          progress, scraper, before_t0, sessions)
        # t0 is a perf_counter reading; the wall clock at t0 dates the ramp-up events.
        wall_t0 = datetime.now() - timedelta(seconds=time.perf_counter() - t0)
        if plan.profile:
            say("Stopping profiler...")
            why = await _server_call(session, target.base_url + "/stop_profile", headers)
            if why is not None:
                say(f"--profile: stop_profile answered {why}")
    gpu_series = gpu.stop() if gpu is not None else None
    return Sent(records, t0, t_end, wall_t0, interrupted, scraper.series(), gpu_series, target)


async def _send(target: TargetConfig, requests: Sequence[RequestSpec], intended: Sequence[float],
                plan: RunPlan, progress: LiveProgress, scraper: MetricsScraper,
                before_t0: Callable[[], Awaitable[None]],
                sessions: Sequence[Session] | None = None) -> tuple[list[RequestRecord], float, float, bool]:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    scrape_stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    started: list[float] = []
    scraping: list[asyncio.Future[None]] = []

    def on_start(t0: float) -> None:
        started.append(t0)

        async def sample_later() -> None:
            # The "before" sample was taken already; keep the first burst free of it.
            await asyncio.sleep(SCRAPE_INTERVAL_S)
            await scraper.run(scrape_stop)
        scraping.append(asyncio.ensure_future(sample_later()))

    try:
        # The "before" sample follows the warm-ups, so the server's counters leave them out.
        controls = SendControls(progress.update, stop, on_start, before_t0)
        if sessions is not None:
            records = await send_sessions(target, requests, sessions, intended, plan.max_concurrency,
                                          plan.num_warmups, controls)
        elif plan.remote is not None:
            records = await plan.remote.send(target, requests, intended, plan.max_concurrency,
                                             plan.num_warmups, controls)
        elif plan.processes > 1:
            records = await send_schedule_processes(target, requests, intended, plan.processes,
                                                    plan.max_concurrency, plan.num_warmups, controls)
        else:
            records = await send_schedule(target, requests, intended, plan.max_concurrency,
                                          plan.num_warmups, controls)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    t_end = time.perf_counter()
    scrape_stop.set()
    for task in scraping:
        await task
    await scraper.scrape_once()  # the "after" sample
    return records, started[0] if started else t_end, t_end, stop.is_set()


def lora_sequence(modules: Sequence[str], assignment: str, n: int,
                  rng: np.random.Generator) -> tuple[str, ...]:
    """The LoRA adapter each of `n` requests asks for: `modules` in turn (round-robin) or
    drawn uniformly with `rng` (random, vLLM's default)."""
    if not modules:
        return ()
    if assignment == "round-robin":
        return tuple(modules)
    picks = rng.integers(0, len(modules), size=n)
    return tuple(modules[int(k)] for k in picks)
