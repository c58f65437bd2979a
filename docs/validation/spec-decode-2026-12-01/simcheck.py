"""Measured vs simulated, per cell, for the speculative-decoding run (issue 17).

    .venv/bin/python docs/validation/spec-decode-2026-12-01/simcheck.py EXPERIMENT_DIR [--fit-arm sync]

Every cell of the experiment (`servelab run examples/h200-spec.yaml`) is re-simulated with
its own prompts, seed, load and warm-ups on its arm's deployment; a speculative arm's cell
with the acceptance that cell measured (per position, the mean tokens per proposal, and the share of decode steps that
drafted: `servelab.experiment.simulation.measured_speculation`). The one new residual,
the CPU time per step that synchronous scheduling exposes (`cpu_step_ms`,
`cpu_per_seq_us`; named sync_step_overhead_ms / sync_per_seq_us when this ran), is fitted with `--fit-arm` on that arm's cells only (the non-speculative
`sync` arm: vLLM with --no-async-scheduling), then the CPU time per sequence that the V1
model runner spends on speculation (`spec_step_us` per step, `spec_per_seq_us` per
sequence; `spec_per_seq_us` alone until 2026-12-02) on the cells of `--spec-fit-arm`
(ngram-k2) only; every other figure is the shipped H200 default (the piecewise-graph cost
without asynchronous scheduling, `sync_piecewise_layer_us`, measured by
../spec-steps-2026-12-02), and the other speculative arms (ngram-k6, draft-k4) are held out
of every fit. `--arm` keeps only those arms' cells (the spec-steps run: `--arm k6
--spec-fit-arm none`). Writes simcheck.json and table.md in `--out`.

The cells name the model, tokenizer and ShareGPT file at their device paths
(/tmp/gpu-x/payload/...): link the kit's payload there (`ln -sfn $PWD/.gpu/dl/payload
/tmp/gpu-x/payload`) and give the draft a directory with its config
(`mkdir -p /tmp/gpu-x/payload/qwen3-0.6b && cp src/servelab/data/models/qwen3-0.6b.json
/tmp/gpu-x/payload/qwen3-0.6b/config.json`, what `dev.sh modeldir` made on the device).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from servelab.sim.calibrate import calibrate, evaluate
from servelab.sim.cost import default_calibration
from servelab.experiment.simulation import measured_cells
from servelab.storage import write_atomic

HERE = Path(__file__).resolve().parent
METRICS = ("output_throughput", "mean_tpot_ms", "mean_ttft_ms")
SYNC_PARAMS = ("cpu_step_ms", "cpu_per_seq_us")
SPEC_PARAMS = ("spec_step_us", "spec_per_seq_us")
DECODE_METRICS = ("output_throughput", "mean_tpot_ms")


def _pct(sim: float, meas: float) -> float:
    return 100.0 * (sim - meas) / meas


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("experiment", type=Path)
    ap.add_argument("--fit-arm", default="none", help=(
        "arm whose cells fit cpu_step_ms / cpu_per_seq_us (the first run: sync; since "
        "2026-12-01's fifth run the shipped figures are held: none)"))
    ap.add_argument("--spec-fit-arm", default="ngram-k2")
    ap.add_argument("--arm", action="append", default=[], help="only these arms' cells")
    ap.add_argument("--max-evals", type=int, default=30)
    ap.add_argument("--out", type=Path, default=HERE)
    a = ap.parse_args()
    targets = [t for t in measured_cells(a.experiment)
               if not a.arm or t.name.split("/")[0] in a.arm]
    for t in targets:
        t.measured = {k: v for k, v in t.measured.items() if k in METRICS}
    opts = targets[0].options
    assert opts is not None
    base = default_calibration(opts.gpu)
    fit_set = [t for t in targets if t.name.split("/")[0] == a.fit_arm]
    cal = base
    if fit_set:
        start = base.model_copy(update={"cpu_step_ms": 0.5, "cpu_per_seq_us": 10.0})
        fit = calibrate(dataclasses.replace(opts, calibration=start), fit_set, a.max_evals,
                        params=SYNC_PARAMS)
        cal = fit.calibration
    spec_set = [t for t in targets if t.name.split("/")[0] == a.spec_fit_arm]
    if spec_set:
        start = cal.model_copy(update={"spec_per_seq_us": 20.0, "spec_step_us": 300.0})
        # Decode-step costs, fitted on decode figures: TTFT carries the frontend gap of
        # issue 14, which these two must not absorb.
        decode_set = [dataclasses.replace(t, measured={k: v for k, v in t.measured.items()
                                                       if k in DECODE_METRICS}) for t in spec_set]
        fit = calibrate(dataclasses.replace(opts, calibration=start), decode_set, a.max_evals,
                        params=SPEC_PARAMS)
        cal = fit.calibration
        fit_set = fit_set + spec_set
    spec_from = (f"fitted on the cells of arm {a.spec_fit_arm}" if spec_set
                 else "the shipped figures, fitted on the n-gram K = 2 arm of ../spec-decode-2026-12-01")
    rows = evaluate(opts, targets, cal)
    cells: dict[str, dict[str, dict[str, float]]] = {}
    for name, metric, meas, sim in rows:
        cells.setdefault(name, {})[metric] = {"measured": meas, "simulated": sim,
                                              "error_pct": round(_pct(sim, meas), 2)}
    fitted = {t.name for t in fit_set}
    speculative = {t.name.split("/")[0] for t in targets if t.options and t.options.speculative}
    lines = ["| cell | set | output tok/s meas | sim | err % | mean TPOT ms meas | sim | err % | "
             "mean TTFT ms meas | sim | err % |", "|---|---|" + "---:|" * 9]
    summary: dict[str, list[float]] = {}
    for name, m in cells.items():
        arm = name.split("/")[0]
        # a draft model's forwards are priced from the CPU time per layer that the engine's
        # trace of this arm gives (servelab.sim.cost.H200_DRAFT_LAYER_US): not held out of that
        role = "fit" if name in fitted else (
            f"{arm}, drafter from its trace" if arm.startswith("draft")
            else f"{arm}, held out" if arm in speculative else "not spec")
        vals = []
        for k in METRICS:
            e = m.get(k)
            vals += ([f"{e['measured']:,.2f}", f"{e['simulated']:,.2f}", f"{e['error_pct']:+.1f}"]
                     if e else ["-", "-", "-"])
            if e:
                summary.setdefault(f"{role}:{k}", []).append(abs(e["error_pct"]))
        lines.append(f"| {name} | {role} | " + " | ".join(vals) + " |")
    lines += ["", "| set: metric | cells | mean abs error % | max % | within 15 % |", "|---|---:|---:|---:|---:|"]
    for key, errs in sorted(summary.items()):
        lines.append(f"| {key} | {len(errs)} | {sum(errs) / len(errs):.1f} | {max(errs):.1f} | "
                     f"{sum(e <= 15 for e in errs)}/{len(errs)} |")
    cpu_from = (f"fitted on the cells of arm {a.fit_arm}"
                if any(t.name.split("/")[0] == a.fit_arm for t in targets) else "the shipped figures")
    lines += ["", f"Residual: the shipped H200 default with cpu_step_ms "
              f"{cal.cpu_step_ms:.3f}, cpu_per_seq_us {cal.cpu_per_seq_us:.2f} "
              f"({cpu_from}), sync_piecewise_layer_us {cal.sync_piecewise_layer_us:.1f} "
              f"(measured, ../spec-steps-2026-12-02), spec_step_us {cal.spec_step_us:.1f} and "
              f"spec_per_seq_us {cal.spec_per_seq_us:.2f} ({spec_from}) and draft_layer_us "
              f"{cal.draft_layer_us:.1f} (the draft model's engine trace, ../sim-host-2026-12-01)."]
    write_atomic(a.out / "table.md", ("\n".join(lines) + "\n").encode())
    write_atomic(a.out / "simcheck.json", (json.dumps({
        "calibration": cal.model_dump(mode="json"), "fit_arm": a.fit_arm, "cells": cells},
        indent=1) + "\n").encode())
    print("\n".join(lines))


if __name__ == "__main__":
    main()
