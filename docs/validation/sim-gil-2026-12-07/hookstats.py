"""What ../sim-waves-2026-12-03's hook files say about the API server's two threads and the
engine's mixed steps (issue 14, 2026-12-07).

    .venv/bin/python docs/validation/sim-gil-2026-12-07/hookstats.py > docs/validation/sim-gil-2026-12-07/hookstats.md

Reads the hook's records of the three random 1024/128 cells per model (rnd_c32, rnd_c64,
rnd_c64_c; their spans in cells.txt) and prints:
1. the tokenizer worker's time per 1,024-token prompt (`_tokenize_prompt`, start to end), split
   by whether the event loop processed engine outputs (`process_outputs`) during it;
2. the loop's time per output in `process_outputs` calls of 16 or more outputs, split by
   whether a tokenisation ran through most of the call;
3. the engine's mixed steps (prefill chunks beside decodes), their measured time (from one
   `update_from_output` to the next: the GPU's step under asynchronous scheduling, the step
   matched by its token count) beside the shipped H200 operator model's price of the same
   counts (decode contexts taken as 1,090 tokens, as ../sim-waves-2026-12-03/summarise.py
   does), by cell and prefill tokens.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from servelab.plan import EngineArgs
from servelab.sim.cost import default_calibration
from servelab.sim.scheduler import ScheduledStep
from servelab.sim.setup import SimOptions, build_cluster

WAVES = Path(__file__).resolve().parent.parent / "sim-waves-2026-12-03" / "results"
MODELS = ("qwen3-4b", "olmoe-1b-7b", "gemma-3-12b")
CELLS = ("rnd_c32", "rnd_c64", "rnd_c64_c")


def _spans(model: str) -> dict[str, tuple[float, float]]:
    start: dict[str, float] = {}
    out = {}
    for line in (WAVES / model / "cells.txt").read_text().splitlines():
        name, edge, t = line.split()
        if edge == "start":
            start[name] = float(t)
        elif name in start:
            out[name] = (start[name], float(t))
    return out


def _records(model: str) -> list[list]:
    recs = []
    for f in sorted((WAVES / model / "hook").glob("*.jsonl")):
        recs += [json.loads(line) for line in f.read_text().splitlines()]
    return sorted((r for r in recs if isinstance(r[1], float)), key=lambda r: r[1])


def _overlap(a: float, b: float, spans: np.ndarray) -> float:
    """Seconds of [a, b] covered by the (start, end) rows of `spans`."""
    if not len(spans):
        return 0.0
    return float(np.clip(np.minimum(spans[:, 1], b) - np.maximum(spans[:, 0], a), 0, None).sum())


def thread_lines() -> list[str]:
    out = ["## 1-2. The API server's tokenizer worker and event loop", "",
           "| model | tokenise 1,024 tokens, ms: no outputs processed meanwhile (median / mean, n) | outputs processed meanwhile | loop per output, us: no tokenisation | during a tokenisation |",
           "|---|---|---|---|---|"]
    for model in MODELS:
        spans = _spans(model)
        inside = [s for c, s in spans.items() if c in CELLS]
        recs = [r for r in _records(model) if any(a <= r[1] <= b for a, b in inside)]
        toks = np.array([(r[1], r[2]) for r in recs if r[0] == "tok"])
        outs = np.array([(r[1], r[2], r[3]) for r in recs if r[0] == "out1"])
        alone, busy = [], []
        for a, b in toks:
            (busy if _overlap(a, b, outs[:, :2]) > 0 else alone).append((b - a) * 1e3)
        per_alone, per_tok = [], []
        for a, b, n in outs:
            if n < 16:
                continue
            frac = _overlap(a, b, toks) / (b - a)
            if frac == 0:
                per_alone.append((b - a) * 1e6 / n)
            elif frac > 0.5:
                per_tok.append((b - a) * 1e6 / n)
        out.append(f"| {model} | {np.median(alone):.2f} / {np.mean(alone):.2f} ({len(alone)}) | "
                   f"{np.median(busy):.2f} / {np.mean(busy):.2f} ({len(busy)}) | "
                   f"{np.median(per_alone):.1f} ({len(per_alone)}) | "
                   f"{np.median(per_tok):.1f} ({len(per_tok)}) |")
    return out + [""]


def step_lines() -> list[str]:
    out = ["## 3. Mixed steps: measured against the operator model", "",
           "| model | cell | prefill tokens | steps | measured median ms | priced median ms | priced / measured |",
           "|---|---|---|---:|---:|---:|---:|"]
    for model in MODELS:
        cost = build_cluster(SimOptions(str(WAVES / model / "config.json"), "H200", None, EngineArgs(),
                                        calibration=default_calibration("H200")),
                             random.Random(0)).engines[0].cost
        spans = _spans(model)
        recs = _records(model)
        for cell in CELLS:
            a, b = spans[cell]
            sch = [r for r in recs if r[0] == "sch" and r[3] > 0 and a <= r[1] <= b]
            upd = [r for r in recs if r[0] == "upd0" and r[2] > 0 and a <= r[1] <= b]
            rows = []
            for j in range(1, min(len(sch), len(upd))):
                _, _, _, tokens, nreq, chunks, pre, _new = sch[j]
                if tokens != upd[j][2]:
                    break  # the pairing is lost: keep what matched
                if pre == 0:
                    continue
                dec = nreq - chunks
                per = pre / chunks
                step = ScheduledStep(reqs=[], num_new=[], decode_seqs=dec, decode_context_tokens=dec * 1090,
                                     prefill_tokens=pre, prefill_context_tokens=int(chunks * per * (per + 1) / 2),
                                     preempted=0, prefill_seqs=chunks)
                rows.append((pre, (upd[j][1] - upd[j - 1][1]) * 1e3, cost.step_duration_s(step) * 1e3))
            arr = np.array(rows)
            for lo, hi in ((1, 2100), (2101, 6200), (6201, 8300)):
                m = (arr[:, 0] >= lo) & (arr[:, 0] <= hi)
                if m.sum():
                    meas, sim = np.median(arr[m, 1]), np.median(arr[m, 2])
                    out.append(f"| {model} | {cell} | {lo}-{hi} | {int(m.sum())} | {meas:.1f} | {sim:.1f} | {sim / meas:.2f} |")
    return out + [""]


def main() -> None:
    print("\n".join(["# The sim-waves hook files: two threads and mixed steps (hookstats.py)", "",
                     *thread_lines(), *step_lines()]))


if __name__ == "__main__":
    main()
