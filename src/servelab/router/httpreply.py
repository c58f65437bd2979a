"""One HTTP/1.1 response on a client connection: whole (with `Content-Length`), or
streamed (chunked to HTTP/1.1 clients, ended by closing the connection for HTTP/1.0).

A `Reply` writes to the connection's transport directly; a whole answer, or a stream's head
with its first piece, is one write. Once a stream is under way the relay
(`servelab.router.upstream`) writes its pieces to `transport` itself, framed like `frame`,
and ends it with `end`. The `sink` (the request's forwarding) hears from the connection
when the client leaves or its socket buffer fills and drains. `done` turns true when the
last byte is written (the connection may then read the next request) or when the client
is gone; writes after that are dropped.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from http import HTTPStatus
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from servelab.router.httprequest import Request

_END = b"0\r\n\r\n"  # the last (empty) chunk and the blank line after it


class ReplySink(Protocol):
    """What relays into a reply (`relay.Forwarding`); its connection calls these."""

    def client_gone(self) -> None: ...

    def pause(self) -> None:
        """The client's socket buffer is above its high-water mark: stop reading upstream."""

    def resume(self) -> None:
        """It drained: read upstream again."""


class ReplyOwner(Protocol):
    """What a reply needs of its connection (`servelab.router.httpserver`)."""

    transport: asyncio.Transport
    write_paused: bool  # the transport's buffer is above its high-water mark

    def date(self) -> str: ...

    def reply_done(self, reply: Reply) -> None: ...


_REASONS = {s.value: s.phrase for s in HTTPStatus}  # a constant table: no enum call per reply


def reason(status: int) -> str:
    """The reason phrase of `status` ("Unknown" for codes outside the registry)."""
    return _REASONS.get(status, "Unknown")


class Reply:
    """The answer to one request. `keep_alive` (the client's wish, less the router's
    refusals) decides whether the connection reads another request afterwards."""

    __slots__ = ("_owner", "transport", "head_only", "keep_alive", "chunked", "started", "done",
                 "sink")

    def __init__(self, owner: ReplyOwner, req: Request | None) -> None:
        self._owner = owner
        self.transport = owner.transport
        self.head_only = req is not None and req.method == "HEAD"
        # No request (a refused one) or an untrusted framing: answer, then close.
        self.keep_alive = req is not None and req.keep_alive
        self.chunked = req is None or req.http11  # HTTP/1.0 has no chunked framing
        self.started = False  # the head is written
        self.done = False  # the last byte is written, or the client is gone
        self.sink: ReplySink | None = None  # the forwarding relaying into this reply

    def send(self, status: int, body: bytes, headers: Iterable[tuple[str, str]] = (),
             content_type: str | None = "application/json; charset=utf-8") -> None:
        """The whole answer in one write. `content_type` None: `headers` carries it."""
        if self.started or self._gone():
            return
        self.started = True
        head = self._head(status, headers, content_type)
        head += f"Content-Length: {len(body)}\r\n\r\n"
        self.transport.write(head.encode("latin-1") + (b"" if self.head_only else body))
        self._finish()

    def json(self, status: int, obj: object, headers: Iterable[tuple[str, str]] = ()) -> None:
        self.send(status, json.dumps(obj).encode(), headers)

    def error(self, status: int, message: str, kind: str,
              headers: Iterable[tuple[str, str]] = ()) -> None:
        """An OpenAI-style JSON error."""
        self.json(status, {"error": {"message": message, "type": kind, "code": status}}, headers)

    def start(self, status: int, headers: Iterable[tuple[str, str]], first: bytes) -> None:
        """A stream's head and its first piece, in one write. `headers` carries its
        Content-Type."""
        if self.started or self._gone():
            return
        self.started = True
        if not self.chunked:
            self.keep_alive = False  # HTTP/1.0: the stream's end is the connection's close
        head = self._head(status, headers, None)
        head += "Transfer-Encoding: chunked\r\n\r\n" if self.chunked else "\r\n"
        self.transport.write(head.encode("latin-1") + self.frame(first))

    def frame(self, data: bytes) -> bytes:
        """`data` as one piece of this stream (one chunk, unless HTTP/1.0)."""
        if not self.chunked:
            return data
        return b"%x\r\n%b\r\n" % (len(data), data) if data else b""  # empty: not the end

    def end(self, framed: bytes = b"") -> None:
        """End a started stream; `framed` (pieces already framed) goes in the same write."""
        if self._gone():
            return
        tail = framed + _END if self.chunked else framed
        if tail:
            self.transport.write(tail)
        self._finish()

    @property
    def write_paused(self) -> bool:
        """Whether the client's socket buffer is above its high-water mark."""
        return self._owner.write_paused

    def abandon(self) -> None:
        """The client is gone: nothing more is written."""
        self.done = True

    def _gone(self) -> bool:
        # uvloop raises on writes to a closed transport; a closing one drops them anyway
        if not self.done and self.transport.is_closing():
            self.done = True
        return self.done

    def _head(self, status: int, headers: Iterable[tuple[str, str]],
              content_type: str | None) -> str:
        lines = [f"HTTP/1.1 {status} {reason(status)}", f"Date: {self._owner.date()}"]
        if content_type is not None:
            lines.append(f"Content-Type: {content_type}")
        lines += [f"{k}: {v}" for k, v in headers]
        if not self.keep_alive:
            lines.append("Connection: close")
        elif not self.chunked:
            lines.append("Connection: keep-alive")  # HTTP/1.0 asked to keep it
        return "\r\n".join(lines) + "\r\n"

    def _finish(self) -> None:
        self.done = True
        self._owner.reply_done(self)
