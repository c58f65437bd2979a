"""Incoming HTTP/1.1 requests: the record, and the incremental parser that cuts them out of
a client connection's bytes.

Scope is what an OpenAI-compatible proxy receives: a request line, headers, and a body
framed by `Content-Length` or `Transfer-Encoding: chunked`; pipelined requests follow each
other in the same buffer. What the parser refuses raises `HttpError` with the status to
answer (400 malformed, 413 body too large, 431 head too large, 501 unknown transfer
coding, 505 HTTP version); the connection is closed after that answer, since its framing
can no longer be trusted. Ambiguous framing (both `Content-Length` and
`Transfer-Encoding`, differing repeated lengths, bare CR or LF, whitespace before a
header's colon) is refused rather than guessed, so no request can be smuggled past it.

Why not aiohttp's server: it spent ~160 us of CPU per request on this project's 2-core
machine (parser objects, multidicts, a handler task, the response head); this parser
costs a few string operations per header line.
"""

from __future__ import annotations


class HttpError(Exception):
    """A request that cannot be served as sent; `status` is the answer (4xx/5xx)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# States (`_left` > 0: bytes left in the current chunk's data).
_SIZE = 0  # expecting a chunk-size line
_CRLF = -1  # expecting the CRLF after a chunk's data
_TRAILERS = -2  # after the last (empty) chunk: trailer lines until a blank one

_MAX_LINE = 4096  # a size or trailer line longer than this is malformed
_HEX = b"0123456789abcdefABCDEF"


class ChunkedBody:
    """One request body sent with `Transfer-Encoding: chunked` (at most `max_body_bytes`
    of data), de-chunked as its bytes arrive. Few clients of an OpenAI API send one (they
    know the JSON's length), but HTTP/1.1 allows it."""

    __slots__ = ("_parts", "_size", "_left", "_buf", "_max")

    def __init__(self, max_body_bytes: int) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self._left = _SIZE
        self._buf = b""
        self._max = max_body_bytes

    def feed(self, data: bytes) -> tuple[bytes | None, bytes]:
        """Take `data`; return (the body, the bytes after it) once complete, else
        (None, b""). Raises HttpError (400 malformed, 413 too large)."""
        buf = self._buf + data if self._buf else data
        pos, n = 0, len(buf)
        while pos < n:
            left = self._left
            if left > 0:
                take = min(left, n - pos)
                self._parts.append(buf[pos:pos + take])
                pos += take
                self._left = left - take or _CRLF
                continue
            eol = buf.find(b"\r\n", pos, pos + _MAX_LINE)
            if eol < 0:
                if n - pos >= _MAX_LINE:
                    raise HttpError(400, "malformed chunked body (line too long)")
                break
            line = buf[pos:eol]
            pos = eol + 2
            if left == _CRLF:
                if line:
                    raise HttpError(400, "malformed chunked body (no CRLF after chunk data)")
                self._left = _SIZE
            elif left == _SIZE:
                digits = line.split(b";", 1)[0].strip(b" \t")
                if not digits or digits.strip(_HEX) or len(digits) > 15:
                    raise HttpError(400, "malformed chunked body (bad chunk size)")
                size = int(digits, 16)
                self._size += size
                if self._size > self._max:
                    raise HttpError(413, f"request body exceeds {self._max} bytes (max_body_bytes)")
                self._left = size or _TRAILERS
            elif not line:  # _TRAILERS: the blank line ends the body (trailers are dropped)
                self._buf = b""
                return b"".join(self._parts), buf[pos:]
        self._buf = buf[pos:]
        return None, b""


class Request:
    """One parsed request. `headers` maps lower-case names to values (a repeated header's
    values joined with ", "); `path` is the target without its query string."""

    __slots__ = ("method", "target", "path", "http11", "headers", "body", "keep_alive")

    def __init__(self, method: str, target: str, http11: bool, headers: dict[str, str]) -> None:
        self.method = method
        self.target = target
        self.path = target.split("?", 1)[0]
        self.http11 = http11
        self.headers = headers
        self.body = b""
        conn = headers.get("connection", "").lower()
        # HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 only when asked.
        self.keep_alive = "close" not in conn if http11 else "keep-alive" in conn


class RequestParser:
    """Feed it a connection's bytes; `next()` returns each complete request in order.

    `max_head_bytes` bounds the request line plus headers; `max_body_bytes` the body
    (declared or de-chunked)."""

    __slots__ = ("_buf", "_req", "_need", "_chunks", "_continue", "_max_head", "_max_body")

    def __init__(self, max_head_bytes: int, max_body_bytes: int) -> None:
        self._buf = b""
        self._req: Request | None = None  # head parsed, body still arriving
        self._need = 0  # Content-Length body: bytes still missing
        self._chunks: ChunkedBody | None = None
        self._continue = False  # the client waits for "100 Continue" before the body
        self._max_head = max_head_bytes
        self._max_body = max_body_bytes

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as (part of) a request."""
        return len(self._buf)

    @property
    def mid_request(self) -> bool:
        """Whether part of a request has arrived (a head, or bytes of one)."""
        return self._req is not None or bool(self._buf.strip(b"\r\n"))

    def feed(self, data: bytes) -> None:
        self._buf = self._buf + data if self._buf else data

    def wants_continue(self) -> bool:
        """True once per request whose client sent `Expect: 100-continue` and waits for
        the interim answer before sending the body."""
        want, self._continue = self._continue, False
        return want

    def next(self) -> Request | None:
        """The next complete request, or None until more bytes arrive. Raises HttpError."""
        if self._req is None:
            buf = self._buf
            if buf[:2] == b"\r\n":  # stray line ends between requests may be ignored
                buf = self._buf = buf.lstrip(b"\r\n")
            end = buf.find(b"\r\n\r\n", 0, self._max_head + 4)
            if end < 0:
                if len(buf) > self._max_head:
                    raise HttpError(431, f"request head exceeds {self._max_head} bytes")
                return None
            self._req = req = _head(buf[:end].decode("latin-1"), self._max_body)
            self._buf = buf[end + 4:]
            te = req.headers.get("transfer-encoding")
            if te is not None:
                self._chunks = ChunkedBody(self._max_body)
            else:
                self._need = int(req.headers.get("content-length", "0"))
            if req.headers.get("expect", "").lower() == "100-continue" and req.http11:
                self._continue = True
        req = self._req
        if self._chunks is not None:
            body, rest = self._chunks.feed(self._buf)
            self._buf = b""
            if body is None:
                return None
            req.body, self._buf, self._chunks = body, rest, None
        elif self._need:
            if len(self._buf) < self._need:
                return None
            req.body, self._buf = self._buf[:self._need], self._buf[self._need:]
            self._need = 0
        self._req = None
        self._continue = False
        return req


def _head(text: str, max_body: int) -> Request:
    """Parse a request head (without its blank line); raise HttpError naming the fault."""
    lines = text.split("\r\n")
    if text.count("\n") != len(lines) - 1 or text.count("\r") != len(lines) - 1:
        raise HttpError(400, "bare CR or LF in the request head")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1]:
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if version != "HTTP/1.1" and version != "HTTP/1.0":
        if version.startswith("HTTP/"):
            raise HttpError(505, f"{version} is not supported (HTTP/1.1 or HTTP/1.0)")
        raise HttpError(400, "malformed request line")
    if target[0] != "/":
        raise HttpError(400, "the request target must be a path (origin-form)")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name[-1] in " \t" or line[0] in " \t":
            raise HttpError(400, f"malformed header line {line[:40]!r}")
        name = name.lower()
        value = value.strip(" \t")
        if name in headers:
            if name == "content-length" and headers[name] != value:
                raise HttpError(400, "conflicting Content-Length headers")
            if name != "content-length":
                headers[name] += ", " + value
        else:
            headers[name] = value
    req = Request(method, target, version == "HTTP/1.1", headers)
    length = headers.get("content-length")
    te = headers.get("transfer-encoding")
    if te is not None:
        if length is not None:
            raise HttpError(400, "both Content-Length and Transfer-Encoding")
        if te.lower() != "chunked":
            raise HttpError(501, f"Transfer-Encoding {te!r} is not supported (chunked only)")
        if not req.http11:
            raise HttpError(400, "Transfer-Encoding in an HTTP/1.0 request")
    elif length is not None:
        if not (length.isascii() and length.isdigit()):
            raise HttpError(400, f"malformed Content-Length {length[:20]!r}")
        if len(length) > 15 or int(length) > max_body:  # (int() refuses 4300+ digits)
            raise HttpError(413, f"request body exceeds {max_body} bytes (max_body_bytes)")
    return req
