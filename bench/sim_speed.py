"""How fast the offline simulator runs: simulated seconds per wall second.

Cases (issues 4 and 19):
1. the seeds' ShareGPT row: Qwen3-14B bf16 on one L40S, 2,000 prompts, rate 10,
   burstiness 1, max concurrency 10 (target: >= 10,000x real time on one core);
2. 20,000 requests (random lengths: prompt 128-1024, output 64-512 tokens) at concurrency
   256 on 8 replicas of Qwen3-14B on H200, round robin;
3. the fleet: Qwen3-14B on 64 H200 replicas, round robin, Poisson arrivals at 280 req/s of
   `--dataset-name random --random-input-len 220 --random-output-len 200
   --random-range-ratio 0.9` lengths (`--fleet-requests`, default 20,000 requests, ~71
   simulated seconds; the issue's target is 1,000,000 of them, about an hour, in <= 120 s:
   `--cases 3 --fleet-requests 1000000`, whose stepwise reference takes about 20 minutes
   more; `--no-reference` leaves it out and prints the default path's time alone).

Every case runs twice, each time on fresh engines: on the default path and on the
stepwise reference (`simulate(stepwise=True)`, every event through the generic dispatch,
every step through the scheduler's general loops and priced by the cost model, every
routing policy asked through a view per replica, no decode stretch taken in one jump, no
replica simulated alone); the bench
checks that both give identical records and prints the speed-up. Case 1 also runs a third
time, stepwise, with the operator cost model's caches switched off (per token count,
per sequence count, per step shape, the decode attention by context, and a decode step's
per-batch parts: every step prices every kernel again), so that ratio shows what pricing each distinct step shape once buys. Workload building
(tokenising, drawing lengths) is outside the timings.

The bench says which build of the simulator ran (`servelab.sim.BUILD`: compiled by mypyc
at install, or the sources). With `--against-source` (on a compiled install) each case's
default path also runs on the sources, in a child process with SERVELAB_PURE_PYTHON=1,
and the bench prints the compiled build's speed-up over it and checks that both give the
same records (a digest of every record's fields and gaps).

    .venv/bin/python bench/sim_speed.py [--quick] [--cases 1,2,3] [--fleet-requests N]
        [--no-reference] [--against-source]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import fields
from array import array
from collections.abc import Callable, Sequence

import numpy as np

import servelab.sim
from servelab.plan import EngineArgs
from servelab.sim.cluster import Cluster
from servelab.sim.offline import OfflineRequest, OfflineRun, simulate
from servelab.sim.offline import PreparedWorkload, prepare_workload
from servelab.sim.setup import SimOptions, build_cluster
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DatasetOptions
from servelab.workload.synthetic import length_bounds


def _timed(cluster: Cluster, requests: Sequence[OfflineRequest], intended: np.ndarray,
           conc: int | None, stepwise: bool = False) -> tuple[OfflineRun, float]:
    """(the run, its wall seconds)."""
    t = time.perf_counter()
    run = simulate(cluster, requests, intended, conc, stepwise=stepwise)
    return run, time.perf_counter() - t


def _report(name: str, run: OfflineRun, wall_s: float) -> float:
    ratio = run.duration_s / wall_s
    print(f"{name:<50} simulated {run.duration_s:8.1f} s in {wall_s:7.2f} s wall "
          f"({run.num_steps:,} steps, {wall_s / run.num_steps * 1e6:5.1f} us/step): "
          f"{ratio:9.0f}x real time")
    return ratio


def _digest(run: OfflineRun) -> str:
    """A digest of every record's fields and gaps (compares runs across processes)."""
    h = hashlib.sha256(f"{run.duration_s!r} {run.num_steps}".encode())
    for r in run.records:
        h.update(repr([getattr(r, f.name) for f in fields(r) if f.name != "itl_ms"]).encode())
        h.update(array("d", r.itl_ms).tobytes() if isinstance(r.itl_ms, list) else memoryview(r.itl_ms))
    return h.hexdigest()


