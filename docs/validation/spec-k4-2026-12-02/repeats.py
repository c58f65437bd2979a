"""The run-to-run spread of the n-gram K = 4 cells, the simulator's error against it, and the
speed-up over `nospec` (issue 17); adapted from ../spec-repeats-2026-12-02/repeats.py.

    PYTHONPATH=/tmp/wt-k4/src .venv/bin/python docs/validation/spec-decode-2026-12-01/simcheck.py docs/validation/spec-k4-2026-12-02/results/exp --spec-fit-arm none --out docs/validation/spec-k4-2026-12-02
    .venv/bin/python docs/validation/spec-k4-2026-12-02/repeats.py > docs/validation/spec-k4-2026-12-02/repeats.md

Reads this run's simcheck.json (every cell re-simulated with the acceptance it measured, the
shipped H200 figures, nothing fitted). For each arm, workload and load: the draws of this run
(`sharegpt` and `prefix` under ../spec-decode-2026-12-01's names, so its seeds; `-b` and `-c`
other prompts from the same distribution; `nospec` ran the first draws only), their spread,
the simulator's error on each and on their mean. The first run had no K = 4 cells (its
ngram-k4 arm was skipped), so there is no first-run column. Then the speed-up of ngram-k4 over
nospec per load, measured and simulated, on the first draw (the same prompts for both arms)
and on the mean of the three K = 4 draws.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
METRICS = (("output_throughput", "output tok/s"), ("mean_tpot_ms", "mean TPOT ms"))
SPEC, BASE = "ngram-k4", "nospec"


def _family(workload: str) -> str:
    return workload.removesuffix("-b").removesuffix("-c")


def _load_key(load: str) -> int:
    return int(load.lstrip("c"))


def main() -> None:
    cells = json.loads((HERE / "simcheck.json").read_text())["cells"]
    groups: dict[tuple[str, str, str], dict[str, dict]] = {}
    for name, m in cells.items():
        arm, workload, load = name.split("/")
        groups.setdefault((arm, _family(workload), load), {})[workload] = m
    order = sorted(groups, key=lambda k: (k[0], k[1], _load_key(k[2])))
    out = ["# n-gram K = 4: run-to-run spread, the simulator's error, speed-up over nospec (issue 17)", ""]
    totals: dict[str, list[float]] = {}
    for metric, label in METRICS:
        out += [f"## {label}", "",
                "| arm / workload / load | this run: first, -b, -c meas | spread % | "
                "sim err % per draw | sim err % on their mean |",
                "|---|---|---:|---|---:|"]
        for key in order:
            arm, fam, load = key
            draws = groups[key]
            names = [fam, f"{fam}-b", f"{fam}-c"]
            present = [draws[n][metric] for n in names if n in draws and metric in draws[n]]
            if not present:
                continue
            meas = [d["measured"] for d in present]
            sims = [d["simulated"] for d in present]
            errs = [d["error_pct"] for d in present]
            mean_meas = sum(meas) / len(meas)
            mean_err = 100.0 * (sum(sims) / len(sims) - mean_meas) / mean_meas
            spread = f"{100.0 * (max(meas) / min(meas) - 1):.1f}" if len(meas) > 1 else "-"
            out.append(f"| {arm}/{fam}/{load} | {', '.join(f'{v:,.2f}' for v in meas)} | "
                       f"{spread} | {', '.join(f'{e:+.1f}' for e in errs)} | "
                       f"{mean_err:+.1f} |")
            totals.setdefault(f"{arm} {label}: per draw", []).extend(abs(e) for e in errs)
            if len(meas) > 1:
                totals.setdefault(f"{arm} {label}: mean of draws", []).append(abs(mean_err))
        out.append("")
    out += ["## Summary", "", "| set | n | mean abs error % | max % | within 15 % |", "|---|---:|---:|---:|---:|"]
    for key, errs in sorted(totals.items()):
        out.append(f"| {key} | {len(errs)} | {sum(errs) / len(errs):.1f} | {max(errs):.1f} | "
                   f"{sum(e <= 15 for e in errs)}/{len(errs)} |")
    out += ["", f"## Speed-up of {SPEC} over {BASE} (output tok/s)", "",
            f"First draw: the same prompts for both arms. Mean of draws: the mean of {SPEC}'s three "
            f"draws over {BASE}'s one. Simulated: the simulator's cell over its {BASE} cell.", "",
            "| workload / load | measured, first draw | simulated, first draw | measured, mean of draws | "
            "simulated, mean of draws |", "|---|---:|---:|---:|---:|"]
    for key in order:
        arm, fam, load = key
        if arm != SPEC or (BASE, fam, load) not in groups:
            continue
        base = groups[(BASE, fam, load)][fam]["output_throughput"]
        spec = groups[key]
        first = spec[fam]["output_throughput"]
        allm = [spec[n]["output_throughput"] for n in (fam, f"{fam}-b", f"{fam}-c") if n in spec]
        mm = sum(d["measured"] for d in allm) / len(allm)
        ms = sum(d["simulated"] for d in allm) / len(allm)
        out.append(f"| {fam}/{load} | x{first['measured'] / base['measured']:.2f} | "
                   f"x{first['simulated'] / base['simulated']:.2f} | x{mm / base['measured']:.2f} | "
                   f"x{ms / base['simulated']:.2f} |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
