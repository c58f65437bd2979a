"""A small OpenAI-compatible server that streams tokens on a known schedule.

Tests and benchmarks use it as ground truth: chunk c of a response (0-based) leaves at
`ttft_ms + c * itl_ms` after the request arrived, carrying `tokens_per_chunk` tokens (the
last chunk may carry fewer). Sleeps target absolute deadlines on the event loop's clock,
so lateness does not accumulate over a response. With one token per chunk, `itl_ms` is the
true inter-token latency and `ttft_ms` the true time to first token.

This module owns when bytes leave and what was counted: the schedule, the faults, the
`ServerStats`, the aiohttp app and the command line. What an answer says (its length,
text, usage, vLLM's stream format) is `token_answer`'s, so either reads without the other.

Serves `/v1/completions` and `/v1/chat/completions` (SSE streaming or one JSON answer),
`/v1/models`, `/health`, and `/stats` (requests seen, in flight now, the maximum ever in
flight, and what the server actually did, measured with `time.perf_counter` just before
each chunk was written: mean time from the request's arrival to the first chunk, mean gap
between chunks, and the sums of TTFT and of arrival-to-last-chunk per stream, which bound
any client's sums from below; `POST /stats/reset` zeroes them), and `/requests` (the headers, but the API key,
and the body of each completion request, so tests see what a client sent, and for each
finished stream its own `truth`: TTFT and arrival-to-last-chunk, ms). On a busy machine the actual figures drift from
the schedule (timers fire late); they are the truth a client is checked against.

Faults, counted over completion requests in arrival order (1-based): every `fail_every`-th
gets HTTP 500, and so does every one after the first `fail_after`; every `break_every`-th has its connection cut after `break_after_tokens`
tokens; every `stall_every`-th waits `stall_ms` before answering. With `api_key` set,
completion requests without `Authorization: Bearer <api_key>` get HTTP 401.

    python -m servelab.testing.token_server --port 0 --ttft-ms 50 --itl-ms 20

prints `listening on http://127.0.0.1:PORT` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import time
import sys
from dataclasses import dataclass, fields

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from servelab.testing import token_answer


@dataclass(frozen=True, slots=True)
class TokenServerConfig:
    """The server's schedule and faults (times in milliseconds)."""

    ttft_ms: float = 0.0
    itl_ms: float = 0.0
    tokens_per_chunk: int = 1
    reasoning_tokens: int = 0
    eos_after: int | None = None
    fail_every: int = 0
    break_every: int = 0
    break_after_tokens: int = 0
    stall_every: int = 0
    stall_ms: float = 0.0
    model: str = "token-server"
    api_key: str | None = None
    fail_after: int = 0


@dataclass(slots=True)
class ServerStats:
    """What the server counted (exposed on /stats)."""

    requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    streams: int = 0
    sum_ttft_ms: float = 0.0
    sum_stream_ms: float = 0.0
    gaps: int = 0
    sum_gap_ms: float = 0.0


class _StampingHandler(RequestHandler):
    """aiohttp's connection protocol, noting when each request's first bytes arrived.

    The handler coroutine of a request that arrived in a burst starts only after the
    handlers before it ran; stamping in `data_received` makes the schedule (and the
    measured truth) start when the request reached the server, as a client sees it. A read
    that starts with a method name starts a request (bodies here are JSON).
    """

    __slots__ = ("t_first_byte",)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.t_first_byte: float | None = None

    def data_received(self, data: bytes) -> None:
        if data[:4] in (b"POST", b"GET "):
            self.t_first_byte = time.perf_counter()
        super().data_received(data)


def _arrival(request: web.Request) -> float:
    """When the request's first bytes arrived (perf_counter s)."""
    t = getattr(request.protocol, "t_first_byte", None)
    return t if t is not None else time.perf_counter()


@web.middleware
async def _stamp_arrival(request: web.Request, handler):  # type: ignore[no-untyped-def]
    request["t_arrive"] = _arrival(request)
    return await handler(request)


