"""The simulator's TTFT split the way decompose.py splits the measured one (issue 14).

    SERVELAB_PURE_PYTHON=1 .venv/bin/python docs/validation/sim-transfer-h100-2026-12-06/simphases.py

For every cell with a /metrics dump (the second H100 run), re-simulates it as check.py does
(its own seed, prompts, load; the shipped residual) and times each request's phases from the
engine's steps (`simulate`'s step observer): engine entry (after the simulated API server),
its first step (scheduled), the end of the step that emits its first token. Mean client TTFT
= engine (entry -> first token) + the rest (API server intake and output path, client);
decompose.py's measured split gives queue + prefill (the engine core's stamps) and the rest
the same way (client TTFT - queue - prefill). vLLM stamps `scheduled` when it schedules a
step, which with asynchronous scheduling can be a step before the step runs, so only the
engine's sum (queue + prefill) compares, not each part. Runs from the sources
(SERVELAB_PURE_PYTHON=1): the observer is a plain function, which the compiled driver's
type checks refuse.
"""

from __future__ import annotations

import importlib.util
import json
import random
from dataclasses import replace
from pathlib import Path

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
    cells = {t.name: t for t in check.targets(HERE / "results")}
    print("| cell | client TTFT ms meas / sim | engine (queue + prefill) meas / sim | rest meas / sim |")
    print("|---|---:|---:|---:|")
    for mdir in sorted(p for p in (HERE / "results").iterdir() if p.is_dir()):
        before = {k: (0.0, 0.0) for k in decompose.HISTOGRAMS}
        for path in decompose.cells(mdir):
            now = decompose.totals(path)
            ms = {k: 1000 * (now[k][0] - before[k][0]) / (now[k][1] - before[k][1]) for k in decompose.HISTOGRAMS}
            before = now
            name = f"{mdir.name}/{path.name.removesuffix('.metrics.txt.gz')}"
            t = cells[name]
            if t.num_warmups:  # c1 with warm-ups: its dump holds them
                continue
            client = json.loads((mdir / f"{name.split('/')[1]}.json").read_text())["mean_ttft_ms"]
            entry: dict[str, float] = {}
            first: dict[str, float] = {}

            def observe(k: int, start_s: float, dur_s: float, step: ScheduledStep, engine: SimEngine) -> None:
                for r in step.reqs:
                    key = r.request_id
                    entry.setdefault(key, r.arrival_s)
                    if key not in first and r.num_output >= 1:
                        first[key] = start_s + dur_s

            opts = replace(t.options, calibration=default_calibration(t.options.gpu))
            cluster = build_cluster(opts, random.Random(t.seed))
            run = simulate(cluster, t.workload.requests, t.workload.intended_s, t.max_concurrency, 0, observe)
            engine_ms = 1000 * sum(first[k] - entry[k] for k in first) / len(first)
            sim_client = sum(r.ttft_ms for r in run.records if r.ttft_ms is not None) / len(run.records)
            meas_engine = ms["queue"] + ms["prefill"]
            print(f"| {name} | {client:.1f} / {sim_client:.1f} | {meas_engine:.1f} / {engine_ms:.1f} | "
                  f"{client - meas_engine:.1f} / {sim_client - engine_ms:.1f} |")


if __name__ == "__main__":
    main()
