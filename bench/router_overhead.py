"""What `servelab route` costs: added TTFT, lost throughput, router CPU per relayed token.

Starts two token servers and the router (round robin) as subprocesses on 127.0.0.1, then,
at each concurrency, drives the same closed-loop streaming load directly at the backends
(each worker pinned to one, alternating) and through the router, and prints:

  added TTFT   routed minus direct, mean / p50 / p99 (ms)
  throughput   routed / direct output tokens per second
  router CPU   the router process's user+system CPU time (from /proc) per relayed token
               (us), and per request (us; with --max-tokens 2 --ttft-ms 0 --itl-ms 0 it is
               mostly the per-request cost)

Targets (issue 6): < 2 ms added mean TTFT, < 1 % throughput loss, <= 25 us per token.

Noise: with two or more cores, the router is pinned to one core and the client (this
process, using servelab's own lean client) and the backends to another, so the router
competes with nothing of the benchmark's. Before each concurrency a short warm-up opens
every connection (the client's and the router's upstream ones), and the streams' starts
are spread over one stream's length, so the runs measure a steady state rather than waves
of `concurrency` requests arriving at once (`--burst` measures those: each arrival then
also waits for the router's per-request work on the ones ahead of it). Each figure is measured
`--repeats` times (each routed run right after a direct one) and the median is printed.
Other work on the machine still shows; run it on an otherwise idle machine.

`--baseline-src DIR` also runs a second router from another servelab source tree (DIR is
its `src/`, e.g. from `git archive COMMIT | tar -x -C /tmp/base`), on the same core, right
after each routed run, and prints its row too: a before/after comparison under the same
noise.

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

from servelab.client.connection import ConnectionPool, Exchange, StreamBroken

TICKS = os.sysconf("SC_CLK_TCK")


def start(args: list[str], cores: set[int] | None, src: Path | None = None
          ) -> tuple[subprocess.Popen, str]:
    """Start a server subprocess (pinned to `cores` when given; importing servelab from
    `src` when given); return it and its URL."""
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    env = None if src is None else {**os.environ, "PYTHONPATH": str(src)}
    p = subprocess.Popen([sys.executable, "-u", *args], stdout=log, stderr=subprocess.STDOUT,
                         env=env)
    if cores is not None:
        os.sched_setaffinity(p.pid, cores)
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


async def drive(urls: list[str], concurrency: int, duration_s: float, max_tokens: int,
                stagger_s: float = 0.0) -> dict:
    """Closed loop: each worker sends streams back to back until `duration_s` has passed;
    worker k starts `k / concurrency x stagger_s` after t0.

    The client is servelab's own (`servelab.client.connection`: keep-alive connections
    opened before t0, arrival times stamped in `data_received`, tokens counted by the one
    SSE parser and tally), so its CPU per token is small next to what it measures.
    """
    clock = time.perf_counter
    pools = [ConnectionPool(u, clock) for u in urls]
    body = json.dumps({"prompt": "hello router", "max_tokens": max_tokens, "stream": True})
    reqs = [p.encode("/v1/completions", {"Content-Type": "application/json"}, body.encode())
            for p in pools]
    for i, p in enumerate(pools):
        n = len(range(i, concurrency, len(pools)))
        await p.preopen(n, p.encode_get("/health", {}))
    loop = asyncio.get_running_loop()
    ttfts: list[float] = []
    tokens = 0
    failures = 0
    t0 = clock()
    stop_at = t0 + duration_s

    async def worker(k: int) -> None:
        nonlocal tokens, failures
        pool, req = pools[k % len(pools)], reqs[k % len(pools)]
        await asyncio.sleep(k / concurrency * stagger_s)
        while clock() < stop_at:
            conn = pool.take_idle() or await pool.open()
            ex = Exchange(loop.create_future())
            t_send = clock()
            conn.start(req, ex)
            try:
                await ex.future
            except StreamBroken:
                failures += 1
                continue
            if ex.status != 200 or not ex.tally.done or not ex.tally.has_tokens:
                failures += 1
                continue
            n, ttft_ms, _, _ = ex.tally.timeline(t_send)
            ttfts.append(ttft_ms)
            tokens += n

    try:
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
    finally:
        for p in pools:
            p.close()
    elapsed = clock() - t0
    ttfts.sort()
    return {
        "requests": len(ttfts), "failures": failures, "tokens": tokens,
        "tok_per_s": tokens / elapsed,
        "ttft_mean_ms": statistics.fmean(ttfts),
        "ttft_p50_ms": ttfts[len(ttfts) // 2],
        "ttft_p99_ms": ttfts[min(len(ttfts) - 1, int(len(ttfts) * 0.99))],
    }


def measure(direct: dict, routed: dict, cpu0: tuple[float, float], cpu1: tuple[float, float]
            ) -> dict:
    """One repeat's figures: routed against the direct run just before it."""
    per_token = 1e6 / max(1, routed["tokens"])
    return {
        "direct": direct, "routed": routed,
        "throughput_ratio": routed["tok_per_s"] / direct["tok_per_s"],
        "added_ttft_mean_ms": routed["ttft_mean_ms"] - direct["ttft_mean_ms"],
        "added_ttft_p50_ms": routed["ttft_p50_ms"] - direct["ttft_p50_ms"],
        "added_ttft_p99_ms": routed["ttft_p99_ms"] - direct["ttft_p99_ms"],
        "router_cpu_us_per_token": (sum(cpu1) - sum(cpu0)) * per_token,
        "router_sys_us_per_token": (cpu1[1] - cpu0[1]) * per_token,
        "router_cpu_us_per_request": (sum(cpu1) - sum(cpu0)) * 1e6 / max(1, routed["requests"]),
        "failures": direct["failures"] + routed["failures"],
    }


