"""OLMoE-1B-7B's prefill steps one by one, wave by wave (issue 14, 2026-12-08).

    .venv/bin/python docs/validation/sim-steptrace-2026-12-07/waves.py > docs/validation/sim-steptrace-2026-12-07/waves.md

Reads the sim-waves hook files (../sim-waves-2026-12-03) as accounting.py does and lists, for
each OLMoE cell, every step with prefill tokens that ran in a busy engine (steps s + 1 and
s + 2 scheduled while their predecessors were in flight): its counts, the interval between
the `schedule()` calls of s + 1 and s + 2 (step s's period when the GPU binds, the next
step's launches when the CPU does), the wall time of its own `schedule()` call (pure Python
on the engine core's main thread: how fast that thread ran then), and the shipped H200
model's price: its kernels x `gpu_time_scale` + `per_prefill_token_us` x prefill tokens
(GPU) beside its launches x `launch_us` (CPU).
"""

from __future__ import annotations

import random

from accounting import CELLS, WAVES, engine_records, paired_steps, spans
from servelab.plan import EngineArgs
from servelab.sim.cost import default_calibration
from servelab.sim.scheduler import ScheduledStep
from servelab.sim.setup import SimOptions, build_cluster

MODEL = "olmoe-1b-7b"


def main() -> None:
    cost = build_cluster(SimOptions(str(WAVES / MODEL / "config.json"), "H200", None, EngineArgs(),
                                    calibration=default_calibration("H200")),
                         random.Random(0)).engines[0].cost
    cal = cost.calibration
    print(f"# {MODEL}: prefill steps in a busy engine, wave by wave (waves.py)\n")
    for cell, (a, b) in spans(MODEL).items():
        if cell not in CELLS:
            continue
        recs = engine_records(MODEL, a, b)
        new = {r[1]: len(r[7]) for r in recs if r[0] == "sch"}
        st = paired_steps(recs)
        print(f"## {cell}\n")
        print("| ms into the cell | prefill tokens | chunks | new | decodes | period ms | "
              "schedule() ms | priced ms | GPU ms | launches ms |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for j in range(1, len(st) - 2):
            s, n1, n2 = st[j], st[j + 1], st[j + 2]
            if s["pre"] == 0 or not (n1["sch0"] < s["upd"] and n2["sch0"] < n1["upd"]):
                continue
            ch, pre = s["chunks"], s["pre"]
            per = pre / ch
            step = ScheduledStep(reqs=[], num_new=[], decode_seqs=s["dec"],
                                 decode_context_tokens=s["dec"] * 1090, prefill_tokens=pre,
                                 prefill_context_tokens=int(ch * per * (per + 1) / 2), preempted=0,
                                 prefill_seqs=ch)
            p = cost.parts(step)
            gpu = p.total_s * cal.gpu_time_scale + cost._ptok_s * pre
            print(f"| {1e3 * (s['sch0'] - a):,.0f} | {pre:,} | {ch} | {new[s['sch0']]} | {s['dec']} | "
                  f"{1e3 * (n2['sch0'] - n1['sch0']):.1f} | {1e3 * (s['sch1'] - s['sch0']):.2f} | "
                  f"{1e3 * cost.step_duration_s(step):.1f} | {1e3 * gpu:.1f} | "
                  f"{1e3 * p.launches * cost._launch_s:.1f} |")
        print()


if __name__ == "__main__":
    main()
