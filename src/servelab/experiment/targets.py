"""Targets: what the orchestrator drives a cell's schedule at.

The orchestrator needs only `Target.measure`: given a workload's requests, their intended
send times and the load's concurrency cap, return the request records, the run's duration
and the engine's state over the run. Two implementations:

- `HttpTarget`: servelab's client against URLs (a launched engine, a router, an external
  server). With several replicas and ``routing: direct`` the client itself spreads the
  schedule: request i goes to replica i mod n, and the concurrency cap is split between
  the replicas (as two bench clients at half the concurrency would, the seeds'
  replica2_direct). `/metrics` of every replica is sampled during the run.
- `OfflineSimTarget`: the simulator in process on a virtual clock (fresh engines per cell),
  with the engine state recorded step by step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp

from servelab.client.backends import SamplingParams, get_backend
from servelab.client.sender import PREOPEN_MAX, ScheduleSender, SendStatus
from servelab.client.target import TargetConfig, check_reachable
from servelab.client.workers import direct_shares, new_event_loop
from servelab.experiment.simseries import SIM_URL, SimSeriesRecorder
from servelab.metrics.records import RequestRecord
from servelab.metrics.scrape import MetricsScraper, ServerSeries, SpecDecodeStats, combine_spec_decode
from servelab.sim.offline import offline_requests, simulate
from servelab.sim.setup import SimOptions, build_cluster
from servelab.workload.request import RequestSpec
from servelab.workload.tokenizer import TokenizerHandle
from servelab.workload.warmup import warmup_requests

SCRAPE_INTERVAL_S = 1.0


@dataclass(slots=True)
class Measurement:
    """One cell's raw outcome: records (warm-ups first), duration (s, first due request to
    last answer), one server series per replica, and facts only this target knows."""

    records: list[RequestRecord]
    duration_s: float
    servers: list[ServerSeries]
    extras: dict[str, float] = field(default_factory=dict)
    spec_decode: SpecDecodeStats | None = None  # over the measured requests, all replicas


class Target(Protocol):
    """Anything a schedule can be driven at."""

    backend: str

    def measure(self, requests: Sequence[RequestSpec], tokenizer: TokenizerHandle,
                intended_s: Sequence[float], max_concurrency: int | None, num_warmups: int,
                seed: int) -> Measurement:
        """Run the schedule once (requests[i] due `intended_s[i]` s after the start)."""
        ...


class OfflineSimTarget:
    """The simulator on a virtual clock; a fresh cluster (empty caches) for every cell.

    With `direct` (the arm's ``routing: direct``) and several replicas, the cell is split
    as the HTTP client splits it: request i to replica i mod n, the concurrency cap and the
    warm-ups split between replicas, no router; each replica is one simulation from t0.
    Otherwise the replicas sit behind the simulated router with `opts.router_policy`.
    """

    backend = "servelab-sim"

    def __init__(self, opts: SimOptions, direct: bool = False) -> None:
        self.opts = opts
        self.direct = direct and opts.replicas > 1

    def measure(self, requests: Sequence[RequestSpec], tokenizer: TokenizerHandle,
                intended_s: Sequence[float], max_concurrency: int | None, num_warmups: int,
                seed: int) -> Measurement:
        offline = offline_requests(requests, tokenizer)
        if not self.direct:
            return self._simulate(self.opts, offline, list(intended_s), max_concurrency,
                                  num_warmups, seed)
        one = dataclasses.replace(self.opts, replicas=1)
        parts = [self._simulate(one, [offline[i] for i in sh.requests],
                                [intended_s[i] for i in sh.requests], sh.max_concurrency,
                                len(sh.warmups), seed)
                 for sh in direct_shares(len(requests), max_concurrency, num_warmups,
                                         self.opts.replicas)]
        records = [r for m in parts for r in m.records if r.warmup]
        records += sorted((r for m in parts for r in m.records if not r.warmup), key=lambda r: r.index)
        series = [dataclasses.replace(m.servers[0], url=SIM_URL.format(k)) for k, m in enumerate(parts)]
        extras = {key: float(sum(m.extras[key] for m in parts)) for key in ("num_steps", "preemptions")}
        return Measurement(records, max(m.duration_s for m in parts), series, extras,
                           combine_spec_decode([m.spec_decode for m in parts]))

    @staticmethod
    def _simulate(opts: SimOptions, offline: list, intended_s: list[float],
                  max_concurrency: int | None, num_warmups: int, seed: int) -> Measurement:
        cluster = build_cluster(opts, random.Random(seed))
        recorder = SimSeriesRecorder(len(cluster.engines))
        run = simulate(cluster, offline, intended_s, max_concurrency, num_warmups, recorder)
        preemptions = sum(e.stats.num_preemptions_total for e in cluster.engines)
        return Measurement(run.records, run.duration_s, recorder.series(),
                           {"num_steps": float(run.num_steps), "preemptions": float(preemptions)},
                           run.spec_decode)


class HttpTarget:
    """Servelab's client against `send_urls` (one URL, or replicas split directly), sampling
    `/metrics` at `scrape_urls` (the replicas, also when a router is in front)."""

    def __init__(self, send_urls: list[str], scrape_urls: list[str], model: str, backend: str,
                 ignore_eos: bool, request_timeout_s: float,
                 sampling: SamplingParams = SamplingParams()) -> None:
        if not send_urls:
            raise ValueError("an HTTP target needs at least one URL")
        self.backend = backend
        be = get_backend(backend)
        self.targets = [
            TargetConfig(base_url=u, endpoint=be.default_endpoint, backend=be, model=model,
                         ignore_eos=ignore_eos, sampling=sampling, request_timeout_s=request_timeout_s)
            for u in send_urls
        ]
        self.scrape_urls = scrape_urls

    def measure(self, requests: Sequence[RequestSpec], tokenizer: TokenizerHandle,
                intended_s: Sequence[float], max_concurrency: int | None, num_warmups: int,
                seed: int) -> Measurement:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            return runner.run(self._measure(requests, list(intended_s), max_concurrency,
                                            num_warmups))

    async def _measure(self, requests: Sequence[RequestSpec], intended_s: list[float],
                       max_concurrency: int | None, num_warmups: int) -> Measurement:
        first = self.targets[0]
        await check_reachable(first.base_url, first.headers())
        async with aiohttp.ClientSession() as session:
            scrapers = [MetricsScraper(session, u, SCRAPE_INTERVAL_S) for u in self.scrape_urls]
            stop = asyncio.Event()
            tasks: list[asyncio.Future[None]] = []

            async def start_scraping() -> None:
                # The first sample must precede the first measured request (and follow the
                # warm-ups): counters are read as last-minus-first sample.
                await asyncio.gather(*(s.scrape_once() for s in scrapers))
                tasks.extend(asyncio.ensure_future(s.run(stop)) for s in scrapers)

            try:
                records, t0, t_end = await _send_split(self.targets, requests, intended_s,
                                                       max_concurrency, num_warmups, start_scraping)
            finally:
                stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
        series = [s.series() for s in scrapers]
        return Measurement(records, max(t_end - t0, 1e-9), series, {},
                           combine_spec_decode([x.spec_decode for x in series]))


async def _send_split(targets: list[TargetConfig], requests: Sequence[RequestSpec],
                      intended_s: list[float], cap: int | None, num_warmups: int,
                      before_t0: Callable[[], Awaitable[None]]) -> tuple[list[RequestRecord], float, float]:
    """Send request i to targets[i mod n], all on one t0; caps split as evenly as integers
    allow; `before_t0` is awaited after the warm-ups, just before t0. Returns (records
    sorted by index with warm-ups first, t0, end) on perf_counter."""
    shares = direct_shares(len(requests), cap, num_warmups, len(targets))
    clock = time.perf_counter
    senders = [ScheduleSender(targets[k], sh.max_concurrency, None, clock)
               for k, sh in enumerate(shares)]
    for s in senders:
        await s.__aenter__()
    try:
        await asyncio.gather(*(s.preopen(min(sh.max_concurrency or len(sh.requests),
                                             len(sh.requests), PREOPEN_MAX))
                               for s, sh in zip(senders, shares)))
        warm_specs = warmup_requests(requests, num_warmups)
        t_warm = clock()
        warm_lists = await asyncio.gather(*(s.warmup([warm_specs[i] for i in sh.warmups], t_warm)
                                            for s, sh in zip(senders, shares)))
        subsets = [[requests[i] for i in sh.requests] for sh in shares]
        bodies = [s.encode(subsets[k]) for k, s in enumerate(senders)]
        await before_t0()
        t0 = clock()
        warm = [r for lst in warm_lists for r in lst]
        for r in warm:
            r.send_s -= t0 - t_warm
            r.intended_send_s -= t0 - t_warm
        for s in senders:
            s.status = SendStatus()
        runs = await asyncio.gather(*(
            s.run(subsets[k], bodies[k], [intended_s[i] for i in shares[k].requests], t0)
            for k, s in enumerate(senders)))
        t_end = clock()
    finally:
        for s in senders:
            await s.__aexit__(None, None, None)
    measured = sorted((r for lst in runs for r in lst), key=lambda r: r.index)
    return warm + measured, t0, t_end
