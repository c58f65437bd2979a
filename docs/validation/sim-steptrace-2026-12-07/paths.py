"""A prefill-heavy request's two paths, measured and simulated, wave by wave (issue 14, 2026-12-08).

    .venv/bin/python docs/validation/sim-steptrace-2026-12-07/paths.py > docs/validation/sim-steptrace-2026-12-07/paths.md

A request's TTFT is two paths end to end:
- the API server's: from the client's send to the hand-off to the engine core (HTTP, the
  event loop's intake, the tokenizer worker, the loop's hand-off);
- the engine's: from the hand-off to the first token at the client (the engine core's intake
  between steps, asynchronous scheduling's step in flight, the prefill's own step, the
  outputs back through the API server's loop).

The measured stamps are ../sim-waves-2026-12-03's hook files (`summarise.request_stamps`). The
simulator's run of the same cell (shipped H200 profile and residual, the cell's seed) gives
each request's entry into the simulated engine: there the hand-off and the entry are one
instant. Both paths are split at that instant, so the engine's path holds the same pieces on
both sides. Needs the kit's payload linked as the device's paths (/tmp/gpu-x/payload), as
../sim-waves-2026-12-03 does.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servelab.sim.engine import SimEngine
from servelab.sim.scheduler import ScheduledStep

WAVES_DIR = Path(__file__).resolve().parent.parent / "sim-waves-2026-12-03"
sys.path.insert(0, str(WAVES_DIR))
from summarise import CELLS, MODELS, RESULTS, request_stamps, simulated, waves  # noqa: E402


@dataclass(frozen=True)
class Paths:
    """Per request, seconds: send -> hand-off to the engine, hand-off -> first token, TTFT."""

    send: np.ndarray
    api: np.ndarray
    engine: np.ndarray
    ttft: np.ndarray


def measured(model: str, cell: str) -> Paths:
    """The cell's requests as the hook and the client stamped them."""
    m = request_stamps(model, cell)
    return Paths(m.send, m.hand_off - m.send, m.first - m.hand_off, m.ttft)


def simulated_paths(model: str, cell: str) -> Paths:
    """The simulator's run of the cell (`summarise.simulated`), each request split at its
    entry into the simulated engine."""
    res = json.loads((RESULTS / model / f"{cell}.json").read_text())
    entered: dict[int, float] = {}

    def on_step(_k: int, _start_s: float, _dur_s: float, step: ScheduledStep, _e: SimEngine) -> None:
        for r in step.reqs:
            entered.setdefault(r.tag, r.arrival_s)  # the engine's add, on the run's clock

    recs = simulated(model, res, on_step)
    send = np.array([r.send_s for r in recs])
    ttft = np.array([r.ttft_ms for r in recs]) / 1e3
    entry = np.array([entered[i] for i in range(len(recs))])
    return Paths(send, entry - send, send + ttft - entry, ttft)


def cell_rows(model: str, cell: str) -> list[str]:
    conc = int(json.loads((RESULTS / model / f"{cell}.json").read_text())["max_concurrency"])
    m, s = measured(model, cell), simulated_paths(model, cell)
    ms = lambda x: f"{1e3 * np.nanmean(x):.1f}"  # noqa: E731
    rows = []
    for w, (a, b) in enumerate(zip(waves(m.send, conc), waves(s.send, conc))):
        rows.append(f"| {model} | {cell} | {w} | {ms(m.api[a])} | {ms(s.api[b])} | "
                    f"{ms(m.engine[a])} | {ms(s.engine[b])} | {ms(m.ttft[a])} | {ms(s.ttft[b])} |")
    rows.append(f"| {model} | {cell} | all | {ms(m.api)} | {ms(s.api)} | {ms(m.engine)} | "
                f"{ms(s.engine)} | {ms(m.ttft)} | {ms(s.ttft)} |")
    return rows


def main() -> None:
    lines = ["# A prefill-heavy request's two paths, measured and simulated (paths.py)", "",
             ("Means per closed-loop wave, ms. API server: send -> hand-off to the engine core. "
              "Engine: hand-off -> first token at the client. Simulated: shipped H200 profile "
              "and residual."), "",
             ("| model | cell | wave | API server, measured | simulated | engine, measured | "
              "simulated | TTFT, measured | simulated |"),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for model in MODELS:
        for cell in CELLS:
            lines += cell_rows(model, cell)
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
