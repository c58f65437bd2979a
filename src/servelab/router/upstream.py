"""One backend answer on its way to the client, relayed from the socket callback.

The upstream side is the client's own HTTP/1.1 connection (`servelab.client.connection`:
keep-alive pool per backend, head and chunked framing parsed in `data_received`). An
`UpstreamAnswer` is the sink it delivers into, and tells its `AnswerListener` (the
request's `relay.Forwarding`) what happened, from the same callback: the first body piece
of a stream is in hand (the listener commits the client's response there and then), or the
answer settled (ended, failed, timed out, or the client left). Until `commit` the body is
kept (the answer may still be retried or is relayed whole); after it, the body pieces of
each upstream read are framed as HTTP chunks and written to the client's transport in one
write at the end of that read (`flush`). The stream's end (the last pieces and the
terminating chunk) is one write too. Backpressure is callbacks as well: when the client's
socket buffer fills, reading from the backend stops (`pause`) until it drains (`resume`).
No task, no future, no wake-up on the way.

Of the head only the status and `Content-Type` are read; of the body only the chunk
framing, and the last two pieces, where the relay looks for `[DONE]`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

from servelab.client.connection import ConnectionPool, HttpConnection, StreamBroken
from servelab.router.httpreply import Reply


class AnswerListener(Protocol):
    """Told by an `UpstreamAnswer` what happened, from inside the socket's callback."""

    def first_piece(self, answer: UpstreamAnswer) -> None:
        """A streamed (SSE) answer's first body bytes are in `answer.body`; not committed."""

    def settled(self, answer: UpstreamAnswer) -> None:
        """The answer ended, failed, or the client left; called once, last."""