def _against_source(args: list[str], fast_wall: float, fast: OfflineRun) -> None:
    """The same case's default path on the sources, in a child process: the speed-up of
    this (compiled) build over it, and whether both give the same records."""
    proc = subprocess.run([sys.executable, __file__, *args, "--child"], capture_output=True,
                          text=True, env={**os.environ, "SERVELAB_PURE_PYTHON": "1"}, check=True)
    child = json.loads(proc.stdout.splitlines()[-1])
    assert child["build"].startswith("pure Python"), child["build"]
    same = child["digest"] == _digest(fast)
    print(f"   sources ({child['build']}): {child['wall_s']:.2f} s wall; compiled build "
          f"{child['wall_s'] / fast_wall:.2f}x faster; records identical: {'yes' if same else 'NO'}")
    if not same:
        raise SystemExit("the compiled build and the sources differ")


def _case(name: str, make: Callable[[], Cluster], requests: Sequence[OfflineRequest],
          intended: np.ndarray, conc: int | None, reference: bool = True,
          child_args: list[str] | None = None) -> float:
    """Run one case on the default path and on the stepwise reference, check they agree;
    the reference's wall seconds (the default path's without the reference). With
    `child_args`, also on the sources in a child process (`_against_source`); as that
    child (`--child`), the default path alone, printed as one JSON line."""
    fast, fast_wall = _timed(make(), requests, intended, conc)
    if child_args is None and "--child" in sys.argv:
        print(json.dumps({"wall_s": fast_wall, "digest": _digest(fast),
                          "build": servelab.sim.BUILD.describe()}))
        return fast_wall
    _report(name, fast, fast_wall)
    print(f"   {fast_wall / len(requests) * 1e6:.1f} us of wall time per request")
    if child_args is not None:
        _against_source(child_args, fast_wall, fast)
    if not reference:
        return fast_wall
    ref, ref_wall = _timed(make(), requests, intended, conc, stepwise=True)
    _report("   stepwise reference (simulate(stepwise=True))", ref, ref_wall)
    same = (fast.records == ref.records and fast.num_steps == ref.num_steps
            and fast.duration_s == ref.duration_s)
    print(f"   speed-up over the stepwise reference: {ref_wall / fast_wall:.2f}x; "
          f"records identical: {'yes' if same else 'NO'}")
    if not same:
        raise SystemExit(f"{name}: the default path and the stepwise reference differ")
    return ref_wall


def _sharegpt(n: int) -> PreparedWorkload:
    return prepare_workload(DatasetOptions(dataset_name="sharegpt", num_prompts=n), 0,
                            ArrivalOptions(request_rate=10.0, burstiness=1.0))


def _random_requests(n: int, rng: np.random.Generator) -> list[OfflineRequest]:
    plens = rng.integers(128, 1025, n)
    olens = rng.integers(64, 513, n)
    return [OfflineRequest(i, tuple(range(i * 2000, i * 2000 + int(p))), int(o))
            for i, (p, o) in enumerate(zip(plens, olens))]


def _fleet_requests(n: int, rate: float, rng: np.random.Generator) -> tuple[list[OfflineRequest], np.ndarray]:
    """Requests of the random dataset's lengths (220 +- 90 % in, 200 +- 90 % out, as
    `servelab.workload.synthetic` bounds them) with distinct token ids (4-byte arrays, as
    the random dataset keeps them: a million requests' ids in under 1 GB), Poisson
    arrivals."""
    in_lo, in_hi = length_bounds(220, 0.9, 0)
    out_lo, out_hi = length_bounds(200, 0.9, 1)
    plens = rng.integers(in_lo, in_hi + 1, n)
    olens = rng.integers(out_lo, out_hi + 1, n)
    reqs = [OfflineRequest(i, array("I", range(i * 500, i * 500 + int(p))), int(o))
            for i, (p, o) in enumerate(zip(plens, olens))]
    return reqs, np.cumsum(rng.exponential(1.0 / rate, n))


