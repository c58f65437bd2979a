"""The verification step per cell, measured and simulated (issue 17, 2026-12-06).

A speculative cell's mean TPOT times its tokens per verification (vLLM's acceptance length,
1 + accepted / drafts) is its mean step, the same measure on both sides; the difference is
the time a step lacks in the simulation. Beside it, the cell's mean running batch (scraped)
and the tokens a step verifies (batch x (1 + draft tokens per draft)). Reads `check.py`'s
check.json (default host/check.json) and the cells of results/exp; writes steps.md.

    .venv/bin/python docs/validation/spec-lowacc-2026-12-06/steps.py [CHECK_JSON]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from servelab.storage import write_atomic

HERE = Path(__file__).resolve().parent


def main() -> None:
    check = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "host" / "check.json"
    cells = json.loads(check.read_text())["cells"]
    rows = ["| cell | running batch | draft tokens / draft | tokens / verification | verified tokens / step "
            "| step ms measured | simulated | lacking ms |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, figs in sorted(cells.items(), key=lambda kv: (kv[0].split("/")[1], kv[0])):
        arm, workload, load = name.split("/")
        record = json.loads((HERE / "results" / "exp" / "cells" / arm / workload / f"{load}.json").read_text())
        server = record["servers"][0]
        spec = server.get("spec_decode")
        if spec is None:
            continue
        length = spec["acceptance_length"]
        per_draft = spec["draft_tokens"] / spec["num_drafts"]
        batch = server["mean_num_requests_running"]
        tpot = figs["mean_tpot_ms"]
        meas, sim = tpot["measured"] * length, tpot["simulated"] * length
        rows.append(f"| {name} | {batch:.1f} | {per_draft:.2f} | {length:.2f} | {batch * (1 + per_draft):.0f} "
                    f"| {meas:.1f} | {sim:.1f} | {meas - sim:+.1f} |")
    write_atomic(HERE / "steps.md", ("\n".join(rows) + "\n").encode())
    print("\n".join(rows))


if __name__ == "__main__":
    main()
