"""The SSE parser over vLLM's recorded streams, split at every byte and with odd framing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.client.sse import DONE, SSEParser

DATA = Path(__file__).parent / "data" / "client"
FIXTURES = ["vllm-0.32.0-cpu-stream-completions.sse", "vllm-0.32.0-cpu-stream-chat.sse"]


def _payloads(raw: bytes) -> list[bytes]:
    return [line[6:] for line in raw.split(b"\n") if line.startswith(b"data: ")]


@pytest.mark.parametrize("name", FIXTURES)
def test_every_split_point_gives_the_same_events(name: str) -> None:
    raw = (DATA / name).read_bytes()
    expected = _payloads(raw)
    assert expected[-1] == DONE
    for cut in range(1, len(raw)):
        p = SSEParser()
        got = p.feed(raw[:cut]) + p.feed(raw[cut:]) + p.close()
        assert got == expected, f"split at byte {cut}"


@pytest.mark.parametrize("name", FIXTURES)
def test_byte_by_byte_and_whole(name: str) -> None:
    raw = (DATA / name).read_bytes()
    p = SSEParser()
    got = [e for i in range(len(raw)) for e in p.feed(raw[i : i + 1])]
    assert got == _payloads(raw)
    assert SSEParser().feed(raw) == _payloads(raw)
    for payload in got[:-1]:
        json.loads(payload)


def test_crlf_comments_fields_and_multiline_data() -> None:
    raw = (
        b": keep-alive comment\r\n\r\n"
        b"event: message\r\nid: 7\r\ndata: {\"a\":1}\r\n\r\n"
        b"data:no-space\n\n"
        b"data: line1\ndata: line2\n\n"
        b"retry: 10\n\n"
        b"data: [DONE]\n\n"
    )
    assert SSEParser().feed(raw) == [b'{"a":1}', b"no-space", b"line1\nline2", DONE]


def test_cr_split_from_its_lf_and_unterminated_last_event() -> None:
    p = SSEParser()
    assert p.feed(b"data: x\r") == []
    assert p.feed(b"\n\r") == []
    assert p.feed(b"\ndata: tail") == [b"x"]
    assert p.close() == [b"tail"]
