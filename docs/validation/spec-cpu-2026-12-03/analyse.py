"""Issue 17: where an n-gram verification step's time goes, from runner_probe.py's offline
steps (results/, both models), the served Llama-3.1-8B hook of ../spec-llama-2026-12-03 and
every served speculative cell, beside the simulator's price (shipped H200 figures).

    .venv/bin/python docs/validation/spec-cpu-2026-12-03/analyse.py > docs/validation/spec-cpu-2026-12-03/analysis.md

1. Offline steps (all B sequences decoding, medians): the step, the scheduler's and the
   runner's phases, the GPU's span from the forward's start to the sampler's end (CUDA
   events), the serial CPU (step - GPU span: what the GPU waits for), and the simulator's
   kernels, launches and CPU terms for the same counts (context = prompt + half the output).
2. The served hook's uniform steps beside the offline ones at the same batch.
3. Per served speculative cell: the constant per-step time the simulator would have to add to
   match it (from simulations with the speculative CPU terms at 0 and at 6 ms a step).
"""

from __future__ import annotations

import json
import statistics as st
import sys
from pathlib import Path

import numpy as np

from servelab.experiment.simulation import measured_cells
from servelab.plan.args import EngineArgs
from servelab.sim.calibrate import evaluate
from servelab.sim.cost import default_calibration
from servelab.sim.engine import build_engine
from servelab.sim.scheduler import ScheduledStep
from servelab.speculation import SpeculativeConfig

HERE = Path(__file__).resolve().parent
VAL = HERE.parent
REPO = VAL.parents[1]
CONFIGS = {"llama-3.1-8b": VAL / "sim-transfer-2026-12-01/results/llama-3.1-8b/config.json",
           "qwen3-14b": REPO / "src/servelab/data/models/qwen3-14b.json"}
PROBES = ("llama-k4.json", "qwen3-14b-k4.json", "llama-k4-long.json")
SERVED = {"spec-decode": ("spec-decode-2026-12-01", None), "spec-k4": ("spec-k4-2026-12-02", None),
          "spec-repeats": ("spec-repeats-2026-12-02", None), "spec-steps": ("spec-steps-2026-12-02", "k6"),
          "spec-crossover": ("spec-crossover-2026-12-02", None), "spec-llama": ("spec-llama-2026-12-03", None)}


def med(xs):
    xs = [x for x in xs if x == x]
    return st.median(xs) if xs else float("nan")


def sim_parts(cost, b: int, ctx: int, drafts: int) -> dict[str, float]:
    """The simulator's pieces (ms) of a decode step of b sequences with `drafts` draft tokens."""
    cal = cost.calibration
    shape = ScheduledStep([], [], b, b * ctx, 0, 0, 0, draft_tokens=drafts, drafting_seqs=b if drafts else 0)
    p = cost.parts(shape)
    cpu = (cal.cpu_step_ms + cal.step_overhead_ms) + (cal.cpu_per_seq_us + cal.per_seq_us) * 1e-3 * b
    return {"G": p.total_s * cost._scale * 1e3, "L": p.launches * cost._launch_s * 1e3,
            "cpu": cpu, "spec": cal.spec_step_us * 1e-3 + cal.spec_per_seq_us * 1e-3 * b,
            "sim_step": cost.step_duration_s(shape) * 1e3}


