"""The engine's time per prefill token beyond the kernels (issue 14, 2026-12-08): the H200's
`per_prefill_token_us`, from the steps of a fit model alone.

    .venv/bin/python docs/validation/sim-steptrace-2026-12-07/prefill.py > docs/validation/sim-steptrace-2026-12-07/prefill.md

Reads the sim-waves hook files (../sim-waves-2026-12-03) as accounting.py does. A step with
6,201-8,300 prefill tokens whose kernels outlast their launches (priced: the kernels x
`gpu_time_scale` above the launches x `launch_us`) is bound by the GPU: under asynchronous
scheduling the engine schedules step s + 1 and launches it while s runs, so the interval
between the `schedule()` calls of s + 1 and s + 2 (both in a busy run) is step s on the GPU.
Its excess over the shipped price, divided by its prefill tokens, is what the GPU spends per
prefill token beyond the profile's kernels. The figure comes from Qwen3-4B (a model of the
residual's fit set) alone; OLMoE-1B-7B and gemma-3-12b (held out) are printed beside it,
not used.
"""

from __future__ import annotations

import random

import numpy as np

from accounting import CELLS, engine_records, paired_steps, spans, WAVES
from servelab.plan import EngineArgs
from servelab.sim.cost import default_calibration
from servelab.sim.scheduler import ScheduledStep
from servelab.sim.setup import SimOptions, build_cluster

FIT_MODEL = "qwen3-4b"
MODELS = (FIT_MODEL, "olmoe-1b-7b", "gemma-3-12b")
LO, HI = 6201, 8300


def gpu_bound_steps(model: str) -> list[tuple[int, float, float]]:
    """(prefill tokens, period s, shipped price s) of the model's GPU-bound 6-8k-token steps."""
    cal = default_calibration("H200").model_copy(update={"per_prefill_token_us": 0.0})
    cost = build_cluster(SimOptions(str(WAVES / model / "config.json"), "H200", None, EngineArgs(),
                                    calibration=cal), random.Random(0)).engines[0].cost
    out = []
    for cell, (a, b) in spans(model).items():
        if cell not in CELLS:
            continue
        st = paired_steps(engine_records(model, a, b))
        for j in range(1, len(st) - 2):
            s, n1, n2 = st[j], st[j + 1], st[j + 2]
            if not (LO <= s["pre"] <= HI and n1["sch0"] < s["upd"] and n2["sch0"] < n1["upd"]):
                continue
            ch, pre = s["chunks"], s["pre"]
            per = pre / ch
            step = ScheduledStep(reqs=[], num_new=[], decode_seqs=s["dec"],
                                 decode_context_tokens=s["dec"] * 1090, prefill_tokens=pre,
                                 prefill_context_tokens=int(ch * per * (per + 1) / 2), preempted=0,
                                 prefill_seqs=ch)
            parts = cost.parts(step)
            if parts.total_s * cal.gpu_time_scale <= parts.launches * cost._launch_s:
                continue
            out.append((pre, n2["sch0"] - n1["sch0"], cost.step_duration_s(step)))
    return out


def main() -> None:
    print("# Prefill steps on the GPU: period against the shipped price (prefill.py)\n")
    print("| model | role | steps | period ms, median | priced ms, median | excess us per prefill token, median (IQR) |")
    print("|---|---|---:|---:|---:|---|")
    for model in MODELS:
        rows = np.array(gpu_bound_steps(model))
        per_tok = 1e6 * (rows[:, 1] - rows[:, 2]) / rows[:, 0]
        q1, med, q3 = np.percentile(per_tok, [25, 50, 75])
        role = "fit: the figure" if model == FIT_MODEL else "held out: not used"
        print(f"| {model} | {role} | {len(rows)} | {1e3 * np.median(rows[:, 1]):.1f} | "
              f"{1e3 * np.median(rows[:, 2]):.1f} | {med:.2f} ({q1:.2f}-{q3:.2f}) |")


if __name__ == "__main__":
    main()
