"""The router's one HTTP/1.1 server: a raw asyncio protocol per client connection.

Each connection parses its requests in `data_received` (`httprequest.RequestParser`) and
hands each, with its `Reply`, to the handler. A handler answers on the spot (health,
metrics, refusals), starts work that callbacks carry on (a forwarded request), or returns a
coroutine, which runs as the request's task (`/v1/models`). Requests are answered in
order; pipelined ones wait in the parser's buffer (the connection stops reading once a
head's worth is waiting). The connection calls back into the reply's `sink`, the request
relaying to it: when the client's socket buffer fills (`pause_writing`) or drains, the
relay stops or resumes reading from the backend, and when the client goes away the relay
drops its backend connection at once; a request's task is cancelled instead.

Malformed requests get their 4xx (never a traceback), then a lingering close: the
connection sends its FIN and discards what the client still sends, so the answer is not
destroyed by a reset. Idle connections (no request under way) close after
`keepalive_timeout_s`, checked by one sweep timer for all.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable, Coroutine
from email.utils import formatdate
from functools import partial
from typing import Any

from servelab.router.httpreply import Reply
from servelab.router.httprequest import HttpError, Request, RequestParser

log = logging.getLogger("servelab.router")

Handler = Callable[[Request, Reply], Coroutine[Any, Any, None] | None]

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class HttpServer:
    """Listens on one socket; owns its connections, the idle sweep and the Date header.

    `handler(request, reply)` answers each request (see the module docstring);
    `on_refused(status)` is told of each request refused before the handler (400, 413,
    431, 501, 505). Sizes are bytes, times seconds (`clock`: monotonic)."""

    def __init__(
        self, handler: Handler, on_refused: Callable[[int], None], *, max_body_bytes: int,
        max_head_bytes: int = 65536, keepalive_timeout_s: float = 75.0, linger_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.handler = handler
        self.on_refused = on_refused
        self.max_body_bytes = max_body_bytes
        self.max_head_bytes = max_head_bytes
        self.keepalive_timeout_s = keepalive_timeout_s
        self.linger_s = linger_s
        self.clock = clock
        self.connections: set[ClientConnection] = set()
        self._server: asyncio.AbstractServer | None = None
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]  # set by start
        self._sweeper: asyncio.TimerHandle | None = None
        self._date_s = -1
        self._date = ""

    async def start(self, sock: socket.socket, backlog: int = 4096) -> None:
        """Serve connections accepted on `sock` (bound, not yet listening)."""
        self.loop = loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: ClientConnection(self), sock=sock,
                                                backlog=backlog)
        self._sweep()

    def stop_listening(self) -> None:
        """Close the listening socket: new connections are refused; open ones stay."""
        if self._server is not None:
            self._server.close()

    def close(self) -> None:
        """Close every connection (a stream still under way is cut) and stop sweeping."""
        self.stop_listening()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for conn in list(self.connections):
            conn.close(abort=conn.reply is not None)

    def date(self) -> str:
        """The `Date` header's value, formatted once per second."""
        now = int(time.time())
        if now != self._date_s:
            self._date_s, self._date = now, formatdate(now, usegmt=True)
        return self._date

    def _sweep(self) -> None:
        now = self.clock()
        for conn in list(self.connections):
            since = conn.idle_since
            if since is not None and now - since > self.keepalive_timeout_s:
                conn.close()
        period = max(0.05, self.keepalive_timeout_s / 4)
        self._sweeper = self.loop.call_later(period, self._sweep)


