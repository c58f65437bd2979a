"""The run-to-run spread of the speculative cells and the simulator's error against it.

    .venv/bin/python docs/validation/spec-decode-2026-12-01/simcheck.py docs/validation/spec-repeats-2026-12-02/results/exp --spec-fit-arm none --out docs/validation/spec-repeats-2026-12-02
    .venv/bin/python docs/validation/spec-repeats-2026-12-02/repeats.py > docs/validation/spec-repeats-2026-12-02/repeats.md

Reads this run's simcheck.json (every cell re-simulated with the acceptance it measured, the
shipped H200 figures, nothing fitted) and the first run's (../spec-decode-2026-12-01). For each
arm, workload and load: the three draws of this run (`sharegpt` and `prefix` repeat the first
run's prompts, `-b` and `-c` draw others), their spread, the simulator's error on each, and on
their mean; and the first run's cell beside them.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIRST = HERE.parent / "spec-decode-2026-12-01" / "simcheck.json"
METRICS = (("output_throughput", "output tok/s"), ("mean_tpot_ms", "mean TPOT ms"))


def _family(workload: str) -> str:
    return workload.removesuffix("-b").removesuffix("-c")


def main() -> None:
    cells = json.loads((HERE / "simcheck.json").read_text())["cells"]
    first = json.loads(FIRST.read_text())["cells"]
    groups: dict[tuple[str, str, str], dict[str, dict]] = {}
    for name, m in cells.items():
        arm, workload, load = name.split("/")
        groups.setdefault((arm, _family(workload), load), {})[workload] = m
    out = ["# Run-to-run spread and the simulator's error (issue 17)", ""]
    totals: dict[str, list[float]] = {}
    for metric, label in METRICS:
        out += [f"## {label}", "",
                "| arm / workload / load | first run meas (err %) | this run: repeat, -b, -c meas | spread % | "
                "sim err % per draw | sim err % on their mean |",
                "|---|---:|---|---:|---|---:|"]
        for (arm, fam, load), draws in sorted(groups.items()):
            names = [fam, f"{fam}-b", f"{fam}-c"]
            present = [draws[n][metric] for n in names if n in draws and metric in draws[n]]
            if not present:
                continue
            meas = [d["measured"] for d in present]
            sims = [d["simulated"] for d in present]
            errs = [d["error_pct"] for d in present]
            mean_meas = sum(meas) / len(meas)
            mean_err = 100.0 * (sum(sims) / len(sims) - mean_meas) / mean_meas
            spread = 100.0 * (max(meas) / min(meas) - 1)
            f = first.get(f"{arm}/{fam}/{load}", {}).get(metric)
            first_txt = f"{f['measured']:,.2f} ({f['error_pct']:+.1f})" if f else "-"
            out.append(f"| {arm}/{fam}/{load} | {first_txt} | {', '.join(f'{v:,.2f}' for v in meas)} | "
                       f"{spread:.1f} | {', '.join(f'{e:+.1f}' for e in errs)} | {mean_err:+.1f} |")
            totals.setdefault(f"{arm} {label}: per draw", []).extend(abs(e) for e in errs)
            totals.setdefault(f"{arm} {label}: mean of draws", []).append(abs(mean_err))
        out.append("")
    out += ["## Summary", "", "| set | n | mean abs error % | max % | within 15 % |", "|---|---:|---:|---:|---:|"]
    for key, errs in sorted(totals.items()):
        out.append(f"| {key} | {len(errs)} | {sum(errs) / len(errs):.1f} | {max(errs):.1f} | "
                   f"{sum(e <= 15 for e in errs)}/{len(errs)} |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
