"""The report's payoff against the measured speed-up (issue 17, 2026-12-07).

    .venv/bin/python docs/validation/sim-grid-2026-12-07/payoff.py EXPERIMENT HOST.json > OUT.md

Runs `servelab report` on a copy of EXPERIMENT with the host figures HOST.json (the shipped
kernel profile of the experiment's GPU), then reads its payoff tables ("where ARM pays":
simulated and measured speed-up per load) and prints the simulated speed-up's error against
the measured one, mean / max absolute per arm and over all rows, and the report's advice
lines (advised K, the decode batch where the simulation has the arm stop paying, and whether
the measured cells agree).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_ARM = re.compile(r"^### \S+: where (\S+) pays")


def payoff_rows(report: str) -> list[tuple[str, str, float, float]]:
    """(arm, load, simulated, measured speed-up) for every payoff row with a measured cell."""
    rows, arm = [], ""
    for line in report.splitlines():
        m = _ARM.match(line)
        if m:
            arm = m.group(1)
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if arm and len(cells) == 7 and re.fullmatch(r"c\d+", cells[0]) and cells[3].startswith("x"):
            rows.append((arm, cells[0], float(cells[2][1:]), float(cells[3][1:])))
    return rows


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    exp, cal = Path(sys.argv[1]), Path(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "exp"
        shutil.copytree(exp, copy)
        subprocess.run([sys.executable, "-m", "servelab", "report", str(copy), "--calibration", str(cal)],
                       check=True, capture_output=True)
        report = (copy / "report.md").read_text()
    rows = payoff_rows(report)
    if not rows:
        raise SystemExit(f"{exp}: the report has no payoff rows with a measured speed-up")
    out = [f"Payoff of `servelab report {exp} --calibration {cal}`: simulated speed-up over the "
           "measured one, absolute error.", "", "| arm | rows | mean % | max % |", "|---|---:|---:|---:|"]
    for arm in sorted({r[0] for r in rows}):
        err = [abs(s / m - 1) * 100 for a, _, s, m in rows if a == arm]
        out.append(f"| {arm} | {len(err)} | {sum(err) / len(err):.1f} | {max(err):.1f} |")
    err = [abs(s / m - 1) * 100 for _, _, s, m in rows]
    out += [f"| all | {len(err)} | {sum(err) / len(err):.1f} | {max(err):.1f} |", "", "Advice lines:", ""]
    out += [line for line in report.splitlines() if re.match(r"^- \S+ on \S+: measured acceptance", line)]
    print("\n".join(out))


if __name__ == "__main__":
    main()
