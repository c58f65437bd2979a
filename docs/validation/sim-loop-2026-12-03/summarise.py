"""Prefill-heavy closed loops measured several times (issue 14, 2026-12-03, second run): each
cell's runs beside the earlier days' runs of the same cell and the simulator's prediction,
and the API server's event-loop time per request, per completion and per output, from the
hook's loop probe (hook/sitecustomize.py: the loop thread's CPU time every millisecond).

    .venv/bin/python docs/validation/sim-loop-2026-12-03/summarise.py > docs/validation/sim-loop-2026-12-03/summary.md

Needs the kit's payload linked as the device's paths (/tmp/gpu-x/payload: the Qwen tokenizer
the cells were drawn with), as ../sim-transfer-2026-12-01 does.
"""

from __future__ import annotations

import json
import lzma
import re
from pathlib import Path

import numpy as np

from servelab.plan import EngineArgs
from servelab.sim.cost import default_calibration
from servelab.sim.offline import prepare_workload, simulate_prepared
from servelab.sim.setup import SimOptions
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DatasetOptions

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PAYLOAD = Path("/tmp/gpu-x/payload")
MODELS = ("olmoe-1b-7b", "gemma-3-12b", "mistral-7b", "qwen3-30b-a3b", "qwen3-4b", "llama-3.1-8b")
# The same cells measured on earlier days (seed 102 at c32, 103 at c64).
EARLIER = {
    "sim-transfer-2026-12-01": (HERE.parent / "sim-transfer-2026-12-01" / "results", ("rnd_c32", "rnd_c64")),
    "sim-frontend-2026-12-01": (HERE.parent / "sim-frontend-2026-12-01" / "results", ("rnd_c32", "rnd_c64")),
    "sim-waves-2026-12-03": (HERE.parent / "sim-waves-2026-12-03" / "results", ("rnd_c32", "rnd_c64", "rnd_c64_c")),
}
_CELL = re.compile(r"rnd_c(\d+)_(r\d|s\d+)\.json$")


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def _runs(model: str) -> list[dict]:
    """Every measured run of `model`'s prefill-heavy cells, in the order they ran."""
    out = []
    for d in sorted(RESULTS.glob(f"{model}*")):
        prev = None
        order = [line.split()[0] for line in (d / "cells.txt").read_text().splitlines() if line.endswith(tuple("0123456789")) and " start " in line]
        for name in order:
            f = d / f"{name}.json"
            metrics = (d / f"{name}.metrics.txt").read_text()
            hits, queries = (_metric(metrics, "vllm:prefix_cache_hits_total"),
                             _metric(metrics, "vllm:prefix_cache_queries_total"))
            m = _CELL.search(f.name)
            if m is not None:
                res = json.loads(f.read_text())
                dh, dq = (hits - prev[0], queries - prev[1]) if prev else (hits, queries)
                out.append(dict(dir=d.name, name=name, conc=int(m.group(1)), seed=int(res["servelab"]["seed"]),
                                ttft=res["mean_ttft_ms"], tpot=res["mean_tpot_ms"], tput=res["output_throughput"],
                                cached=dh / dq if dq else 0.0, n=int(res["num_prompts"])))
            prev = (hits, queries)
    return out


def _earlier(model: str, conc: int) -> list[tuple[str, float]]:
    seen = []
    for name, (root, cells) in EARLIER.items():
        for cell in cells:
            f = root / model / f"{cell}.json"
            if f.exists():
                res = json.loads(f.read_text())
                if int(res["max_concurrency"]) == conc:
                    seen.append((f"{name} {cell}", res["mean_ttft_ms"]))
    return seen


def _simulated(model: str, conc: int, n: int, seed: int) -> tuple[float, float, float]:
    cfg = next(RESULTS.glob(f"{model}*/config.json"))
    opts = SimOptions(str(cfg), "H200", None, EngineArgs(), calibration=default_calibration("H200"))
    ds = DatasetOptions(dataset_name="random", num_prompts=n, random_input_len=1024, random_output_len=128,
                        tokenizer=str(PAYLOAD / "qwen3-14b"))
    wl = prepare_workload(ds, seed, ArrivalOptions())
    run, *_ = simulate_prepared(opts, wl, seed, conc, 0)
    recs = [r for r in run.records if not r.warmup]
    ttft = float(np.mean([r.ttft_ms for r in recs]))
    tpot = float(np.mean([(r.e2el_ms - r.ttft_ms) / (r.output_len - 1) for r in recs]))
    return ttft, tpot, sum(r.output_len for r in recs) / run.duration_s


