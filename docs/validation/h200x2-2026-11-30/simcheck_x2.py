"""Simulator check on the two-H200 run: predict every two-GPU cell (and the one-GPU fp8 cells).

    .venv/bin/python docs/validation/h200x2-2026-11-30/simcheck_x2.py X2_RUN_DIR FP8_RUN_DIR OUT_DIR [--no-what-if]

X2_RUN_DIR is the experiment directory of examples/h200x2-vllm.yaml (arms replicas2-direct,
replicas2-rr, replicas2-cache, tp2, pp2; workloads sharegpt and prefix; c10, c32, c64);
FP8_RUN_DIR the one-GPU experiment of examples/h200-vllm.yaml holding the fp8 arm's cells
(other arms' cells there are ignored). The cells record the tokenizer and ShareGPT file at
their device paths (/tmp/gpu-x/payload/...): link that folder to the kit's payload first
(`ln -sfn $PWD/.gpu/dl/payload /tmp/gpu-x/payload`).

Nothing is fitted here. Each cell is re-simulated exactly as the one-GPU check
(docs/validation/h200-2026-11-29/simcheck.py: its `cells()` reads the cells, the workload is
`prepare_workload` with the cell's own seed, num_prompts and tokenizer, the load its
concurrency and 10 warm-ups, the figures `servelab.sim.calibrate.simulated_metrics`) on the
arm's own deployment as `servelab sim calibrate --experiment` builds it
(`servelab.experiment.simulation.arm_options`: tp2 -> tensor_parallel_size 2, pp2 ->
pipeline_parallel_size 2, replicas2-rr / replicas2-cache -> 2 replicas behind the simulated
router with the router's own policy, fp8 -> quantization fp8), with
  - "shipped": the H200 defaults of the tree the script runs on (fitted on one-GPU bf16+AWQ
    cells only: never on TP, PP, replicas or fp8);
  - "bf16cal": the one-GPU bf16 calibration, docs/validation/h200-2026-11-29/sim/after/
    cal-bf16.json (x2 cells only; fp8 cells get "shipped" only).
Warm-ups are the simulator's own (a first token of their own, as the client's marked
warm-ups of this run: commit 24c61b8), not the copied warm-ups the earlier check patched in.

replicas2-direct has no router: the client sends request i to replica i mod 2, with the
concurrency cap and the warm-ups split between two senders
(`servelab.experiment.targets._send_split`). The simulator has no such mode
(`arm_options` maps `routing: direct` to round_robin behind a router), so the direct arm is
simulated as the client does it: two independent one-replica simulations
(`simulate_prepared`), replica k getting requests k, k+2, ... with cap `split_cap(c, 2)[k]`
and warm-ups [k::2], records merged and summarised over the longer of the two durations
(both measured phases start at the same t0, after every warm-up); no router hop is charged.
The round-robin approximation is also kept (`direct_as_rr`) for comparison.

Diagnostic: the one-GPU bf16 cells of the earlier run (same seeds and prompts at c10, c32,
c64) are re-simulated too, so each arm's measured and simulated ratio over one GPU can be
compared (the multi-GPU / fp8 modelling apart from the one-GPU base error). What-if rows
(skipped with --no-what-if) re-run tp2 with other TP all-reduce latencies and fp8 with other
fp8 factors and tensor rates, patched in this process only (`what_if`): diagnostics of
which piece of the cost model misses, not fits.

Writes OUT_DIR/simcheck_x2.json (every cell: measured, predictions, input tokens measured
vs simulated; the one-GPU reference; ranking and scaling) and OUT_DIR/table.md, and prints
one line per cell.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path

from servelab.client.workers import split_cap
from servelab.metrics.summary import SummaryOptions, summarize
from servelab.sim.calibrate import FIT_METRICS, MeasuredCell, simulated_metrics
from servelab.sim.cost import Calibration
from servelab.experiment.simulation import _spec, arm_options
from servelab.sim.offline import PreparedWorkload, prepare_workload, simulate_prepared
from servelab.workload.arrivals import ArrivalOptions

HERE = Path(__file__).resolve().parent
H200_DIR = HERE.parent / "h200-2026-11-29"
BF16_CAL = H200_DIR / "sim" / "after" / "cal-bf16.json"
X2_ARMS = ("replicas2-direct", "replicas2-rr", "replicas2-cache", "tp2", "pp2")


def _load_simcheck():
    """The one-GPU check's module (its `cells()` reads an experiment's cells)."""
    spec = importlib.util.spec_from_file_location("simcheck_h200", H200_DIR / "simcheck.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def direct_metrics(opts, target: MeasuredCell, n: int = 2) -> dict[str, float]:
    """The client's direct split over `n` replicas (see module doc), summarised as
    `simulated_metrics` summarises one simulation."""
    one = replace(opts, replicas=1)
    wl = target.workload
    caps = split_cap(target.max_concurrency, n)
    warm_per = [len(range(k, target.num_warmups, n)) for k in range(n)]
    records, duration = [], 0.0
    for k in range(n):
        idx = list(range(k, len(wl.requests), n))
        sub = PreparedWorkload([wl.requests[i] for i in idx], wl.intended_s[idx],
                               wl.tokenizer_name, wl.tokenizer_source, wl.notes)
        run, *_ = simulate_prepared(one, sub, target.seed, caps[k], warm_per[k])
        records.extend(run.records)
        duration = max(duration, run.duration_s)
    res = summarize(records, duration, SummaryOptions(
        percentile_metrics=("ttft", "tpot", "itl"), metric_percentiles=(99.0,)))
    d = res.to_json_dict()
    return {k: float(d[k]) for k in FIT_METRICS if k in d}


def check_run(run: Path, arms: tuple[str, ...], cals: dict[str, Calibration | None],
              simcheck) -> list[dict]:
    spec = _spec(run)
    prepared: dict = {}
    rows = []
    for c in simcheck.cells(run):
        if c["arm"] not in arms:
            continue
        key = (c["workload"], c["load"], c["seed"])
        if key not in prepared:
            prepared[key] = prepare_workload(c["dataset"], c["seed"], ArrivalOptions())
        wl = prepared[key]
        base = arm_options(spec, spec.arm(c["arm"]), None, True)
        name = f"{c['arm']}/{c['workload']}/{c['load']}"
        t = MeasuredCell(name, {}, wl, c["seed"], c["concurrency"], c["num_warmups"], None)
        row = {"cell": name, "arm": c["arm"], "workload": c["workload"], "load": c["load"],
               "concurrency": c["concurrency"], "num_prompts": len(wl.requests),
               "deployment": {"tensor_parallel_size": base.engine_args.tensor_parallel_size,
                              "pipeline_parallel_size": base.engine_args.pipeline_parallel_size,
                              "replicas": base.replicas, "quantization": base.quantization,
                              "routing": "client direct split (i mod 2)" if c["arm"] == "replicas2-direct"
                              else (base.router_policy if base.replicas > 1 else None)},
               "measured": c["measured"], "failed": c["failed"], "completed": c["completed"],
               "input_tokens": {"measured": c["input_tokens"],
                                "simulated": sum(len(r.prompt_token_ids) for r in wl.requests)}}
        for label, cal in cals.items():
            opts = replace(base, calibration=cal)
            if c["arm"] == "replicas2-direct":
                row[label] = direct_metrics(opts, t)
                row[f"{label}:direct_as_rr"] = simulated_metrics(opts, t)
            else:
                row[label] = simulated_metrics(opts, t)
        rows.append(row)
        print(json.dumps({"cell": name, "input_ok": row["input_tokens"]["measured"] ==
                          row["input_tokens"]["simulated"], **{
            f"{lab}:{m}": round(100 * (row[lab][m] - row["measured"][m]) / row["measured"][m], 1)
            for lab in cals for m in ("output_throughput", "mean_ttft_ms", "mean_itl_ms")
            if row["measured"][m]}}), flush=True)
    return rows


def one_gpu_reference(simcheck, cals: dict[str, Calibration | None]) -> list[dict]:
    """The one-GPU bf16 cells of the earlier run (docs/validation/h200-2026-11-29/results,
    c10/c32/c64: the same seeds, num_prompts and prompts as the x2 and fp8 cells),
    re-simulated with copied warm-ups as they were measured (that check's
    `_copied_warmups`): the base each multi-GPU arm's scaling is read against."""
    import servelab.sim.offline as offline

    run = H200_DIR / "results"
    spec = _spec(run)
    saved = offline._warmups
    offline._warmups = simcheck._copied_warmups
    rows = []
    try:
        for c in simcheck.cells(run):
            if c["arm"] != "bf16" or c["load"] == "c1":
                continue
            wl = prepare_workload(c["dataset"], c["seed"], ArrivalOptions())
            t = MeasuredCell("", {}, wl, c["seed"], c["concurrency"], c["num_warmups"], None)
            base = arm_options(spec, spec.arm("bf16"), None, True)
            row = {"cell": f"bf16-1gpu/{c['workload']}/{c['load']}", "arm": "bf16-1gpu",
                   "workload": c["workload"], "load": c["load"], "seed": c["seed"],
                   "measured": c["measured"]}
            for label, cal in cals.items():
                row[label] = simulated_metrics(replace(base, calibration=cal), t)
            rows.append(row)
    finally:
        offline._warmups = saved
    return rows


