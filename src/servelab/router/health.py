"""Background checks of the backends: active health (GET /health) and, for policies that
use it, telemetry (GET /metrics, parsed by `servelab.metrics.scrape`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import aiohttp

from servelab.errors import ServelabError
from servelab.metrics.scrape import parse_server_metrics
from servelab.router.metrics import RouterMetrics
from servelab.router.pool import BackendPool

log = logging.getLogger("servelab.router")


class HealthMonitor:
    """Checks every backend each `interval_s`; ejects on a failed check, re-admits after
    `readmit_after_checks` good ones (the pool decides)."""

    def __init__(
        self, pool: BackendPool, session: aiohttp.ClientSession, metrics: RouterMetrics,
        interval_s: float, timeout_s: float, telemetry_interval_s: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._session = session
        self._metrics = metrics
        self._interval_s = interval_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._telemetry_interval_s = telemetry_interval_s
        self._clock = clock

    async def check_all(self) -> None:
        """One round of health checks, all backends at once."""
        await asyncio.gather(*(self._check(b.index) for b in self._pool.backends))

    async def run(self) -> None:
        """Health checks (and telemetry scrapes, if asked) until cancelled."""
        tasks = [asyncio.create_task(self._loop(self.check_all, self._interval_s))]
        if self._telemetry_interval_s is not None:
            tasks.append(asyncio.create_task(self._loop(self._scrape_all, self._telemetry_interval_s)))
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()

    async def _loop(self, step: Callable, interval_s: float) -> None:
        while True:
            await step()
            await asyncio.sleep(interval_s)

    async def _check(self, index: int) -> None:
        b = self._pool[index]
        try:
            async with self._session.get(b.url + "/health", timeout=self._timeout) as resp:
                await resp.read()
                ok = resp.status == 200
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
            ok = False
        change = self._pool.record_check(index, ok)
        if change is not None:
            self._metrics.healthy.labels(b.url).set(1 if b.healthy else 0)
            if change == "ejected":
                self._metrics.ejections.labels(b.url, "health_check").inc()
            log.warning("backend %s %s by health check", b.url, change)

    async def _scrape_all(self) -> None:
        await asyncio.gather(*(self._scrape(b.index) for b in self._pool.backends if b.healthy))

    async def _scrape(self, index: int) -> None:
        b = self._pool[index]
        try:
            async with self._session.get(b.url + "/metrics", timeout=self._timeout) as resp:
                if resp.status != 200:
                    return
                text = await resp.text()
            snapshot = parse_server_metrics(text, source=b.url + "/metrics")
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ServelabError):
            return  # the old reading ages out; kv_aware then ignores it
        self._pool.record_telemetry(index, snapshot, self._clock())
