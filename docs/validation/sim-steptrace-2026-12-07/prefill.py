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

import numpy as np

from accounting import WAVES, busy_triples, cell_steps, h200_cost, step_shape
from servelab.sim.cost import default_calibration

FIT_MODEL = "qwen3-4b"
MODELS = (FIT_MODEL, "olmoe-1b-7b", "gemma-3-12b")
LO, HI = 6201, 8300


def gpu_bound_steps(model: str) -> list[tuple[int, float, float]]:
    """(prefill tokens, period s, price s without the per-token time) of the model's
    GPU-bound 6-8k-token steps."""
    cal = default_calibration("H200").model_copy(update={"per_prefill_token_us": 0.0})
    cost = h200_cost(WAVES / model / "config.json", cal)
    out = []
    for _, _, st in cell_steps(model):
        for s, n1, n2 in busy_triples(st):
            if not LO <= s["pre"] <= HI:
                continue
            step = step_shape(s["dec"], s["pre"], s["chunks"])
            parts = cost.parts(step)
            if parts.total_s * cal.gpu_time_scale <= parts.launches * cost._launch_s:
                continue
            out.append((s["pre"], n2["sch0"] - n1["sch0"], cost.step_duration_s(step)))
    return out


def per_prefill_token_us(model: str) -> tuple[float, float, float]:
    """The model's excess per prefill token (us): (first quartile, median, third quartile)."""
    rows = np.array(gpu_bound_steps(model))
    q1, med, q3 = np.percentile(1e6 * (rows[:, 1] - rows[:, 2]) / rows[:, 0], [25, 50, 75])
    return float(q1), float(med), float(q3)


def main() -> None:
    print("# Prefill steps on the GPU: period against the shipped price (prefill.py)\n")
    print("| model | role | steps | period ms, median | priced ms, median | excess us per prefill token, median (IQR) |")
    print("|---|---|---:|---:|---:|---|")
    for model in MODELS:
        rows = np.array(gpu_bound_steps(model))
        q1, med, q3 = per_prefill_token_us(model)
        role = "fit: the figure" if model == FIT_MODEL else "held out: not used"
        print(f"| {model} | {role} | {len(rows)} | {1e3 * np.median(rows[:, 1]):.1f} | "
              f"{1e3 * np.median(rows[:, 2]):.1f} | {med:.2f} ({q1:.2f}-{q3:.2f}) |")


if __name__ == "__main__":
    main()
