"""Where a prefill-heavy closed loop's TTFT goes, request by request (issue 14, 2026-12-03):
the hook's timestamps (hook/sitecustomize.py) and the client's records of each cell, beside
the simulator's run of the same cell (shipped H200 residual).

    .venv/bin/python docs/validation/sim-waves-2026-12-03/summarise.py > docs/validation/sim-waves-2026-12-03/summary.md

Needs the kit's payload linked as the device's paths (/tmp/gpu-x/payload: the Qwen tokenizer
the cells were drawn with), as ../sim-transfer-2026-12-01 does.
"""

from __future__ import annotations

import json
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servelab.metrics.records import RequestRecord
from servelab.plan import EngineArgs
from servelab.sim.cost import Calibration, OperatorCostModel, default_calibration
from servelab.sim.offline import StepObserver, prepare_workload, simulate
from servelab.sim.scheduler import ScheduledStep
from servelab.sim.setup import SimOptions, build_cluster
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DatasetOptions

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PAYLOAD = Path("/tmp/gpu-x/payload")
MODELS = ("qwen3-4b", "olmoe-1b-7b", "gemma-3-12b")
CELLS = ("rnd_c32", "rnd_c64", "rnd_c64_c")
# The same cells (model, seed) measured on earlier days: their mean TTFT (ms).
EARLIER = {
    "sim-transfer-2026-12-01": HERE.parent / "sim-transfer-2026-12-01" / "results",
    "sim-frontend-2026-12-01": HERE.parent / "sim-frontend-2026-12-01" / "results",
}
_ID = re.compile(r"cmpl-bench-[0-9a-f]+-(\d+)-0-")


def _index(request_id: str) -> int | None:
    """The client's request index in a vLLM request id (None: the client's test prompt)."""
    m = _ID.match(request_id)
    return int(m.group(1)) if m else None


def spans(model: str, root: Path = RESULTS) -> dict[str, tuple[float, float]]:
    """Each cell's (start, end) on perf_counter, from `root`/<model>/cells.txt."""
    start: dict[str, float] = {}
    out = {}
    for line in (root / model / "cells.txt").read_text().splitlines():
        name, edge, t = line.split()
        if edge == "start":
            start[name] = float(t)
        elif name in start:
            out[name] = (start[name], float(t))
    return out


