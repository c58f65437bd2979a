"""A backend killed under 64 concurrent streams through the router, then restarted."""

from __future__ import annotations

import asyncio
import signal
import time

import aiohttp

from conftest import router_proc, token_server_proc

STREAMS = 64
REQUESTS = 400


async def one(s: aiohttp.ClientSession, url: str, k: int) -> str:
    """Outcome of one streamed request: done, mid_stream_error, or a failure kind."""
    body = {"prompt": f"p{k}", "max_tokens": 60, "stream": True}
    got_bytes = False
    try:
        async with s.post(url + "/v1/completions", json=body) as r:
            if r.status != 200:
                return f"http_{r.status}"
            text = b""
            async for chunk in r.content.iter_any():
                got_bytes = True
                text += chunk
    except aiohttp.ClientError as exc:
        return f"{'after' if got_bytes else 'before'}_bytes_{type(exc).__name__}"
    if text.rstrip().endswith(b"data: [DONE]"):
        return "done"
    if b'"upstream_error"' in text and b'"text":' in text:
        return "mid_stream_error"
    return "bad_end"


async def health(s, url) -> list[bool]:
    async with s.get(url + "/health") as r:
        return [b["healthy"] for b in (await r.json())["backends"]]


def test_killed_backend_is_ejected_and_readmitted(procs):
    a = token_server_proc("--ttft-ms", "20", "--itl-ms", "5")
    b = token_server_proc("--ttft-ms", "20", "--itl-ms", "5")
    procs.extend([a, b])
    rt = router_proc([a, b], "--policy", "round_robin")
    procs.append(rt)
    b_port = b.port

    async def go():
        outcomes: list[str] = []
        done = asyncio.Event()
        connector = aiohttp.TCPConnector(limit=STREAMS)
        async with aiohttp.ClientSession(connector=connector) as s:
            queue = iter(range(REQUESTS))

            async def worker(i):
                # Staggered starts (over about one stream's length) keep most streams
                # mid-stream at any instant, instead of all in their first 20 ms together.
                await asyncio.sleep(i * 0.005)
                for k in queue:
                    outcomes.append(await one(s, rt.url, k))
                    if len(outcomes) == STREAMS * 2:
                        done.set()

            workers = [asyncio.create_task(worker(i)) for i in range(STREAMS)]
            await done.wait()  # well into the run: every worker is mid-request
            t_kill = time.monotonic()
            b.stop(signal.SIGKILL)
            ejected_after = None
            while ejected_after is None and time.monotonic() - t_kill < 10:
                if not (await health(s, rt.url))[1]:
                    ejected_after = time.monotonic() - t_kill
                await asyncio.sleep(0.02)
            await asyncio.gather(*workers)

            restarted = token_server_proc("--ttft-ms", "20", "--itl-ms", "5", port=b_port)
            procs.append(restarted)
            readmitted = False
            for _ in range(500):
                if (await health(s, rt.url))[1]:
                    readmitted = True
                    break
                await asyncio.sleep(0.02)
            after = [await one(s, rt.url, k) for k in range(6)]
            async with s.get(restarted.url + "/stats") as r:
                restarted_requests = (await r.json())["requests"]
        return outcomes, ejected_after, readmitted, after, restarted_requests

    outcomes, ejected_after, readmitted, after, restarted_requests = asyncio.run(go())
    kinds = {k: outcomes.count(k) for k in set(outcomes)}
    assert len(outcomes) == REQUESTS
    # Only streams that had started on the killed backend fail, and they say so in-band.
    assert set(kinds) <= {"done", "mid_stream_error"}, kinds
    assert kinds.get("mid_stream_error", 0) >= 1, kinds
    assert kinds["mid_stream_error"] <= STREAMS // 2 + 1, kinds
    # ejected while the other streams still ran (how fast is the health checker's
    # interval x threshold, a timing figure: not asserted here)
    assert ejected_after is not None
    assert readmitted
    assert after == ["done"] * 6, after
    assert restarted_requests >= 2  # round robin uses the re-admitted backend again
