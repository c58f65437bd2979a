"""The engine's steps of the sim-steptrace cells: GPU time, CPU time and what the operator model
prices (issue 14, 2026-12-07).

    .venv/bin/python docs/validation/sim-steptrace-2026-12-07/steps.py > docs/validation/sim-steptrace-2026-12-07/steps.md

Reads results/<model>/hook/*.jsonl (hook/sitecustomize.py) and cells.txt. A step is one
`execute_model` + `sample_tokens` of the engine core's main thread, after the `schedule` that
made it. For each step:
- period: from the GPU's end of the step before to the GPU's end of this one (CUDA events on the
  stream: what a step costs the engine when steps run back to back);
- GPU lag: from the CPU's last launch of the step (`sample_tokens` returns) to the GPU's end of
  it. Near zero, the GPU finished as soon as the CPU had issued the work: the step is bound by
  the CPU's launches, and its period is CPU time;
- launch CPU: the main thread's CPU time in `execute_model` + `sample_tokens`;
- cycle CPU: the main thread's CPU time from the end of one step's launches to the end of the
  next's (schedule, launches, the wait for a step's tokens, `update_from_output`, the input queue),
  beside the same cycle's wall time;
- priced: the shipped H200 operator model's step for the same counts (decode contexts taken as
  1,090 tokens, each prefill chunk's context as its own tokens so far), and its two parts: the
  kernels x gpu_time_scale + per_prefill_token_us x prefill tokens (the GPU) and the
  launches x launch_us.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from accounting import h200_cost, spans, step_shape

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MODELS = ("olmoe-1b-7b", "qwen3-4b")
CELLS = ("rnd_c1", "rnd_c32_1", "rnd_c32_2", "rnd_c64_1", "rnd_c64_2", "rnd_c64_3")
BINS = ((0, 0), (1, 2100), (2101, 6200), (6201, 8300))


def records(model: str) -> tuple[list[list], list[list]]:
    """(engine core's records, API server's records), each sorted by time."""
    core, api = [], []
    for f in sorted((RESULTS / model / "hook").glob("*.jsonl")):
        recs = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        kinds = {r[0] for r in recs}
        if "sch" in kinds:
            core += recs
        elif "out1" in kinds or "tok" in kinds:
            api += recs
    key = lambda r: r[1] if len(r) > 1 and isinstance(r[1], float) else 0.0  # noqa: E731
    return sorted(core, key=key), sorted(api, key=key)


def steps(core: list[list], a: float, b: float) -> list[dict]:
    """The steps launched within [a, b], in order, with their GPU times where recorded."""
    gpu = {r[1]: (r[2], r[3]) for r in core if r[0] == "gpu"}
    out: list[dict] = []
    last_sch = None
    cur: dict | None = None
    for r in core:
        kind = r[0]
        if kind == "sch":
            last_sch = r
        elif kind == "exe" and r[5] > 0 and last_sch is not None and a <= r[1] <= b:
            _, t0, t1, tokens, nreq, chunks, pre, new = last_sch[:3] + last_sch[5:]
            cur = {"idx": r[5], "tokens": tokens, "nreq": nreq, "chunks": chunks, "pre": pre,
                   "new": len(new), "sch_cpu": last_sch[4] - last_sch[3], "exe0": r[1],
                   "launch_cpu": r[4] - r[3], "exe_c0": r[3]}
            last_sch = None
        elif kind == "smp" and cur is not None and r[5] == cur["idx"]:
            cur["smp1"] = r[2]
            cur["launch_cpu"] += r[4] - r[3]
            cur["smp_c1"] = r[4]
            if cur["idx"] in gpu:
                cur["g0"], cur["g1"] = gpu[cur["idx"]]
                out.append(cur)
            cur = None
    for prev, s in zip(out, out[1:]):
        s["period"] = s["g1"] - prev["g1"]
        s["cycle_wall"] = s["smp1"] - prev["smp1"]
        s["cycle_cpu"] = s["smp_c1"] - prev["smp_c1"]
        s["gap"] = s["g0"] - prev["g1"]
    return out[1:]


def priced(model: str):
    cost = h200_cost(RESULTS / model / "config.json")

    def price(s: dict) -> tuple[float, float, float]:
        st = step_shape(s["nreq"] - s["chunks"], s["pre"], s["chunks"])
        parts = cost.parts(st)
        return (cost.step_duration_s(st),
                parts.total_s * cost.calibration.gpu_time_scale + cost._ptok_s * s["pre"],
                parts.launches * cost._launch_s)
    return price


def ms(x) -> str:
    return f"{1e3 * x:.2f}"


def step_table(model: str, core: list[list]) -> list[str]:
    price = priced(model)
    sp = spans(model, RESULTS)
    out = [f"### {model}", "",
           "| cell | prefill tokens | steps | requests (median) | period ms | GPU lag ms | gap ms | "
           "launch CPU ms | cycle CPU / wall ms | schedule CPU ms | priced ms | GPU: kernels x scale + per token | launches x launch_us |",
           "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for cell in CELLS:
        if cell not in sp:
            continue
        st = [s for s in steps(core, *sp[cell]) if s["period"] < 0.5]
        for lo, hi in BINS:
            sel = [s for s in st if lo <= s["pre"] <= hi]
            if not sel:
                continue
            med = lambda k: float(np.median([s[k] for s in sel]))  # noqa: E731
            pr = np.array([price(s) for s in sel])
            out.append(f"| {cell} | {lo}-{hi} | {len(sel)} | {med('nreq'):.0f} | {ms(med('period'))} | "
                       f"{ms(float(np.median([s['g1'] - s['smp1'] for s in sel])))} | {ms(med('gap'))} | "
                       f"{ms(med('launch_cpu'))} | {ms(med('cycle_cpu'))} / {ms(med('cycle_wall'))} | "
                       f"{ms(med('sch_cpu'))} | {ms(np.median(pr[:, 0]))} | {ms(np.median(pr[:, 1]))} | "
                       f"{ms(np.median(pr[:, 2]))} |")
    return out + [""]


def main() -> None:
    lines = ["# The engine's steps, CPU and GPU apart (steps.py)", ""]
    for model in MODELS:
        if not (RESULTS / model / "hook").is_dir():
            continue
        core, _api = records(model)
        lines += step_table(model, core)
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