class TokenServer:
    """The aiohttp application and its state: one instance per server process."""

    def __init__(self, config: TokenServerConfig) -> None:
        self.config = config
        self.stats = ServerStats()
        # What each generation request carried (headers but the API key, and the body).
        self.seen: list[dict[str, object]] = []
        self.app = web.Application(client_max_size=1 << 30, middlewares=[_stamp_arrival])
        self.app.add_routes(
            [
                web.post("/v1/completions", self.completions),
                web.post("/v1/chat/completions", self.chat),
                web.get("/v1/models", self.models),
                web.get("/health", self.health),
                web.get("/stats", self.get_stats),
                web.get("/requests", self.get_requests),
                web.post("/stats/reset", self.reset_stats),
            ]
        )

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.config.model, "object": "model"}]}
        )

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def get_stats(self, request: web.Request) -> web.Response:
        s = self.stats
        return web.json_response({
            "requests": s.requests, "in_flight": s.in_flight, "max_in_flight": s.max_in_flight,
            "streams": s.streams,
            "mean_ttft_ms": s.sum_ttft_ms / s.streams if s.streams else None,
            "mean_chunk_gap_ms": s.sum_gap_ms / s.gaps if s.gaps else None,
            "sum_ttft_ms": s.sum_ttft_ms, "sum_stream_ms": s.sum_stream_ms,
        })

    async def reset_stats(self, request: web.Request) -> web.Response:
        self.stats = ServerStats(in_flight=self.stats.in_flight, max_in_flight=self.stats.in_flight)
        self.seen.clear()
        return web.Response(text="")

    async def get_requests(self, request: web.Request) -> web.Response:
        return web.json_response(self.seen)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, chat: bool) -> web.StreamResponse:
        t_arrive: float = request["t_arrive"]
        stats = self.stats
        stats.requests += 1
        seq = stats.requests
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            return await self._answer(request, chat, seq, t_arrive)
        except ConnectionResetError:
            # The client went away (a timeout, a stopped run): nothing left to answer.
            return web.Response(status=499)
        finally:
            self.stats.in_flight -= 1

    async def _answer(
        self, request: web.Request, chat: bool, seq: int, t_arrive: float
    ) -> web.StreamResponse:
        cfg = self.config
        if cfg.api_key is not None and request.headers.get("Authorization") != f"Bearer {cfg.api_key}":
            return web.json_response({"object": "error", "message": "bad API key"}, status=401)
        body = await request.json()
        seen: dict[str, object] = {"headers": {k.lower(): v for k, v in request.headers.items()
                                               if k.lower() != "authorization"}, "body": body}
        if len(self.seen) < SEEN_MAX:
            self.seen.append(seen)
        if cfg.fail_after and seq > cfg.fail_after:
            return web.json_response(
                {"object": "error", "message": f"injected failure after request {cfg.fail_after}"},
                status=500)
        if cfg.fail_every and seq % cfg.fail_every == 0:
            return web.json_response(
                {"object": "error", "message": f"injected failure for request {seq}"}, status=500
            )
        if cfg.stall_every and seq % cfg.stall_every == 0:
            t_arrive += cfg.stall_ms / 1000.0
        n = token_answer.count_output_tokens(body, cfg.eos_after)
        prompt_tokens = token_answer.count_prompt_tokens(body)
        opts = body.get("stream_options") or {}
        if not body.get("stream"):
            await _sleep_until(t_arrive + (cfg.ttft_ms + cfg.itl_ms * _chunks(n, cfg) - cfg.itl_ms) / 1000)
            return web.json_response(token_answer.whole_answer(cfg.model, chat, n, prompt_tokens))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        cut_after = cfg.break_after_tokens if cfg.break_every and seq % cfg.break_every == 0 else None
        events = token_answer.StreamEvents(cfg.model, cfg.reasoning_tokens, chat,
                                           prompt_tokens, opts)
        if chat:
            await resp.write(events.role())
        sent = 0
        c = 0
        t_first = t_prev = 0.0
        while sent < n:
            k = min(cfg.tokens_per_chunk, n - sent)
            await _sleep_until(t_arrive + (cfg.ttft_ms + c * cfg.itl_ms) / 1000.0)
            if cut_after is not None and sent + k > cut_after:
                assert request.transport is not None
                request.transport.abort()  # a broken stream: no final chunk, no [DONE]
                return resp
            sent += k
            # Stamped before the write: no client can see the chunk earlier, so a client's
            # TTFT and latency are never below the server's (the tests' causal bound).
            t_now = time.perf_counter()
            await resp.write(events.tokens(sent - k, k, sent, "length" if sent == n else None))
            if c == 0:
                t_first = t_now
            else:
                self.stats.gaps += 1
                self.stats.sum_gap_ms += (t_now - t_prev) * 1000.0
            t_prev = t_now
            c += 1
        self.stats.streams += 1
        self.stats.sum_ttft_ms += (t_first - t_arrive) * 1000.0
        stream_ms = (t_prev - request["t_arrive"]) * 1000.0
        self.stats.sum_stream_ms += stream_ms
        seen["truth"] = {"ttft_ms": (t_first - t_arrive) * 1000.0, "stream_ms": stream_ms}
        if events.include_usage:
            await resp.write(events.usage(n))
        await resp.write(token_answer.DONE)
        await resp.write_eof()
        return resp


