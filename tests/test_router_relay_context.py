"""`Forwarding` through its `RelayContext`, built here from the router's real parts (pool,
policy, retry budget, metrics, keep-alive upstream pools) without the proxy around it, in
front of real token servers; the client side is a real socket pair."""

from __future__ import annotations

import asyncio
import random
import socket
import time
from dataclasses import dataclass, field

from servelab.client.connection import ConnectionPool
from servelab.router.config import RouterConfig
from servelab.router.httpreply import Reply
from servelab.router.httprequest import Request
from servelab.router.intake import parse_body
from servelab.router.metrics import RouterMetrics
from servelab.router.pool import BackendPool
from servelab.router.relay import Forwarding
from servelab.router.retry import RetryBudget
from servelab.routing import make_policy
from servelab.testing.ports import free_port_base

BODY = b'{"model": "M", "prompt": "hello there", "max_tokens": 5, "stream": true}'


@dataclass
class Context:
    """A `RelayContext` of real parts; `done` counts `request_done` calls."""

    config: RouterConfig
    pool: BackendPool
    upstreams: list[ConnectionPool]
    policy: object
    rng: random.Random
    budget: RetryBudget
    metrics: RouterMetrics
    clock: object
    loop: asyncio.AbstractEventLoop
    api_key: bytes | None = None
    done: list[float] = field(default_factory=list)
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    def request_done(self) -> None:
        self.done.append(time.monotonic())
        self.finished.set()


def _context(urls: list[str]) -> Context:
    config = RouterConfig(backends=urls, policy="round_robin", max_retries=2, retry_backoff_ms=1)
    rng = random.Random(1)
    return Context(config, BackendPool(urls, config.eject_after_errors, config.readmit_after_checks),
                   [ConnectionPool(u, time.monotonic) for u in urls], make_policy("round_robin", rng), rng,
                   RetryBudget(1.0, 10, 10.0), RouterMetrics(urls, "round_robin", 10.0, time.monotonic),
                   time.monotonic, asyncio.get_running_loop())


class _Client:
    """The reply's connection: the router's side of a socket pair (`ReplyOwner`)."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.write_paused = False
        self.replies: list[Reply] = []

    def date(self) -> str:
        return "Tue, 01 Dec 2026 00:00:00 GMT"

    def reply_done(self, reply: Reply) -> None:
        self.replies.append(reply)


async def _forward(ctx: Context) -> bytes:
    """One streamed completion through `Forwarding`; what the client's socket received."""
    ours, theirs = socket.socketpair()
    transport, _ = await ctx.loop.connect_accepted_socket(asyncio.Protocol, ours)
    owner = _Client(transport)  # type: ignore[arg-type]
    req = Request("POST", "/v1/completions", True, {"content-type": "application/json"})
    req.body = BODY
    reply = Reply(owner, req)  # type: ignore[arg-type]
    Forwarding(ctx, req, reply, parse_body(BODY, False, None), ctx.clock()).start()  # type: ignore[arg-type]
    await asyncio.wait_for(ctx.finished.wait(), 30)
    transport.close()
    theirs.setblocking(False)
    data = b""
    while True:
        try:
            chunk = theirs.recv(65536)
        except BlockingIOError:
            await asyncio.sleep(0.01)
            continue
        if not chunk:
            break
        data += chunk
    theirs.close()
    return data


def test_a_stream_is_relayed_whole_and_the_books_close(token_server) -> None:
    a, b = token_server(ttft_ms=5, itl_ms=1), token_server(ttft_ms=5, itl_ms=2)

    async def go() -> tuple[bytes, Context]:
        ctx = _context([a.url, b.url])
        data = await _forward(ctx)
        return data, ctx

    data, ctx = asyncio.run(go())
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert data.count(b"data: {") == 5 and data.rstrip().endswith(b"0")  # chunked, 5 tokens
    assert b"data: [DONE]" in data
    assert len(ctx.done) == 1  # request_done once
    assert [s.in_flight for s in ctx.pool.backends] == [0, 0]
    assert (a.stats()["requests"], b.stats()["requests"]) == (1, 0)  # round robin's first
    assert ctx.metrics.registry.get_sample_value("servelab_router_retries_total") == 0


def test_a_refused_backend_is_retried_on_the_next(token_server) -> None:
    dead = f"http://127.0.0.1:{free_port_base(1)}"  # nothing listens there
    live = token_server(ttft_ms=5, itl_ms=1)

    async def go() -> tuple[bytes, Context]:
        ctx = _context([dead, live.url])
        return await _forward(ctx), ctx

    data, ctx = asyncio.run(go())
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"data: [DONE]" in data
    assert ctx.metrics.registry.get_sample_value("servelab_router_retries_total") == 1  # one retry, after the refused connect
    assert live.stats()["requests"] == 1
    assert ctx.pool.backends[0].consecutive_errors == 1 and len(ctx.done) == 1
