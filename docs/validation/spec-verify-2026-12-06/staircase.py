"""Diagnostic kernel profiles with the GEMM staircase between the shipped grid's M points
(issue 17, 2026-12-06). Not shipped: they show what the measured staircase does to the
simulation before the profiles are measured again on the finer grid.

    .venv/bin/python docs/validation/spec-verify-2026-12-06/staircase.py OUT_DIR H100_PROFILE

Writes OUT_DIR/h200.json: this run's H200 profile (results/profile.json) plus every bf16 GEMM
point measured here that it lacks (results/kernels.jsonl: Qwen3-14B's four layer shapes at
M = 320, 448, 640), all measured on the same H200.

And OUT_DIR/h100-sxm.json: H100_PROFILE (the H100 profile shipped on 2026-12-06, which
../sim-grid-2026-12-07 replaced: `git show 3fec5cc:src/servelab/data/profiles/h100-sxm.json`) plus the H200 points of kernels.py it
lacks, each scaled by the H100's time over the H200's at the two shipped grid points around
it (geometric mean). An ESTIMATE: no H100 was lent to measure them. The two GPUs are the same
GH100 chip (132 SMs) with other memory: on these shapes the H100 takes x1.26-1.46 the H200's
time at M = 128, x1.14-1.19 at 256 and x1.00-1.13 from 512 on.
"""

from __future__ import annotations

import json
import math
import sys
from bisect import bisect_left
from pathlib import Path

HERE = Path(__file__).resolve().parent
R = HERE / "results"


def _bf16(profile: dict) -> dict[tuple[int, int, int], float]:
    return {(p["m"], p["n"], p["k"]): p["time_us"] for p in profile["gemm"] if p["family"] == "bf16"}


def measured_points() -> dict[tuple[int, int, int], float]:
    """bf16 GEMM points measured on this run's H200 outside its profile."""
    got: dict[tuple[int, int, int], float] = {}
    for line in (R / "kernels.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["kind"] == "gemm":
            got[(r["m"], r["n"], r["k"])] = r["time_us"]
    return got


def main() -> None:
    out, h100_path = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    h200 = json.loads((R / "profile.json").read_text())
    h100 = json.loads(h100_path.read_text())
    points = measured_points()
    t200, t100 = _bf16(h200), _bf16(h100)
    shapes = {(n, k) for _, n, k in t200}
    extra200, extra100 = [], []
    for (m, n, k), us in sorted(points.items()):
        if (n, k) not in shapes:
            continue  # a shape the profile does not have (the 5,120-wide LM head)
        if (m, n, k) not in t200:
            extra200.append({"family": "bf16", "m": m, "n": n, "k": k, "time_us": us})
        if (m, n, k) not in t100:
            grid = sorted(mm for mm, nn, kk in t100 if (nn, kk) == (n, k))
            i = bisect_left(grid, m)
            lo, hi = grid[max(i - 1, 0)], grid[min(i, len(grid) - 1)]
            ratio = math.sqrt(t100[(lo, n, k)] / t200[(lo, n, k)] * t100[(hi, n, k)] / t200[(hi, n, k)])
            extra100.append({"family": "bf16", "m": m, "n": n, "k": k, "time_us": us * ratio})
    h200["gemm"] += extra200
    h100["gemm"] += extra100
    (out / "h200.json").write_text(json.dumps(h200, indent=1) + "\n")
    (out / "h100-sxm.json").write_text(json.dumps(h100, indent=1) + "\n")
    print(f"h200.json: +{len(extra200)} bf16 points; h100-sxm.json: +{len(extra100)} (estimated)")


if __name__ == "__main__":
    main()
