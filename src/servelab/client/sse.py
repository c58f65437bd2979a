"""The one Server-Sent Events parser: incremental over the byte chunks a socket delivers.

A read may end in the middle of a line, hold several events, or use CRLF line ends; the
parser keeps the unfinished tail for the next `feed`. Only `data:` fields matter to an
OpenAI stream: comments (`:` lines) and other fields (`event:`, `id:`, `retry:`) are
skipped. This is the client's hot path (one call per socket read), so the common case
(`data: {...}\\n\\n`, whole events in one read) does one `split` and no per-byte work.
"""

from __future__ import annotations

DONE = b"[DONE]"


class SSEParser:
    """Turns byte chunks into the `data` payloads of complete events.

    `feed(chunk)` returns the payloads (bytes, without the `data:` prefix, multi-line data
    joined with b"\\n") of every event completed by `chunk`, in order. The OpenAI end
    marker is returned as the payload `DONE` (b"[DONE]"); the caller decides what it means.
    """

    __slots__ = ("_tail", "_data")

    def __init__(self) -> None:
        self._tail = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """Parse one read's bytes; return the payloads of the events it completed."""
        if self._tail:
            chunk = self._tail + chunk
        lines = chunk.split(b"\n")
        # The last element is an unfinished line (empty when the chunk ended on "\n").
        self._tail = lines.pop()
        out: list[bytes] = []
        data = self._data
        for line in lines:
            if line[-1:] == b"\r":
                line = line[:-1]
            if not line:
                # A blank line dispatches the event being built (if it had data).
                if data:
                    out.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
                continue
            if line[:5] == b"data:":
                value = line[5:]
                if value[:1] == b" ":
                    value = value[1:]
                data.append(value)
            # Comments (":...") and other fields carry nothing an OpenAI stream needs.
        return out

    def close(self) -> list[bytes]:
        """End of stream: return the payload of a final event that lacked its blank line."""
        tail, self._tail = self._tail, b""
        if tail:
            self.feed(tail + b"\n")
        data, self._data = self._data, []
        if not data:
            return []
        return [b"\n".join(data)]
