"""A backend killed under 64 concurrent streams through the router, then restarted.

Waits are counted in the router's own health checks (its /health says how many it has done
per backend), not in seconds: the backend must be out by the first check after the kill and
back after `readmit_after_checks` good ones, however slow the machine."""

from __future__ import annotations

import asyncio
import signal

import aiohttp

from conftest import router_proc, token_server_proc
from servelab.router.config import RouterConfig

READMIT_AFTER = RouterConfig.model_fields["readmit_after_checks"].default  # the router's default
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
    return [b["healthy"] for b in await backends(s, url)]


async def backends(s, url) -> list[dict]:
    async with s.get(url + "/health") as r:
        return (await r.json())["backends"]


async def after_checks(s, url: str, index: int, wanted: bool, checks: int) -> bool:
    """Whether backend `index` reaches healthy == `wanted` within `checks` more of the
    router's health checks of it."""
    start = (await backends(s, url))[index]["health_checks"]
    while True:
        b = (await backends(s, url))[index]
        if b["healthy"] == wanted:
            return True
        if b["health_checks"] >= start + checks:
            return False
        await asyncio.sleep(0.02)


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
            b.stop(signal.SIGKILL)
            # one check in flight at the kill may still pass; the next one cannot
            ejected = await after_checks(s, rt.url, 1, False, 2)
            ejected_mid_run = not all(w.done() for w in workers)
            await asyncio.gather(*workers)

            restarted = token_server_proc("--ttft-ms", "20", "--itl-ms", "5", port=b_port)
            procs.append(restarted)
            readmitted = await after_checks(s, rt.url, 1, True, READMIT_AFTER + 2)
            after = [await one(s, rt.url, k) for k in range(6)]
            async with s.get(restarted.url + "/stats") as r:
                restarted_requests = (await r.json())["requests"]
        return outcomes, (ejected, ejected_mid_run), readmitted, after, restarted_requests

    outcomes, (ejected, ejected_mid_run), readmitted, after, restarted_requests = asyncio.run(go())
    kinds = {k: outcomes.count(k) for k in set(outcomes)}
    assert len(outcomes) == REQUESTS
    # Only streams that had started on the killed backend fail, and they say so in-band.
    assert set(kinds) <= {"done", "mid_stream_error"}, kinds
    assert kinds.get("mid_stream_error", 0) >= 1, kinds
    assert kinds["mid_stream_error"] <= STREAMS // 2 + 1, kinds
    assert ejected and ejected_mid_run  # by the router's next check, while streams still ran
    assert readmitted
    assert after == ["done"] * 6, after
    assert restarted_requests >= 2  # round robin uses the re-admitted backend again