class UpstreamAnswer:
    """Implements `servelab.client.connection.AnswerSink` for the router."""

    __slots__ = (
        "status", "header_lines", "got_bytes", "body", "sse", "ended", "error", "client_left",
        "pieces", "prev", "last", "conn", "_stream", "_listener", "_reply", "_out", "_chunked",
        "_pending", "_paused", "_timer", "_settled",
    )

    def __init__(self, conn: HttpConnection, stream: bool, listener: AnswerListener) -> None:
        self.status = 0
        self.header_lines: list[bytes] = []
        self.got_bytes = False
        self.body = bytearray()  # before commit: everything received
        self.sse = False  # a 200 text/event-stream answer to a streaming request
        self.ended = False  # the backend framed the end of the answer
        self.error: BaseException | None = None
        self.client_left = False
        self.pieces = 0  # body pieces relayed after commit
        self.prev = self.last = b""  # the last two pieces (for the [DONE] check)
        self.conn = conn
        self._stream = stream
        self._listener = listener
        self._reply: Reply | None = None
        self._out: asyncio.Transport | None = None  # the client's, after commit
        self._chunked = True
        self._pending: list[bytes] = []  # framed pieces of the current read, not yet written
        self._paused = False  # upstream reading paused until the client's socket drains
        self._timer: asyncio.TimerHandle | None = None
        self._settled = False

    # -- AnswerSink (called from the upstream connection's data_received) ----------------

    def head(self, status: int, header_lines: list[bytes]) -> None:
        self.status = status
        self.header_lines = header_lines
        if self._stream and status == 200:
            for line in header_lines:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-type":
                    self.sse = value.strip().lower().startswith(b"text/event-stream")

    def deliver(self, data: bytes, t: float) -> None:
        if self._out is None:
            if self._settled or not data:
                return
            first = not self.body
            self.body += data
            if first and self.sse:
                self._listener.first_piece(self)  # commits: later pieces take the path below
            return
        if self.client_left or not data:
            return
        # Framed here, not by `Reply.frame`: this runs once per token.
        self._pending.append(b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data)
        self.prev, self.last = self.last, data
        self.pieces += 1

    def flush(self) -> None:
        """The end of one upstream read: its pieces go to the client in one write."""
        pending = self._pending
        if not pending:
            return
        out = self._out
        assert out is not None
        if out.is_closing():
            self.client_gone()
            return
        out.write(pending[0] if len(pending) == 1 else b"".join(pending))
        pending.clear()

    def finish(self, t: float) -> None:
        if self._settled:
            return
        self.ended = True
        reply = self._reply
        if reply is not None and not self.client_left:
            if self.complete():  # the last pieces and the stream's end in one write
                tail = b"".join(self._pending)
                self._pending.clear()
                reply.end(tail)
            else:
                self.flush()  # the listener adds the error event
        self._settle()

    def fail(self, exc: BaseException) -> None:
        if self._settled or self.ended:
            return
        self.error = exc
        if self._out is not None and not self.client_left:
            self.flush()
        self._settle()

    # -- used by the listener and the client's connection -------------------------------------

    def complete(self) -> bool:
        """Whether the stream ended with `data: [DONE]` (else it was cut)."""
        return b"[DONE]" in (self.prev + self.last)[-64:]

    def arm(self, timeout_s: float, loop: asyncio.AbstractEventLoop) -> None:
        """Fail the answer (and drop its connection) `timeout_s` from now. (The loop is
        passed in: on Python 3.11 `get_running_loop()` costs a getpid system call.)"""
        self._timer = loop.call_later(timeout_s, self.time_out)

    def time_out(self) -> None:
        """The per-request timeout fired: the answer fails and its connection is dropped."""
        self.conn.abort()
        self.fail(asyncio.TimeoutError())

    def commit(self, reply: Reply, headers: Iterable[tuple[str, str]]) -> None:
        """Start the client's stream: its head with the body received so far, in one write;
        from now on relay each read's pieces straight to the client's transport."""
        first = bytes(self.body)
        self.body = bytearray()
        reply.start(self.status, headers, first)
        self._reply = reply
        self._out = reply.transport
        self._chunked = reply.chunked
        self.last = first
        if reply.done:  # the client is gone already
            self.client_gone()
        elif reply.write_paused:
            self.pause()

    @property
    def committed(self) -> bool:
        return self._out is not None

    def pause(self) -> None:
        """The client's socket buffer is full: stop reading from the backend."""
        transport = self.conn.transport
        if not self._paused and transport is not None and not transport.is_closing():
            self._paused = True
            transport.pause_reading()

    def resume(self) -> None:
        """The client's socket buffer drained: read from the backend again."""
        transport = self.conn.transport
        if self._paused and transport is not None and not transport.is_closing():
            self._paused = False
            transport.resume_reading()

    def client_gone(self) -> None:
        """The client cannot be written to: drop the upstream connection (its answer can
        no longer be read to the end, so it cannot be reused)."""
        if self._settled:
            return
        self.client_left = True
        self._pending.clear()
        if self._reply is not None:
            self._reply.abandon()
        self.conn.abort()
        self._settle()

    def _settle(self) -> None:
        self._settled = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.ended:
            self.conn.abort()  # never reuse a connection whose answer was not read to the end
        self._listener.settled(self)


class _Resolve:
    """An AnswerListener that resolves a future once the answer settles."""

    def __init__(self, future: asyncio.Future[None]) -> None:
        self._future = future

    def first_piece(self, answer: UpstreamAnswer) -> None:
        return None

    def settled(self, answer: UpstreamAnswer) -> None:
        if not self._future.done():
            self._future.set_result(None)


async def fetch(pool: ConnectionPool, request: bytes, connect_timeout_s: float,
                timeout_s: float) -> UpstreamAnswer:
    """Send `request` (encoded) and return its whole answer, settled (a coroutine, for the
    rare requests that are not relayed: `GET /v1/models`). A kept-alive connection the
    backend had closed is resent once on a new one. Raises OSError or asyncio.TimeoutError
    when the backend cannot be connected to."""
    conn = pool.take_idle()
    loop = asyncio.get_running_loop()
    for fresh in (conn is None, True):
        if fresh:
            conn = await asyncio.wait_for(pool.open(), connect_timeout_s)
        assert conn is not None
        done: asyncio.Future[None] = loop.create_future()
        answer = UpstreamAnswer(conn, False, _Resolve(done))
        answer.arm(timeout_s, loop)
        conn.start(request, answer)
        try:
            await done
        except BaseException:  # cancelled: nobody will read this answer
            answer.client_gone()
            raise
        err = answer.error
        if fresh or not (isinstance(err, StreamBroken) and err.retryable):
            return answer
    raise AssertionError("unreachable")
