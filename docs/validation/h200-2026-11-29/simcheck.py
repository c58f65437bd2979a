"""Simulator check on the H200 run: calibrate on half the cells, predict the other half.

    .venv/bin/python docs/validation/h200-2026-11-29/simcheck.py RUN_DIR OUT_DIR [--no-async-scheduling]

RUN_DIR is the experiment directory (`servelab run examples/h200-vllm.yaml`) or this
folder's results/ (the stripped cells keep every key this script reads). The cells record
the tokenizer and ShareGPT file at their device paths (/tmp/gpu-x/payload/...): link that
folder to the kit's payload first (`ln -sfn $PWD/.gpu/dl/payload /tmp/gpu-x/payload`).

Calibration set (12 of the 34 cells): c1 and c32 of every workload for bf16 and for awq,
one calibration per weight format, fitted by `servelab.sim.calibrate.calibrate` (the
function behind `servelab sim calibrate`; the CLI takes one dataset per call, and a
calibration must see all three workloads). Held out: c10 and c64 of bf16 and awq, and every
awq-overtuned cell (predicted with the awq calibration). Each cell is re-simulated with
its own seed, num_prompts, concurrency and 10 warm-ups, exactly as `servelab sim run` does.
A third fit, "joint", uses the same 12 cells for one calibration of both formats (each cell
simulated on its own arm's deployment; AWQ through the cost model's format factor): that is
what ships as the H200 default. Uncalibrated = the shipped H200 defaults of the tree the
script runs on. `--no-async-scheduling` simulates vLLM's synchronous scheduler (the
simulator before it modelled async scheduling: `sim/before-async/`). Writes OUT_DIR/cal-{bf16,awq,joint}.json and OUT_DIR/simcheck.json (every
cell: measured, uncalibrated, calibrated, joint).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from servelab.plan import EngineArgs
from servelab.sim.calibrate import MeasuredCell, calibrate, simulated_metrics
from servelab.sim.cost import Calibration
from servelab.sim.offline import prepare_workload
from servelab.sim.setup import SimOptions
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DatasetOptions

METRICS = ("output_throughput", "total_token_throughput", "mean_ttft_ms", "mean_itl_ms",
           "p99_itl_ms")
FORMAT = {"bf16": None, "awq": "awq", "awq-overtuned": "awq"}
ARGS = {"awq-overtuned": {"max_num_seqs": 8, "max_model_len": 1024}}
CAL_LOADS = ("c1", "c32")


def cells(run: Path) -> list[dict]:
    spec = json.loads((run / "manifest.json").read_text())["spec"]
    workloads = {w["name"]: {k: v for k, v in w.items() if k != "name"} for w in spec["workloads"]}
    out = []
    for f in sorted(run.glob("cells/*/*/*.json")):
        d = json.loads(f.read_text())
        c, r = d["cell"], d["result"]
        ds = DatasetOptions(**{**workloads[c["workload"]], "num_prompts": c["num_prompts"],
                               "tokenizer": r["servelab"]["tokenizer"]})
        out.append({"arm": c["arm"], "workload": c["workload"], "load": c["load"], "seed": c["seed"],
                    "concurrency": c["concurrency"], "num_warmups": c["num_warmups"], "dataset": ds,
                    "measured": {k: float(r[k]) for k in METRICS}, "failed": r["failed"],
                    "completed": r["completed"], "input_tokens": r["total_input_tokens"]})
    return out


def options(arm: str, cal: Calibration | None, async_scheduling: bool = True) -> SimOptions:
    args = EngineArgs(gpu_memory_utilization=0.9, **ARGS.get(arm, {}))
    return SimOptions("Qwen/Qwen3-14B", "H200", FORMAT[arm], args, calibration=cal,
                      async_scheduling=async_scheduling)


def target(cell: dict, prepared: dict, async_scheduling: bool = True) -> MeasuredCell:
    key = (cell["workload"], cell["load"])
    if key not in prepared:
        prepared[key] = prepare_workload(cell["dataset"], cell["seed"], ArrivalOptions())
    name = f"{cell['arm']}/{cell['workload']}/{cell['load']}"
    measured = {k: v for k, v in cell["measured"].items() if k in ("output_throughput",
                "total_token_throughput", "mean_itl_ms", "p99_itl_ms", "mean_ttft_ms")}
    return MeasuredCell(name, measured, prepared[key], cell["seed"], cell["concurrency"], cell["num_warmups"],
                  options(cell["arm"], None, async_scheduling))


def _copied_warmups(requests: list, n: int) -> list:
    """Warm-ups as the H200 run's client sent them: plain copies of the first requests (so
    the first 10 measured requests of every cell found their prompt cached; fixed in the
    client since, see Findings 1). The simulator now marks warm-ups; this script reproduces
    what was measured."""
    return [requests[i % len(requests)] for i in range(n)]


def main() -> None:
    import servelab.sim.offline as offline

    offline._warmups = _copied_warmups  # what the measured client did (docstring above)
    run, out = Path(sys.argv[1]), Path(sys.argv[2])
    asy = "--no-async-scheduling" not in sys.argv[3:]
    out.mkdir(parents=True, exist_ok=True)
    all_cells = cells(run)
    prepared: dict = {}
    cals: dict[str, Calibration] = {}
    for fmt_arm in ("bf16", "awq", "joint"):
        path = out / f"cal-{fmt_arm}.json"
        if path.exists():
            cals[fmt_arm] = Calibration.load(path)
            continue
        arms = ("bf16", "awq") if fmt_arm == "joint" else (fmt_arm,)
        fit_cells = [c for c in all_cells if c["arm"] in arms and c["load"] in CAL_LOADS]
        fit = calibrate(options("bf16", None, asy), [target(c, prepared, asy) for c in fit_cells],
                        max_evals=60, progress=print)
        fit.calibration.save(path)
        cals[fmt_arm] = fit.calibration
        print("\n".join(fit.report_lines()))
    rows = []
    for c in all_cells:
        t = target(c, prepared, asy)
        cal = cals["bf16" if c["arm"] == "bf16" else "awq"]
        row = {"cell": t.name, "role": "fit" if (c["arm"] in ("bf16", "awq") and c["load"] in CAL_LOADS) else "held out",
               "measured": c["measured"], "failed": c["failed"],
               "input_tokens": {"measured": c["input_tokens"],
                                "simulated": sum(len(r.prompt_token_ids) for r in t.workload.requests)}}
        for label, cal_used in (("uncalibrated", None), ("calibrated", cal), ("joint", cals["joint"])):
            row[label] = simulated_metrics(options(c["arm"], cal_used, asy), t)
        rows.append(row)
        print(json.dumps({"cell": row["cell"], "role": row["role"], **{
            f"{lab}:{m}": round(100 * (row[lab][m] - row["measured"][m]) / row["measured"][m], 1)
            for lab in ("uncalibrated", "calibrated") for m in ("output_throughput", "mean_ttft_ms", "mean_itl_ms")
            if row["measured"][m] and m in row[lab]}}))
    (out / "simcheck.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