class _NoCache(dict):
    """A cache that keeps nothing (the baseline's operator model recomputes every step)."""

    def __setitem__(self, key: object, value: object) -> None:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of each case")
    ap.add_argument("--cases", default="1,2,3", help="which cases to run (default: 1,2,3)")
    ap.add_argument("--fleet-requests", type=int, default=20000,
                    help="requests in case 3 (default 20,000; the issue's target: 1,000,000)")
    ap.add_argument("--no-reference", action="store_true",
                    help="case 3 on the default path alone (no stepwise reference, no ratio)")
    ap.add_argument("--against-source", action="store_true",
                    help="also run each case's default path on the sources (SERVELAB_PURE_PYTHON=1) "
                         "in a child process: the compiled build's speed-up, records compared")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.fleet_requests < 10:
        ap.error(f"--fleet-requests {a.fleet_requests}: give at least 10 (a tenth of them with --quick)")
    if a.against_source and not servelab.sim.BUILD.compiled:
        ap.error(f"--against-source: the simulator here is {servelab.sim.BUILD.describe()}")
    cases = {int(c) for c in a.cases.split(",")}
    scale = 10 if a.quick else 1
    if not a.child:
        print(f"simulator build: {servelab.sim.BUILD.describe()}")

    def child_args(case: int) -> list[str] | None:
        """This command's arguments for the child that runs `case` on the sources."""
        if not a.against_source:
            return None
        return [*(["--quick"] if a.quick else []), "--cases", str(case),
                "--fleet-requests", str(a.fleet_requests)]

    if 1 in cases:
        l40s = SimOptions("Qwen/Qwen3-14B", "L40S", None, EngineArgs())
        wl = _sharegpt(2000 // scale)
        if not a.child:
            print(f"ShareGPT workload: {len(wl.requests)} requests, "
                  f"{sum(len(r.prompt_token_ids) for r in wl.requests):,} in / "
                  f"{sum(r.output_len for r in wl.requests):,} out tokens")
        ref_wall = _case("1. ShareGPT row, L40S, c10 (operator model)",
                         lambda: build_cluster(l40s, random.Random(0)), wl.requests, wl.intended_s, 10,
                         child_args=child_args(1))
        if not a.child:
            slow_cluster = build_cluster(l40s, random.Random(0))
            for e in slow_cluster.engines:
                ops = e.cost.ops  # type: ignore[attr-defined]
                ops._per_tokens, ops._per_seqs, ops._decode_attn = _NoCache(), _NoCache(), _NoCache()
                ops._shapes, ops._attn_at = _NoCache(), _NoCache()
                e.cost._decode_parts = _NoCache()  # type: ignore[attr-defined]
            slow, slow_wall = _timed(slow_cluster, wl.requests, wl.intended_s, 10, stepwise=True)
            _report("   baseline: every kernel priced on every step", slow, slow_wall)
            print(f"   per-shape cache speed-up over the baseline (both stepwise): "
                  f"{slow_wall / ref_wall:.2f}x")

    if 2 in cases:
        h200 = SimOptions("Qwen/Qwen3-14B", "H200", None, EngineArgs(), replicas=8)
        n = 20000 // scale
        reqs = _random_requests(n, np.random.default_rng(0))
        _case(f"2. {n:,} requests, c256, 8 x H200, round robin",
              lambda: build_cluster(h200, random.Random(0)), reqs, np.zeros(n), 256,
              child_args=child_args(2))

    if 3 in cases:
        fleet = SimOptions("Qwen/Qwen3-14B", "H200", None, EngineArgs(), replicas=64,
                           router_policy="round_robin")
        n = a.fleet_requests // scale
        reqs, intended = _fleet_requests(n, 280.0, np.random.default_rng(0))
        _case(f"3. {n:,} requests at 280 req/s, 64 x H200, round robin",
              lambda: build_cluster(fleet, random.Random(0)), reqs, intended, None,
              reference=not a.no_reference, child_args=child_args(3))


if __name__ == "__main__":
    main()