class ClientConnection(asyncio.Protocol):
    """One client's connection: its requests in order, one reply under way at a time."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set on connect
        self._parser = RequestParser(server.max_head_bytes, server.max_body_bytes)
        self.reply: Reply | None = None  # the request being answered
        self._task: asyncio.Task[None] | None = None  # its task, until it is answered
        self.idle_since: float | None = server.clock()  # None while a request is under way
        self.write_paused = False
        self._read_paused = False
        self._closing = False  # answered for the last time; discarding input
        self._parsing = False  # inside `_next` (a reply finished there must not recurse)

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # tokens leave at once
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._server.connections.discard(self)
        reply, self.reply = self.reply, None
        if reply is None or reply.done:
            return
        reply.abandon()
        if reply.sink is not None:
            reply.sink.client_gone()  # drops its backend connection; the forwarding ends
        elif self._task is not None:
            self._task.cancel()  # before the first byte: nothing to relay, stop trying

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._parser.feed(data)
        if self.reply is None:
            self._next()
        elif self._parser.buffered > self._server.max_head_bytes and not self._read_paused:
            self._read_paused = True  # pipelined requests pile up: wait for this answer
            self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        if not self._closing and self.reply is None and self._parser.mid_request:
            self._refuse(HttpError(400, "the connection ended in the middle of a request"))
        return None  # close (as aiohttp did): a half-closed client counts as gone

    def pause_writing(self) -> None:
        self.write_paused = True
        if self.reply is not None and self.reply.sink is not None:
            self.reply.sink.pause()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.reply is not None and self.reply.sink is not None:
            self.reply.sink.resume()

    # -- used by Reply and the server --------------------------------------------------------

    def date(self) -> str:
        return self._server.date()

    def reply_done(self, reply: Reply) -> None:
        """`reply`'s last byte is written: read the next request, or close."""
        if reply is not self.reply:
            return
        self.reply = None
        self._task = None  # it may still be finishing its bookkeeping; it no longer answers
        if not reply.keep_alive:
            self._linger()
            return
        self.idle_since = self._server.clock()
        if not self._parsing:
            self._next()

    def close(self, abort: bool = False) -> None:
        self._closing = True
        if abort:
            self.transport.abort()
        else:
            self.transport.close()

    # -- internals ---------------------------------------------------------------------------

    def _next(self) -> None:
        """Answer the requests complete in the buffer, one at a time."""
        self._parsing = True
        try:
            while self.reply is None and not self._closing:
                try:
                    req = self._parser.next()
                except HttpError as exc:
                    self._refuse(exc)
                    return
                if req is None:
                    if self._parser.wants_continue():
                        self.transport.write(_CONTINUE)
                    if self._read_paused:
                        self._read_paused = False
                        self.transport.resume_reading()
                    return
                self._dispatch(req)
        finally:
            self._parsing = False

    def _dispatch(self, req: Request) -> None:
        reply = Reply(self, req)
        self.reply = reply
        self.idle_since = None
        try:
            coro = self._server.handler(req, reply)
        except Exception:  # a bug in a handler: answer 500 rather than hang the client
            log.exception("router: handler failed on %s %s", req.method, req.path)
            self._internal_error(reply)
            return
        if coro is not None:
            task = self._server.loop.create_task(coro)
            if not reply.done:
                self._task = task
            task.add_done_callback(partial(self._task_done, reply))

    def _task_done(self, reply: Reply, task: asyncio.Task[None]) -> None:
        if self._task is task:
            self._task = None
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("router: request task failed", exc_info=exc)
        if not reply.done:
            self._internal_error(reply)

    def _internal_error(self, reply: Reply) -> None:
        if self.transport.is_closing():  # shutting down, or the client is gone
            reply.abandon()
        elif not reply.started:
            reply.keep_alive = False
            reply.error(500, "internal router error", "internal_error")
        else:  # mid-stream: only cutting the connection tells the client it is incomplete
            reply.abandon()
            self.reply = None
            self.close(abort=True)

    def _refuse(self, exc: HttpError) -> None:
        """Answer a request refused before the handler, then close the connection."""
        self._server.on_refused(exc.status)
        self.reply = reply = Reply(self, None)
        reply.error(exc.status, str(exc), "invalid_request_error")

    def _linger(self) -> None:
        """Close after the last answer: FIN once it is sent, discard what the client still
        sends (unread bytes would make the close a reset that can destroy the answer),
        and close for good when the client does, or after `linger_s`."""
        self._closing = True
        transport = self.transport
        if transport.is_closing():
            return
        if self._read_paused:
            self._read_paused = False
            transport.resume_reading()
        if transport.can_write_eof():
            transport.write_eof()
            self._server.loop.call_later(self._server.linger_s, transport.close)
        else:
            transport.close()
