"""One backend answer on its way to the client, relayed from the socket callback.

The upstream side is the client's own HTTP/1.1 connection (`servelab.client.connection`:
keep-alive pool per backend, head and chunked framing parsed in `data_received`). An
`UpstreamAnswer` is the sink it delivers into. Until `commit` the body is kept (the answer
may still be retried or is relayed whole); after it, every body piece is written straight
to the client's transport as one HTTP chunk from inside `data_received`: no StreamReader,
no task wake-up, one socket write per body piece (one per upstream read, unless the
backend's chunks arrive together). The relaying coroutine sleeps until the answer ends,
fails, the client leaves, or the client is slow: then the upstream connection's reading
is paused until the client's transport drains (backpressure).

Of the head only the status and `Content-Type` are read; of the body only the chunk
framing, and the last two pieces, where the relay looks for `[DONE]`.
"""

from __future__ import annotations

import asyncio

from servelab.client.connection import ConnectionPool, HttpConnection, StreamBroken


class UpstreamAnswer:
    """Implements `servelab.client.connection.AnswerSink` for the router."""

    __slots__ = (
        "status", "header_lines", "got_bytes", "body", "sse", "ended", "error", "client_left",
        "paused", "pieces", "prev", "last", "_stream", "_conn", "_out", "_chunked", "_high",
        "_waiter", "_timer",
    )

    def __init__(self, conn: HttpConnection, stream: bool) -> None:
        self.status = 0
        self.header_lines: list[bytes] = []
        self.got_bytes = False
        self.body = bytearray()  # before commit: everything received
        self.sse = False  # a 200 text/event-stream answer to a streaming request
        self.ended = False  # the backend framed the end of the answer
        self.error: BaseException | None = None
        self.client_left = False
        self.paused = False  # upstream reading paused until the client's transport drains
        self.pieces = 0  # body pieces relayed after commit
        self.prev = self.last = b""  # the last two pieces (for the [DONE] check)
        self._stream = stream
        self._conn = conn
        self._out: asyncio.Transport | None = None
        self._chunked = True
        self._high = 0
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

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
        out = self._out
        if out is None:
            if not self.client_left:
                self.body += data
                if self.sse:
                    self._wake()
            return
        if out.is_closing():
            self._client_gone()
            return
        out.write(b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data)
        self.prev, self.last = self.last, data
        self.pieces += 1
        if not self.paused and out.get_write_buffer_size() > self._high:
            self.paused = True
            transport = self._conn.transport
            if transport is not None:
                transport.pause_reading()
            self._wake()

    def finish(self, t: float) -> None:
        self.ended = True
        self._wake()

    def fail(self, exc: BaseException) -> None:
        if not self.ended and self.error is None:
            self.error = exc
            self._wake()

    # -- used by the relaying coroutine ---------------------------------------------------

    def settled(self) -> bool:
        """Whether the relaying coroutine has something to act on."""
        return self.ended or self.error is not None or self.client_left or self.paused

    async def wait(self) -> None:
        """Sleep until a callback wakes this answer (new state to look at)."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def arm(self, timeout_s: float) -> None:
        """Fail the answer (and drop its connection) `timeout_s` from now."""
        self._timer = asyncio.get_running_loop().call_later(timeout_s, self.time_out)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def time_out(self) -> None:
        """The per-request timeout fired: the answer fails and its connection is dropped."""
        self.fail(asyncio.TimeoutError())
        self._conn.abort()

    def commit(self, out: asyncio.Transport, chunked: bool) -> None:
        """From now on relay pieces straight to `out` (the client's transport; the head and
        the first piece were already written). Pieces that came meanwhile go first."""
        self._out = out
        self._chunked = chunked
        self._high = out.get_write_buffer_limits()[1]
        pending, self.body = bytes(self.body), bytearray()
        if pending:
            self.deliver(pending, 0.0)

    def resume(self) -> None:
        """The client's transport drained: read from the backend again."""
        self.paused = False
        transport = self._conn.transport
        if transport is not None and not transport.is_closing():
            transport.resume_reading()

    def client_gone(self) -> None:
        """The client cannot be written to: drop the upstream connection (its answer can
        no longer be read to the end, so it cannot be reused)."""
        self._client_gone()

    def drop(self) -> None:
        """Abandon the answer (an error, a timeout, a cancellation): never reuse its
        connection."""
        self._conn.abort()

    def _client_gone(self) -> None:
        self.client_left = True
        self._conn.abort()
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)


async def send(pool: ConnectionPool, request: bytes, stream: bool, connect_timeout_s: float,
               timeout_s: float) -> UpstreamAnswer:
    """Send `request` (encoded) on a kept-alive connection of `pool`, or a new one (at most
    `connect_timeout_s` to connect), and return its answer once it is settled or, for a
    stream, once its first body piece is in hand. The answer fails with TimeoutError
    `timeout_s` after sending (whenever that is); the caller must `disarm` it.

    A kept-alive connection the backend had closed fails without a byte: that request is
    resent once on a new connection (not a backend error). Raises OSError or
    asyncio.TimeoutError when the backend cannot be connected to.
    """
    conn = pool.take_idle()
    for fresh in (conn is None, True):
        if fresh:
            conn = await asyncio.wait_for(pool.open(), connect_timeout_s)
        assert conn is not None
        answer = UpstreamAnswer(conn, stream)
        answer.arm(timeout_s)
        conn.start(request, answer)
        try:
            while not (answer.sse and answer.body) and not answer.settled():
                await answer.wait()
        except BaseException:  # cancelled: nobody will read this answer
            answer.disarm()
            answer.drop()
            raise
        err = answer.error
        if fresh or not (isinstance(err, StreamBroken) and err.retryable):
            return answer
        answer.disarm()
    raise AssertionError("unreachable")