def offline() -> dict[tuple[str, int], dict[str, float]]:
    print("## 1. Offline verification steps (runner_probe.py, n-gram K = 4, all B decoding)\n")
    print("| model (max_model_len) | B | tokens | step ms | schedule + update | prepare (states, inputs, attn) | "
          "forward CPU | sampler CPU | bookkeeping (wait + parse) | proposer | GPU span | serial CPU | "
          "sim: kernels | launches | non-spec CPU | spec CPU | step | step err % |")
    print("|---|---:|" + "---:|" * 16)
    out = {}
    for name in PROBES:
        f = HERE / "results" / name
        if not f.exists():
            continue
        d = json.loads(f.read_text())
        model = d["model"]
        sc = SpeculativeConfig(**d["speculative_config"], acceptance=[1.0] * d["speculative_config"]["num_speculative_tokens"])
        eng = build_engine(str(CONFIGS[model]), "H200", None,
                           EngineArgs(max_num_seqs=1024, max_num_batched_tokens=8192, max_model_len=4096),
                           None, speculative=sc)
        for bs, e in d["batches"].items():
            b = int(bs)
            rs = [r for r in e["steps"] if r.get("reqs") == b and not r.get("prefill")]
            if not rs:
                continue
            step = med([(r["t1"] - r["t0"]) * 1e3 for r in rs])
            ph = {k: med([r["ph"].get(k, 0.0) for r in rs]) for k in
                  ("schedule", "update_from_output", "post_step", "_update_states", "_prepare_inputs",
                   "_build_attention_metadata", "_model_forward", "_sample", "_bookkeeping_sync",
                   "propose_draft_token_ids")}
            span = med([r.get("gpu_fwd_sample_ms", float("nan")) for r in rs])
            serial = med([(r["t1"] - r["t0"]) * 1e3 - r.get("gpu_fwd_sample_ms", float("nan")) for r in rs])
            tokens = med([r["tokens"] for r in rs])
            s = sim_parts(eng.cost, b, d["prompt_tokens"] + d["output_tokens"] // 2, round(tokens) - b)
            out[(f"{model} ({d['max_model_len']})", b)] = {"step": step, "serial": serial, "span": span, **s,
                                                          "sched_upd": ph["schedule"] + ph["update_from_output"] + ph["post_step"]}
            print(f"| {model} ({d['max_model_len']:,}) | {b} | {tokens:.0f} | {step:.2f} | "
                  f"{ph['schedule'] + ph['update_from_output'] + ph['post_step']:.2f} | "
                  f"{ph['_update_states'] + ph['_prepare_inputs'] + ph['_build_attention_metadata']:.2f} | "
                  f"{ph['_model_forward']:.2f} | {ph['_sample']:.2f} | {ph['_bookkeeping_sync']:.2f} | "
                  f"{ph['propose_draft_token_ids']:.2f} | {span:.2f} | {serial:.2f} | {s['G']:.2f} | {s['L']:.2f} | "
                  f"{s['cpu']:.2f} | {s['spec']:.2f} | {s['sim_step']:.2f} | {100 * (s['sim_step'] - step) / step:+.1f} |")
    print()
    return out


def served_vs_offline(off: dict) -> None:
    print("## 2. Served (../spec-llama-2026-12-03 hook) vs offline, Llama-3.1-8B, uniform steps\n")
    print("| B | served steps | served step ms | served schedule + update/loop | served runner | "
          "offline step | offline schedule + update | offline runner | served - offline |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    ev = [json.loads(x) for x in (VAL / "spec-llama-2026-12-03/results/hook/4262.jsonl").read_text().splitlines()]
    sch = [e for e in ev if e[0] == "sch"]
    upd = np.array([e[1] for e in ev if e[0] == "upd0"])
    rows = []
    for a, b in zip(sch, sch[1:]):
        _, t0, t1, tokens, seqs, _, _, new = a
        j = np.searchsorted(upd, t1)
        if new or not seqs or j >= len(upd) or upd[j] > b[1] or tokens != 5 * seqs:
            continue
        rows.append((seqs, 1e3 * (b[1] - t0), 1e3 * (t1 - t0) + 1e3 * (b[1] - upd[j]), 1e3 * (upd[j] - t1)))
    arr = np.array(rows)
    for b in (128, 256):
        m = arr[:, 0] == b
        o = off.get(("llama-3.1-8b (4096)", b))
        if not m.sum() or o is None:
            continue
        sv = np.median(arr[m], axis=0)
        print(f"| {b} | {int(m.sum())} | {sv[1]:.2f} | {sv[2]:.2f} | {sv[3]:.2f} | {o['step']:.2f} | "
              f"{o['sched_upd']:.2f} | {o['step'] - o['sched_upd']:.2f} | {sv[1] - o['step']:+.2f} |")
    print()


def served_cells() -> None:
    print("## 3. Per served speculative cell: the per-step time the simulator lacks without its "
          "speculative CPU terms (ms; interpolated between 0 and 6 ms a step)\n")
    print("| run | cell | from throughput | from TPOT |")
    print("|---|---|---:|---:|")
    base = default_calibration("H200")
    for run, (d, arm) in SERVED.items():
        ts = [t for t in measured_cells(VAL / d / "results" / "exp") if t.options and t.options.speculative
              and not t.name.startswith("draft") and (arm is None or t.name.split("/")[0] == arm)]
        for t in ts:
            t.measured = {k: v for k, v in t.measured.items() if k in ("output_throughput", "mean_tpot_ms")}
        res: dict = {}
        for e in (0.0, 6.0):
            cal = base.model_copy(update={"spec_step_us": e * 1e3, "spec_per_seq_us": 0.0})
            for name, metric, meas, sim in evaluate(ts[0].options, ts, cal):
                res.setdefault(name, {}).setdefault(metric, []).append((meas, sim))
        for name in sorted(res, key=lambda n: (n.split("/")[1], int(n.split("/c")[-1]))):
            v = {k: 6.0 * (x[0][0] - x[0][1]) / (x[1][1] - x[0][1]) for k, x in res[name].items()}
            print(f"| {run} | {name} | {v['output_throughput']:.1f} | {v['mean_tpot_ms']:.1f} |")
    print()


def main() -> None:
    print("# Issue 17: the n-gram verification step's time (analyse.py)\n")
    off = offline()
    served_vs_offline(off)
    if "--no-cells" not in sys.argv:
        served_cells()


if __name__ == "__main__":
    main()
