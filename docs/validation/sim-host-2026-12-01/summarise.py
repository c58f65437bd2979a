"""The host's CPU cost of a step outside CUDA graphs, from host_probe.py's four synthetic
models, and a draft model's forward from the draft-model engine trace (issues 14 and 17).

Per layer kind (the Qwen3 dense layer, the Qwen3-MoE layer): the difference of the median
walls between the deep and the shallow model over the layers added is the CPU time of one
layer (the GPU's share is a tenth of it, see `gpu_us_per_layer`), for a prefill beyond the
captured sizes (every kernel launched) and within them (piecewise graphs); divided by the
kernels the profiler counted per added layer, the CPU time per kernel launched.

The drafter (../sim-frontend-2026-12-01/results/trace-qwen3-14b-draft-k4.json: Qwen3-14B
with a Qwen3-0.6B-shaped draft model, K = 4, batch 1 and 16): verification steps per output
token from the attention kernels (one per layer of the target and of each drafter forward),
the step's wall from the decode wall per token; the drafter's CPU per layer and forward is
what the step leaves after the target's verification as the simulator prices it (its
operator model and residual, the drafter's forwards taken out), over K x the drafter's layers.

    .venv/bin/python docs/validation/sim-host-2026-12-01/summarise.py > docs/validation/sim-host-2026-12-01/summary.md
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
RES = HERE / "results"
TRACE = HERE.parent / "sim-frontend-2026-12-01" / "results" / "trace-qwen3-14b-draft-k4.json"
PAIRS = {"dense (Qwen3 layer)": ("probe-dense-4", "probe-dense-20"),
         "MoE (Qwen3-MoE layer)": ("probe-moe-4", "probe-moe-16")}


def layer_costs() -> dict[str, dict[str, dict[str, float]]]:
    """{layer kind: {eager|piecewise: {cpu_us_per_layer, kernels_per_layer, us_per_kernel,
    gpu_us_per_layer, intercept_ms}}}."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for kind, (lo, hi) in PAIRS.items():
        a = json.loads((RES / f"host-{lo}.json").read_text())
        b = json.loads((RES / f"host-{hi}.json").read_text())
        dl = b["layers"] - a["layers"]
        out[kind] = {}
        for mode in ("eager", "piecewise"):
            pa, pb = a["points"][mode], b["points"][mode]
            per = (pb["wall_ms_median"] - pa["wall_ms_median"]) * 1e3 / dl
            kern = (pb["kernels"] - pa["kernels"]) / dl
            out[kind][mode] = {"tokens": pa["tokens"], "cpu_us_per_layer": per, "kernels_per_layer": kern,
                               "us_per_kernel": per / kern,
                               "gpu_us_per_layer": (pb["kernels_us"] - pa["kernels_us"]) / dl,
                               "intercept_ms": pa["wall_ms_median"] - a["layers"] * per * 1e-3}
    return out


def drafter_layer_us() -> list[tuple[int, float, float, float]]:
    """[(batch, step wall ms, target verification ms as simulated, drafter us per layer)]."""
    from servelab.plan import EngineArgs
    from servelab.sim.engine import build_engine
    from servelab.sim.scheduler import ScheduledStep
    from servelab.speculation import SpeculativeConfig

    t = json.loads(TRACE.read_text())
    cfg = json.loads(t["speculative_config"])
    k = int(cfg["num_speculative_tokens"])
    spec = SpeculativeConfig(method="draft_model", model="Qwen/Qwen3-0.6B", num_speculative_tokens=k,
                             acceptance=cfg["synthetic_acceptance_rates"])
    eng = build_engine("Qwen/Qwen3-14B", "H200", None, EngineArgs(), None, True, None, spec)
    target_layers, draft_layers = eng.cost.ops.model.layers, eng.cost.spec.drafter.model.layers
    rows = []
    for b, rec in sorted(t["batches"].items(), key=lambda kv: int(kv[0])):
        batch = int(b)
        fa = sum(c for name, (c, _) in rec["decode_per_step"].items() if "FlashAttnFwdSm90" in name)
        steps_per_token = fa / (target_layers + k * draft_layers)  # per output token of one sequence
        wall_ms = rec["decode_step_ms"] / steps_per_token
        ctx = (t["context"] + t["steps"] // 2) * batch
        shape = ScheduledStep([], [], batch, ctx, 0, 0, 0, draft_tokens=k * batch, drafting_seqs=batch)
        target_ms = (eng.cost.step_duration_s(shape) - eng.cost.draft_s(shape)) * 1e3
        rows.append((batch, wall_ms, target_ms, (wall_ms - target_ms) * 1e3 / (k * draft_layers)))
    return rows


def draft_layer_us(rows: list[tuple[int, float, float, float]]) -> float:
    """The figure the simulator ships: the mean over the traced batches, 0.1 us."""
    return round(sum(r[3] for r in rows) / len(rows), 1)


def main() -> None:
    costs = layer_costs()
    print("# Host CPU per layer outside CUDA graphs (H200 host, vLLM 0.25.1)\n")
    print("| layer | mode | prompt tokens | CPU us / layer | kernels / layer | us / kernel | GPU us / layer | intercept ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for kind, modes in costs.items():
        for mode, c in modes.items():
            print(f"| {kind} | {mode} | {c['tokens']} | {c['cpu_us_per_layer']:.0f} | {c['kernels_per_layer']:.1f} | "
                  f"{c['us_per_kernel']:.1f} | {c['gpu_us_per_layer']:.0f} | {c['intercept_ms']:.2f} |")
    print("\n# A draft model's forward (Qwen3-0.6B shape, K = 4, in Qwen3-14B's engine)\n")
    print("| batch | verification step wall ms | target's verification, simulated ms | drafter CPU us / layer / forward |")
    print("|---:|---:|---:|---:|")
    rows = drafter_layer_us()
    for batch, wall, target, per in rows:
        print(f"| {batch} | {wall:.1f} | {target:.1f} | {per:.0f} |")
    print(f"\nMean over the batches: {draft_layer_us(rows)} us per drafter layer and forward "
          "(`servelab.sim.cost.H200_DRAFT_LAYER_US`).")


if __name__ == "__main__":
    main()
