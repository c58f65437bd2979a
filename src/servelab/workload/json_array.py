"""Streaming reader of a JSON array file, item by item, that survives a file cut mid-item.

`json.load` needs the whole file in memory as one string (the full ShareGPT file is 642 MB,
which Python may hold at 4 bytes a character) and fails outright on a truncated file. This
reader decodes one item at a time from a sliding window of text, so memory stays around one
chunk plus one item, every complete item is kept, and a cut is reported by byte offset.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from servelab.errors import ServelabError

_CHUNK_BYTES = 1 << 20
_WS = " \t\r\n"
# An error this close to the end of the window may be an item (or an escape such as
# "\u00e9") split by the window's edge rather than bad JSON: read more before judging.
_EDGE_CHARS = 8


@dataclass(frozen=True, slots=True)
class ArrayItem:
    """One decoded item and where it starts in the file (byte offset, 1-based line)."""

    value: object
    byte_offset: int
    line: int


@dataclass(slots=True)
class ArrayEnd:
    """How the array ended, filled in when iteration stops.

    `truncated` is True when the file stops inside an item (or before the closing `]`);
    `cut_item_offset` is then the byte offset where the unfinished item starts, and
    `file_bytes` the file's size.
    """

    items: int = 0
    truncated: bool = False
    cut_item_offset: int | None = None
    file_bytes: int = 0


class JsonArrayReader:
    """Iterate the items of the JSON array in `path`; `end` describes the ending afterwards."""

    def __init__(self, path: Path, chunk_bytes: int = _CHUNK_BYTES) -> None:
        self.path = path
        self.end = ArrayEnd()
        self._chunk_bytes = chunk_bytes
        self._decoder = json.JSONDecoder()

    def __iter__(self) -> Iterator[ArrayItem]:
        try:
            fh = self.path.open("rb")
        except OSError as exc:
            raise ServelabError(f"{self.path}: cannot open ({exc.strerror})") from exc
        with fh:
            yield from self._items(fh)

    def _items(self, fh) -> Iterator[ArrayItem]:
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="strict")
        buf = ""
        # A cursor (index into buf, its byte offset and line) moved forward only, so
        # offsets cost one pass over the text in all.
        cur_pos, cur_byte, cur_line = 0, 0, 1
        pos = 0
        eof = False

        def fill() -> bool:
            nonlocal buf, eof
            if eof:
                return False
            data = fh.read(self._chunk_bytes)
            try:
                text = utf8.decode(data, final=not data)
            except UnicodeDecodeError as exc:
                raise ServelabError(
                    f"{self.path}: not UTF-8 text near byte {self.end.file_bytes + exc.start}"
                ) from exc
            self.end.file_bytes += len(data)
            eof = not data
            buf += text
            return True

        def where(p: int) -> tuple[int, int]:
            nonlocal cur_pos, cur_byte, cur_line
            if p >= cur_pos:
                cur_byte += len(buf[cur_pos:p].encode("utf-8"))
                cur_line += buf.count("\n", cur_pos, p)
                cur_pos = p
                return cur_byte, cur_line
            back = buf[p:cur_pos]
            return cur_byte - len(back.encode("utf-8")), cur_line - back.count("\n")

        def skip_ws() -> bool:
            """Advance pos past whitespace; False when the file ends first."""
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos] in _WS:
                    pos += 1
                if pos < len(buf):
                    return True
                if not fill():
                    return False

        def fail(p: int, problem: str) -> ServelabError:
            byte, line = where(p)
            return ServelabError(f"{self.path}: byte {byte} (line {line}): {problem}")

        fill()
        if buf.startswith("\ufeff"):
            pos = 1
        if not skip_ws():
            raise fail(pos, "the file is empty, expected a JSON array")
        if buf[pos] != "[":
            raise fail(pos, f"expected a JSON array starting with '[', found {buf[pos]!r}")
        pos += 1
        first = True
        while True:
            if not skip_ws():
                self._mark_cut(None)
                return
            if buf[pos] == "]":
                pos += 1
                if skip_ws():
                    raise fail(pos, "unexpected data after the array's closing ']'")
                return
            if not first:
                if buf[pos] != ",":
                    raise fail(pos, f"expected ',' or ']' between items, found {buf[pos]!r}")
                pos += 1
                if not skip_ws():
                    self._mark_cut(None)
                    return
            first = False
            while True:
                try:
                    value, stop = self._decoder.raw_decode(buf, pos)
                    break
                except json.JSONDecodeError as exc:
                    at_edge = exc.msg.startswith("Unterminated string") or (
                        exc.pos >= len(buf) - _EDGE_CHARS
                    )
                    if not at_edge:
                        raise fail(exc.pos, exc.msg) from None
                    if not fill():
                        if not self._cut_at(exc, buf):
                            raise fail(exc.pos, exc.msg) from None
                        self._mark_cut(where(pos)[0])
                        return
            byte, line = where(pos)
            self.end.items += 1
            yield ArrayItem(value, byte, line)
            pos = stop
            if pos > self._chunk_bytes:
                # Drop consumed text so the window stays about one chunk long.
                where(pos)
                buf = buf[pos:]
                pos = cur_pos = 0

    @staticmethod
    def _cut_at(exc: json.JSONDecodeError, buf: str) -> bool:
        """At end of file: did decoding fail because the text stops (not because it is bad)?"""
        return exc.msg.startswith("Unterminated string") or (
            exc.pos >= len(buf.rstrip(_WS)) - _EDGE_CHARS
        )

    def _mark_cut(self, item_offset: int | None) -> None:
        self.end.truncated = True
        self.end.cut_item_offset = item_offset
