"""Measured vs simulated, per cell, for one machine's speculative run (issue 17).

    .venv/bin/python docs/validation/spec-onehost-2026-12-05/check.py EXPERIMENT_DIR \
        [--calibration HOST.json] [--fit CELL ...] [--profile PROFILE.json] [--out DIR]

Every cell of the experiment is re-simulated with its own prompts, seed, load and warm-ups
on its arm's deployment, a speculative cell with the acceptance that cell measured
(`servelab.experiment.simulation.measured_cells`), under `--calibration` (the host's
figures from `servelab sim calibrate`; default: the GPU's shipped figures). `--fit` names
the cells that calibration was fitted on (ARM/WORKLOAD or ARM/WORKLOAD/LOAD); every other
speculative cell is reported as held out. Also the speed-up of each speculative cell over
the non-speculative arm's cell at the same workload and load, measured and simulated, and
per arm and workload the first load where it falls below 1 (the crossover). Writes
table.md and check.json in `--out`.

The cells name the model, tokenizer and dataset at their device paths
(/tmp/gpu-x/payload/...): link the kit's payload there (`ln -sfn $PWD/.gpu/dl/payload
/tmp/gpu-x/payload`) and give the draft a directory with its config
(`mkdir -p /tmp/gpu-x/payload/qwen3-0.6b && cp src/servelab/data/models/qwen3-0.6b.json
/tmp/gpu-x/payload/qwen3-0.6b/config.json`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from servelab.experiment.simulation import measured_cells
from servelab.sim.calibrate import evaluate, priced_with
from servelab.sim.cost import Calibration, default_calibration
from servelab.sim.kernel_profile import KernelProfile
from servelab.storage import write_atomic

HERE = Path(__file__).resolve().parent
METRICS = ("output_throughput", "mean_tpot_ms", "mean_ttft_ms")
DECODE = ("output_throughput", "mean_tpot_ms")  # the figures the issue bounds at 15 %


def _pct(sim: float, meas: float) -> float:
    return 100.0 * (sim - meas) / meas


def _fitted(name: str, fit: list[str]) -> bool:
    return any(name == f or name.startswith(f + "/") for f in fit)


def _load_key(load: str) -> int:
    return int(load.lstrip("c")) if load.lstrip("c").isdigit() else 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("experiment", type=Path)
    ap.add_argument("--calibration", type=Path, default=None)
    ap.add_argument("--fit", action="append", default=[], help="cells the calibration was fitted on")
    ap.add_argument("--label", default="", help="what the calibration is, for the table's title")
    ap.add_argument("--repeats", action="append", default=[], help=(
        "W1,W2,W3: workloads that draw from one distribution; adds each held-out cell's error "
        "on the mean of their draws (the run-to-run spread averaged out)"))
    ap.add_argument("--profile", type=Path, default=None,
                    help="a kernel profile to price every cell with (default: the GPU's shipped one)")
    ap.add_argument("--out", type=Path, default=HERE)
    a = ap.parse_args()
    targets = measured_cells(a.experiment)
    if a.profile:
        targets = priced_with(targets, KernelProfile.load(a.profile))
    for t in targets:
        t.measured = {k: v for k, v in t.measured.items() if k in METRICS}
    opts = targets[0].options
    assert opts is not None
    cal = Calibration.load(a.calibration) if a.calibration else default_calibration(opts.gpu)
    rows = evaluate(dataclasses.replace(opts, calibration=cal), targets, cal)
    cells: dict[str, dict[str, dict[str, float]]] = {}
    for name, metric, meas, sim in rows:
        cells.setdefault(name, {})[metric] = {"measured": meas, "simulated": sim,
                                              "error_pct": round(_pct(sim, meas), 2)}
    speculative = {t.name.split("/")[0] for t in targets if t.options and t.options.speculative}
    plain = sorted({t.name.split("/")[0] for t in targets} - speculative)
    base = plain[0] if plain else None

    def role(name: str) -> str:
        arm = name.split("/")[0]
        if arm not in speculative:
            return "no speculation"
        return "fit" if _fitted(name, a.fit) else "held out"

    title = a.label or (f"calibration {a.calibration}" if a.calibration else "the shipped H200 figures")
    lines = [f"Figures: {title}. spec_step_us {cal.spec_step_us:.1f}, spec_per_seq_us "
             f"{cal.spec_per_seq_us:.2f}, draft_layer_us {cal.draft_layer_us:.1f}.", "",
             "| cell | role | output tok/s meas | sim | err % | mean TPOT ms meas | sim | err % | "
             "mean TTFT ms meas | sim | err % |", "|---|---|" + "---:|" * 9]
    summary: dict[str, list[float]] = {}
    order = sorted(cells, key=lambda n: (n.split("/")[0], n.split("/")[1], _load_key(n.split("/")[2])))
    for name in order:
        m = cells[name]
        r = role(name)
        arm, wl = name.split("/")[:2]
        vals = []
        for k in METRICS:
            e = m.get(k)
            vals += ([f"{e['measured']:,.2f}", f"{e['simulated']:,.2f}", f"{e['error_pct']:+.1f}"]
                     if e else ["-", "-", "-"])
            if e:
                summary.setdefault(f"{arm} / {wl} ({r}): {k}", []).append(abs(e["error_pct"]))
                if r == "held out" and k in DECODE:
                    summary.setdefault(f"ALL held out / {wl}: {k}", []).append(abs(e["error_pct"]))
                    summary.setdefault(f"{arm}, held out, every workload: {k}", []).append(abs(e["error_pct"]))
        lines.append(f"| {name} | {r} | " + " | ".join(vals) + " |")
    for group in a.repeats:
        names = group.split(",")
        lines += ["", f"On the mean of the draws {', '.join(names)} (held-out cells; the spread is "
                  "(max - min) / min of the measured draws):", "",
                  "| arm / load | metric | measured draws | spread % | sim mean | err % on the mean |",
                  "|---|---|---|---:|---:|---:|"]
        for arm in sorted(speculative):
            for load in sorted({n.split("/")[2] for n in cells}, key=_load_key):
                group_cells = [cells.get(f"{arm}/{w}/{load}") for w in names]
                if any(c is None for c in group_cells) or any(
                        role(f"{arm}/{w}/{load}") != "held out" for w in names):
                    continue
                for k in DECODE:
                    meas = [c[k]["measured"] for c in group_cells if c and k in c]
                    sims = [c[k]["simulated"] for c in group_cells if c and k in c]
                    if len(meas) != len(names):
                        continue
                    m, sm = sum(meas) / len(meas), sum(sims) / len(sims)
                    err = _pct(sm, m)
                    summary.setdefault(f"{arm}, held out, on the mean of {'/'.join(names)}: {k}", []).append(abs(err))
                    lines.append(f"| {arm} / {load} | {k} | {', '.join(f'{v:,.2f}' for v in meas)} | "
                                 f"{100 * (max(meas) - min(meas)) / min(meas):.1f} | {sm:,.2f} | {err:+.1f} |")
    lines += ["", "| set: metric | cells | mean abs error % | max % | within 15 % |",
              "|---|---:|---:|---:|---:|"]
    for key, errs in sorted(summary.items()):
        lines.append(f"| {key} | {len(errs)} | {sum(errs) / len(errs):.1f} | {max(errs):.1f} | "
                     f"{sum(e <= 15 for e in errs)}/{len(errs)} |")
    speedups: dict[str, dict[str, float]] = {}
    by: dict[tuple[str, str], list[tuple[str, float, float]]] = {}
    for name in order:
        arm, wl, load = name.split("/")
        b = cells.get(f"{base}/{wl}/{load}") if base is not None else None
        if arm == base or b is None or "output_throughput" not in cells[name]:
            continue
        c = cells[name]["output_throughput"]
        ms = c["measured"] / b["output_throughput"]["measured"]
        ss = c["simulated"] / b["output_throughput"]["simulated"]
        by.setdefault((arm, wl), []).append((load, ms, ss))
        speedups[name] = {"measured": round(ms, 3), "simulated": round(ss, 3)}
    if by:
        loads = sorted({ld for v in by.values() for ld, _, _ in v}, key=_load_key)
        lines += ["", f"Speed-up (output tok/s over {base}'s at the same workload and load), "
                  "measured / simulated:", "",
                  "| arm / workload | " + " | ".join(loads) + " | stops paying (meas / sim) |",
                  "|---|" + "---:|" * (len(loads) + 1)]
        for (arm, wl), vals in sorted(by.items()):
            got = {ld: (ms, ss) for ld, ms, ss in vals}
            stop_m = next((ld for ld, ms, _ in vals if ms < 1.0), "pays at every load")
            stop_s = next((ld for ld, _, ss in vals if ss < 1.0), "pays at every load")
            lines.append(f"| {arm} / {wl} | " + " | ".join(
                f"x{got[ld][0]:.2f} / x{got[ld][1]:.2f}" if ld in got else "-" for ld in loads)
                + f" | {stop_m} / {stop_s} |")
    write_atomic(a.out / "table.md", ("\n".join(lines) + "\n").encode())
    write_atomic(a.out / "check.json", (json.dumps({
        "calibration": cal.model_dump(mode="json"), "fit": a.fit, "cells": cells,
        "speedups": speedups}, indent=1) + "\n").encode())
    print("\n".join(lines))


if __name__ == "__main__":
    main()
