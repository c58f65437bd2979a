"""The router's HTTP face: an aiohttp application speaking the OpenAI API.

`Router` owns the proxy's state (policy, backend pool, metrics, retry budget, the
relay's upstream connection pools, the aiohttp session for health checks and
`/v1/models`) and the handlers that refuse bad requests (401, 400, 413, 503) before
`relay.forward` sends the good ones on.
"""

from __future__ import annotations

import asyncio
import hmac
import random
import time
from collections.abc import Callable

import aiohttp
from aiohttp import web

from servelab.client.connection import ConnectionPool
from servelab.router.config import RouterConfig
from servelab.router.health import HealthMonitor
from servelab.router.intake import BadRequest, parse_body
from servelab.router.metrics import RouterMetrics
from servelab.router.policies import make_policy
from servelab.router.pool import BackendPool
from servelab.router.relay import error_response, forward
from servelab.router.retry import RetryBudget

_TELEMETRY_POLICIES = frozenset({"kv_aware"})


class Router:
    """One proxy instance. Use `app()` to get the aiohttp application."""

    def __init__(self, config: RouterConfig, clock: Callable[[], float] = time.monotonic):
        self.config = config
        self.clock = clock
        self.rng = random.Random(config.seed)
        self.policy = make_policy(config.policy, self.rng, **config.typed_policy_params())
        self.pool = BackendPool(config.backends, config.eject_after_errors,
                                config.readmit_after_checks)
        self.metrics = RouterMetrics(config.backends, config.policy, config.hotspot_window_s, clock)
        self.budget = RetryBudget(config.retry_budget_ratio, config.retry_budget_min,
                                  config.retry_budget_window_s)
        key = config.resolved_api_key()
        self.api_key: bytes | None = key.encode() if key else None
        self.session: aiohttp.ClientSession | None = None  # health checks, /v1/models
        # the relay's keep-alive connections, one pool per backend (index as in `pool`)
        self.upstreams = [ConnectionPool(url, clock) for url in config.backends]
        self.monitor: HealthMonitor | None = None
        self.active = 0
        self.draining = False
        self._idle: asyncio.Event | None = None
        self._monitor_task: asyncio.Task | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_body_bytes)
        app.add_routes([
            web.post("/v1/completions", self._completions),
            web.post("/v1/chat/completions", self._chat),
            web.get("/v1/models", self._models),
            web.get("/health", self._health),
            web.get("/metrics", self._metrics),
        ])
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, app: web.Application) -> None:
        cfg = self.config
        self._idle = asyncio.Event()
        self._idle.set()
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=cfg.request_timeout_s,
                                          sock_connect=cfg.connect_timeout_s),
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )
        telemetry = cfg.telemetry_interval_s if cfg.policy in _TELEMETRY_POLICIES else None
        self.monitor = HealthMonitor(self.pool, self.session, self.metrics, cfg.health_interval_s,
                                     cfg.health_timeout_s, telemetry, self.clock)
        await self.monitor.check_all()
        self._monitor_task = asyncio.create_task(self.monitor.run())

    async def _stop(self, app: web.Application) -> None:
        if self._monitor_task is not None:
            self._monitor_task.cancel()
            await asyncio.gather(self._monitor_task, return_exceptions=True)
        if self.session is not None:
            await self.session.close()
        for upstream in self.upstreams:
            upstream.close()

    async def drained(self) -> None:
        """Stop taking requests and return when none is in flight."""
        self.draining = True
        assert self._idle is not None
        await self._idle.wait()

    # -- handlers -------------------------------------------------------------------------

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._proxy(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._proxy(request, chat=True)

    def _authorized(self, request: web.Request) -> bool:
        if self.api_key is None:
            return True
        given = request.headers.get("Authorization", "")
        token = given[7:] if given[:7].lower() == "bearer " else ""
        return hmac.compare_digest(token.encode(), self.api_key)

    def _refusal(self, request: web.Request) -> web.Response | None:
        if self.draining:
            self.metrics.client_errors.labels("draining").inc()
            return error_response(503, "router is shutting down", "service_unavailable",
                                  Connection="close")
        if not self._authorized(request):
            self.metrics.client_errors.labels("unauthorized").inc()
            return error_response(401, "missing or wrong API key", "authentication_error")
        if self.active >= self.config.max_in_flight:
            self.metrics.client_errors.labels("overloaded").inc()
            return error_response(
                503, f"router overloaded: {self.active} requests in flight "
                f"(max_in_flight {self.config.max_in_flight})", "service_unavailable",
                **{"Retry-After": "1"})
        return None

    async def _proxy(self, request: web.Request, chat: bool) -> web.StreamResponse:
        t_arrival = self.clock()
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        self.active += 1
        assert self._idle is not None
        self._idle.clear()
        try:
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                self.metrics.client_errors.labels("too_large").inc()
                return error_response(413, f"request body exceeds {self.config.max_body_bytes} "
                                      "bytes (max_body_bytes)", "invalid_request_error")
            try:
                intake = parse_body(body, chat, request.headers.get("x-session-id"))
            except BadRequest as exc:
                self.metrics.client_errors.labels("bad_request").inc()
                return error_response(400, str(exc), "invalid_request_error")
            return await forward(self, request, request.path, body, intake, t_arrival)
        finally:
            self.active -= 1
            if self.active == 0:
                self._idle.set()

    async def _models(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return error_response(401, "missing or wrong API key", "authentication_error")
        backend = self.pool.first_healthy()
        if backend is None or self.session is None:
            return error_response(503, "no healthy backend", "service_unavailable")
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() == "authorization" and self.api_key is None}
        try:
            async with self.session.get(backend.url + "/v1/models", headers=headers,
                                        timeout=aiohttp.ClientTimeout(total=10)) as resp:
                data = await resp.read()
                return web.Response(body=data, status=resp.status, content_type=resp.content_type)
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            return error_response(502, f"{backend.url}: {type(exc).__name__}", "upstream_error")

    async def _health(self, request: web.Request) -> web.Response:
        backends = [{"url": b.url, "healthy": b.healthy, "in_flight": b.in_flight}
                    for b in self.pool.backends]
        ok = not self.draining and any(b["healthy"] for b in backends)
        return web.json_response({"ok": ok, "draining": self.draining, "backends": backends},
                                 status=200 if ok else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.exposition(),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
