"""The operator model on the earlier H200 cells (Qwen3-14B bf16 and AWQ, 2026-11-29) against
what the roofline model shipped for them.

    .venv/bin/python docs/validation/sim-transfer-2026-12-01/qwen14b_check.py

Re-simulates every bf16 and awq cell of ../h200-2026-11-29/results with that folder's own
harness (its `cells` and `target`, and its client's copied warm-ups) under the
calibration in cal-h200.json, and compares with the roofline model's "joint" column of
../h200-2026-11-29/sim/after-async/simcheck.json (the H200 default it shipped, fitted on
12 of those cells). Metrics: output throughput, mean TTFT, mean ITL (those cells' files
carry no TPOT key). Needs the kit's payload linked at /tmp/gpu-x/payload (simcheck.py).
Writes qwen14b_check.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import replace
from pathlib import Path

# main() replaces the offline driver's `_warmups` by what that run's client sent. The
# compiled driver (mypyc, since 2026-12-05) calls its own function directly and would
# ignore the replacement, silently simulating other warm-ups (the AWQ cells' mean TTFT
# error then reads 25.4 % instead of 9.5 %): run the sources, before servelab.sim is imported.
os.environ["SERVELAB_PURE_PYTHON"] = "1"

import servelab.sim.offline as offline  # noqa: E402
from servelab.sim.calibrate import simulated_metrics  # noqa: E402
from servelab.sim.cost import Calibration  # noqa: E402
from servelab.storage import write_atomic  # noqa: E402

HERE = Path(__file__).resolve().parent
OLD = HERE.parent / "h200-2026-11-29"
METRICS = ("output_throughput", "mean_ttft_ms", "mean_itl_ms")


def _old_harness():
    spec = importlib.util.spec_from_file_location("old_simcheck", OLD / "simcheck.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    old = _old_harness()
    offline._warmups = old._copied_warmups  # what that run's client sent (its docstring)
    cal = Calibration.load(HERE / "cal-h200.json")
    before = {r["cell"]: r for r in json.loads((OLD / "sim" / "after-async" / "simcheck.json").read_text())}
    prepared: dict = {}
    lines = ["| cell | metric | measured | roofline (shipped) | err | operator model | err |",
             "|---|---|---:|---:|---:|---:|---:|"]
    errs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for c in old.cells(OLD / "results"):
        if c["arm"] not in ("bf16", "awq"):
            continue
        t = old.target(c, prepared)
        sim = simulated_metrics(replace(t.options, calibration=cal), t)
        prev = before[t.name]["joint"]
        for m in METRICS:
            meas = c["measured"][m]
            e_old, e_new = 100 * (prev[m] - meas) / meas, 100 * (sim[m] - meas) / meas
            errs.setdefault((c["arm"], m), []).append((abs(e_old), abs(e_new)))
            lines.append(f"| {t.name} | {m} | {meas:,.1f} | {prev[m]:,.1f} | {e_old:+.1f} % | "
                         f"{sim[m]:,.1f} | {e_new:+.1f} % |")
    lines += ["", "| arm | metric | cells | roofline mean abs error | operator model mean abs error |",
              "|---|---|---:|---:|---:|"]
    for (arm, m), pairs in sorted(errs.items()):
        n = len(pairs)
        lines.append(f"| {arm} | {m} | {n} | {sum(a for a, _ in pairs) / n:.1f} % | "
                     f"{sum(b for _, b in pairs) / n:.1f} % |")
    text = "\n".join(lines) + "\n"
    write_atomic(HERE / "qwen14b_check.md", text.encode())
    print(text)


if __name__ == "__main__":
    main()
