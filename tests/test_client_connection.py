"""HTTP/1.1 framing of the client connection over real sockets: chunked bodies split at
every byte, Content-Length, close-delimited bodies, and a kept-alive connection the server
closed (resent once)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from conftest import client_target, request_specs, run_client

from servelab.client.sender import send_schedule

SSE = (Path(__file__).parent / "data" / "client" / "vllm-0.32.0-cpu-stream-completions.sse").read_bytes()


def chunked(body: bytes, size: int) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def serve(responses: list[bytes], write_size: int, close_after: bool):  # type: ignore[no-untyped-def]
    """A raw HTTP server answering each request with the next response, `write_size` bytes
    per write; returns (server, url)."""
    queue = list(responses)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while queue:
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"GET"):
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                continue
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            resp = queue.pop(0)
            for i in range(0, len(resp), write_size):
                writer.write(resp[i : i + write_size])
                await writer.drain()
                await asyncio.sleep(0)
            if close_after:
                break
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


def exchange(responses: list[bytes], write_size: int = 1 << 20, close_after: bool = False, n: int = 1):  # type: ignore[no-untyped-def]
    async def go():  # type: ignore[no-untyped-def]
        server, url = await serve(responses, write_size, close_after)
        async with server:
            return await send_schedule(client_target(url, "openai"), request_specs(n, 8), [0.0] * n, 1)

    return run_client(go())


def test_chunked_body_split_into_small_writes() -> None:
    for chunk_size, write_size in ((7, 1), (64, 3), (1000, 5)):
        resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(SSE, chunk_size)
        [rec] = exchange([resp], write_size)
        assert rec.success and rec.output_len == 8 and len(rec.itl_ms) == 7, rec


def test_content_length_and_close_delimited_bodies() -> None:
    by_length = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)
    [rec] = exchange([by_length], 11)
    assert rec.success and rec.output_len == 8
    by_close = b"HTTP/1.0 200 OK\r\n\r\n" + SSE
    [rec] = exchange([by_close], 13, close_after=True)
    assert rec.success and rec.output_len == 8


def test_error_status_keeps_the_body_start() -> None:
    body = b'{"object":"error","message":"model M does not exist"}'
    resp = b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    [rec] = exchange([resp])
    assert rec.error_kind == "http_404" and "does not exist" in (rec.error or "")


def test_connection_closed_by_the_server_between_requests_is_resent() -> None:
    ok = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(SSE, 100)
    records = exchange([ok, ok, ok], close_after=True, n=3)
    assert [r.error_kind for r in records] == [None, None, None]
