"""Forwarding one request: choose a backend, send, retry while nothing has reached the
client, then relay the answer's bytes as they arrive.

A response is committed to the client only when the backend's first body chunk is in
hand, so connect errors, 5xx, 429 and streams that die before their first byte are
retried on another backend (within `max_retries` and the retry budget); once a byte has
been sent the stream is never replayed, and a backend failure ends it with an SSE error
event (no `[DONE]`). Chunks are written as received: no parsing, no re-serialising.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from servelab.router.intake import Intake
from servelab.router.pool import BackendState
from servelab.router.records import NoHealthyReplicaError, RouteDecision
from servelab.router.retry import backoff_s

if TYPE_CHECKING:
    from servelab.router.proxy import Router

log = logging.getLogger("servelab.router")

_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "trailers", "transfer-encoding", "upgrade", "host", "content-length",
})
_NOT_RELAYED = _HOP | {"date", "server"}


def error_response(status: int, message: str, kind: str, **headers: str) -> web.Response:
    """An OpenAI-style JSON error."""
    body = {"error": {"message": message, "type": kind, "code": status}}
    return web.json_response(body, status=status, headers=headers or None)


def _sse_error(message: str) -> bytes:
    obj = {"error": {"message": message, "type": "upstream_error", "code": 502}}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


@dataclass(frozen=True, slots=True)
class Failure:
    """An attempt that failed before anything reached the client (so it may be retried)."""

    kind: str  # connect | timeout | http_5xx | http_429 | stream_broken
    detail: str
    status: int | None = None
    body: bytes = b""
    content_type: str = "application/json"

    def response(self) -> web.Response:
        if self.status is not None and self.kind in ("http_5xx", "http_429"):
            return web.Response(body=self.body, status=self.status, content_type=self.content_type)
        status = 504 if self.kind == "timeout" else 502
        return error_response(status, self.detail, "upstream_error")


def upstream_headers(headers: "aiohttp.typedefs.LooseHeaders", strip_auth: bool) -> dict[str, str]:
    out = {k: v for k, v in headers.items() if k.lower() not in _HOP}
    if strip_auth:
        out.pop("Authorization", None)
        out = {k: v for k, v in out.items() if k.lower() != "authorization"}
    if not any(k.lower() == "accept-encoding" for k in out):
        out["Accept-Encoding"] = "identity"
    return out


async def forward(
    rt: Router, request: web.Request, path: str, body: bytes, intake: Intake, t_arrival: float
) -> web.StreamResponse:
    """Route and forward one request; always returns the client's response."""
    cfg = rt.config
    rt.budget.record_request(t_arrival)
    headers = upstream_headers(request.headers, strip_auth=rt.api_key is not None)
    tried: set[int] = set()
    attempt = 0
    last: Failure | None = None
    while True:
        now = rt.clock()
        try:
            views = rt.pool.views(now, frozenset(tried))
            decision = rt.policy.choose(intake.route, views, now)
        except NoHealthyReplicaError:
            if last is not None:
                return last.response()
            rt.metrics.client_errors.labels("no_healthy_backend").inc()
            return error_response(503, "no healthy backend", "service_unavailable",
                                  **{"Retry-After": "1"})
        backend = rt.pool[decision.index]
        rt.metrics.decided(decision.index, decision.prefix_match_chars, now)
        if cfg.explain:
            log.info("route %s attempt %d -> %s: %s", request.path, attempt + 1, backend.url,
                     decision.reason)
        tried.add(decision.index)
        outcome = await _attempt(rt, request, backend, decision, path, body, headers, intake,
                                 t_arrival)
        if not isinstance(outcome, Failure):
            return outcome
        last = outcome
        attempt += 1
        if attempt > cfg.max_retries:
            return outcome.response()
        if not rt.budget.try_spend(rt.clock()):
            rt.metrics.retry_budget_exhausted.inc()
            return outcome.response()
        rt.metrics.retries.inc()
        await asyncio.sleep(backoff_s(attempt, cfg.retry_backoff_ms, rt.rng))


def _relayed(resp: aiohttp.ClientResponse) -> dict[str, str]:
    return {k: v for k, v in resp.headers.items() if k.lower() not in _NOT_RELAYED}