def cell_lines() -> list[str]:
    out = ["## Mean TTFT of every run (ms), beside the simulator", "",
           "Runs served mostly from vLLM's prefix cache (a repeated seed) are marked and left out of the means.", "",
           "| model | cell | runs today (seed: TTFT ms) | earlier days | mean of clean runs (n) | spread (min-max) | sim | sim vs mean | TPOT meas / sim | tok/s meas / sim |",
           "|---|---|---|---|---:|---|---:|---:|---|---|"]
    for model in MODELS:
        runs = _runs(model)
        for conc in (32, 64):
            rs = [r for r in runs if r["conc"] == conc]
            if not rs:
                continue
            clean = [r for r in rs if r["cached"] < 0.5]
            earlier = _earlier(model, conc)
            vals = [r["ttft"] for r in clean] + [v for _, v in earlier]
            mean = float(np.mean(vals))
            sim_ttft, sim_tpot, sim_tput = _simulated(model, conc, rs[0]["n"], rs[0]["seed"])
            today = ", ".join(f"{r['seed']}: {r['ttft']:.1f}" + (" (cached)" if r["cached"] >= 0.5 else "") for r in rs)
            tpot = float(np.mean([r["tpot"] for r in clean])) if clean else float("nan")
            tput = float(np.mean([r["tput"] for r in clean])) if clean else float("nan")
            out.append(f"| {model} | c{conc} | {today} | {', '.join(f'{v:.1f}' for _, v in earlier)} | "
                       f"{mean:.1f} ({len(vals)}) | {min(vals):.1f}-{max(vals):.1f} | {sim_ttft:.1f} | "
                       f"{(sim_ttft / mean - 1) * 100:+.1f} % | {tpot:.2f} / {sim_tpot:.2f} | {tput:,.0f} / {sim_tput:,.0f} |")
    return out


def _loop_fit(d: Path, cell: str, window_s: float = 0.02) -> dict[str, float]:
    """Least squares of the loop thread's CPU per window on the window's counts."""
    span = {}
    for line in (d / "cells.txt").read_text().splitlines():
        name, edge, t = line.split()
        if name == cell:
            span[edge] = float(t)
    lag, ev = [], {k: [] for k in ("srv0", "add", "out1", "gen1")}
    for f in (d / "hook").glob("*.jsonl.xz"):
        for line in lzma.open(f, "rt"):
            r = json.loads(line)
            if r[0] == "lag":
                lag += r[1]
            elif r[0] in ev:
                ev[r[0]].append(r)
    a = np.array(sorted(lag))
    a = a[(a[:, 0] >= span["start"]) & (a[:, 0] <= span["end"])]
    edges = np.arange(a[0, 0], a[-1, 0], window_s)
    busy = np.diff(np.interp(edges, a[:, 0], a[:, 1]))

    def hist(ts: list[float], w: list[float] | None = None) -> np.ndarray:
        return np.histogram(np.asarray(ts), bins=edges, weights=w)[0]
    x = np.column_stack([np.ones(len(busy)), hist([r[1] for r in ev["srv0"]]), hist([r[1] for r in ev["add"]]),
                         hist([r[1] for r in ev["gen1"]]), hist([r[1] for r in ev["out1"]]),
                         hist([r[1] for r in ev["out1"]], [r[3] for r in ev["out1"]])])
    coef, *_ = np.linalg.lstsq(x, busy, rcond=None)
    pred = x @ coef
    r2 = 1 - ((busy - pred) ** 2).sum() / ((busy - busy.mean()) ** 2).sum()
    names = ("base_per_window", "intake", "hand_off", "completion", "step_outputs", "per_output")
    return {**{n: float(c) * 1e6 for n, c in zip(names, coef)}, "r2": float(r2),
            "busy_frac": float(busy.sum() / (edges[-1] - edges[0]))}


def loop_lines() -> list[str]:
    out = ["", "## The API server's event loop (us of loop-thread CPU, least squares over 20 ms windows)", "",
           "| model | cell | busy | intake (handler entry) | hand-off (to the engine) | completion (stream end) | per step's outputs | per output | base per window | r2 |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for model in MODELS:
        for d in sorted(RESULTS.glob(f"{model}*")):
            for f in sorted(d.glob("rnd_c*.json"), key=lambda f: f.stat().st_mtime):
                cell = f.stem
                fit = _loop_fit(d, cell)
                out.append(f"| {d.name} | {cell} | {fit['busy_frac'] * 100:.0f} % | {fit['intake']:.0f} | {fit['hand_off']:.0f} | "
                           f"{fit['completion']:.0f} | {fit['step_outputs']:.0f} | {fit['per_output']:.1f} | "
                           f"{fit['base_per_window']:.0f} | {fit['r2']:.2f} |")
    return out


def main() -> None:
    print("# Prefill-heavy closed loops, measured several times (summarise.py)\n")
    print("\n".join(cell_lines() + loop_lines()))


if __name__ == "__main__":
    main()