# ---- tables ---------------------------------------------------------------------------

SHOW = (("output_throughput", "out tok/s", "{:.0f}"), ("mean_ttft_ms", "mean TTFT ms", "{:.1f}"),
        ("mean_itl_ms", "mean ITL ms", "{:.2f}"))
ARM_ORDER = ("tp2", "replicas2-rr", "replicas2-direct", "replicas2-cache", "pp2", "fp8")


def err(row: dict, label: str, metric: str) -> float | None:
    meas, sim = row["measured"].get(metric), row.get(label, {}).get(metric)
    if not meas or sim is None:
        return None
    return 100.0 * (sim - meas) / meas


def _mae(rows: list[dict], label: str, metric: str) -> str:
    es = [abs(e) for r in rows if (e := err(r, label, metric)) is not None]
    return f"{sum(es) / len(es):.1f}" if es else "-"


def _sorted(rows: list[dict]) -> list[dict]:
    loads = {"c10": 0, "c32": 1, "c64": 2}
    return sorted(rows, key=lambda r: (ARM_ORDER.index(r["arm"]), r["workload"], loads[r["load"]]))


def cell_table(rows: list[dict], labels: tuple[str, ...]) -> list[str]:
    head = ["cell"]
    for _, name, _ in SHOW:
        head += [f"{name} meas."] + [f"{lab} (err %)" for lab in labels]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in _sorted(rows):
        cells = [r["cell"] + ("" if r["input_tokens"]["measured"] == r["input_tokens"]["simulated"]
                              else " (input tokens differ)")]
        for metric, _, fmt in SHOW:
            cells.append(fmt.format(r["measured"][metric]))
            for lab in labels:
                e = err(r, lab, metric)
                cells.append("-" if e is None else f"{fmt.format(r[lab][metric])} ({e:+.1f})")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def mae_table(rows: list[dict], labels: tuple[str, ...], groups: dict) -> list[str]:
    head = ["set", "cells"] + [f"{name} {lab}" for _, name, _ in SHOW for lab in labels]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * (len(head) - 2)]
    for gname, pred in groups.items():
        sel = [r for r in rows if pred(r)]
        lines.append(f"| {gname} | {len(sel)} | " + " | ".join(
            _mae(sel, lab, m) for m, _, _ in SHOW for lab in labels) + " |")
    return lines


