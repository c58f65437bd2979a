"""The relay's byte path over real sockets: answers arrive exact (streamed, whole, chat),
a slow client gets every byte (upstream reading paused and resumed, nothing lost), and a
kept-alive upstream connection the backend dropped is resent without counting an error."""

from __future__ import annotations

import asyncio
import re

import aiohttp

from conftest import router_proc, token_server_proc


async def _post(s: aiohttp.ClientSession, url: str, path: str, body: dict) -> tuple[int, bytes]:
    async with s.post(url + path, json=body) as r:
        return r.status, await r.read()


def test_answers_are_relayed_byte_for_byte(procs):
    backend = token_server_proc("--itl-ms", "1")
    procs.append(backend)
    rt = router_proc([backend])
    procs.append(rt)
    bodies = [
        ("/v1/completions", {"prompt": "p", "max_tokens": 40, "stream": True}),
        ("/v1/completions", {"prompt": "p", "max_tokens": 40}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "c"}],
                                  "max_tokens": 30, "stream": True,
                                  "stream_options": {"include_usage": True}}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "c"}],
                                  "max_tokens": 30}),
    ]

    async def go():
        async with aiohttp.ClientSession() as s:
            return [(await _post(s, backend.url, p, b), await _post(s, rt.url, p, b))
                    for p, b in bodies]

    for direct, routed in asyncio.run(go()):
        assert direct[0] == 200
        assert routed == direct


def test_slow_client_gets_every_byte(procs):
    # ~15 MB sent as fast as the backend can: more than the socket buffers hold while the
    # client is not reading, so the router's write buffer fills; it stops reading upstream
    # and resumes once the client reads again (checked by hand: one pause, one resume).
    backend = token_server_proc()
    procs.append(backend)
    rt = router_proc([backend])
    procs.append(rt)
    n = 100000

    async def go():
        async with aiohttp.ClientSession() as s:
            body = {"prompt": "p", "max_tokens": n, "stream": True}
            async with s.post(rt.url + "/v1/completions", json=body) as r:
                await r.content.readany()
                await asyncio.sleep(1.0)  # not reading
                rest = await r.content.read()
            async with s.get(rt.url + "/metrics") as m:
                metrics = await m.text()
            return rest, metrics

    rest, metrics = asyncio.run(go())
    numbers = [int(x) for x in re.findall(rb'"text":" t(\d+)"', rest)]
    assert numbers == list(range(numbers[0], n))
    assert rest.rstrip().endswith(b"data: [DONE]")
    assert "servelab_router_errors_total{" not in metrics


async def _once_per_connection_backend() -> tuple[asyncio.AbstractServer, list[int]]:
    """A backend that answers the first request on each connection (keep-alive, chunked)
    and closes the connection when a second one arrives on it, without answering: what a
    backend's keep-alive timeout racing a new request looks like. Returns the server and
    the count of requests dropped that way."""
    dropped = [0]
    sse = b"data: {\"choices\":[{\"text\":\" t0\"}]}\n\ndata: [DONE]\n\n"
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(sse), sse)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answered = False
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length:\s*(\d+)", head)
                if length:
                    await reader.readexactly(int(length.group(1)))
                if head.startswith(b"GET /health"):
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    continue
                if answered:
                    dropped[0] += 1
                    break
                answered = True
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n" + chunked)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, dropped


def test_dropped_keep_alive_connection_is_resent_not_an_error(procs):
    async def go():
        server, dropped = await _once_per_connection_backend()
        port = server.sockets[0].getsockname()[1]
        backend = type("B", (), {"url": f"http://127.0.0.1:{port}"})()
        async with server:
            rt = await asyncio.to_thread(router_proc, [backend], "--max-retries", "0")
            procs.append(rt)
            async with aiohttp.ClientSession() as s:
                texts = []
                for _ in range(5):  # one after another: each reuses the last connection
                    async with s.post(rt.url + "/v1/completions",
                                      json={"prompt": "p", "stream": True}) as r:
                        texts.append((r.status, await r.text()))
                async with s.get(rt.url + "/metrics") as m:
                    metrics = await m.text()
        return texts, dropped[0], metrics

    texts, dropped, metrics = asyncio.run(go())
    assert all(status == 200 and text.endswith("data: [DONE]\n\n") for status, text in texts)
    assert dropped >= 4  # requests 2..5 each met a dropped connection first
    assert "servelab_router_errors_total{" not in metrics
    assert "servelab_router_retries_total 0.0" in metrics
