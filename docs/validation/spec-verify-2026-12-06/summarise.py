"""The figures of this run's README from its results (issue 17, 2026-12-06).

    .venv/bin/python docs/validation/spec-verify-2026-12-06/summarise.py > summary.md
    .venv/bin/python docs/validation/spec-verify-2026-12-06/summarise.py --results DIR --gpu NAME \
        --profile FILE --baseline FILE > OTHER.md

--results (default: this folder's results/) holds kernels.jsonl, trace-k6low.json and
trace-nospec.json as `device.sh kernels` and `trace` write them; --gpu (default H200) is the
catalog's name of the GPU they were measured on; --profile (default: RESULTS/profile.json) is
that run's profile and --baseline (default: the GPU's shipped profile) the one section 4
compares it with.

1. Verification attention: FlashAttention time at q queries per sequence over q = 1 (Qwen3-14B's
   heads, 40/8/128), from kernels.jsonl.
2. GEMMs between M = 256 and 512: measured against the log-log interpolation between the two
   points the shipped profiles have, per Qwen3-14B shape and per layer.
3. The engine traces: per target forward (FlashAttention launches / 40 layers), the wall time
   and the GPU's kernels by kind, speculative (n-gram K = 6, low synthetic acceptance) and not.
4. The operator model's price of the same forwards (Qwen3-14B, one GPU), with the GPU's shipped
   profile and with this run's.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

from servelab.hardware.catalog import get_gpu
from servelab.models.catalog import load_model
from servelab.plan.args import EngineArgs
from servelab.sim.cost import shipped_profile
from servelab.sim.kernel_profile import KernelProfile
from servelab.sim.kernels import DatasheetKernels, ProfiledKernels
from servelab.sim.operators import OperatorModel

HERE = Path(__file__).resolve().parent
LAYERS = 40
# Qwen3-14B per layer: QKV, O, gate-up, down; then the LM head
SHAPES = {"qkv": (7168, 5120), "o": (5120, 5120), "gate_up": (34816, 5120), "down": (5120, 17408)}
LM_HEAD = (151936, 5120)


def attention(rows: list[dict]) -> list[str]:
    t = {(r["batch"], r["context"], r["q_len"]): r["time_us"] for r in rows
         if r["kind"] == "attn" and r["q_heads"] == 40}
    out = ["## 1. Verification attention (40 / 8 / 128 heads), time at q queries per sequence over q = 1", "",
           "| batch | context | q = 1 us | q = 2 | q = 3 | q = 5 | q = 7 |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for b in (1, 16, 64, 256):
        for c in (512, 1024, 2048):
            one = t[(b, c, 1)]
            out.append(f"| {b} | {c} | {one:.1f} | " + " | ".join(f"x{t[(b, c, q)] / one:.3f}" for q in (2, 3, 5, 7)) + " |")
    return out + [""]


def gemms(rows: list[dict]) -> list[str]:
    t = {(r["m"], r["n"], r["k"]): r["time_us"] for r in rows if r["kind"] == "gemm"}

    def interp(m: int, n: int, k: int) -> float:
        f = math.log(m / 256) / math.log(2)
        return math.exp((1 - f) * math.log(t[(256, n, k)]) + f * math.log(t[(512, n, k)]))
    out = ["## 2. bf16 GEMMs between M = 256 and 512: measured / interpolated from M = 256 and 512", "",
           "| M | " + " | ".join(SHAPES) + " | lm_head | per layer, measured us | interpolated | lacking x 40 layers, ms |",
           "|---:|" + "---:|" * (len(SHAPES) + 4)]
    for m in (320, 384, 448):
        cells = [f"{t[(m, *nk)] / interp(m, *nk):.3f}" for nk in SHAPES.values()]
        cells.append(f"{t[(m, *LM_HEAD)] / interp(m, *LM_HEAD):.3f}")
        meas = sum(t[(m, *nk)] for nk in SHAPES.values())
        est = sum(interp(m, *nk) for nk in SHAPES.values())
        out.append(f"| {m} | " + " | ".join(cells) + f" | {meas:.1f} | {est:.1f} | {(meas - est) * LAYERS / 1e3:.2f} |")
    return out + [""]


def kind(name: str) -> str:
    if name.startswith("runtime:"):
        return "cpu"
    if "nvjet" in name or "cublas" in name or "gemm" in name.lower():
        return "gemm"
    if "flash" in name.lower() or "reshape_and_cache" in name:
        return "attention"
    if "triton" in name:
        return "triton"
    return "other"


def traces(results: Path) -> list[str]:
    out = ["## 3. Engine traces (offline engine, 512-token prompts, 64 output tokens): per target forward", "",
           "| arm | batch | forwards / output token | wall ms | GPU kernels ms | GEMM | attention | triton | other | wall - kernels |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for arm in ("k6low", "nospec"):
        d = json.loads((results / f"trace-{arm}.json").read_text())
        for b, r in d["batches"].items():
            per = r["decode_per_step"]
            fw = next(v[0] for k, v in per.items() if "FlashAttnFwdSm90" in k) / LAYERS
            by: dict[str, float] = defaultdict(float)
            for k, (_, us) in per.items():
                by[kind(k)] += us / fw / 1e3
            gpu = sum(v for k, v in by.items() if k != "cpu")
            wall = r["decode_step_ms"] / fw
            out.append(f"| {arm} | {b} | {fw:.3f} | {wall:.2f} | {gpu:.2f} | {by['gemm']:.2f} | {by['attention']:.2f} | "
                       f"{by['triton']:.2f} | {by['other']:.2f} | {wall - gpu:.2f} |")
    return out + [""]


def priced(gpu_name: str, profile: Path, baseline: Path | None) -> list[str]:
    gpu, model = get_gpu(gpu_name), load_model("Qwen/Qwen3-14B")
    new = KernelProfile.load(profile)
    base = KernelProfile.load(baseline) if baseline else shipped_profile(gpu)
    assert base is not None
    label = f"{'shipped' if baseline is None else 'baseline'} ({base.measured_at[:10]})"
    out = ["## 4. The operator model's GPU time for such forwards (context 560 a sequence)", "",
           "| profile | sequences | draft tokens | padded tokens | GEMMs, norms, LM head, sampler ms | attention ms | kernels ms |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for label, prof in ((label, base), ("this run's", new)):
        kt = ProfiledKernels(prof, gpu, DatasheetKernels(gpu))
        for k, seqs, drafts in ((0, 16, 0), (0, 64, 0), (6, 16, 96), (6, 64, 320), (6, 64, 384)):
            ops = OperatorModel(model, gpu, EngineArgs(), kt, num_speculative_tokens=k)
            p = ops.parts(seqs, seqs * 560, 0, 0, 0, draft_tokens=drafts, piecewise=False)
            out.append(f"| {label} | {seqs} | {drafts} | {ops.padded(seqs + drafts, uniform_decode=True)} | "
                       f"{p.linear_s * 1e3:.2f} | {p.attention_s * 1e3:.2f} | {p.total_s * 1e3:.2f} |")
    return out + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=HERE / "results")
    ap.add_argument("--gpu", default="H200")
    ap.add_argument("--profile", type=Path)
    ap.add_argument("--baseline", type=Path)
    a = ap.parse_args()
    rows = [json.loads(line) for line in (a.results / "kernels.jsonl").read_text().splitlines()]
    print("\n".join([*attention(rows), *gemms(rows), *traces(a.results),
                     *priced(a.gpu, a.profile or a.results / "profile.json", a.baseline)]))


if __name__ == "__main__":
    main()