def hook_records(model: str, a: float, b: float, root: Path = RESULTS) -> list[list]:
    """The hook's records of every process stamped within [a, b] (perf_counter seconds), by
    time, from `root`/<model>/hook."""
    out = []
    for f in sorted((root / model / "hook").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if isinstance(r[1], float) and a <= r[1] <= b:
                out.append(r)
    return sorted(out, key=lambda r: r[1])


def _events(model: str, cell: str) -> list[list]:
    """The hook's records of every process during `cell`."""
    return hook_records(model, *spans(model)[cell])


def step_shape(decodes: int, prefill_tokens: int, chunks: int) -> ScheduledStep:
    """A measured step's counts as the operator model takes them: decode contexts of 1,090
    tokens (1,024 in + half of 128 out), each chunk's context its own tokens so far."""
    per = prefill_tokens / chunks if chunks else 0.0
    return ScheduledStep(reqs=[], num_new=[], decode_seqs=decodes, decode_context_tokens=decodes * 1090,
                         prefill_tokens=prefill_tokens,
                         prefill_context_tokens=int(chunks * per * (per + 1) / 2), preempted=0,
                         prefill_seqs=chunks)


def h200_cost(config: Path, cal: Calibration | None = None) -> OperatorCostModel:
    """The simulator's cost model of the served model `config` on the H200 (default: the
    shipped residual)."""
    return build_cluster(SimOptions(str(config), "H200", None, EngineArgs(),
                                    calibration=cal or default_calibration("H200")),
                         random.Random(0)).engines[0].cost


def simulated(model: str, result: dict, on_step: StepObserver | None = None) -> list[RequestRecord]:
    """The simulator's run of a measured cell (shipped H200 residual, the cell's seed, prompts
    and load), its records without warm-ups; `on_step` sees every step."""
    opts = SimOptions(str(RESULTS / model / "config.json"), "H200", None, EngineArgs(),
                      calibration=default_calibration("H200"))
    ds = DatasetOptions(dataset_name="random", num_prompts=int(result["num_prompts"]),
                        random_input_len=1024, random_output_len=128,
                        tokenizer=str(PAYLOAD / "qwen3-14b"))
    seed = int(result["servelab"]["seed"])
    wl = prepare_workload(ds, seed, ArrivalOptions())
    run = simulate(build_cluster(opts, random.Random(seed)), wl.requests, wl.intended_s,
                   int(result["max_concurrency"]), 0, on_step)
    return [r for r in run.records if not r.warmup]


def waves(send: np.ndarray, conc: int) -> list[np.ndarray]:
    """A closed loop's waves: the request indices in order of sending, `conc` at a time."""
    order = np.argsort(send, kind="stable")
    return [order[w:w + conc] for w in range(0, len(send), conc)]


@dataclass(frozen=True)
class Stamps:
    """One measured cell's requests on the hook's clock (perf_counter seconds; NaN where the
    hook saw none): sent, vLLM's arrival, handed to the engine core, added to its scheduler,
    first in a `schedule()`, first token, last token."""

    conc: int
    send: np.ndarray
    arrival: np.ndarray
    hand_off: np.ndarray
    engine: np.ndarray
    scheduled: np.ndarray
    first: np.ndarray
    end: np.ndarray
    ttft: np.ndarray  # the client's, seconds


def request_stamps(model: str, cell: str) -> Stamps:
    """The hook's and the client's stamps of each request of `cell`, joined by request index."""
    res = json.loads((RESULTS / model / f"{cell}.json").read_text())
    n, conc = len(res["ttfts"]), int(res["max_concurrency"])
    arr, hand, eng, sched = (np.full(n, np.nan) for _ in range(4))
    for r in _events(model, cell):
        i = _index(r[2]) if r[0] in ("add", "eadd") else None
        if r[0] == "add" and i is not None:
            arr[i], hand[i] = r[3] - (r[4] - r[1]), r[1]  # vLLM's arrival time on perf_counter
        elif r[0] == "eadd" and i is not None:
            eng[i] = r[1]
        elif r[0] == "sch":
            for rid, _ in r[7]:
                j = _index(rid)
                if j is not None and np.isnan(sched[j]):
                    sched[j] = r[1]
    send = np.array(res["start_times"])
    ttft = np.array(res["ttfts"])
    t0 = np.nanmin(arr - send)  # the client's t0 on perf_counter (send -> arrival >= 0)
    return Stamps(conc, t0 + send, arr, hand, eng, sched, t0 + send + ttft,
                  t0 + send + np.array(res["latencies"]), ttft)


def cell_table(model: str, cell: str) -> list[str]:
    """Per closed-loop wave: the measured path of a request (means, ms) beside the simulator's."""
    res = json.loads((RESULTS / model / f"{cell}.json").read_text())
    m = request_stamps(model, cell)
    recs = simulated(model, res)
    s_send = np.array([r.send_s for r in recs])
    s_ttft = np.array([r.ttft_ms for r in recs]) / 1e3
    s_end = s_send + np.array([r.e2el_ms for r in recs]) / 1e3
    out = [f"### {model} {cell}: measured mean TTFT {1e3 * m.ttft.mean():.1f} ms, simulated "
           f"{1e3 * s_ttft.mean():.1f} ms ({100 * (s_ttft.mean() / m.ttft.mean() - 1):+.1f} %)", "",
           "| wave | sends spread | send->arrival | arrival->hand-off | hand-off->engine | "
           "engine->scheduled | scheduled->first token | TTFT | finishes spread || sim sends "
           "spread | sim TTFT | sim finishes spread |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for w, (s, q) in enumerate(zip(waves(m.send, m.conc), waves(s_send, m.conc))):
        ms = lambda x: f"{1e3 * np.nanmean(x):.1f}"  # noqa: E731
        spread = lambda x: f"{1e3 * (x.max() - x.min()):.0f}"  # noqa: E731
        out.append(f"| {w} | {spread(m.send[s])} | {ms(m.arrival[s] - m.send[s])} | "
                   f"{ms(m.hand_off[s] - m.arrival[s])} | {ms(m.engine[s] - m.hand_off[s])} | "
                   f"{ms(m.scheduled[s] - m.engine[s])} | {ms(m.first[s] - m.scheduled[s])} | "
                   f"{ms(m.ttft[s])} | {spread(m.end[s])} || {spread(s_send[q])} | {ms(s_ttft[q])} | "
                   f"{spread(s_end[q])} |")
    return out + [""]


def step_table(model: str) -> list[str]:
    """Measured step intervals (between two `schedule()` calls, the GPU's step under
    asynchronous scheduling) by prefill tokens, beside the operator model's price of the
    same counts (decode contexts taken as 1,090 tokens, prompts uncached)."""
    cost = h200_cost(RESULTS / model / "config.json")
    rows = []
    for cell in CELLS:
        sch = [r for r in _events(model, cell) if r[0] == "sch"]
        for a, b in zip(sch, sch[1:]):
            _, _, _, _, nreq, chunks, pre, _ = a
            rows.append((pre, 1e3 * (b[1] - a[1]),
                         1e3 * cost.step_duration_s(step_shape(nreq - chunks, pre, chunks))))
    a = np.array(rows)
    out = [f"### {model}: steps of the three cells", "",
           "| prefill tokens | steps | measured median ms | priced median ms | priced / measured |",
           "|---|---:|---:|---:|---:|"]
    for lo, hi in ((0, 0), (1, 1100), (1101, 2100), (2101, 4200), (4201, 6200), (6201, 8300)):
        m = (a[:, 0] >= lo) & (a[:, 0] <= hi)
        if m.sum():
            meas, sim = np.median(a[m, 1]), np.median(a[m, 2])
            out.append(f"| {lo}-{hi} | {int(m.sum())} | {meas:.2f} | {sim:.2f} | {sim / meas:.3f} |")
    return out + [""]


def server_lines(model: str) -> list[str]:
    """The API server's own figures over the three cells."""
    tok, outs = [], []
    for cell in CELLS:
        for r in _events(model, cell):
            if r[0] == "tok":
                tok.append(r[2] - r[1])
            elif r[0] == "out1":
                outs.append((r[2] - r[1], r[3]))
    o = np.array(outs)
    return [f"- {model}: tokenising a 1,024-token prompt {1e3 * np.mean(tok):.2f} ms mean "
            f"(p50 {1e3 * np.median(tok):.2f}, p90 {1e3 * np.percentile(tok, 90):.2f}; the simulator "
            f"{0.850 + 5.14e-3 * 1024:.2f}); processing a step's outputs "
            f"{1e6 * o[:, 0].sum() / o[:, 1].sum():.1f} us per output (the simulator 9.8 per token)"]


def earlier_lines() -> list[str]:
    out = ["| model | cell (seed) | this run | earlier runs of the same cell |", "|---|---|---:|---|"]
    for model in MODELS:
        for cell in CELLS[:2]:
            res = json.loads((RESULTS / model / f"{cell}.json").read_text())
            seen = []
            for name, root in EARLIER.items():
                f = root / model / f"{cell}.json"
                if f.exists():
                    seen.append(f"{json.loads(f.read_text())['mean_ttft_ms']:.1f} ({name})")
            out.append(f"| {model} | {cell} ({res['servelab']['seed']}) | {res['mean_ttft_ms']:.1f} | "
                       f"{', '.join(seen) or '-'} |")
    return out + [""]


def main() -> None:
    lines = ["# Prefill-heavy closed loops, request by request (summarise.py)", "",
             "## The same cells on other days (mean TTFT, ms)", "", *earlier_lines(),
             "## The API server", "", *[ln for m in MODELS for ln in server_lines(m)], ""]
    lines += ["## Waves (means per wave, ms)", ""]
    for model in MODELS:
        for cell in CELLS:
            lines += cell_table(model, cell)
    lines += ["## Steps", ""]
    for model in MODELS:
        lines += step_table(model)
    sys.stdout.write("\n".join(lines))


if __name__ == "__main__":
    main()
