"""Drop the per-request lists from this run's cells before committing them, as
../spec-decode-2026-12-01 did (the check reads none of them: it re-simulates each cell from
its seed and reads the acceptance from the server series). Each file's `stripped` names
what went; every file still loads as a cell record.

    .venv/bin/python docs/validation/spec-repeats-2026-12-02/strip.py [EXPERIMENT_DIR [KEEP ...]]

EXPERIMENT_DIR defaults to this run's results/exp; ../spec-k4-2026-12-02 and
../spec-crossover-2026-12-02 pass theirs. KEEP names result keys to keep
(../spec-cross-2026-12-07 keeps `output_lens`, which the report's payoff reads, and
`input_lens` and `start_times`, which its `waves.py` reads).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from servelab.experiment.cellrecord import CellRecord
from servelab.storage import write_json_atomic

HERE = Path(__file__).resolve().parent
DROP = ("generated_texts", "itls", "start_times", "input_lens", "output_lens", "errors")
DROP_SERVELAB = ("sched_lags_ms", "slot_waits_ms", "error_kinds")


def main() -> None:
    exp = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "results" / "exp"
    unknown = [k for k in sys.argv[2:] if k not in DROP]
    if unknown:
        raise SystemExit(f"KEEP: {', '.join(unknown)} not among the lists this drops ({', '.join(DROP)})")
    drop = [k for k in DROP if k not in sys.argv[2:]]
    for path in sorted((exp / "cells").rglob("*.json")):
        data = json.loads(path.read_text())
        gone = [k for k in drop if data["result"].pop(k, None) is not None]
        extra = data["result"].get("servelab", {})
        gone += [f"servelab.{k}" for k in DROP_SERVELAB if extra.pop(k, None) is not None]
        if not gone:
            continue
        data["stripped"] = sorted(set(data.get("stripped", [])) | set(gone))
        CellRecord.parse(data, str(path))
        write_json_atomic(path, data)


if __name__ == "__main__":
    main()
