"""Tabulate step_probe.py's JSONs: the engine's decode step at each batch, its phases, and
what the simulator prices for the same step (issue 17).

    .venv/bin/python docs/validation/spec-batch-2026-12-02/summarise.py RESULTS_DIR > steps.md

Per file and batch B: the median interval between consecutive scheduler updates over the
steps where all B requests decode (no prefill chunk), the tokens such a step schedules, the
median of each wrapped phase (schedule, execute, sample, update; `rest` is the interval
less the four: the offline loop's output processing), and the simulator's price of that
step: B decoding sequences at the mean context over the run (prompt + half the output),
with the recorded draft tokens, on the shipped H200 figures
(`servelab.sim.engine.build_engine` on the served directory's config.json, which the
simulator accepts as a model; nothing fitted on these runs).

Then, from device2.sh's host probes (../sim-host-2026-12-01/host_probe.py: a 768-token
prefill, every kernel launched, and a 256-token one on piecewise graphs, at 4 and 20 layers
of a Qwen3-0.6B-shaped layer) on each of vLLM's model runners: the CPU time per layer, the
difference of the two depths' median walls over the 16 layers added, and per kernel over
the 13 the operator model counts for that layer (`H200_V1_LAUNCH_US` is the V1 runner's).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from servelab.plan.args import EngineArgs
from servelab.sim.engine import build_engine
from servelab.sim.scheduler import ScheduledStep
from servelab.speculation import SpeculativeConfig

CONFIGS = {"qwen3-14b": "src/servelab/data/models/qwen3-14b.json",
           "llama-3.1-8b": "results/llama-3.1-8b-config.json"}


def decode_steps(recs: list[dict], b: int) -> list[tuple[dict, float, dict[str, float]]]:
    """(schedule record, interval ms, phase ms) per all-decode step at batch b."""
    sch = [r for r in recs if r["phase"] == "schedule"]
    upd = [r for r in recs if r["phase"] == "update"]
    by = {p: [r for r in recs if r["phase"] == p] for p in ("execute", "sample")}
    out = []
    for i in range(1, min(len(sch), len(upd))):
        s = sch[i]
        if s["reqs"] != b or s["prefill"]:
            continue
        ph = {"schedule": (s["t1"] - s["t0"]) * 1e3, "update": (upd[i]["t1"] - upd[i]["t0"]) * 1e3}
        for p, rs in by.items():
            ph[p] = (rs[i]["t1"] - rs[i]["t0"]) * 1e3 if i < len(rs) else 0.0
        out.append((s, (upd[i]["t1"] - upd[i - 1]["t1"]) * 1e3, ph))
    return out


KERNELS_PER_LAYER = 13  # QKV, q/k norm x 2, rope, KV write, attention, O, 2 add+norm, gate-up, act, down


def host_layers(root: Path) -> dict[str, dict[str, float]]:
    """{runner: {eager|piecewise: CPU us per layer}} from the host probes' walls."""
    out: dict[str, dict[str, float]] = {}
    for runner, tag in (("V1", "v2runner0"), ("V2", "v2runner1")):
        shallow = json.loads((root / f"host-probe-dense-4-{tag}.json").read_text())
        deep = json.loads((root / f"host-probe-dense-20-{tag}.json").read_text())
        layers = deep["layers"] - shallow["layers"]
        out[runner] = {mode: 1e3 * (deep["points"][mode]["wall_ms_median"] - shallow["points"][mode]["wall_ms_median"]) / layers
                       for mode in ("eager", "piecewise")}
    return out


def v1_launch_us(root: Path) -> float:
    """The V1 runner's CPU time per launched kernel (us): `H200_V1_LAUNCH_US`."""
    return round(host_layers(root)["V1"]["eager"] / KERNELS_PER_LAYER, 1)


def main() -> None:
    root = Path(sys.argv[1])
    here = Path(__file__).resolve().parent
    repo = here.parents[2]
    print("| run | B | steps | tokens | drafts | step ms | schedule | execute | sample | update | rest | sim ms | sim err % |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for f in sorted(root.glob("*.json")):
        if f.name.endswith("-config.json") or f.name.startswith("host-"):
            continue
        d = json.loads(f.read_text())
        model = d["model"]
        cfg = CONFIGS[model]
        cfg_path = (here / cfg) if cfg.startswith("results/") else (repo / cfg)
        spec = d["speculative_config"]
        sc = None
        if spec:
            sc = SpeculativeConfig(**spec, acceptance=[1.0] * spec["num_speculative_tokens"])
        args = EngineArgs(max_num_seqs=1024, max_num_batched_tokens=8192, max_model_len=4096)
        eng = build_engine(str(cfg_path), "H200", None, args, None, speculative=sc)
        runner = "V2" if d.get("v2_model_runner") else "V1"
        for b, run in d["batches"].items():
            b = int(b)
            steps = decode_steps(run["phases"], b)
            if not steps:
                continue
            gen = [i for i, _ in enumerate(steps)]
            tokens = statistics.median(s["tokens"] for s, _, _ in steps)
            drafts = statistics.median(s["spec"] for s, _, _ in steps)
            step = statistics.median(g for _, g, _ in steps)
            ph = {p: statistics.median(x[p] for _, _, x in steps)
                  for p in ("schedule", "execute", "sample", "update")}
            rest = step - sum(ph.values())
            # context per sequence: the prompt plus half the output on average over the steps
            ctx = d["prompt_tokens"] + d["output_tokens"] // 2
            shape = ScheduledStep([], [], b, b * ctx, 0, 0, 0, draft_tokens=round(drafts),
                                  drafting_seqs=b if drafts else 0)
            sim = eng.cost.step_duration_s(shape) * 1e3
            name = f"{model} {'ngram-k%d' % spec['num_speculative_tokens'] if spec else 'nospec'}"
            if "v2_model_runner" in d and not spec:
                name += f" ({runner} runner)"
            print(f"| {name} | {b} | {len(gen)} | {tokens:.0f} | {drafts:.0f} | {step:.2f} | "
                  f"{ph['schedule']:.2f} | {ph['execute']:.2f} | {ph['sample']:.2f} | {ph['update']:.2f} | "
                  f"{rest:.2f} | {sim:.2f} | {100 * (sim - step) / step:+.1f} |")


    print()
    print("| runner | eager us / layer | us / kernel | piecewise us / layer |")
    print("|---|---:|---:|---:|")
    for runner, modes in host_layers(root).items():
        print(f"| {runner} | {modes['eager']:.0f} | {modes['eager'] / KERNELS_PER_LAYER:.1f} | {modes['piecewise']:.0f} |")


if __name__ == "__main__":
    main()
