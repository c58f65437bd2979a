"""Forwarding one request: choose a backend, send, retry while nothing has reached the
client, then relay the answer's bytes as they arrive.

A response is committed to the client only when the backend's first body chunk is in
hand, so connect errors, 5xx, 429 and streams that die before their first byte are
retried on another backend (within `max_retries` and the retry budget, after a jittered
backoff); once a byte has been sent the stream is never replayed, and a backend failure
ends it with an SSE error event (no `[DONE]`).

A `Forwarding` is a state machine driven by callbacks, not a task: it starts in the client
connection's `data_received`, sends on a kept-alive upstream connection there and then,
commits the client's response from the upstream `data_received` that brings the first
piece, and does its bookkeeping (in-flight counts, EWMAs, the policy's feedback) from the
callback that ends the answer. Only opening a new upstream connection runs as a task, and
a retry waits on a timer. The request's steps therefore cost no task creation and no
wake-ups, and each step happens as soon as its bytes arrive.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Protocol

from servelab.client.connection import ConnectionPool, HttpConnection, StreamBroken
from servelab.router.config import RouterConfig
from servelab.router.failure import Failure, sse_error
from servelab.router.headers import relayed_headers, upstream_headers
from servelab.router.httpreply import Reply
from servelab.router.httprequest import Request
from servelab.router.intake import Intake
from servelab.router.metrics import RouterMetrics
from servelab.router.pool import BackendPool, BackendState
from servelab.routing.records import NoHealthyReplicaError, RoutingPolicy
from servelab.router.retry import RetryBudget, backoff_s
from servelab.router.upstream import UpstreamAnswer

log = logging.getLogger("servelab.router")


class RelayContext(Protocol):
    """What forwarding a request needs from the proxy around it (the proxy's `Router` is
    one; a test can build its own from real parts): the backends' state and their
    keep-alive connections (`upstreams`, index as in `pool`), the policy and its RNG, the
    retry budget, the metrics, the settings, the clock (s), the event loop, the client key
    (None: no auth), and `request_done()`, called once when a request is over."""

    config: RouterConfig
    pool: BackendPool
    upstreams: list[ConnectionPool]
    policy: RoutingPolicy
    rng: random.Random
    budget: RetryBudget
    metrics: RouterMetrics
    clock: Callable[[], float]
    loop: asyncio.AbstractEventLoop
    api_key: bytes | None

    def request_done(self) -> None: ...


class Forwarding:
    """One request from choice to last byte; implements `upstream.AnswerListener` and
    `httpreply.ReplySink`. `start()` begins; `rt.request_done()` is called once at the end."""

    __slots__ = ("_rt", "_req", "_reply", "_intake", "_t_arrival", "_headers", "_encoded",
                 "_tried", "_retries", "_last", "_b", "_t_send", "_t_first", "_resent",
                 "_answer", "_connecting", "_backoff", "_over")

    def __init__(self, rt: RelayContext, req: Request, reply: Reply, intake: Intake,
                 t_arrival: float) -> None:
        self._rt = rt
        self._req = req
        self._reply = reply
        self._intake = intake
        self._t_arrival = t_arrival
        self._headers = upstream_headers(req.headers, strip_auth=rt.api_key is not None)
        self._encoded: dict[int, bytes] = {}  # the request's bytes, per backend
        self._tried: set[int] = set()
        self._retries = 0
        self._last: Failure | None = None
        self._b: BackendState | None = None  # the backend of the attempt under way
        self._t_send = self._t_first = 0.0
        self._resent = False  # this attempt was resent after a stale keep-alive connection
        self._answer: UpstreamAnswer | None = None
        self._connecting: asyncio.Task[HttpConnection] | None = None
        self._backoff: asyncio.TimerHandle | None = None
        self._over = False

    def start(self) -> None:
        self._rt.budget.record_request(self._t_arrival)
        self._reply.sink = self
        self._choose()

    # -- attempts -------------------------------------------------------------------------

    def _choose(self) -> None:
        self._backoff = None
        rt = self._rt
        now = rt.clock()
        try:
            views = rt.pool.views(now, frozenset(self._tried))
            decision = rt.policy.choose(self._intake.route, views, now)
        except NoHealthyReplicaError:
            if self._last is not None:
                self._last.answer(self._reply)
            else:
                rt.metrics.client_errors.labels("no_healthy_backend").inc()
                self._reply.error(503, "no healthy backend", "service_unavailable",
                                  [("Retry-After", "1")])
            self._end()
            return
        i = decision.index
        b = self._b = rt.pool[i]
        rt.metrics.decided(i, decision.prefix_match_chars, now)
        if rt.config.explain:
            log.info("route %s attempt %d -> %s: %s", self._req.path, self._retries + 1, b.url,
                     decision.reason)
        self._tried.add(i)
        b.in_flight += 1
        self._t_send = rt.clock()
        self._resent = False
        conn = rt.upstreams[i].take_idle()
        if conn is None:
            self._connect()
        else:
            self._send(conn)

    def _connect(self) -> None:
        rt, b = self._rt, self._b
        assert b is not None
        opening = asyncio.wait_for(rt.upstreams[b.index].open(), rt.config.connect_timeout_s)
        self._connecting = rt.loop.create_task(opening)
        self._connecting.add_done_callback(self._connected)

    def _connected(self, task: asyncio.Task[HttpConnection]) -> None:
        self._connecting = None
        if task.cancelled():  # the client left meanwhile (already accounted for)
            return
        exc = task.exception()
        b = self._b
        assert b is not None
        if self._over:  # the client left as the connection opened: keep it for the next
            if exc is None:
                self._rt.upstreams[b.index].release(task.result())
            return
        if isinstance(exc, asyncio.TimeoutError):
            self._failed(Failure("timeout", f"{b.url}: no connection in time"))
        elif exc is not None:
            self._failed(Failure("connect", f"{b.url}: {type(exc).__name__}"))
        else:
            self._send(task.result())

    def _send(self, conn: HttpConnection) -> None:
        rt, b = self._rt, self._b
        assert b is not None
        data = self._encoded.get(b.index)
        if data is None:
            pool = rt.upstreams[b.index]
            data = self._encoded[b.index] = pool.encode(self._req.path, self._headers,
                                                        self._req.body)
        self._answer = answer = UpstreamAnswer(conn, self._intake.stream, self)
        answer.arm(rt.config.request_timeout_s, rt.loop)
        try:
            conn.start(data, answer)
        except RuntimeError:  # its transport closed as it was taken: as if it had dropped
            answer.fail(StreamBroken("connection closed before the request", conn.reused))

    # -- AnswerListener ---------------------------------------------------------------------

    def first_piece(self, answer: UpstreamAnswer) -> None:
        rt, b = self._rt, self._b
        assert b is not None
        self._t_first = t_first = rt.clock()
        rt.metrics.answered(b.index, answer.status)
        answer.commit(self._reply, relayed_headers(answer.header_lines)[0])
        took = (rt.clock() - self._t_arrival) - (t_first - self._t_send)
        rt.metrics.added_latency.observe(max(0.0, took))

    def settled(self, answer: UpstreamAnswer) -> None:
        self._answer = None
        rt, b = self._rt, self._b
        assert b is not None
        if answer.status and not answer.committed:  # (a stream is counted at its start)
            rt.metrics.answered(b.index, answer.status)
        if answer.committed:
            self._stream_ended(answer)
            return
        if answer.client_left:
            self._attempt_over(False, None, None)
            self._end()
            return
        err = answer.error
        if err is not None:
            if isinstance(err, StreamBroken) and err.retryable and not self._resent:
                self._resent = True  # a kept-alive connection the backend had closed: not
                self._connect()  # the backend's fault; the same attempt, on a new connection
                return
            if isinstance(err, asyncio.TimeoutError):
                self._failed(Failure("timeout", f"{b.url}: no answer in time"))
            else:
                kind = "connect" if answer.status == 0 else "stream_broken"
                self._failed(Failure(kind, f"{b.url}: {type(err).__name__}"))
            return
        status = answer.status
        relayed, content_type = relayed_headers(answer.header_lines)
        data = bytes(answer.body)
        if answer.sse:  # a stream that ended without a body byte
            self._failed(Failure("stream_broken", f"{b.url}: empty stream"))
        elif status >= 500 or status == 429:
            kind = "http_429" if status == 429 else "http_5xx"
            self._failed(Failure(kind, f"{b.url}: HTTP {status}", status, data, content_type))
        else:  # relayed whole: a JSON answer, a non-stream, a 4xx
            rt.pool.record_ok(b.index)
            self._attempt_over(True, (rt.clock() - self._t_send) * 1000.0, None)
            self._reply.send(status, data, relayed, content_type=None)
            self._end()

    def _stream_ended(self, answer: UpstreamAnswer) -> None:
        """A committed stream is over: it completed, the client left, or it was cut."""
        rt, b = self._rt, self._b
        assert b is not None
        ok = True
        if not answer.client_left:  # a client that left is not the backend's fault
            if answer.error is None and answer.complete():
                rt.pool.record_ok(b.index)  # the answer already ended the client's stream
            else:
                if answer.error is None:
                    detail = f"backend {b.url} ended the stream without [DONE]"
                else:
                    detail = f"backend {b.url} failed mid-stream ({type(answer.error).__name__})"
                self._count_failure(Failure("stream_broken", detail))
                self._reply.end(self._reply.frame(sse_error(detail)))
                ok = False
        now = rt.clock()
        ttft_ms = (self._t_first - self._t_send) * 1000.0
        itl_ms = (now - self._t_first) * 1000.0 / answer.pieces if answer.pieces else None
        self._attempt_over(ok, ttft_ms, itl_ms)
        self._end()

    # -- ReplySink (the client's connection) ----------------------------------------------------

    def client_gone(self) -> None:
        if self._over:
            return
        if self._answer is not None:
            self._answer.client_gone()  # settles: bookkeeping and the end follow from there
            return
        if self._connecting is not None:
            self._connecting.cancel()
            self._connecting = None
            self._attempt_over(False, None, None)
        if self._backoff is not None:
            self._backoff.cancel()
            self._backoff = None
        self._end()

    def pause(self) -> None:
        if self._answer is not None and self._answer.committed:
            self._answer.pause()

    def resume(self) -> None:
        if self._answer is not None and self._answer.committed:
            self._answer.resume()

    # -- outcomes -------------------------------------------------------------------------------

    def _failed(self, failure: Failure) -> None:
        """This attempt failed before the client saw a byte: retry, or answer the failure."""
        self._count_failure(failure)
        self._attempt_over(False, None, None)
        rt = self._rt
        self._last = failure
        self._retries += 1
        if self._retries > rt.config.max_retries:
            failure.answer(self._reply)
        elif not rt.budget.try_spend(rt.clock()):
            rt.metrics.retry_budget_exhausted.inc()
            failure.answer(self._reply)
        else:
            rt.metrics.retries.inc()
            delay_s = backoff_s(self._retries, rt.config.retry_backoff_ms, rt.rng)
            self._backoff = rt.loop.call_later(delay_s, self._choose)
            return
        self._end()

    def _count_failure(self, failure: Failure) -> None:
        rt, b = self._rt, self._b
        assert b is not None
        rt.metrics.errors.labels(b.url, failure.kind).inc()
        if failure.kind != "http_429" and rt.pool.record_error(b.index):
            rt.metrics.healthy.labels(b.url).set(0)
            rt.metrics.ejections.labels(b.url, "consecutive_errors").inc()
            log.warning("backend %s ejected after %d consecutive errors", b.url,
                        b.consecutive_errors)

    def _attempt_over(self, ok: bool, ttft_ms: float | None, itl_ms: float | None) -> None:
        """The attempt on `_b` is over: in-flight count, EWMAs, the policy's feedback."""
        rt, b = self._rt, self._b
        assert b is not None
        b.in_flight -= 1
        if ok and ttft_ms is not None:
            b.ewma_ttft.add(ttft_ms)
            if itl_ms is not None:
                b.ewma_itl.add(itl_ms)
        rt.policy.on_finished(b.index, self._intake.route, ttft_ms, itl_ms, ok, rt.clock())

    def _end(self) -> None:
        if not self._over:
            self._over = True
            self._reply.sink = None
            self._rt.request_done()
