"""The engine's decode steps of this run (hook/*.jsonl), by batch, beside the simulator's price of
the same counts (issue 17): where the verification step's time goes past a batch of 100.

    .venv/bin/python docs/validation/spec-llama-2026-12-03/steps.py > docs/validation/spec-llama-2026-12-03/steps.md

A step is a `schedule()` call without a new request's prefill. Measured: the scheduler's own time
(`schedule()`), from its end to `update_from_output()` (the model runner: inputs, launches,
kernels, sampling, the n-gram proposer) and from there to the next `schedule()` (the update and
the loop). Priced: the operator model's kernels x gpu_time_scale, launches x their price, the
speculative path's CPU (`spec_step_us` + `spec_per_seq_us` x sequences) and the engine's CPU
(`cpu_step_ms` + `cpu_per_seq_us` x sequences), with the step's measured drafts and contexts of
400 tokens (ShareGPT's).
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
from pathlib import Path

import numpy as np

from servelab.sim.cost import default_calibration
from servelab.sim.scheduler import ScheduledStep
from servelab.sim.setup import build_cluster

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "spec-decode-2026-12-01"))
from simcheck import measured_cells  # noqa: E402

# the engine core's hook file of each arm (the API servers' are the others)
HOOKS = {"ngram-k4": "4262.jsonl", "nospec": "4770.jsonl"}
BINS = ((1, 32), (33, 64), (65, 100), (101, 128), (129, 192), (193, 256))


def main() -> None:
    targets = measured_cells(HERE / "results" / "exp")
    lines = ["# Decode steps by batch (steps.py)", ""]
    for arm, hook in HOOKS.items():
        t = next(x for x in targets if x.name.startswith(arm))
        opts = dataclasses.replace(t.options, calibration=default_calibration("H200"))
        cost = build_cluster(opts, random.Random(0)).engines[0].cost
        ev = [json.loads(line) for line in (HERE / "results" / "hook" / hook).read_text().splitlines()]
        sch = [e for e in ev if e[0] == "sch"]
        upd = np.array([e[1] for e in ev if e[0] == "upd0"])
        rows = []
        for a, b in zip(sch, sch[1:]):
            _, t0, t1, tokens, seqs, _, _, new = a
            j = np.searchsorted(upd, t1)
            if new or not seqs or j >= len(upd) or upd[j] > b[1]:
                continue
            drafts = tokens - seqs
            step = ScheduledStep(reqs=[], num_new=[], decode_seqs=seqs, decode_context_tokens=400 * seqs,
                                 prefill_tokens=0, prefill_context_tokens=0, preempted=0,
                                 draft_tokens=drafts, drafting_seqs=seqs if drafts else 0)
            p = cost.parts(step)
            kern = p.total_s * cost._scale
            launch = p.launches * cost._launch_s + p.pieces * cost._piece_s
            spec = cost._step_s + cost._seq_s * seqs - cost.calibration.step_overhead_ms * 1e-3 \
                - cost.calibration.per_seq_us * 1e-6 * seqs
            rows.append((seqs, drafts / seqs, 1e3 * (t1 - t0), 1e3 * (upd[j] - t1), 1e3 * (b[1] - upd[j]),
                         1e3 * (b[1] - t0), 1e3 * kern, 1e3 * launch, 1e3 * spec,
                         1e3 * cost.step_duration_s(step)))
        a = np.array(rows)
        lines += [f"## {arm}", "",
                  "| batch | steps | drafts / seq | schedule ms | runner ms | update + loop ms | step ms "
                  "|| kernels ms | launches ms | spec CPU ms | priced step ms | priced / measured |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for lo, hi in BINS:
            m = (a[:, 0] >= lo) & (a[:, 0] <= hi)
            if m.sum() < 3:
                continue
            med = np.median(a[m], axis=0)
            lines.append(f"| {lo}-{hi} | {int(m.sum())} | {med[1]:.2f} | {med[2]:.2f} | {med[3]:.2f} | "
                         f"{med[4]:.2f} | {med[5]:.2f} || {med[6]:.2f} | {med[7]:.2f} | {med[8]:.2f} | "
                         f"{med[9]:.2f} | {med[9] / med[5]:.3f} |")
        lines.append("")
    sys.stdout.write("\n".join(lines))


if __name__ == "__main__":
    main()