def ranking(rows: list[dict], labels: tuple[str, ...]) -> tuple[list[str], dict]:
    """Per (workload, load): arms by output throughput, measured and simulated; the grouped
    order tp2 > every replica arm > pp2, and the full order of the five arms."""
    from collections import defaultdict

    by: dict = defaultdict(dict)
    for r in rows:
        if r["arm"] in X2_ARMS:
            by[(r["workload"], r["load"])][r["arm"]] = r
    reps = ("replicas2-rr", "replicas2-direct", "replicas2-cache")
    short = {"tp2": "tp2", "replicas2-rr": "rr", "replicas2-direct": "direct",
             "replicas2-cache": "cache", "pp2": "pp2"}
    out: dict = {}
    lines = ["| workload/load | source | order by output tok/s | tp2 / best replica arm | pp2 / worst replica arm | tp2 > replicas > pp2 | full order as measured |",
             "|---|---|---|---:|---:|---|---|"]
    for (wl, load), arms in sorted(by.items(), key=lambda kv: (kv[0][0], int(kv[0][1][1:]))):
        meas_order = sorted(arms, key=lambda a: -arms[a]["measured"]["output_throughput"])
        for src in ("measured",) + labels:
            thr = {a: arms[a][src]["output_throughput"] for a in arms}
            order = sorted(arms, key=lambda a: -thr[a])
            grouped = thr["tp2"] > max(thr[a] for a in reps) and min(thr[a] for a in reps) > thr["pp2"]
            out.setdefault(f"{wl}/{load}", {})[src] = {
                "order": order, "grouped_order_holds": grouped, "same_full_order": order == meas_order,
                "tp2_over_best_replicas": thr["tp2"] / max(thr[a] for a in reps),
                "pp2_over_worst_replicas": thr["pp2"] / min(thr[a] for a in reps)}
            o = out[f"{wl}/{load}"][src]
            lines.append(f"| {wl}/{load} | {src} | " + " > ".join(
                f"{short[a]} {thr[a]:.0f}" for a in order) +
                f" | {o['tp2_over_best_replicas']:.3f} | {o['pp2_over_worst_replicas']:.3f} | "
                f"{'yes' if grouped else 'NO'} | {'-' if src == 'measured' else ('yes' if o['same_full_order'] else 'no')} |")
    return lines, out