SEEN_MAX = 10_000  # requests /requests remembers (a test server: bounded, not a log)


def _chunks(n: int, cfg: TokenServerConfig) -> int:
    return -(-n // cfg.tokens_per_chunk)


async def _sleep_until(deadline: float) -> None:
    """Sleep until `deadline` (time.perf_counter seconds)."""
    delay = deadline - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


def _parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, TokenServerConfig]:
    p = argparse.ArgumentParser(description="OpenAI-compatible token server on a known schedule.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
    p.add_argument("--ttft-ms", type=float, default=0.0)
    p.add_argument("--itl-ms", type=float, default=0.0, help="gap between chunks")
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--reasoning-tokens", type=int, default=0, help="chat: first N as reasoning")
    p.add_argument("--eos-after", type=int, default=None)
    p.add_argument("--fail-every", type=int, default=0)
    p.add_argument("--break-every", type=int, default=0)
    p.add_argument("--break-after-tokens", type=int, default=0)
    p.add_argument("--stall-every", type=int, default=0)
    p.add_argument("--stall-ms", type=float, default=0.0)
    p.add_argument("--model", default="token-server")
    p.add_argument("--api-key", default=None, help="answer 401 unless this Bearer key is sent")
    p.add_argument("--fail-after", type=int, default=0, help="answer 500 to every request after the first N")
    a = p.parse_args(argv)
    if a.tokens_per_chunk < 1:
        p.error("--tokens-per-chunk must be >= 1")
    # Every config field is a flag of the same name, so a new field cannot be left unparsed.
    cfg = TokenServerConfig(**{f.name: getattr(a, f.name) for f in fields(TokenServerConfig)})
    return a, cfg


async def _serve_forever(host: str, port: int, cfg: TokenServerConfig) -> None:
    server = TokenServer(cfg)
    runner = web.AppRunner(server.app, access_log=None, handle_signals=True)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(4096)
    loop = asyncio.get_running_loop()
    manager = runner.server
    assert manager is not None
    listener = await loop.create_server(
        lambda: _StampingHandler(manager, loop=loop, access_log=None), sock=sock
    )
    print(f"listening on http://{host}:{sock.getsockname()[1]}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        listener.close()
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    """Run the server until SIGINT/SIGTERM."""
    args, cfg = _parse_args(argv)
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        loop_factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        try:
            runner.run(_serve_forever(args.host, args.port, cfg))
        except (KeyboardInterrupt, web.GracefulExit):
            pass
    sys.exit(0)


if __name__ == "__main__":
    main()
