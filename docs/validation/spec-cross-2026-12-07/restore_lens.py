"""Copy an earlier run's experiment with each cell's per-request output lengths put back
where the cell itself implies them, so that the report prices its loop as waves (issue 17).

    .venv/bin/python docs/validation/spec-cross-2026-12-07/restore_lens.py EXPERIMENT OUT_DIR

The earlier runs' committed cells dropped `output_lens` (../spec-repeats-2026-12-02/strip.py).
Their workloads ask every request for the same L output tokens with `ignore_eos`
(`sharegpt_output_len`, `prefix_repetition_output_len`), and no request can return more than
it asked for. Where a cell's output tokens are exactly L x its completed requests, every
request returned L, and that list is written back; any other cell is copied as it is. Prints
how many cells got their lengths back.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from servelab.experiment.cellrecord import CellRecord
from servelab.storage import write_json_atomic

FIXED = ("sharegpt_output_len", "prefix_repetition_output_len")


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    shutil.copytree(src, out)
    spec = json.loads((out / "manifest.json").read_text())["spec"]
    fixed = {w["name"]: next((w[k] for k in FIXED if w.get(k)), None) for w in spec["workloads"]}
    restored = total = 0
    for path in sorted((out / "cells").rglob("*.json")):
        data = json.loads(path.read_text())
        res, total = data["result"], total + 1
        length = fixed.get(data["cell"]["workload"])
        if length is None or "output_lens" in res or res["total_output_tokens"] != length * res["completed"]:
            continue
        res["output_lens"] = [length] * res["completed"]
        data["stripped"] = [k for k in data.get("stripped", []) if k != "output_lens"]
        CellRecord.parse(data, str(path))
        write_json_atomic(path, data)
        restored += 1
    print(f"{out}: output lengths restored in {restored} of {total} cells")


if __name__ == "__main__":
    main()
