"""Markdown tables of simcheck.json: per-cell error (%) and mean absolute error per role.

    .venv/bin/python docs/validation/h200-2026-11-29/simtable.py OUT_DIR/simcheck.json [...]
Several files (e.g. before/after a cost-model change) give one column pair per file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

METRICS = (("output_throughput", "out tok/s"), ("mean_ttft_ms", "mean TTFT"),
           ("mean_itl_ms", "mean ITL"))


def err(row: dict, label: str, metric: str) -> float | None:
    meas = row["measured"][metric]
    sim = row.get(label, {}).get(metric)
    if not meas or sim is None or row["failed"] and not row["measured"]["output_throughput"]:
        return None
    return 100.0 * (sim - meas) / meas


def main() -> None:
    files = [Path(p) for p in sys.argv[1:]]
    runs = [json.loads(f.read_text()) for f in files]
    labels = [(i, lab) for i in range(len(runs)) for lab in ("uncalibrated", "calibrated")]
    head = "| cell | role | " + " | ".join(
        f"{name} {lab[:5]}.{'' if len(runs) == 1 else f' ({files[i].parent.name})'}"
        for _, name in METRICS for i, lab in labels) + " |"
    print(head)
    print("|---|---|" + "---:|" * (len(METRICS) * len(labels)))
    for k, row in enumerate(runs[0]):
        cells = []
        for metric, _ in METRICS:
            for i, lab in labels:
                e = err(runs[i][k], lab, metric)
                cells.append("-" if e is None else f"{e:+.1f}")
        inp = row["input_tokens"]
        note = "" if inp["measured"] == inp["simulated"] else f" (input tokens {inp['measured']}/{inp['simulated']})"
        print(f"| {row['cell']}{note} | {row['role']} | " + " | ".join(cells) + " |")
    print()
    print("| set | cells | " + " | ".join(
        f"{name} {lab[:5]}.{'' if len(runs) == 1 else f' ({files[i].parent.name})'}"
        for _, name in METRICS for i, lab in labels) + " |")
    print("|---|---:|" + "---:|" * (len(METRICS) * len(labels)))
    groups = {
        "fit (bf16+awq c1, c32)": lambda r: r["role"] == "fit",
        "held out, bf16+awq (c10, c64)": lambda r: r["role"] != "fit" and not r["cell"].startswith("awq-overtuned"),
        "held out, awq-overtuned": lambda r: r["cell"].startswith("awq-overtuned"),
        "held out, all": lambda r: r["role"] != "fit",
    }
    for gname, pred in groups.items():
        vals = []
        n = 0
        for metric, _ in METRICS:
            for i, lab in labels:
                es = [abs(e) for r in runs[i] if pred(r) and (e := err(r, lab, metric)) is not None]
                n = len(es)
                vals.append(f"{sum(es) / len(es):.1f}" if es else "-")
        print(f"| {gname} | {n} | " + " | ".join(vals) + " |")


if __name__ == "__main__":
    main()
