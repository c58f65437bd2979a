"""Sections 1 and 4 of this folder's README: the engine's kernel trace vs the operator
model, and the Qwen3-0.6B cells vs the simulator with the shipped residual.

    .venv/bin/python docs/validation/sim-kernels-2026-12-01/summarise.py

Needs the GPU kit's payload at /tmp/gpu-x/payload for section 4 (as the transfer check).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from servelab.hardware.catalog import get_gpu
from servelab.models import load_model
from servelab.plan import EngineArgs
from servelab.sim.calibrate import evaluate
from servelab.sim.cost import default_calibration, kernel_times, shipped_profile
from servelab.sim.operators import OperatorModel

HERE = Path(__file__).resolve().parent
TRANSFER = HERE.parent / "sim-transfer-2026-12-01"
CONTEXT = 1024 + 32  # mid-way through 64 output tokens after a 1,024-token prompt


def traces() -> None:
    gpu = get_gpu("H200")
    kernels = kernel_times(gpu, shipped_profile(gpu))
    print("| model | batch | step wall (offline) | kernels in the trace | operator model | "
          "prefill kernels (trace) | operator model |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in ("olmoe-1b-7b", "qwen3-30b-a3b", "llama-3.1-8b"):
        ops = OperatorModel(load_model(str(TRANSFER / "results" / name / "config.json")), gpu,
                            EngineArgs(), kernels)
        trace = json.loads((HERE / "traces" / f"trace-{name}-graphs.json").read_text())
        for b, v in trace["batches"].items():
            n = int(b)
            decode = ops.parts(n, n * CONTEXT, 0, 0, 0).total_s
            per = min(n, 8)  # 8,192 batched tokens: eight 1,024-token prompts a step
            steps = -(-n // per)
            q = 1024
            prefill = steps * ops.parts(0, 0, per * q, per * q * (q + 1) // 2, per).total_s
            print(f"| {name} | {n} | {v['decode_step_ms']:.3f} ms | {v['decode_kernels_us'] / 1e3:.3f} ms | "
                  f"{decode * 1e3:.3f} ms | {v['prefill_kernels_us'] / 1e3:.1f} ms | {prefill * 1e3:.1f} ms |")


def tiny() -> None:
    spec = importlib.util.spec_from_file_location("simcheck", TRANSFER / "simcheck.py")
    assert spec is not None and spec.loader is not None
    sc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sc)
    sc.CELLS = ("rnd_c1", "rnd_c16", "rnd_c64", "sg_c64")
    if not (sc.PAYLOAD / "sharegpt_subset.json").exists():
        print(f"Qwen3-0.6B: skipped ({sc.PAYLOAD} is not the GPU kit's payload)")
        return
    targets = [t for _, t in sc.targets(HERE / "results") if t.name.startswith("qwen3-0.6b/")]
    base = targets[0].options
    got: dict[str, dict[str, tuple[float, float]]] = {}
    for name, metric, meas, sim in evaluate(base, targets, default_calibration("H200")):
        got.setdefault(name.split("/")[1], {})[metric] = (meas, sim)
    print("\n| cell | out tok/s meas | sim | err | TTFT ms meas | sim | err | TPOT ms meas | sim | err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cell, by in got.items():
        parts = [cell]
        for m in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"):
            meas, sim = by[m]
            parts += [f"{meas:,.1f}", f"{sim:,.1f}", f"{100 * (sim - meas) / meas:+.1f} %"]
        print("| " + " | ".join(parts) + " |")


if __name__ == "__main__":
    traces()
    tiny()
