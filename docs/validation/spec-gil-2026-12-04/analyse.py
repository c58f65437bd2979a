"""Step times of the served engine per load and switch interval (issue 17, 2026-12-04).

    python3 analyse.py RESULTS_DIR    (the device's /tmp/grun, or results/ here)

For every bench of device.sh: its window (from the result's start and duration and
device.log's order), the engine core's steps inside it (intervals between `schedule()`
starts, from `sch` records), by number of running sequences, the median step, and the
engine-core threads' CPU over the window (from `cpu` records).
"""
import json
import statistics
import sys
from pathlib import Path


def records(hook: Path):
    out = {}
    for f in sorted(hook.glob("*.jsonl")):
        recs = []
        for line in f.read_text().splitlines():
            try:
                recs.append(json.loads(line))
            except ValueError:
                pass
        out[f.stem] = recs
    return out


BENCHES = [(256, 5.0), (256, 0.5), (128, 5.0), (128, 0.5), (256, 5.0)]  # device.sh's order


def main(root: Path) -> None:
    for arm in ("ngram-k4", "nospec"):
        hook = root / f"hook-{arm}"
        if not hook.is_dir():
            continue
        core = [(pid, recs) for pid, recs in records(hook).items() if any(r[0] == "sch" for r in recs)]
        pid, recs = core[0]
        sch = [r for r in recs if r[0] == "sch"]
        cpu = [r for r in recs if r[0] == "cpu"]
        # every bench sets another switch interval than the one before it (BENCHES), so the
        # engine core's `swi` records after its start-up one open the benches' windows
        sw = [r for r in recs if r[0] == "swi"]
        edges = [sch[0][1] - 1.0] + [r[1] for r in sw[1:]] + [sch[-1][1] + 1.0]
        # the first window also holds start-up's warm-up steps: the first bench starts
        # after the last idle gap of more than 5 s before the second setting
        gaps = [b[1] for a, b in zip(sch, sch[1:]) if b[1] - a[1] > 5.0 and b[1] < edges[1]]
        if gaps:
            edges[0] = gaps[-1] - 1e-6
        print(f"## {arm} (engine core pid {pid})")
        print("| bench | switch ms | steps | median step ms (steps), B 1-64 | B 65-128 | B 129-192 | B 193-256 | engine-core threads' CPU s over the window |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        for i, ((conc, swms), t0, t1) in enumerate(zip(BENCHES, edges, edges[1:])):
            steps = [(b[1] - a[1], a[4]) for a, b in zip(sch, sch[1:])
                     if t0 <= a[1] < t1 and b[1] - a[1] < 0.5 and a[4] > 0]
            cols = []
            for lo, hi in ((1, 64), (65, 128), (129, 192), (193, 256)):
                d = [dt for dt, b in steps if lo <= b <= hi]
                cols.append(f"{statistics.median(d) * 1e3:.2f} ({len(d)})" if len(d) >= 5 else "-")
            inside = [c for c in cpu if t0 <= c[1] <= t1]
            cpu_txt = "-"
            if len(inside) >= 2:
                a, b = inside[0][2], inside[-1][2]
                per = {k.split(":")[0]: b[k] - a.get(k, 0.0) for k in b}
                cpu_txt = ", ".join(f"{k} {v:.2f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:3]) \
                    + f" (over {inside[-1][1] - inside[0][1]:.1f} s)"
            print(f"| {i + 1}: c{conc} | {swms:.1f} | {len(steps)} | " + " | ".join(cols) + f" | {cpu_txt} |")
        print()
    print("| result file (the fifth bench's overwrote the first's) | output tok/s | mean TPOT ms | mean TTFT ms |")
    print("|---|---:|---:|---:|")
    for f in sorted((root / "cells").glob("*.json")):
        m = json.loads(f.read_text())
        print(f"| {f.name} | {m['output_throughput']:,.0f} | {m['mean_tpot_ms']:.2f} | {m['mean_ttft_ms']:.1f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
