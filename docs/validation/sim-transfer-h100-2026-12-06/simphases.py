"""The simulator's TTFT split the way decompose.py splits the measured one (issue 14).

    SERVELAB_PURE_PYTHON=1 .venv/bin/python docs/validation/sim-transfer-h100-2026-12-06/simphases.py \
        [--results DIR --gpu GPU]

For every cell with a /metrics dump (the second H100 run; not the c1 cells, whose dumps
hold their warm-ups), re-simulates it as check.py does (its own seed, prompts, load; the
shipped residual) and times each request's phases from the engine's steps (`simulate`'s
step observer): the first step boundary at or after the API server hands it to the engine
(where vLLM's engine core takes a request in and stamps it queued), its first step
(scheduled), the end of the step that emits its first token. Mean client TTFT = engine
(queued -> first token) + the rest (the API server's intake and hand-off, the wait for the
step in flight, the output path, the client). decompose.py's measured split gives queue +
prefill (the engine core's stamps) and the rest the same way (client TTFT - queue -
prefill). vLLM stamps `scheduled` when it schedules a step, which with asynchronous
scheduling can be a step before the step runs, so only the engine's sum (queue + prefill)
compares, not each part. Runs from the sources (SERVELAB_PURE_PYTHON=1): the observer is a
plain function, which the compiled driver's type checks refuse.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
from bisect import bisect_left
from dataclasses import replace
from pathlib import Path

from servelab.sim.calibrate import MeasuredCell
from servelab.sim.cost import default_calibration
from servelab.sim.engine import SimEngine
from servelab.sim.offline import build_cluster, simulate
from servelab.sim.scheduler import ScheduledStep

HERE = Path(__file__).resolve().parent


def _load(name: str, path: Path):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


check = _load("check", HERE / "check.py")
decompose = _load("decompose", HERE / "decompose.py")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=HERE / "results", help="another run's cells")
    ap.add_argument("--gpu", default=check.GPU, help="the GPU they ran on (default H100-SXM)")
    a = ap.parse_args()
    cells = {t.name: t for t in check.targets(a.results, a.gpu)}
    print("| cell | client TTFT ms meas / sim | engine (queue + prefill) meas / sim | rest meas / sim |")
    print("|---|---:|---:|---:|")
    for mdir in sorted(p for p in a.results.iterdir() if p.is_dir()):
        for cell, client, ms in decompose.phases(mdir):
            t = cells[f"{mdir.name}/{cell}"]
            if t.num_warmups:  # c1 with warm-ups: its dump holds them
                continue
            engine_ms, sim_client = simulated_split(t)
            meas_engine = ms["queue"] + ms["prefill"]
            print(f"| {t.name} | {client:.1f} / {sim_client:.1f} | {meas_engine:.1f} / {engine_ms:.1f} | "
                  f"{client - meas_engine:.1f} / {sim_client - engine_ms:.1f} |")


def simulated_split(t: MeasuredCell) -> tuple[float, float]:
    """(mean engine time queued -> first token, mean client TTFT), ms, of one simulation of
    `t` on one replica."""
    handed: dict[str, float] = {}
    first: dict[str, float] = {}
    starts: list[float] = []

    def observe(k: int, start_s: float, dur_s: float, step: ScheduledStep, engine: SimEngine) -> None:
        starts.append(start_s)
        for r in step.reqs:
            handed.setdefault(r.request_id, r.arrival_s)
            if r.request_id not in first and r.num_output >= 1:
                first[r.request_id] = start_s + dur_s

    opts = replace(t.options, calibration=default_calibration(t.options.gpu))
    assert opts.replicas == 1
    run = simulate(build_cluster(opts, random.Random(t.seed)), t.workload.requests, t.workload.intended_s,
                   t.max_concurrency, 0, observe)
    # queued at the first step boundary at or after the hand-off (a step starts when a
    # request reaches an idle engine, so one always follows)
    queued = {rid: starts[bisect_left(starts, at)] for rid, at in handed.items()}
    engine_ms = 1000 * sum(first[rid] - queued[rid] for rid in first) / len(first)
    client_ms = sum(r.ttft_ms for r in run.records if r.ttft_ms is not None) / len(run.records)
    return engine_ms, client_ms


if __name__ == "__main__":
    main()
