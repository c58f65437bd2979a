"""The sim-waves hook files (../sim-waves-2026-12-03) read with asynchronous scheduling's order of
events (issue 14, 2026-12-07).

    .venv/bin/python docs/validation/sim-steptrace-2026-12-07/accounting.py > docs/validation/sim-steptrace-2026-12-07/accounting.md

Under asynchronous scheduling vLLM's engine core runs, per turn of its loop: `schedule()` of step
s + 1, its launches, then the wait for step s's tokens and `update_from_output(s)`. The hook
stamps `schedule()` (start, end, the step's counts) and the start of `update_from_output`.
../sim-gil-2026-12-07/hookstats.py took the interval between two updates as the later step's
time. That holds when the GPU is the bound; when the CPU's launches of step s + 1 outlast the
GPU's step s, the update of s waits for those launches, and the interval holds the CPU time of
the next step: a 3,072-token OLMoE step then shows 5.9 ms and the 2,048-token step before it 36
ms. This script pairs each `schedule()` with its own update (first in, first out, the same token
count) and prints:
1. per cell, the engine's busy time: the sum over steps of the interval from the update before
   (or, after an idle engine, from the step's own `schedule()`) to the step's update, against
   the shipped H200 operator model's price of the same steps (decode contexts taken as 1,090
   tokens, each chunk's context as its own tokens so far);
2. per cell and kind of step, the median interval between the `schedule()` calls that follow a
   step (steps s + 1 and s + 2: in a full batch queue, step s's period) with both in a busy run,
   beside the price.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

# The sim-waves folder's reader owns the hook files' layout and the step's pricing;
# `spans`, `step_shape` and `h200_cost` are re-exported for this folder's other readers.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sim-waves-2026-12-03"))
from summarise import CELLS, MODELS, hook_records, h200_cost, spans, step_shape  # noqa: E402,F401
from summarise import RESULTS as WAVES  # noqa: E402
PREFILL_BINS = ((1, 2100), (2101, 6200), (6201, 8300))
DECODE_BINS = ((0, 24), (25, 44), (45, 64))


def engine_records(model: str, a: float, b: float) -> list[list]:
    """The engine core's `sch` and `upd0` records of steps with tokens within [a, b], by time."""
    return [r for r in hook_records(model, a, b)
            if (r[0] == "sch" and r[3] > 0) or (r[0] == "upd0" and r[2] > 0)]


def paired_steps(recs: list[list]) -> list[dict]:
    """Each step's `schedule()` record with the time of its own update (first in, first out)."""
    pending: list[list] = []
    out = []
    for r in recs:
        if r[0] == "sch":
            pending.append(r)
            continue
        s = pending.pop(0)
        if s[3] != r[2]:
            raise ValueError(f"update of {r[2]} tokens after a schedule of {s[3]}")
        _, t0, t1, tokens, nreq, chunks, pre, new = s
        out.append({"sch0": t0, "sch1": t1, "upd": r[1], "pre": pre, "chunks": chunks,
                    "dec": nreq - chunks, "new": len(new)})
    return out


def cell_steps(model: str) -> Iterator[tuple[str, float, list[dict]]]:
    """(cell, its start, its paired steps) for each of `CELLS` the model ran."""
    for cell, (a, b) in spans(model).items():
        if cell in CELLS:
            yield cell, a, paired_steps(engine_records(model, a, b))


def busy_triples(st: list[dict]) -> Iterator[tuple[dict, dict, dict]]:
    """(s, s + 1, s + 2) where s + 1 and s + 2 were scheduled while their predecessors were
    in flight (no idle engine): the `schedule()` calls of s + 1 and s + 2 then bound step
    s's period."""
    for j in range(1, len(st) - 2):
        s, n1, n2 = st[j], st[j + 1], st[j + 2]
        if n1["sch0"] < s["upd"] and n2["sch0"] < n1["upd"]:
            yield s, n1, n2


def pricer(model: str) -> Callable[[dict], float]:
    cost = h200_cost(WAVES / model / "config.json")
    return lambda s: cost.step_duration_s(step_shape(s["dec"], s["pre"], s["chunks"]))


def busy_lines() -> list[str]:
    out = ["## 1. The engine's busy time per cell", "",
           "| model | cell | steps | busy, measured ms | priced ms | priced / measured | idle ms |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for model in MODELS:
        price = pricer(model)
        for cell, _, st in cell_steps(model):
            meas = priced = idle = 0.0
            for prev, s in zip(st, st[1:]):
                if s["sch0"] < prev["upd"]:  # scheduled while the step before was in flight
                    meas += s["upd"] - prev["upd"]
                else:
                    idle += s["sch0"] - prev["upd"]
                    meas += s["upd"] - s["sch1"]
                priced += price(s)
            out.append(f"| {model} | {cell} | {len(st) - 1} | {1e3 * meas:,.0f} | {1e3 * priced:,.0f} | "
                       f"{priced / meas:.3f} | {1e3 * idle:,.0f} |")
    return out + [""]


def period_lines() -> list[str]:
    out = ["## 2. A step's period in a busy run (schedule() of s + 1 to schedule() of s + 2), medians", "",
           "| model | cell | prefill tokens | decodes | steps | period ms | priced ms | priced / measured |",
           "|---|---|---|---|---:|---:|---:|---:|"]
    for model in MODELS:
        price = pricer(model)
        for cell, _, st in cell_steps(model):
            rows = [(s["pre"], s["dec"], n2["sch0"] - n1["sch0"], price(s)) for s, n1, n2 in busy_triples(st)]
            arr = np.array(rows)
            for lo, hi in ((0, 0), *PREFILL_BINS):
                for dlo, dhi in ((0, 64),) if lo == 0 else DECODE_BINS:
                    m = (arr[:, 0] >= lo) & (arr[:, 0] <= hi) & (arr[:, 1] >= dlo) & (arr[:, 1] <= dhi)
                    if m.sum() < 3:
                        continue
                    meas, pr = np.median(arr[m, 2]), np.median(arr[m, 3])
                    out.append(f"| {model} | {cell} | {lo}-{hi} | {dlo}-{dhi} | {int(m.sum())} | "
                               f"{1e3 * meas:.1f} | {1e3 * pr:.1f} | {pr / meas:.2f} |")
    return out + [""]


def main() -> None:
    print("\n".join(["# The sim-waves hook files in asynchronous scheduling's order (accounting.py)", "",
                     *busy_lines(), *period_lines()]))


if __name__ == "__main__":
    main()
