"""What `servelab route` costs: added TTFT, lost throughput, router CPU per relayed token.

Starts two token servers and the router (round robin) as subprocesses on 127.0.0.1, then,
at each concurrency, drives the same closed-loop streaming load directly at the backends
(each worker pinned to one, alternating) and through the router, and prints:

  added TTFT   routed minus direct, mean / p50 / p99 (ms)
  throughput   routed / direct output tokens per second
  router CPU   the router process's user+system CPU time (from /proc) per relayed token (us)

Targets (issue 6): < 2 ms added mean TTFT, < 1 % throughput loss, <= 25 us per token.
The client is a minimal aiohttp loop in this process; all processes share this machine's
cores, so run it on an otherwise idle machine.

    python bench/router_overhead.py --concurrency 32 256 --duration-s 15 --out result.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

TICKS = os.sysconf("SC_CLK_TCK")


def start(args: list[str]) -> tuple[subprocess.Popen, str]:
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    p = subprocess.Popen([sys.executable, "-u", *args], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = Path(log.name).read_text()
        if "listening on http://" in text:
            line = next(ln for ln in text.splitlines() if "listening on http://" in ln)
            return p, line[line.index("http://"):].strip()
        if p.poll() is not None:
            raise SystemExit(f"{args} exited: {text}")
        time.sleep(0.05)
    raise SystemExit(f"{args} did not start")


def cpu_s(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


async def drive(urls: list[str], concurrency: int, duration_s: float, max_tokens: int) -> dict:
    """Closed loop: each worker sends streams back to back until `duration_s` has passed."""
    ttfts: list[float] = []
    tokens = 0
    failures = 0
    body = json.dumps({"prompt": "hello router", "max_tokens": max_tokens, "stream": True})
    conn = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as s:
        warm = [s.get(urls[i % len(urls)] + "/health") for i in range(concurrency)]
        for r in await asyncio.gather(*warm):
            r.release()
        t0 = time.perf_counter()
        stop_at = t0 + duration_s

        async def worker(url: str) -> None:
            nonlocal tokens, failures
            while time.perf_counter() < stop_at:
                t_send = time.perf_counter()
                first = None
                n = 0
                async with s.post(url + "/v1/completions", data=body,
                                  headers={"Content-Type": "application/json"}) as r:
                    async for chunk in r.content.iter_any():
                        if first is None:
                            first = time.perf_counter()
                        n += chunk.count(b'"text"')
                if r.status != 200 or first is None:
                    failures += 1
                    continue
                ttfts.append((first - t_send) * 1000.0)
                tokens += n

        await asyncio.gather(*(worker(urls[i % len(urls)]) for i in range(concurrency)))
        elapsed = time.perf_counter() - t0
    ttfts.sort()
    return {
        "requests": len(ttfts), "failures": failures, "tokens": tokens,
        "tok_per_s": tokens / elapsed,
        "ttft_mean_ms": statistics.fmean(ttfts),
        "ttft_p50_ms": ttfts[len(ttfts) // 2],
        "ttft_p99_ms": ttfts[min(len(ttfts) - 1, int(len(ttfts) * 0.99))],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--duration-s", type=float, default=15.0)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    a = ap.parse_args()
    procs = []
    try:
        backends = []
        for _ in range(2):
            p, url = start(["-m", "servelab.testing.token_server", "--port", "0",
                            "--ttft-ms", str(a.ttft_ms), "--itl-ms", str(a.itl_ms)])
            procs.append(p)
            backends.append(url)
        rargs = ["-m", "servelab.router", "--port", "0", "--policy", "round_robin"]
        for b in backends:
            rargs += ["--backend", b]
        rp, router_url = start(rargs)
        procs.append(rp)
        results = []
        print(f"{'conc':>5} {'direct tok/s':>12} {'routed tok/s':>12} {'ratio':>6} "
              f"{'+TTFT mean':>10} {'+p50':>7} {'+p99':>7} {'us/token':>8} {'(sys)':>6}  failures")
        for c in a.concurrency:
            direct = asyncio.run(drive(backends, c, a.duration_s, a.max_tokens))
            cpu0 = cpu_s(rp.pid)
            routed = asyncio.run(drive([router_url], c, a.duration_s, a.max_tokens))
            cpu1 = cpu_s(rp.pid)
            row = {
                "concurrency": c, "direct": direct, "routed": routed,
                "throughput_ratio": routed["tok_per_s"] / direct["tok_per_s"],
                "added_ttft_mean_ms": routed["ttft_mean_ms"] - direct["ttft_mean_ms"],
                "added_ttft_p50_ms": routed["ttft_p50_ms"] - direct["ttft_p50_ms"],
                "added_ttft_p99_ms": routed["ttft_p99_ms"] - direct["ttft_p99_ms"],
                "router_cpu_us_per_token": (sum(cpu1) - sum(cpu0)) * 1e6 / max(1, routed["tokens"]),
                "router_sys_us_per_token": (cpu1[1] - cpu0[1]) * 1e6 / max(1, routed["tokens"]),
            }
            results.append(row)
            print(f"{c:>5} {direct['tok_per_s']:>12.0f} {routed['tok_per_s']:>12.0f} "
                  f"{row['throughput_ratio']:>6.3f} {row['added_ttft_mean_ms']:>10.2f} "
                  f"{row['added_ttft_p50_ms']:>7.2f} {row['added_ttft_p99_ms']:>7.2f} "
                  f"{row['router_cpu_us_per_token']:>8.1f} {row['router_sys_us_per_token']:>6.1f}  "
                  f"{direct['failures']}/{routed['failures']}", flush=True)
            if a.out is not None:  # atomically, after each row
                tmp = a.out.with_suffix(a.out.suffix + ".tmp")
                tmp.write_text(json.dumps({"args": vars(a) | {"out": str(a.out)},
                                           "results": results}, indent=2))
                tmp.replace(a.out)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)


if __name__ == "__main__":
    main()
