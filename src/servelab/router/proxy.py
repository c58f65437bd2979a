"""The router's request handling: the OpenAI API's endpoints over `httpserver`.

`Router` owns the proxy's state (policy, backend pool, metrics, retry budget, the relay's
upstream connection pools, the health monitor) and answers each request the server hands
it. What needs no backend is answered on the spot, inside the connection's callback:
`/health`, `/metrics`, and refusals (401, 400, 503 when draining or overloaded; the
server itself refuses malformed HTTP and bodies over `max_body_bytes`). Requests to
forward start there too, as a `relay.Forwarding` driven by socket callbacks (no task);
only `/v1/models` runs as a task.
"""

from __future__ import annotations

import asyncio
import hmac
import random
import time
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp

from servelab.client.connection import ConnectionPool
from servelab.router.config import RouterConfig
from servelab.router.health import HealthMonitor
from servelab.router.httpreply import Reply
from servelab.router.httprequest import Request
from servelab.router.intake import BadRequest, parse_body
from servelab.router.metrics import RouterMetrics
from servelab.routing.policies import make_policy
from servelab.router.pool import BackendPool
from servelab.router.headers import relayed_headers
from servelab.router.relay import Forwarding
from servelab.router.retry import RetryBudget
from servelab.router.upstream import fetch

_TELEMETRY_POLICIES = frozenset({"kv_aware"})
_FORWARDED = {"/v1/completions": False, "/v1/chat/completions": True}  # path -> chat
_MODELS_TIMEOUT_S = 10.0
_REFUSED_REASON = {413: "too_large"}  # other statuses refused by the server: bad_request


