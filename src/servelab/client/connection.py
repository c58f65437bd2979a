"""A lean HTTP/1.1 client connection for streaming answers, and its keep-alive pool.

Why not `aiohttp.ClientSession`: measured on this project's 2-core machine, aiohttp's
client spent ~39 us of CPU per streamed token (a coroutine wake-up, a StreamReader and a
parser per read) and several ms per request in a burst, which the client then reports as
TTFT. Here a read is handled in `data_received`, a plain callback: it stamps the arrival
time first, de-chunks the body and hands the pieces to the answer's `AnswerSink`; the
client's (`Exchange`) feeds the one SSE parser and the tally, and wakes the request's
coroutine once, at the end of the answer. Requests are encoded to bytes before the run, so
sending is one `transport.write`.

This module owns the connections' state (framing, keep-alive) and the pool's, kept together
as each calls the other. An answer's meaning is its sink's: `Exchange` lives in
`servelab.client.exchange` (re-exported here), the router's sink in `servelab.router.upstream`.

Scope: one target (host, port, optional TLS), `POST` with a JSON body, responses with
`Transfer-Encoding: chunked`, `Content-Length`, or ending at close. No redirects, no
proxies, no 1xx, no compression (the request does not ask for it).
"""

from __future__ import annotations

import asyncio
import socket
import ssl as ssl_module
from collections.abc import Callable
from typing import Protocol
from urllib.parse import urlsplit

from servelab.client.exchange import Exchange
from servelab.errors import ServelabError

__all__ = ["AnswerSink", "ConnectionPool", "Exchange", "HttpConnection", "StreamBroken"]

# Body framing states (`_left` >= 0 means bytes left in the current chunk's data).
_NEED_SIZE = 0
_NEED_CRLF = -1
_NEED_END = -2


class StreamBroken(Exception):
    """The connection ended before the answer was complete."""

    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class AnswerSink(Protocol):
    """Where `HttpConnection` puts one answer: the head once, then the body de-chunked,
    piece by piece, as it arrives (`t`: arrival time on the pool's clock, seconds). Called
    from `data_received`, so implementations must not block. `Exchange` (the client's) and
    the router's relay implement it."""

    got_bytes: bool

    def head(self, status: int, header_lines: list[bytes]) -> None: ...

    def deliver(self, data: bytes, t: float) -> None: ...

    def flush(self) -> None:
        """The pieces of one socket read have all been delivered (the router writes them
        to its client in one write)."""

    def finish(self, t: float) -> None: ...

    def fail(self, exc: BaseException) -> None: ...


class HttpConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; serves one exchange at a time."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._clock = pool.clock
        self.transport: asyncio.Transport | None = None
        self._ex: AnswerSink | None = None
        self._buf = b""
        self._in_head = True
        self._chunked = False
        self._left = 0  # chunked: framing state; by length: bytes left; at close: -3
        self._keep_alive = True
        self.closed = False
        self.reused = False

    # asyncio.Protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool.forget(self)
        ex, self._ex = self._ex, None
        if ex is None:
            return
        if not self._in_head and not self._chunked and self._left == -3:
            ex.finish(self._clock())  # the answer was framed by the close
            return
        retryable = self.reused and not ex.got_bytes
        ex.fail(StreamBroken(f"connection closed mid-answer ({exc or 'by the server'})", retryable))

    def data_received(self, data: bytes) -> None:
        t = self._clock()
        ex = self._ex
        if ex is None:
            return  # bytes after an answer ended; the connection is dropped on reuse
        ex.got_bytes = True
        if self._in_head:
            data = self._buf + data
            end = data.find(b"\r\n\r\n")
            if end < 0:
                self._buf = data
                return
            self._head(data[:end], ex)
            data = data[end + 4 :]
            self._buf = b""
            if self._left == 0 and not self._chunked:
                self._complete(ex, t)  # Content-Length: 0
                return
            if not data:
                return
        if self._chunked:
            self._dechunk(data, ex, t)
        elif self._left == -3:
            ex.deliver(data, t)
        else:
            ex.deliver(data[: self._left], t)
            self._left -= len(data)
            if self._left <= 0:
                self._complete(ex, t)
        if self._ex is ex:
            ex.flush()

    # framing
    def _head(self, head: bytes, ex: AnswerSink) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        ex.head(int(parts[1]), lines[1:])
        self._in_head = False
        self._chunked = False
        self._left = -3
        self._keep_alive = parts[0] == b"HTTP/1.1"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding" and b"chunked" in value.lower():
                self._chunked = True
                self._left = _NEED_SIZE
            elif name == b"content-length" and not self._chunked:
                self._left = int(value.strip())
            elif name == b"connection" and b"close" in value.lower():
                self._keep_alive = False
        if not self._chunked and self._left == -3:
            self._keep_alive = False

    def _dechunk(self, data: bytes, ex: AnswerSink, t: float) -> None:
        buf = self._buf + data if self._buf else data
        pos = 0
        n = len(buf)
        left = self._left
        while pos < n:
            if left > 0:
                end = pos + left
                if end <= n:
                    ex.deliver(buf[pos:end], t)
                    pos = end
                    left = _NEED_CRLF
                else:
                    ex.deliver(buf[pos:], t)
                    left -= n - pos
                    pos = n
            elif left == _NEED_SIZE:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                size = int(buf[pos:eol].split(b";", 1)[0], 16)
                pos = eol + 2
                left = size if size else _NEED_END
            elif left == _NEED_CRLF:
                if n - pos < 2:
                    break
                pos += 2
                left = _NEED_SIZE
            else:  # _NEED_END: the blank line after the last (empty) chunk; no trailers
                if n - pos < 2:
                    break
                self._buf = b""
                self._complete(ex, t)
                return
        self._buf = buf[pos:] if pos < n else b""
        self._left = left

    def _complete(self, ex: AnswerSink, t: float) -> None:
        self._ex = None
        ex.finish(t)
        if self._keep_alive and not self.closed:
            self._pool.release(self)
        elif self.transport is not None:
            self.transport.close()

    # used by the pool and the sender
    def start(self, request: bytes, ex: AnswerSink) -> None:
        """Send one request (already encoded) and route its answer into `ex`."""
        self._ex = ex
        self._buf = b""
        self._in_head = True
        assert self.transport is not None
        self.transport.write(request)

    def abort(self) -> None:
        """Drop the connection now; it is never reused (even from inside `deliver`)."""
        self._ex = None
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


