"""How a backend's failure reaches the client: before the first byte, as an HTTP error
answer (after the retries ran out); after it, as an SSE error event ending the stream."""

from __future__ import annotations

import json
from dataclasses import dataclass

from servelab.router.httpreply import Reply


def sse_error(message: str) -> bytes:
    """The SSE event that ends a stream cut by its backend."""
    obj = {"error": {"message": message, "type": "upstream_error", "code": 502}}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


@dataclass(frozen=True, slots=True)
class Failure:
    """An attempt that failed before anything reached the client (so it may be retried)."""

    kind: str  # connect | timeout | http_5xx | http_429 | stream_broken
    detail: str
    status: int | None = None
    body: bytes = b""
    content_type: str = "application/json"

    def answer(self, reply: Reply) -> None:
        """Tell the client: the backend's own error answer, else 502 (504 on a timeout)."""
        if self.status is not None and self.kind in ("http_5xx", "http_429"):
            reply.send(self.status, self.body, content_type=self.content_type)
            return
        status = 504 if self.kind == "timeout" else 502
        reply.error(status, self.detail, "upstream_error")