class Router:
    """One proxy instance: `start()`, then `handle` each request; `stop()` at the end."""

    def __init__(self, config: RouterConfig, clock: Callable[[], float] = time.monotonic):
        self.config = config
        self.clock = clock
        self.rng = random.Random(config.seed)
        self.policy = make_policy(config.policy, self.rng, **config.typed_policy_params())
        self.pool = BackendPool(config.backends, config.eject_after_errors,
                                config.readmit_after_checks)
        self.metrics = RouterMetrics(config.backends, config.policy, config.hotspot_window_s, clock)
        self.metrics.watch_in_flight(lambda i: self.pool[i].in_flight)
        self.budget = RetryBudget(config.retry_budget_ratio, config.retry_budget_min,
                                  config.retry_budget_window_s)
        key = config.resolved_api_key()
        self.api_key: bytes | None = key.encode() if key else None
        self.session: aiohttp.ClientSession | None = None  # the health checks'
        # the relay's keep-alive connections, one pool per backend (index as in `pool`)
        self.upstreams = [ConnectionPool(url, clock) for url in config.backends]
        self.monitor: HealthMonitor | None = None
        self.active = 0  # requests being forwarded (`Forwarding`s not yet over)
        self.draining = False
        self._idle: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]  # set by start
        self._monitor_task: asyncio.Task[None] | None = None
        self._gets: dict[str, Callable[[Request, Reply], Coroutine[Any, Any, None] | None]] = {
            "/health": self._health, "/metrics": self._metrics, "/v1/models": self._models,
        }

    async def start(self) -> None:
        """One round of health checks, then keep checking in the background."""
        cfg = self.config
        self.loop = asyncio.get_running_loop()
        self._idle = asyncio.Event()
        self._idle.set()
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
            auto_decompress=False, skip_auto_headers=("User-Agent",),
        )
        telemetry = cfg.telemetry_interval_s if cfg.policy in _TELEMETRY_POLICIES else None
        self.monitor = HealthMonitor(self.pool, self.session, self.metrics, cfg.health_interval_s,
                                     cfg.health_timeout_s, telemetry, self.clock)
        await self.monitor.check_all()
        self._monitor_task = asyncio.create_task(self.monitor.run())

    async def stop(self) -> None:
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

    # -- the server's callbacks -----------------------------------------------------------

    def handle(self, req: Request, reply: Reply) -> Coroutine[Any, Any, None] | None:
        """Answer `req` now, or return the coroutine that will (see the module docstring)."""
        chat = _FORWARDED.get(req.path)
        if chat is not None:
            if req.method != "POST":
                return reply.error(405, f"{req.method} {req.path}: use POST",
                                   "invalid_request_error", [("Allow", "POST")])
            return self._proxy(req, reply, chat)
        get = self._gets.get(req.path)
        if get is None:
            return reply.error(404, f"no route {req.path}", "not_found_error")
        if req.method != "GET" and req.method != "HEAD":
            return reply.error(405, f"{req.method} {req.path}: use GET", "invalid_request_error",
                               [("Allow", "GET, HEAD")])
        return get(req, reply)

    def refused(self, status: int) -> None:
        """The server refused a request before `handle` (malformed, too large)."""
        self.metrics.client_errors.labels(_REFUSED_REASON.get(status, "bad_request")).inc()

    # -- handlers -------------------------------------------------------------------------

    def _authorized(self, req: Request) -> bool:
        if self.api_key is None:
            return True
        given = req.headers.get("authorization", "")
        token = given[7:] if given[:7].lower() == "bearer " else ""
        return hmac.compare_digest(token.encode("latin-1"), self.api_key)

    def _refused(self, req: Request, reply: Reply) -> bool:
        """Answer a request the router will not forward; True if it did."""
        if self.draining:
            self.metrics.client_errors.labels("draining").inc()
            reply.keep_alive = False
            reply.error(503, "router is shutting down", "service_unavailable")
        elif not self._authorized(req):
            self.metrics.client_errors.labels("unauthorized").inc()
            reply.error(401, "missing or wrong API key", "authentication_error")
        elif self.active >= self.config.max_in_flight:
            self.metrics.client_errors.labels("overloaded").inc()
            reply.error(503, f"router overloaded: {self.active} requests in flight "
                        f"(max_in_flight {self.config.max_in_flight})", "service_unavailable",
                        [("Retry-After", "1")])
        else:
            return False
        return True

    def _proxy(self, req: Request, reply: Reply, chat: bool) -> Coroutine[Any, Any, None] | None:
        t_arrival = self.clock()
        if self._refused(req, reply):
            return None
        try:
            intake = parse_body(req.body, chat, req.headers.get("x-session-id"))
        except BadRequest as exc:
            self.metrics.client_errors.labels("bad_request").inc()
            return reply.error(400, str(exc), "invalid_request_error")
        self.active += 1
        assert self._idle is not None
        self._idle.clear()
        Forwarding(self, req, reply, intake, t_arrival).start()
        return None

    def request_done(self) -> None:
        """A `Forwarding` is over (answered, or its client left)."""
        self.active -= 1
        if self.active == 0:
            assert self._idle is not None
            self._idle.set()

    def _models(self, req: Request, reply: Reply) -> Coroutine[Any, Any, None] | None:
        if not self._authorized(req):
            return reply.error(401, "missing or wrong API key", "authentication_error")
        backend = self.pool.first_healthy()
        if backend is None:
            return reply.error(503, "no healthy backend", "service_unavailable")
        return self._relay_models(req, reply, backend.index)

    async def _relay_models(self, req: Request, reply: Reply, index: int) -> None:
        pool, url = self.upstreams[index], self.pool[index].url
        auth = req.headers.get("authorization")
        headers = {"authorization": auth} if auth is not None and self.api_key is None else {}
        try:
            answer = await fetch(pool, pool.encode_get("/v1/models", headers),
                                 self.config.connect_timeout_s, _MODELS_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            return reply.error(502, f"{url}: {type(exc).__name__}", "upstream_error")
        if answer.error is not None:
            return reply.error(502, f"{url}: {type(answer.error).__name__}", "upstream_error")
        reply.send(answer.status, bytes(answer.body), relayed_headers(answer.header_lines)[0],
                   content_type=None)

    def _health(self, req: Request, reply: Reply) -> None:
        backends = [{"url": b.url, "healthy": b.healthy, "in_flight": b.in_flight,
                     "health_checks": b.health_checks} for b in self.pool.backends]
        ok = not self.draining and any(b["healthy"] for b in backends)
        reply.json(200 if ok else 503, {"ok": ok, "draining": self.draining, "backends": backends})

    def _metrics(self, req: Request, reply: Reply) -> None:
        reply.send(200, self.metrics.exposition(),
                   content_type="text/plain; version=0.0.4; charset=utf-8")
