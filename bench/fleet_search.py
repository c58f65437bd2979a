"""The capacity search against the brute-force grid, in the same run (issue 19, item 2).

Case: Qwen3-14B on L40S, ShareGPT at RATE req/s, SLO ttft p99 <= 500 ms and tpot p99 <= 50 ms,
up to MAX_GPUS GPUs over bf16 / fp8 / awq x TP 1, 2, 4 x PP 1, 2 x round_robin /
least_requests. Both simulate on the same prepared workload (the window rule's length); the
grid simulates every deployment that fits. Prints both winners, simulations and wall time,
and their ratios.

    .venv/bin/python bench/fleet_search.py [--rate 20] [--max-gpus 4] [--workers 2]
"""

from __future__ import annotations

import argparse
import time

from servelab.fleet.evaluate import SimEvaluator, SimTarget
from servelab.fleet.request import PROBE_PROMPTS, window_prompts
from servelab.fleet.search import best_of, grid, search
from servelab.fleet.space import SearchSpace, Traffic, read_ceilings
from servelab.hardware.catalog import get_gpu
from servelab.sim.offline import prepare_workload
from servelab.sweep.slo import parse_slo
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DatasetOptions

MODEL, GPU = "Qwen/Qwen3-14B", "L40S"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--max-gpus", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    slo = parse_slo(["ttft:500", "tpot:50"], 99.0)
    space = SearchSpace(tensor_parallel_sizes=(1, 2, 4), max_gpus=a.max_gpus)
    arrivals = ArrivalOptions(request_rate=a.rate)
    probe = prepare_workload(DatasetOptions(dataset_name="sharegpt", num_prompts=PROBE_PROMPTS), 0, arrivals)
    n = window_prompts(a.rate, [r.output_len for r in probe.requests], slo)
    wl = prepare_workload(DatasetOptions(dataset_name="sharegpt", num_prompts=n), 0, arrivals)
    traffic = Traffic.of(a.rate, [len(r.prompt_token_ids) for r in wl.requests],
                         [r.output_len for r in wl.requests], slo.percentile)
    ceil = [read_ceilings(MODEL, get_gpu(GPU), s, traffic, dict(slo.limits_ms), space.max_replicas(s))
            for s in space.shapes()]
    ev = SimEvaluator(SimTarget(MODEL, GPU, wl, slo, 0, round(traffic.mean_context_tokens)), a.workers)
    print(f"{MODEL} on {GPU}, ShareGPT at {a.rate:g} req/s ({n} requests), {slo.describe()}, "
          f"<= {a.max_gpus} GPUs, {a.workers} worker processes")
    t = time.perf_counter()
    every = ev.evaluate(grid(space, ceil))
    grid_s = time.perf_counter() - t
    brute = best_of(every)
    t = time.perf_counter()
    out = search(space, ceil, ev)
    search_s = time.perf_counter() - t
    name = lambda e: "none" if e is None else f"{e.deployment.label} ({e.gpus} GPUs)"  # noqa: E731
    print(f"grid:   {len(every):4d} simulations in {grid_s:7.1f} s, winner {name(brute)}")
    print(f"search: {out.simulations:4d} simulations in {search_s:7.1f} s, winner {name(out.winner)}")
    same = (brute is None and out.winner is None) or (
        brute is not None and out.winner is not None and brute.deployment == out.winner.deployment)
    print(f"same winner: {same}; simulations {out.simulations / len(every):.2f}x the grid's, "
          f"wall time {search_s / grid_s:.2f}x")


if __name__ == "__main__":
    main()
