"""The router's request parser (pure logic): framing, pipelining, and what it refuses."""

from __future__ import annotations

import pytest

from servelab.router.httprequest import HttpError, RequestParser


def parse_all(data: bytes, pieces: int = 1, max_body: int = 1000) -> list:
    """Feed `data` in `pieces` parts of equal size; return every request completed."""
    parser = RequestParser(max_head_bytes=512, max_body_bytes=max_body)
    out = []
    step = max(1, len(data) // pieces)
    for i in range(0, len(data), step):
        parser.feed(data[i:i + step])
        while (req := parser.next()) is not None:
            out.append(req)
    return out


def refused(data: bytes, max_body: int = 1000) -> tuple[int, str]:
    with pytest.raises(HttpError) as err:
        parse_all(data, max_body=max_body)
    return err.value.status, str(err.value)


PIPELINED = (
    b"POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
    b"X-Session-Id: s1\r\nX-Tag: a\r\nx-tag: b\r\n\r\nhello"
    b"\r\nGET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nTrailer: t\r\n\r\n"
    b"GET /v1/models HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
)


@pytest.mark.parametrize("pieces", [1, 7, len(PIPELINED)])  # whole, in parts, byte by byte
def test_pipelined_requests_come_out_whole_and_in_order(pieces):
    reqs = parse_all(PIPELINED, pieces)
    assert [(r.method, r.path, r.body) for r in reqs] == [
        ("POST", "/v1/completions", b"hello"),
        ("GET", "/health", b""),
        ("POST", "/v1/chat/completions", b"abc0123456789"),
        ("GET", "/v1/models", b""),
    ]
    first = reqs[0]
    assert first.target == "/v1/completions?x=1"
    assert first.headers["x-session-id"] == "s1"
    assert first.headers["x-tag"] == "a, b"  # a repeated header, joined
    assert [r.keep_alive for r in reqs] == [True, False, True, True]
    assert [r.http11 for r in reqs] == [True, True, True, False]


def test_expect_continue_is_signalled_once_before_the_body():
    parser = RequestParser(512, 1000)
    parser.feed(b"POST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\n"
                b"Content-Length: 2\r\n\r\n")
    assert parser.next() is None
    assert parser.wants_continue() is True
    assert parser.wants_continue() is False
    parser.feed(b"{}")
    assert parser.next().body == b"{}"


@pytest.mark.parametrize("data, status, words", [
    (b"HELLO\r\n\r\n", 400, "malformed request line"),
    (b"GET  /health HTTP/1.1\r\n\r\n", 400, "malformed request line"),
    (b"GET /health HTTP/2.0\r\n\r\n", 505, "HTTP/2.0"),
    (b"GET http://x/health HTTP/1.1\r\n\r\n", 400, "origin-form"),
    (b"GET /health HTTP/1.1\r\nNo colon here\r\n\r\n", 400, "malformed header line"),
    (b"GET /health HTTP/1.1\r\nHost : x\r\n\r\n", 400, "malformed header line"),
    (b"GET /health HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400, "malformed header line"),
    (b"GET /health HTTP/1.1\r\nA: b\nB: c\r\n\r\n", 400, "bare CR or LF"),
    (b"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400, "malformed Content-Length"),
    (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "malformed Content-Length"),
    (b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", 400, "conflicting"),
    (b"POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
     "both Content-Length and Transfer-Encoding"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "not supported"),
    (b"POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", 413, "exceeds 1000 bytes"),
    (b"POST / HTTP/1.1\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n", 431, "request head"),
    (b"POST / HTTP/1.1\r\nContent-Length: " + b"9" * 100 + b"\r\n\r\n", 413, "exceeds"),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * 600 + b"\r\n\r\n", 431, "exceeds 512 bytes"),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * 600, 431, "exceeds 512 bytes"),  # before its end
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "bad chunk size"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0x3\r\n", 400, "bad chunk size"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n", 400, "no CRLF"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3E9\r\n", 413, "exceeds 1000"),
])
def test_malformed_requests_are_refused_with_the_right_status(data, status, words):
    got_status, message = refused(data)
    assert got_status == status
    assert words in message


def test_a_partial_request_waits_and_counts_as_mid_request():
    parser = RequestParser(512, 1000)
    assert not parser.mid_request
    parser.feed(b"\r\n")  # a stray line end between requests is not a request
    assert parser.next() is None and not parser.mid_request
    parser.feed(b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nab")
    assert parser.next() is None and parser.mid_request
    parser.feed(b"cd")
    assert parser.next().body == b"abcd"
    assert not parser.mid_request
