"""The report's payoff against the measured speed-up (issue 17, 2026-12-07).

    .venv/bin/python docs/validation/sim-grid-2026-12-07/payoff.py EXPERIMENT HOST.json [PROFILE.json] > OUT.md

Builds the report of EXPERIMENT with the host figures HOST.json (`build_report`, as
`servelab report EXPERIMENT --calibration HOST.json [--profile PROFILE.json]` does: without
PROFILE, the shipped kernel profile of the experiment's GPU; nothing is written), then reads its payoff tables ("where ARM pays":
simulated and measured speed-up per load) and prints the simulated speed-up's error against
the measured one, mean / max absolute per arm and over all rows, and the report's advice
lines (advised K, the decode batch where the simulation has the arm stop paying, and whether
the measured cells agree).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from servelab.report.build import build_report
from servelab.report.tables import Table

_ARM = re.compile(r"^\S+: where (\S+) pays")
_ADVICE = re.compile(r"^\S+ on \S+: ")


def payoff_rows(tables: tuple[Table, ...]) -> list[tuple[str, str, float, float]]:
    """(arm, load, simulated, measured speed-up) for every payoff row with a measured cell."""
    rows = []
    for t in tables:
        m = _ARM.match(t.title)
        if m is None:
            continue
        sim_col, meas_col = t.headers.index("sim speed-up"), t.headers.index("measured speed-up")
        for r in t.rows:
            if r[meas_col].startswith("x"):
                rows.append((m.group(1), r[0], float(r[sim_col][1:]), float(r[meas_col][1:])))
    return rows


def main() -> None:
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    exp, cal = Path(sys.argv[1]), Path(sys.argv[2])
    profile = Path(sys.argv[3]) if len(sys.argv) == 4 else None
    report = build_report(exp, plots=False, calibration=cal, profile=profile)
    rows = payoff_rows(report.tables)
    if not rows:
        raise SystemExit(f"{exp}: the report has no payoff rows with a measured speed-up")
    flags = f"--calibration {cal}" + (f" --profile {profile}" if profile else "")
    out = [f"Payoff of `servelab report {exp} {flags}`: simulated speed-up over the "
           "measured one, absolute error.", "", "| arm | rows | mean % | max % |", "|---|---:|---:|---:|"]
    for arm in sorted({r[0] for r in rows}):
        err = [abs(s / m - 1) * 100 for a, _, s, m in rows if a == arm]
        out.append(f"| {arm} | {len(err)} | {sum(err) / len(err):.1f} | {max(err):.1f} |")
    err = [abs(s / m - 1) * 100 for _, _, s, m in rows]
    out += [f"| all | {len(err)} | {sum(err) / len(err):.1f} | {max(err):.1f} |", "", "Advice lines:", ""]
    # each arm's advice ("ARM on WORKLOAD: ..."), not the line naming the calibration
    out += [f"- {line}" for line in report.speculation if _ADVICE.match(line)]
    print("\n".join(out))


if __name__ == "__main__":
    main()
