"""The probe's prefill steps (results/prefill-*.json) beside the simulator's price of the
same steps (issue 14, 2026-12-03): per model and step, the measured wall of `generate`, the
GPU's kernel sum, the host's share (wall minus kernels), and what the operator model gives
for the kernels (x `gpu_time_scale`) and for the whole step.

    .venv/bin/python docs/validation/sim-prefill-2026-12-03/summarise.py > docs/validation/sim-prefill-2026-12-03/summary.md

The simulated models are the served directories' configs (vocabulary raised to the Qwen
tokenizer's, as the probe's `dev.sh modeldir` did) from ../sim-transfer-2026-12-01.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from servelab.plan import EngineArgs
from servelab.sim.cost import default_calibration
from servelab.sim.scheduler import ScheduledStep
from servelab.sim.setup import SimOptions, build_cluster

HERE = Path(__file__).resolve().parent
CONFIGS = HERE.parent / "sim-transfer-2026-12-01" / "results"
MODELS = ("olmoe-1b-7b", "qwen3-30b-a3b", "mistral-7b")


def main() -> None:
    print("# Prefill steps beyond the captured graphs: measured vs priced (summarise.py)\n")
    print("`1x64` is the reference for `generate`'s own overhead: one 64-token prompt, which "
          "a captured graph runs. Times in ms.\n")
    print("| model | step | wall | kernels (GPU) | wall - kernels | sim kernels x scale | "
          "sim kernels vs GPU | sim step | sim step vs wall - overhead |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    cal = default_calibration("H200")
    for name in MODELS:
        probe = json.loads((HERE / "results" / f"prefill-{name}.json").read_text())
        cost = build_cluster(SimOptions(str(CONFIGS / name), "H200", None, EngineArgs(),
                                        calibration=cal), random.Random(0)).engines[0].cost
        ref = probe["points"]["1x64"]
        step64 = ScheduledStep([], [], 0, 0, 64, 0, 0, 1)
        overhead = ref["wall_ms_median"] - cost.step_duration_s(step64) * 1e3
        for key, p in probe["points"].items():
            step = ScheduledStep([], [], 0, 0, p["tokens"], 0, 0, p["prompts"])
            kern = cost.parts(step).total_s * cal.gpu_time_scale * 1e3
            price = cost.step_duration_s(step) * 1e3
            gpu = p["kernels_us"] / 1e3
            wall = p["wall_ms_median"]
            print(f"| {name} | {key} | {wall:.1f} | {gpu:.1f} | {wall - gpu:.1f} | {kern:.1f} | "
                  f"{100 * (kern - gpu) / gpu:+.1f} % | {price:.1f} | "
                  f"{100 * (price - (wall - overhead)) / (wall - overhead):+.1f} % |")
        print(f"| {name} | (overhead of `generate`: 1x64 wall - its priced step) | "
              f"{overhead:.1f} | | | | | | |")


if __name__ == "__main__":
    main()