def _tls_context(verify: bool) -> ssl_module.SSLContext:
    """The default TLS context, or one that accepts any certificate (`--insecure`, for
    servers with self-signed certificates)."""
    ctx = ssl_module.create_default_context()
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl_module.CERT_NONE
    return ctx


class ConnectionPool:
    """Keep-alive connections to one `base_url`; idle ones are reused last-in first-out."""

    def __init__(self, base_url: str, clock: Callable[[], float], verify_tls: bool = True) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServelabError(f"--base-url {base_url!r} must look like http://HOST:PORT")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = _tls_context(verify_tls) if parts.scheme == "https" else None
        self.netloc = parts.netloc
        self.clock = clock
        self._idle: list[HttpConnection] = []
        self._all: set[HttpConnection] = set()

    def encode(self, path: str, headers: dict[str, str], body: bytes) -> bytes:
        """The bytes of one POST request (built before the run so sending is one write)."""
        lines = [f"POST {path} HTTP/1.1", f"Host: {self.netloc}", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    async def open(self) -> HttpConnection:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(
            lambda: HttpConnection(self), self.host, self.port, ssl=self.ssl
        )
        self._all.add(conn)
        return conn

    async def preopen(self, n: int, probe: bytes | None = None) -> None:
        """Open `n` connections and keep them idle (before t0: set-up is not TTFT).

        `probe`, an encoded request (e.g. `GET /v1/models`), is sent once on each: the first
        request on a connection runs first-time code on both sides (the server's per-
        connection handler, this parser), which would otherwise land in the first burst's
        TTFT. Its answer is read and ignored.
        """
        conns = await asyncio.gather(*(self.open() for _ in range(n)))
        if probe is not None:
            loop = asyncio.get_running_loop()
            exchanges = [Exchange(loop.create_future()) for _ in conns]
            for conn, ex in zip(conns, exchanges):
                conn.start(probe, ex)
            # Connections the server closes after answering are dropped; the run opens more.
            await asyncio.gather(*(ex.future for ex in exchanges), return_exceptions=True)
            return
        for c in conns:
            self.release(c)

    def encode_get(self, path: str, headers: dict[str, str]) -> bytes:
        """The bytes of one GET request."""
        lines = [f"GET {path} HTTP/1.1", f"Host: {self.netloc}"]
        lines += [f"{k}: {v}" for k, v in headers.items() if k != "Content-Type"]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def take_idle(self) -> HttpConnection | None:
        while self._idle:
            conn = self._idle.pop()
            # A closing transport (the server hung up, connection_lost not yet run) would
            # refuse the write: skip it like a closed one.
            if not conn.closed and not (conn.transport is None or conn.transport.is_closing()):
                conn.reused = True
                return conn
        return None

    def release(self, conn: HttpConnection) -> None:
        self._idle.append(conn)

    def forget(self, conn: HttpConnection) -> None:
        self._all.discard(conn)

    def close(self) -> None:
        for conn in list(self._all):
            if conn.transport is not None:
                conn.transport.close()
        self._all.clear()
        self._idle.clear()
