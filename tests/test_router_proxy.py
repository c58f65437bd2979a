"""`servelab route` over real sockets, in front of token servers run as subprocesses."""

from __future__ import annotations

import asyncio
import json
import signal

import aiohttp
import pytest

from conftest import Proc, router_proc, token_server_proc



def run(coro):
    return asyncio.run(coro)


async def stats(session: aiohttp.ClientSession, backend: Proc) -> dict:
    async with session.get(backend.url + "/stats") as r:
        return await r.json()


async def complete(session, url, prompt="hi", max_tokens=2, headers=None, **extra) -> str:
    """A streamed completion read to the end; returns the body text."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True, **extra}
    async with session.post(url + "/v1/completions", json=body, headers=headers) as r:
        text = await r.text()
        assert r.status == 200, text
        assert text.rstrip().endswith("data: [DONE]")
        return text


async def which_backend(session, backends, send) -> int:
    """Send one request and say which backend's request count went up."""
    before = [(await stats(session, b))["requests"] for b in backends]
    await send()
    after = [(await stats(session, b))["requests"] for b in backends]
    moved = [i for i in range(len(backends)) if after[i] != before[i]]
    assert len(moved) == 1, (before, after)
    return moved[0]


def test_round_robin_exact_order_through_proxy(procs):
    backends = [token_server_proc() for _ in range(3)]
    procs.extend(backends)
    rt = router_proc(backends, "--policy", "round_robin")
    procs.append(rt)

    async def go():
        async with aiohttp.ClientSession() as s:
            return [await which_backend(s, backends, lambda: complete(s, rt.url))
                    for _ in range(7)]

    assert run(go()) == [0, 1, 2, 0, 1, 2, 0]


def test_consistent_hash_sticks_per_session_through_proxy(procs):
    backends = [token_server_proc() for _ in range(3)]
    procs.extend(backends)
    rt = router_proc(backends, "--policy", "consistent_hash")
    procs.append(rt)

    async def go():
        seen: dict[str, set[int]] = {}
        async with aiohttp.ClientSession() as s:
            for rep in range(3):
                for k in range(8):
                    key = f"session-{k}"
                    if k % 2:  # the header and the `user` field are both session keys
                        send = lambda: complete(s, rt.url, f"p{rep}", headers={"x-session-id": key})
                    else:
                        send = lambda: complete(s, rt.url, f"p{rep}", user=key)
                    seen.setdefault(key, set()).add(await which_backend(s, backends, send))
        return seen

    seen = run(go())
    assert all(len(v) == 1 for v in seen.values()), seen
    assert len(set().union(*seen.values())) >= 2  # 8 keys do not all land on one backend