async def _attempt(
    rt: Router, request: web.Request, b: BackendState, decision: RouteDecision, path: str,
    body: bytes, headers: dict[str, str], intake: Intake, t_arrival: float,
) -> web.StreamResponse | Failure:
    b.in_flight += 1
    rt.metrics.in_flight_changed(b.index, b.in_flight)
    t_send = rt.clock()
    ttft_ms = itl_ms = None
    ok = False
    try:
        try:
            resp = await rt.session.post(b.url + path, data=body, headers=headers)
        except asyncio.TimeoutError:
            return _failed(rt, b, Failure("timeout", f"{b.url}: no answer in time"))
        except (aiohttp.ClientError, OSError) as exc:
            return _failed(rt, b, Failure("connect", f"{b.url}: {type(exc).__name__}"))
        try:
            status = resp.status
            rt.metrics.requests.labels(b.url, str(status)).inc()
            if status >= 500 or status == 429:
                data = await resp.read()
                kind = "http_429" if status == 429 else "http_5xx"
                return _failed(rt, b, Failure(kind, f"{b.url}: HTTP {status}", status, data,
                                              resp.content_type))
            if not intake.stream or resp.content_type != "text/event-stream" or status != 200:
                data = await resp.read()
                out = web.Response(body=data, status=status, headers=_relayed(resp))
                ok = True
                rt.pool.record_ok(b.index)
                ttft_ms = (rt.clock() - t_send) * 1000.0
                return out
            try:
                first = await resp.content.readany()
            except asyncio.TimeoutError:
                return _failed(rt, b, Failure("timeout", f"{b.url}: no first token in time"))
            except (aiohttp.ClientError, OSError) as exc:
                return _failed(rt, b, Failure("stream_broken", f"{b.url}: {type(exc).__name__}"))
            if not first:
                return _failed(rt, b, Failure("stream_broken", f"{b.url}: empty stream"))
            t_first = rt.clock()
            ttft_ms = (t_first - t_send) * 1000.0
            client = web.StreamResponse(status=status, headers=_relayed(resp))
            await client.prepare(request)
            await client.write(first)
            rt.metrics.added_latency.observe(max(0.0, (rt.clock() - t_arrival) - (t_first - t_send)))
            ok, chunks = await _relay_rest(rt, b, resp, client, first)
            if chunks > 1:
                itl_ms = (rt.clock() - t_first) * 1000.0 / (chunks - 1)
            return client
        finally:
            resp.release()
    finally:
        b.in_flight -= 1
        rt.metrics.in_flight_changed(b.index, b.in_flight)
        if ok and ttft_ms is not None:
            b.ewma_ttft.add(ttft_ms)
            if itl_ms is not None:
                b.ewma_itl.add(itl_ms)
        rt.policy.on_finished(b.index, intake.route, ttft_ms, itl_ms, ok, rt.clock())


async def _relay_rest(
    rt: Router, b: BackendState, resp: aiohttp.ClientResponse, client: web.StreamResponse,
    first: bytes,
) -> tuple[bool, int]:
    """Copy the rest of the stream; returns (ended cleanly, chunks relayed incl. the first)."""
    chunks = 1
    prev, last = b"", first
    try:
        async for chunk in resp.content.iter_any():
            try:
                await client.write(chunk)
            except (ConnectionError, RuntimeError):
                return True, chunks  # the client left; not the backend's fault
            prev, last = last, chunk
            chunks += 1
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        detail = f"backend {b.url} failed mid-stream ({type(exc).__name__})"
    else:
        if b"[DONE]" in (prev + last)[-64:]:
            rt.pool.record_ok(b.index)
            await _end(client)
            return True, chunks
        detail = f"backend {b.url} ended the stream without [DONE]"
    _failed(rt, b, Failure("stream_broken", detail))
    try:
        await client.write(_sse_error(detail))
        await _end(client)
    except (ConnectionError, RuntimeError):
        pass
    return False, chunks


async def _end(client: web.StreamResponse) -> None:
    try:
        await client.write_eof()
    except (ConnectionError, RuntimeError):
        pass


def _failed(rt: Router, b: BackendState, failure: Failure) -> Failure:
    rt.metrics.errors.labels(b.url, failure.kind).inc()
    if failure.kind != "http_429" and rt.pool.record_error(b.index):
        rt.metrics.healthy.labels(b.url).set(0)
        rt.metrics.ejections.labels(b.url, "consecutive_errors").inc()
        log.warning("backend %s ejected after %d consecutive errors", b.url, b.consecutive_errors)
    return failure
