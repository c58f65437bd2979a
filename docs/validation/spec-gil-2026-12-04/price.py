"""The simulator's price of device2.sh's served n-gram K = 4 steps (the wave steps compare.py
keeps), beside the measured step, with and without the speculative CPU line.

    .venv/bin/python docs/validation/spec-gil-2026-12-04/price.py RESULTS_DIR

The engine's options are ../spec-llama-2026-12-03's ngram-k4 arm (Llama-3.1-8B shape, the same
speculative config); a step's contexts are 256 prompt tokens plus half the wave's 128 outputs.
Priced: `step_duration_s` of the step's shape (its measured draft tokens); the speculative line
is `spec_step_us` + `spec_per_seq_us` x sequences, less the non-speculative CPU it replaces.
"""
from __future__ import annotations

import dataclasses
import random
import statistics
import sys
from pathlib import Path

from servelab.sim.cost import default_calibration
from servelab.sim.scheduler import ScheduledStep
from servelab.sim.setup import build_cluster

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "spec-decode-2026-12-01"))
from compare import served  # noqa: E402
from simcheck import measured_cells  # noqa: E402


def main(root: Path) -> None:
    target = next(x for x in measured_cells(HERE.parent / "spec-llama-2026-12-03" / "results" / "exp")
                  if x.name.startswith("ngram-k4"))
    opts = dataclasses.replace(target.options, calibration=default_calibration("H200"))
    cost = build_cluster(opts, random.Random(0)).engines[0].cost
    cal = cost.calibration
    print("| B | served step ms (median) | priced ms | priced / measured | spec CPU line ms | priced without it / measured |")
    print("|---:|---:|---:|---:|---:|---:|")
    for b, rows in sorted(served(root).items()):
        meas, priced, line = [], [], []
        for ms, tokens in rows:
            drafts = tokens - b
            step = ScheduledStep(reqs=[], num_new=[], decode_seqs=b, decode_context_tokens=(256 + 64) * b,
                                 prefill_tokens=0, prefill_context_tokens=0, preempted=0,
                                 draft_tokens=drafts, drafting_seqs=b if drafts else 0)
            meas.append(ms)
            priced.append(1e3 * cost.step_duration_s(step))
            line.append(1e3 * (cost._step_s + cost._seq_s * b) - cal.step_overhead_ms - cal.per_seq_us * 1e-3 * b)
        m, p, s = statistics.median(meas), statistics.median(priced), statistics.median(line)
        print(f"| {b} | {m:.2f} | {p:.2f} | {p / m:.3f} | {s:.2f} | {(p - s) / m:.3f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
