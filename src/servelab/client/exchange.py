"""The load generator's side of one answer: `Exchange`, the `AnswerSink` it streams into.

An `HttpConnection` (`servelab.client.connection`) only frames bytes; what they mean is up
to the sink it is given. The router relays them (`servelab.router.upstream`); the client
counts them, and that per-answer state lives here: the status, the one SSE parser, the
token tally, the first bytes of an error body, and the future the sending coroutine
awaits. It is kept apart from the connection because the router shares the connection
code but not this state. `deliver` runs inside `data_received` once per de-chunked piece,
so it is the client's per-token path: no wake-up, no allocation beyond the parser's.
"""

from __future__ import annotations

import asyncio

from servelab.client.sse import SSEParser
from servelab.client.tally import StreamTally

# Enough of a failed answer's body to explain it in the record, not to hold a large one.
_ERROR_BODY_MAX = 1000


class Exchange:
    """One request's answer as it arrives: status, SSE tally, error body, completion."""

    __slots__ = ("future", "status", "tally", "parser", "error_body", "got_bytes")

    def __init__(self, future: asyncio.Future[None], keep_text: bool = False) -> None:
        self.future = future
        self.status = 0
        self.tally = StreamTally(keep_text)
        self.parser = SSEParser()
        self.error_body = bytearray()
        self.got_bytes = False

    def head(self, status: int, header_lines: list[bytes]) -> None:
        self.status = status

    def deliver(self, data: bytes, t: float) -> None:
        if self.status == 200:
            add = self.tally.add
            for payload in self.parser.feed(data):
                add(payload, t)
        elif len(self.error_body) < _ERROR_BODY_MAX:
            self.error_body += data[: _ERROR_BODY_MAX - len(self.error_body)]

    def flush(self) -> None:
        return None

    def finish(self, t: float) -> None:
        if self.status == 200:
            for payload in self.parser.close():
                self.tally.add(payload, t)
        if not self.future.done():
            self.future.set_result(None)

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)
