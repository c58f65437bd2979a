"""How fast the offline simulator runs: simulated seconds per wall second.

Cases (issue 4):
1. the seeds' ShareGPT row: Qwen3-14B bf16 on one L40S, 2,000 prompts, rate 10,
   burstiness 1, max concurrency 10 (target: >= 1000x real time on one core);
2. 20,000 requests (random lengths: prompt 128-1024, output 64-512 tokens) at concurrency
   256 on 8 replicas of Qwen3-14B on H200, round robin.

Baseline, measured in the same run: case 1 with the operator cost model's per-token-count
cache switched off (every step prices every kernel again), so the ratio shows what
pricing each distinct step shape once buys. Workload building (tokenising) is outside
the timings.

    .venv/bin/python bench/sim_speed.py [--quick]
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from servelab.plan import EngineArgs
from servelab.sim.cluster import Cluster
from servelab.sim.offline import OfflineRequest, simulate
from servelab.sim.offline import PreparedWorkload, prepare_workload
from servelab.sim.setup import SimOptions, build_cluster
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DatasetOptions


def _timed(cluster: Cluster, requests: list[OfflineRequest], intended: np.ndarray,
           conc: int) -> tuple[float, float, int]:
    t = time.perf_counter()
    run = simulate(cluster, requests, intended, conc)
    wall = time.perf_counter() - t
    return run.duration_s, wall, run.num_steps


def _report(name: str, sim_s: float, wall_s: float, steps: int) -> float:
    ratio = sim_s / wall_s
    print(f"{name:<46} simulated {sim_s:8.1f} s in {wall_s:6.2f} s wall "
          f"({steps:,} steps, {wall_s / steps * 1e6:5.1f} us/step): {ratio:8.0f}x real time")
    return ratio


def _sharegpt(n: int) -> PreparedWorkload:
    return prepare_workload(DatasetOptions(dataset_name="sharegpt", num_prompts=n), 0,
                            ArrivalOptions(request_rate=10.0, burstiness=1.0))


def _random_requests(n: int, rng: np.random.Generator) -> list[OfflineRequest]:
    plens = rng.integers(128, 1025, n)
    olens = rng.integers(64, 513, n)
    return [OfflineRequest(i, tuple(range(i * 2000, i * 2000 + int(p))), int(o))
            for i, (p, o) in enumerate(zip(plens, olens))]


class _NoCache(dict):
    """A cache that keeps nothing (the baseline's operator model recomputes every step)."""

    def __setitem__(self, key: object, value: object) -> None:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of each case")
    a = ap.parse_args()
    scale = 10 if a.quick else 1
    l40s = SimOptions("Qwen/Qwen3-14B", "L40S", None, EngineArgs())
    wl = _sharegpt(2000 // scale)
    print(f"ShareGPT workload: {len(wl.requests)} requests, "
          f"{sum(len(r.prompt_token_ids) for r in wl.requests):,} in / "
          f"{sum(r.output_len for r in wl.requests):,} out tokens")

    fast = _report("1. ShareGPT row, L40S, c10 (operator model)",
                   *_timed(build_cluster(l40s, random.Random(0)), wl.requests, wl.intended_s, 10))
    slow_cluster = build_cluster(l40s, random.Random(0))
    for e in slow_cluster.engines:
        ops = e.cost.ops  # type: ignore[attr-defined]
        ops._per_tokens, ops._per_seqs = _NoCache(), _NoCache()
    slow = _report("   baseline: every kernel priced on every step",
                   *_timed(slow_cluster, wl.requests, wl.intended_s, 10))
    print(f"   per-shape cache speed-up over the baseline: {fast / slow:.1f}x")

    h200 = SimOptions("Qwen/Qwen3-14B", "H200", None, EngineArgs(), replicas=8)
    n = 20000 // scale
    reqs = _random_requests(n, np.random.default_rng(0))
    _report(f"2. {n:,} requests, c256, 8 x H200, round robin",
            *_timed(build_cluster(h200, random.Random(0)), reqs, np.zeros(n), 256))


if __name__ == "__main__":
    main()