FIGURES = ("throughput_ratio", "added_ttft_mean_ms", "added_ttft_p50_ms", "added_ttft_p99_ms",
           "router_cpu_us_per_token", "router_sys_us_per_token", "router_cpu_us_per_request")


def median_row(repeats: list[dict]) -> dict:
    row = {k: statistics.median(r[k] for r in repeats) for k in FIGURES}
    row["direct_tok_per_s"] = statistics.median(r["direct"]["tok_per_s"] for r in repeats)
    row["routed_tok_per_s"] = statistics.median(r["routed"]["tok_per_s"] for r in repeats)
    row["failures"] = sum(r["failures"] for r in repeats)
    return row


def pin_plan() -> tuple[set[int] | None, set[int] | None]:
    """(cores for the client and backends, cores for the router), or (None, None) when
    there are fewer than two cores to split."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None, None
    return {cores[0]}, {cores[1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--duration-s", type=float, default=15.0)
    ap.add_argument("--repeats", type=int, default=3, help="runs per figure; the median is shown")
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--burst", action="store_true",
                    help="start all streams at once (waves of arrivals) instead of spread")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="also measure a router imported from this servelab src/ directory")
    a = ap.parse_args()
    if a.repeats < 1:
        ap.error("--repeats must be >= 1")
    if a.baseline_src is not None and not (a.baseline_src / "servelab").is_dir():
        ap.error(f"--baseline-src {a.baseline_src}: no servelab package there")
    client_cores, router_cores = pin_plan()
    if client_cores is not None:
        os.sched_setaffinity(0, client_cores)
        print(f"pinned: client and backends on cores {sorted(client_cores)}, router on "
              f"{sorted(router_cores)}")
    else:
        print("one core only: nothing pinned")
    procs = []
    try:
        backends = []
        for _ in range(2):
            p, url = start(["-m", "servelab.testing.token_server", "--port", "0",
                            "--ttft-ms", str(a.ttft_ms), "--itl-ms", str(a.itl_ms)], client_cores)
            procs.append(p)
            backends.append(url)
        rargs = ["-m", "servelab.cli.route", "--port", "0", "--policy", "round_robin"]
        for b in backends:
            rargs += ["--backend", b]
        routers = {"router": start(rargs, router_cores)}
        if a.baseline_src is not None:
            routers["baseline"] = start(rargs, router_cores, a.baseline_src.resolve())
        procs += [p for p, _ in routers.values()]
        results = []
        print(f"{'conc':>5} {'':>8} {'direct tok/s':>12} {'routed tok/s':>12} {'ratio':>6} "
              f"{'+TTFT mean':>10} {'+p50':>7} {'+p99':>7} {'us/token':>8} {'(sys)':>6} "
              f"{'us/req':>7}  failures   (median of {a.repeats})")
        for c in a.concurrency:
            # Warm-up: connections (client's and the router's upstream ones) and first-call
            # code, so every repeat measures the steady state.
            asyncio.run(drive(backends, c, 0.2, 4))
            for _, url in routers.values():
                asyncio.run(drive([url], c, 0.2, 4))
            repeats: dict[str, list[dict]] = {name: [] for name in routers}
            # Starts spread over one stream's length: a steady state, not waves of
            # `concurrency` requests arriving together (see --burst).
            stagger_s = 0.0 if a.burst else (a.ttft_ms + (a.max_tokens - 1) * a.itl_ms) / 1000
            for _ in range(a.repeats):  # each routed run right after a direct one
                direct = asyncio.run(drive(backends, c, a.duration_s, a.max_tokens, stagger_s))
                for name, (rp, url) in routers.items():
                    cpu0 = cpu_s(rp.pid)
                    routed = asyncio.run(drive([url], c, a.duration_s, a.max_tokens, stagger_s))
                    repeats[name].append(measure(direct, routed, cpu0, cpu_s(rp.pid)))
            entry: dict = {"concurrency": c}
            for name, reps in repeats.items():
                row = median_row(reps)
                if name == "router":
                    entry.update(row, repeats=reps)
                else:
                    entry[name] = {**row, "repeats": reps}
                print(f"{c:>5} {name:>8} {row['direct_tok_per_s']:>12.0f} "
                      f"{row['routed_tok_per_s']:>12.0f} {row['throughput_ratio']:>6.3f} "
                      f"{row['added_ttft_mean_ms']:>10.2f} {row['added_ttft_p50_ms']:>7.2f} "
                      f"{row['added_ttft_p99_ms']:>7.2f} {row['router_cpu_us_per_token']:>8.1f} "
                      f"{row['router_sys_us_per_token']:>6.1f} "
                      f"{row['router_cpu_us_per_request']:>7.0f}  {row['failures']}", flush=True)
            results.append(entry)
            if a.out is not None:  # atomically, after each concurrency
                tmp = a.out.with_suffix(a.out.suffix + ".tmp")
                tmp.write_text(json.dumps({"args": vars(a) | {"out": str(a.out)},
                                           "results": results}, indent=2, default=str))
                tmp.replace(a.out)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)


if __name__ == "__main__":
    main()
