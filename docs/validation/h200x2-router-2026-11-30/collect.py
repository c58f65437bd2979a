"""Collect the router run into this folder and tabulate it against the simulator's twin.

    .venv/bin/python docs/validation/h200x2-router-2026-11-30/collect.py RUN_DIR SIM_DIR OUT_DIR

RUN_DIR is the device's /tmp/rrun (experiments `router` = examples/h200x2-router.yaml and
`hot` = the same spec with arms rr and cache, workload hot_prefix: 2 prefixes, c16 and c64);
SIM_DIR the offline simulation of the same spec (`engine: sim`, same seed and loads, the
simulator's shipped H200 defaults: nothing fitted on this run). Writes OUT_DIR/results/
(cells without per-request lists, arm status, router logs, replica logs without access
lines), OUT_DIR/table.md and OUT_DIR/table.json: per cell output tok/s, mean and p99 TTFT,
prefix-cache hit rate (hits / queries over both replicas' /metrics counters), hotspot
factor (2 x the larger replica's share of prompt tokens), preemptions, and the simulated
output tok/s and ratio to round robin.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "errors", "generated_texts")
PER_REQUEST_SL = ("sched_lags_ms", "slot_waits_ms", "error_kinds")
ACCESS = ("POST /v1", "GET /metrics", "GET /health", "GET /v1/models")


def strip(cell: dict) -> dict:
    res = cell["result"]
    gone = [k for k in PER_REQUEST if res.pop(k, None) is not None]
    gone += [k for k in PER_REQUEST_SL if res["servelab"].pop(k, None) is not None]
    cell["stripped"] = gone
    return cell


def row(cell: dict) -> dict:
    r, sv = cell["result"], cell["servers"]
    q = [s["series"]["prefix_cache_queries_total"] for s in sv]
    h = [s["series"]["prefix_cache_hits_total"] for s in sv]
    queries = sum(x[-1] - x[0] for x in q)
    hits = sum(x[-1] - x[0] for x in h)
    tokens = [s["prompt_tokens_delta"] for s in sv]
    return {"out_tok_s": r["output_throughput"], "ttft_mean_ms": r["mean_ttft_ms"],
            "ttft_p99_ms": r["p99_ttft_ms"], "hit": hits / queries,
            "hotspot": len(tokens) * max(tokens) / sum(tokens),
            "preemptions": sum(s["preemptions_delta"] for s in sv)}


def collect(run: Path, sim: Path, out: Path) -> dict:
    table: dict = {}
    for exp in ("router", "hot"):
        for f in sorted((run / exp / "cells").glob("*/*/*.json")):
            cell = json.loads(f.read_text())
            arm, wl, load = cell["cell"]["arm"], cell["cell"]["workload"], cell["cell"]["load"]
            entry = row(cell)
            twin = sim / "cells" / arm / wl / f.name
            if twin.exists():
                entry["sim_out_tok_s"] = json.loads(twin.read_text())["result"]["output_throughput"]
            table.setdefault(wl, {}).setdefault(load, {})[arm] = entry
            dest = out / "results" / exp / "cells" / arm / wl / f.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(json.dumps(strip(cell), indent=1))
        for status in (run / exp / "arms").glob("*/status.json"):
            dest = out / "results" / exp / "arms" / status.parent.name
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy(status, dest / "status.json")
            for log in (status.parent / "logs").glob("*.log"):
                lines = log.read_text(errors="replace").splitlines(keepends=True)
                keep = [ln for ln in lines if not any(a in ln for a in ACCESS)]
                name = log.name if log.name.endswith("router.log") else log.stem + ".excerpt.log"
                (dest / name).write_text("".join(keep))
        shutil.copy(run / exp / "manifest.json", out / "results" / exp / "manifest.json")
    for name in ("device.log", "probe.txt", "probe.json", "nvidia-smi-topo.txt", "hot.yaml"):
        shutil.copy(run / name, out / "results" / name)
    return table


def markdown(table: dict) -> str:
    out = ["| workload | load | arm | out tok/s | x rr | sim x rr | TTFT mean ms | TTFT p99 ms "
           "| hit % | hotspot | preemptions |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for wl, loads in table.items():
        for load in sorted(loads, key=lambda c: int(c[1:])):
            arms = loads[load]
            rr = arms["rr"]
            for arm, e in arms.items():
                sim = (f"{e['sim_out_tok_s'] / rr['sim_out_tok_s']:.2f}"
                       if "sim_out_tok_s" in e and "sim_out_tok_s" in rr else "-")
                out.append(f"| {wl} | {load} | {arm} | {e['out_tok_s']:,.0f} | "
                           f"{e['out_tok_s'] / rr['out_tok_s']:.2f} | {sim} | {e['ttft_mean_ms']:.0f} | "
                           f"{e['ttft_p99_ms']:.0f} | {100 * e['hit']:.1f} | {e['hotspot']:.3f} | "
                           f"{e['preemptions']:.0f} |")
    return "\n".join(out) + "\n"


def main() -> None:
    run, sim, out = (Path(a) for a in sys.argv[1:4])
    table = collect(run, sim, out)
    (out / "table.json").write_text(json.dumps(table, indent=1))
    (out / "table.md").write_text(markdown(table))
    print(markdown(table))


if __name__ == "__main__":
    main()
