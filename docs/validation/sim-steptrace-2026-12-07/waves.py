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

from accounting import WAVES, busy_triples, cell_steps, h200_cost, step_shape

MODEL = "olmoe-1b-7b"


def main() -> None:
    cost = h200_cost(WAVES / MODEL / "config.json")
    cal = cost.calibration
    print(f"# {MODEL}: prefill steps in a busy engine, wave by wave (waves.py)\n")
    for cell, a, st in cell_steps(MODEL):
        print(f"## {cell}\n")
        print("| ms into the cell | prefill tokens | chunks | new | decodes | period ms | "
              "schedule() ms | priced ms | GPU ms | launches ms |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for s, n1, n2 in busy_triples(st):
            if s["pre"] == 0:
                continue
            pre, ch = s["pre"], s["chunks"]
            step = step_shape(s["dec"], pre, ch)
            p = cost.parts(step)
            gpu = p.total_s * cal.gpu_time_scale + cost._ptok_s * pre
            print(f"| {1e3 * (s['sch0'] - a):,.0f} | {pre:,} | {ch} | {s['new']} | {s['dec']} | "
                  f"{1e3 * (n2['sch0'] - n1['sch0']):.1f} | {1e3 * (s['sch1'] - s['sch0']):.2f} | "
                  f"{1e3 * cost.step_duration_s(step):.1f} | {1e3 * gpu:.1f} | "
                  f"{1e3 * p.launches * cost._launch_s:.1f} |")
        print()


if __name__ == "__main__":
    main()