async def open_stream(session, url, prompt, max_tokens=100000, headers=None):
    """Start a long stream and return the response once its first bytes have arrived."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True}
    r = await session.post(url + "/v1/completions", json=body, headers=headers)
    assert r.status == 200
    assert await r.content.readany()
    return r


def test_least_requests_avoids_the_backend_busy_with_a_long_request(procs):
    backends = [token_server_proc("--itl-ms", "5") for _ in range(2)]
    procs.extend(backends)
    rt = router_proc(backends, "--policy", "least_requests")
    procs.append(rt)

    async def go():
        async with aiohttp.ClientSession() as s:
            long = await open_stream(s, rt.url, "long")
            busy = [(await stats(s, b))["in_flight"] for b in backends].index(1)
            shorts = [await which_backend(s, backends, lambda: complete(s, rt.url, "short"))
                      for _ in range(6)]
            long.close()
            return busy, shorts

    busy, shorts = run(go())
    assert shorts == [1 - busy] * 6


PREFIX = "You are a helpful assistant. " * 20  # 580 chars: 9 whole 64-char chunks


def test_cache_aware_keeps_prefix_home_until_imbalance(procs):
    backends = [token_server_proc("--itl-ms", "5") for _ in range(2)]
    procs.extend(backends)
    rt = router_proc(backends, "--policy", "cache_aware",
                "--policy-param", "balance_abs_threshold=4",
                "--policy-param", "balance_rel_threshold=1.5")
    procs.append(rt)

    async def go():
        async with aiohttp.ClientSession() as s:
            homes = [await which_backend(s, backends, lambda: complete(s, rt.url, PREFIX + f"q{k}"))
                     for k in range(6)]
            # Hold streams open on the prefix: the home backend takes them until it has
            # 5 in flight against 0 (past +4 and x1.5), then the other one gets the next.
            held = []
            placed = []
            for k in range(7):
                placed.append(await which_backend(
                    s, backends, lambda: _hold(held, s, rt.url, PREFIX + f"h{k}")))
            for r in held:
                r.close()
            return homes, placed

    homes, placed = run(go())
    home = homes[0]
    assert homes == [home] * 6
    # Loads seen at each choice: 0..4 -> home; 5 vs 0 -> fallback to the other, which now
    # holds the prefix too, so the next goes to the less loaded of the two holders.
    assert placed == [home] * 5 + [1 - home, 1 - home]


async def _hold(held, s, url, prompt):
    held.append(await open_stream(s, url, prompt))


@pytest.mark.parametrize("policy", ["random", "power_of_two", "latency", "kv_aware"])
def test_other_policies_spread_and_succeed(procs, policy):
    backends = [token_server_proc() for _ in range(2)]
    procs.extend(backends)
    rt = router_proc(backends, "--policy", policy, "--seed", "3")
    procs.append(rt)

    async def go():
        async with aiohttp.ClientSession() as s:
            await asyncio.gather(*(complete(s, rt.url, f"p{k}", max_tokens=20) for k in range(40)))
            return [(await stats(s, b))["requests"] for b in backends]

    counts = run(go())
    assert sum(counts) == 40 and min(counts) > 0


def test_bad_inputs_are_refused_with_clear_errors(procs):
    backend = token_server_proc()
    procs.append(backend)
    rt = router_proc([backend], "--max-body-bytes", "2000", env={"SERVELAB_ROUTER_API_KEY": "s3cret"})
    procs.append(rt)
    good = {"Authorization": "Bearer s3cret"}

    async def go():
        out = {}
        async with aiohttp.ClientSession() as s:
            url = rt.url + "/v1/completions"
            async with s.post(url, data=b'{"prompt": ', headers=good) as r:
                out["malformed"] = (r.status, (await r.json())["error"]["message"])
            async with s.post(rt.url + "/v1/chat/completions", json={"model": "m"},
                              headers=good) as r:
                out["no_messages"] = (r.status, (await r.json())["error"]["message"])
            async with s.post(url, json={"prompt": "x" * 5000}, headers=good) as r:
                out["big"] = r.status
            async with s.post(url, json={"prompt": "x"}, headers={"Authorization": "Bearer no"}) as r:
                out["wrong_key"] = r.status
            async with s.post(url, json={"prompt": "x"}) as r:
                out["no_key"] = r.status
            async with s.get(rt.url + "/v1/models") as r:
                out["models_no_key"] = r.status
            async with s.get(rt.url + "/v1/models", headers=good) as r:
                out["models"] = (await r.json())["data"][0]["id"]
            async with s.get(rt.url + "/health") as r:
                out["health"] = r.status
            await complete(s, rt.url, headers=good)
            out["backend_requests"] = (await stats(s, backend))["requests"]
        return out

    out = run(go())
    assert out["malformed"][0] == 400 and "not valid JSON" in out["malformed"][1]
    assert out["no_messages"] == (400, "'messages' must be a non-empty list.")
    assert out["big"] == 413
    assert out["wrong_key"] == out["no_key"] == out["models_no_key"] == 401
    assert out["models"] == "token-server"
    assert out["health"] == 200
    assert out["backend_requests"] == 1  # only the good request reached the backend
    assert "s3cret" not in rt.log.read_text()


def test_overload_is_refused_not_queued(procs):
    backend = token_server_proc("--itl-ms", "5")
    procs.append(backend)
    rt = router_proc([backend], "--max-in-flight", "2")
    procs.append(rt)

    async def go():
        async with aiohttp.ClientSession() as s:
            held = [await open_stream(s, rt.url, f"h{k}") for k in range(2)]
            async with s.post(rt.url + "/v1/completions", json={"prompt": "x"}) as r:
                status, retry_after = r.status, r.headers.get("Retry-After")
            for h in held:
                h.close()
            return status, retry_after

    assert run(go()) == (503, "1")


def test_retries_before_first_byte_and_error_event_after(procs):
    failing = token_server_proc("--fail-every", "1")  # every request: HTTP 500
    broken = token_server_proc("--itl-ms", "1", "--break-every", "1", "--break-after-tokens", "3")
    fine = token_server_proc()
    procs.extend([failing, broken, fine])
    rt_retry = router_proc([failing, fine], "--policy", "round_robin")
    rt_break = router_proc([broken], "--max-retries", "0")
    procs.extend([rt_retry, rt_break])

    async def go():
        async with aiohttp.ClientSession() as s:
            await asyncio.gather(*(complete(s, rt_retry.url, f"p{k}") for k in range(10)))
            async with s.get(rt_retry.url + "/metrics") as r:
                metrics = await r.text()
            body = {"prompt": "x", "max_tokens": 10, "stream": True}
            async with s.post(rt_break.url + "/v1/completions", json=body) as r:
                status, text = r.status, await r.text()
        return metrics, status, text

    metrics, status, text = run(go())
    assert "servelab_router_retries_total" in metrics
    events = [e for e in text.split("\n\n") if e.strip()]
    assert status == 200
    assert sum('"text":' in e for e in events) == 3  # three tokens, then the cut
    assert "[DONE]" not in text
    assert json.loads(events[-1][len("data: "):])["error"]["type"] == "upstream_error"


def test_sigterm_drains_in_flight_then_exits_zero(procs):
    backend = token_server_proc("--itl-ms", "10")
    procs.append(backend)
    rt = router_proc([backend])

    async def go():
        async with aiohttp.ClientSession() as s:
            r = await open_stream(s, rt.url, "x", max_tokens=60)
            rt.p.send_signal(signal.SIGTERM)
            refused = False
            for _ in range(200):  # the listening socket closes promptly
                try:
                    async with aiohttp.ClientSession() as s2:
                        await s2.get(rt.url + "/health")
                except aiohttp.ClientConnectorError:
                    refused = True
                    break
                await asyncio.sleep(0.01)
            text = (await r.content.read()).decode()
            return refused, text

    refused, text = run(go())
    assert refused
    assert text.rstrip().endswith("data: [DONE]") and text.count(" t59") == 1
    assert rt.stop(signal.SIGTERM) == 0


def test_request_timeout_before_and_after_the_first_byte(procs):
    stalled = token_server_proc("--stall-every", "1", "--stall-ms", "600000")  # never answers
    slow = token_server_proc("--itl-ms", "100")  # 1000 tokens: 100 s, far past the timeout
    procs.extend([stalled, slow])
    rt_stalled = router_proc([stalled], "--request-timeout-s", "0.5", "--max-retries", "0")
    rt_slow = router_proc([slow], "--request-timeout-s", "1", "--max-retries", "0")
    procs.extend([rt_stalled, rt_slow])

    async def go():
        async with aiohttp.ClientSession() as s:
            body = {"prompt": "x", "max_tokens": 1000, "stream": True}
            async with s.post(rt_stalled.url + "/v1/completions", json=body) as r:
                before = (r.status, (await r.json())["error"])
            async with s.post(rt_slow.url + "/v1/completions", json=body) as r:
                after = (r.status, await r.text())
            async with s.get(rt_slow.url + "/health") as r:
                in_flight = (await r.json())["backends"][0]["in_flight"]
        return before, after, in_flight

    before, after, in_flight = run(go())
    assert before[0] == 504 and before[1]["type"] == "upstream_error"
    assert "no answer in time" in before[1]["message"]
    status, text = after
    events = [e for e in text.split("\n\n") if e.strip()]
    assert status == 200 and '"text":" t0"' in events[0] and "[DONE]" not in text
    err = json.loads(events[-1][len("data: "):])["error"]
    assert err["type"] == "upstream_error" and "TimeoutError" in err["message"]
    assert in_flight == 0


def test_explain_logs_each_decision_and_never_the_key(procs):
    backends = [token_server_proc() for _ in range(2)]
    procs.extend(backends)
    rt = router_proc(backends, "--policy", "round_robin", "--explain", "--api-key", "k3y-s3cret")
    procs.append(rt)

    async def go():
        async with aiohttp.ClientSession() as s:
            for _ in range(2):
                await complete(s, rt.url, headers={"Authorization": "Bearer k3y-s3cret"})

    run(go())
    assert rt.stop(signal.SIGTERM) == 0
    log = rt.log.read_text()
    routes = [line for line in log.splitlines() if " route /v1/completions attempt 1 -> " in line]
    assert [r.split(" -> ")[1].split(":")[0:3] for r in routes] == [
        backends[0].url.split(":"), backends[1].url.split(":")]
    assert [r.split(": ", 1)[1] for r in routes] == ["round robin: turn 0 of 2",
                                                      "round robin: turn 1 of 2"]
    assert "k3y-s3cret" not in log
