"""Forwarding one request: choose a backend, send, retry while nothing has reached the
client, then relay the answer's bytes as they arrive.

A response is committed to the client only when the backend's first body chunk is in
hand, so connect errors, 5xx, 429 and streams that die before their first byte are
retried on another backend (within `max_retries` and the retry budget); once a byte has
been sent the stream is never replayed, and a backend failure ends it with an SSE error
event (no `[DONE]`). After the first piece, the answer relays itself from the upstream
socket callback (`upstream.UpstreamAnswer`): bytes as received, no parsing, no
re-serialising; this coroutine only waits for the end, a failure or a slow client.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from servelab.router.intake import Intake
from servelab.router.pool import BackendState
from servelab.router.records import NoHealthyReplicaError, RouteDecision
from servelab.router.retry import backoff_s
from servelab.router.upstream import UpstreamAnswer, send

if TYPE_CHECKING:
    from servelab.router.proxy import Router

log = logging.getLogger("servelab.router")

_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "trailers", "transfer-encoding", "upgrade", "host", "content-length", "expect",
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


def _head_fields(lines: list[bytes]) -> tuple[dict[str, str], str]:
    """The relayed headers of an upstream answer, and its content type (no parameters)."""
    headers: dict[str, str] = {}
    content_type = "application/octet-stream"
    for line in lines:
        name, _, value = line.decode("latin-1").partition(":")
        name, value = name.strip(), value.strip()
        low = name.lower()
        if low == "content-type":
            content_type = value.split(";", 1)[0].strip() or content_type
        if low not in _NOT_RELAYED:
            headers[name] = value
    return headers, content_type


async def _attempt(
    rt: Router, request: web.Request, b: BackendState, decision: RouteDecision, path: str,
    body: bytes, headers: dict[str, str], intake: Intake, t_arrival: float,
) -> web.StreamResponse | Failure:
    cfg = rt.config
    pool = rt.upstreams[b.index]
    b.in_flight += 1
    rt.metrics.in_flight_changed(b.index, b.in_flight)
    t_send = rt.clock()
    ttft_ms = itl_ms = None
    ok = False
    answer: UpstreamAnswer | None = None
    try:
        try:
            answer = await send(pool, pool.encode(path, headers, body), intake.stream,
                                cfg.connect_timeout_s, cfg.request_timeout_s)
        except asyncio.TimeoutError:
            return _failed(rt, b, Failure("timeout", f"{b.url}: no connection in time"))
        except OSError as exc:
            return _failed(rt, b, Failure("connect", f"{b.url}: {type(exc).__name__}"))
        if answer.status:
            rt.metrics.requests.labels(b.url, str(answer.status)).inc()
        if not answer.sse:  # relayed whole: an error, a JSON answer, a non-stream
            while not answer.settled():
                await answer.wait()
        if answer.error is not None:
            return _failed(rt, b, _broken(b, answer))
        if not answer.sse:
            status = answer.status
            relayed, content_type = _head_fields(answer.header_lines)
            data = bytes(answer.body)
            if status >= 500 or status == 429:
                kind = "http_429" if status == 429 else "http_5xx"
                return _failed(rt, b, Failure(kind, f"{b.url}: HTTP {status}", status, data,
                                              content_type))
            ok = True
            rt.pool.record_ok(b.index)
            ttft_ms = (rt.clock() - t_send) * 1000.0
            return web.Response(body=data, status=status, headers=relayed)
        if not answer.body:  # ended without a body byte
            return _failed(rt, b, Failure("stream_broken", f"{b.url}: empty stream"))
        t_first = rt.clock()
        ttft_ms = (t_first - t_send) * 1000.0
        client = web.StreamResponse(status=answer.status,
                                    headers=_head_fields(answer.header_lines)[0])
        writer = await client.prepare(request)
        first = bytes(answer.body)
        answer.body.clear()
        try:
            await client.write(first)  # the head and the first piece in one write
        except (ConnectionError, RuntimeError):
            answer.client_gone()
            return client
        assert request.transport is not None
        answer.last = first
        chunked = client.headers.get("Transfer-Encoding", "").lower() == "chunked"
        answer.commit(request.transport, chunked)
        rt.metrics.added_latency.observe(max(0.0, (rt.clock() - t_arrival) - (t_first - t_send)))
        ok = await _relay_rest(rt, b, answer, client, writer)
        if answer.pieces:
            itl_ms = (rt.clock() - t_first) * 1000.0 / answer.pieces
        return client
    finally:
        if answer is not None:
            answer.disarm()
            if not answer.ended:
                answer.drop()
        b.in_flight -= 1
        rt.metrics.in_flight_changed(b.index, b.in_flight)
        if ok and ttft_ms is not None:
            b.ewma_ttft.add(ttft_ms)
            if itl_ms is not None:
                b.ewma_itl.add(itl_ms)
        rt.policy.on_finished(b.index, intake.route, ttft_ms, itl_ms, ok, rt.clock())


def _broken(b: BackendState, answer: UpstreamAnswer) -> Failure:
    """The Failure of an answer that failed before anything reached the client."""
    err = answer.error
    if isinstance(err, asyncio.TimeoutError):
        return Failure("timeout", f"{b.url}: no answer in time")
    kind = "connect" if answer.status == 0 else "stream_broken"
    return Failure(kind, f"{b.url}: {type(err).__name__}")


async def _relay_rest(
    rt: Router, b: BackendState, answer: UpstreamAnswer, client: web.StreamResponse,
    writer: AbstractStreamWriter,
) -> bool:
    """Wait while `answer` relays itself; end the client's stream. True unless the backend
    failed (a client that left is not the backend's fault)."""
    while True:
        if answer.client_left:
            return True
        if answer.error is not None or answer.ended:
            break
        if answer.paused:
            try:
                await writer.drain()
            except (ConnectionError, RuntimeError):
                answer.client_gone()
                return True
            answer.resume()
            continue
        await answer.wait()
    if answer.error is None:
        if b"[DONE]" in (answer.prev + answer.last)[-64:]:
            rt.pool.record_ok(b.index)
            await _end(client)
            return True
        detail = f"backend {b.url} ended the stream without [DONE]"
    else:
        detail = f"backend {b.url} failed mid-stream ({type(answer.error).__name__})"
    _failed(rt, b, Failure("stream_broken", detail))
    try:
        await client.write(_sse_error(detail))
        await _end(client)
    except (ConnectionError, RuntimeError):
        pass
    return False


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