def scaling(rows: list[dict], ref: list[dict], label: str) -> tuple[list[str], list[dict]]:
    """Each arm's figure over the one-GPU bf16 cell of the same workload and load, measured
    and simulated (shipped): the multi-GPU (or fp8) modelling without the base error."""
    base = {(r["workload"], r["load"]): r for r in ref}
    lines = ["| cell | out tok/s ratio meas. | sim. | mean ITL ratio meas. | sim. | mean TTFT ratio meas. | sim. |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    data = []
    for r in _sorted(rows):
        b = base.get((r["workload"], r["load"]))
        if b is None:
            continue
        d = {"cell": r["cell"]}
        cells = [r["cell"]]
        for m in ("output_throughput", "mean_itl_ms", "mean_ttft_ms"):
            meas = r["measured"][m] / b["measured"][m]
            sim = r[label][m] / b[label][m]
            d[m] = {"measured": meas, "simulated": sim}
            cells += [f"{meas:.3f}", f"{sim:.3f}"]
        data.append(d)
        lines.append("| " + " | ".join(cells) + " |")
    return lines, data


def what_if(x2: Path, fp8: Path, simcheck) -> tuple[list[str], list[dict]]:
    """Diagnostics, not fits: the tp2 cells with another per-call TP all-reduce latency
    (the catalog's H200 NVLink figure is 5 us; 80 calls a step for Qwen3-14B), and the fp8
    cells with another fp8 weight-format factor (cost.WEIGHT_FORMAT_FACTOR, 0.9) and fp8
    tensor rate (catalog 1979 TFLOP/s dense, i.e. 2 x bf16). Patched in this process only
    (`servelab.hardware.catalog.get_gpu`, the factor table); src/ is not changed."""
    import io
    from contextlib import redirect_stdout
    from dataclasses import replace as dc_replace

    import servelab.hardware.catalog as catalog
    import servelab.sim.cost as cost

    orig_get, orig_factor = catalog.get_gpu, cost.WEIGHT_FORMAT_FACTOR["fp8"]

    def patched(lat: float | None, fp8_tflops: float | None):
        def get(name: str):
            g = orig_get(name)
            if lat is not None:
                g = dc_replace(g, interconnect=dc_replace(g.interconnect, allreduce_latency_us=lat))
            if fp8_tflops is not None:
                g = dc_replace(g, dense_fp8_tflops=fp8_tflops)
            return g
        return get

    cases = [("tp2", x2, f"all-reduce latency {lat:g} us/call", lat, None, None)
             for lat in (5.0, 10.0, 15.0, 20.0)]
    cases += [("fp8", fp8, f"fp8 factor {fac:g}, fp8 rate {tf or 1979:g} TFLOP/s", None, tf, fac)
              for fac, tf in ((0.9, None), (0.9, 989.5), (0.8, 1250.0), (0.75, 1250.0))]
    out, lines = [], ["| arm | variant | cells | out tok/s MAE | mean TTFT MAE | mean ITL MAE | out tok/s err per cell | mean ITL err per cell |",
                      "|---|---|---:|---:|---:|---:|---|---|"]
    try:
        for arm, run, name, lat, tf, fac in cases:
            catalog.get_gpu = patched(lat, tf)
            cost.WEIGHT_FORMAT_FACTOR["fp8"] = fac if fac is not None else orig_factor
            with redirect_stdout(io.StringIO()):
                rows = check_run(run, (arm,), {"shipped": None}, simcheck)
            rows = _sorted(rows)
            errs = {m: [err(r, "shipped", m) for r in rows] for m, _, _ in SHOW}
            out.append({"arm": arm, "variant": name, "cells": [r["cell"] for r in rows],
                        "error_pct": errs})
            lines.append(f"| {arm} | {name} | {len(rows)} | " + " | ".join(
                _mae(rows, "shipped", m) for m, _, _ in SHOW) + " | " + " ".join(
                f"{e:+.1f}" for e in errs["output_throughput"]) + " | " + " ".join(
                f"{e:+.1f}" for e in errs["mean_itl_ms"]) + " |")
    finally:
        catalog.get_gpu, cost.WEIGHT_FORMAT_FACTOR["fp8"] = orig_get, orig_factor
    lines += ["", "Cells per row in the order " + ", ".join(out[0]["cells"]) + " (tp2) and "
              + ", ".join(out[-1]["cells"]) + " (fp8)."]
    return lines, out


def write_tables(rows: list[dict], ref: list[dict], out: Path,
                 whatif_lines: list[str] | None = None) -> dict:
    x2 = [r for r in rows if r["arm"] in X2_ARMS]
    fp8 = [r for r in rows if r["arm"] == "fp8"]
    groups = {a: (lambda r, a=a: r["arm"] == a) for a in X2_ARMS}
    groups["replicas (3 arms)"] = lambda r: r["arm"].startswith("replicas2")
    groups["all x2"] = lambda r: True
    direct = [r for r in x2 if r["arm"] == "replicas2-direct"]
    rank_lines, rank = ranking(x2, ("shipped", "bf16cal"))
    scale_lines, scale = scaling(rows, ref, "shipped")
    md = ["# Simulator vs the two-H200 run (and one-GPU fp8), no fitting",
          "",
          "Generated by `simcheck_x2.py` (see its docstring). Error = (sim - measured) / measured, %.",
          "shipped = the tree's H200 defaults (joint one-GPU bf16+AWQ fit); bf16cal = "
          "docs/validation/h200-2026-11-29/sim/after/cal-bf16.json. Every cell's simulated "
          "prompt tokens equal the measured total_input_tokens unless marked.",
          "", "## Two-GPU cells (30)", ""] + cell_table(x2, ("shipped", "bf16cal")) + [
          "", "## Mean absolute error (%) per arm", ""] + mae_table(x2, ("shipped", "bf16cal"), groups) + [
          "", "replicas2-direct simulated as round robin behind the router instead of the "
          "client's split (what `arm_options` does for `routing: direct`):", ""] + mae_table(
          [{**r, "shipped": r["shipped:direct_as_rr"], "bf16cal": r["bf16cal:direct_as_rr"]}
           for r in direct], ("shipped", "bf16cal"), {"replicas2-direct as rr": lambda r: True}) + [
          "", "## One-GPU fp8 cells (9), shipped defaults (fp8 never calibrated)", ""] + cell_table(
          fp8, ("shipped",)) + ["", ""] + mae_table(fp8, ("shipped",), {
              "fp8 all": lambda r: True,
              **{f"fp8 {w}": (lambda r, w=w: r["workload"] == w) for w in ("sharegpt", "prefix", "random")}}) + [
          "", "## Ranking of the arms by output throughput", ""] + rank_lines + [
          "", "## Scaling over one GPU bf16 (same seeds and prompts; docs/validation/h200-2026-11-29/results, "
          "re-simulated with the copied warm-ups it was measured with), shipped defaults", ""] + scale_lines + [""]
    if whatif_lines:
        md += ["## What-if (diagnostic, shipped defaults otherwise; not a fit, src/ unchanged)", ""] + whatif_lines + [""]
    (out / "table.md").write_text("\n".join(md))
    return {"ranking": rank, "scaling": scale}


def main() -> None:
    x2, fp8, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    simcheck = _load_simcheck()
    cals = {"shipped": None, "bf16cal": Calibration.load(BF16_CAL)}
    rows = check_run(x2, X2_ARMS, cals, simcheck)
    rows += check_run(fp8, ("fp8",), {"shipped": None}, simcheck)
    ref = one_gpu_reference(simcheck, cals)
    wi_lines, wi = what_if(x2, fp8, simcheck) if "--no-what-if" not in sys.argv[4:] else ([], [])
    extra = write_tables(rows, ref, out, wi_lines)
    (out / "simcheck_x2.json").write_text(json.dumps(
        {"cells": rows, "one_gpu_bf16_reference": ref, **extra, "what_if": wi}, indent=1) + "\n")


if __name__ == "__main__":
    main()
