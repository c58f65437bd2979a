"""Markdown tables from results/ (written by run.sh). Usage: tables.py RESULTS_DIR."""

from __future__ import annotations

import json
import sys
from pathlib import Path

MODELS = (("awq", "Qwen3-14B-AWQ"), ("bf16", "Qwen3-14B bf16"))
CONCS = (16, 64, 256)
WORKLOADS = (("sharegpt", "ShareGPT", 512), ("prefix", "prefix repetition 256/256 x10, out 128", 576))
ARMS4 = ("tp4", "tp2x2-rr", "tp2x2-ca", "tp2x2-direct", "4rep-rr", "4rep-ca", "4rep-direct")
ARMS8 = ("tp8", "8rep-rr", "8rep-ca", "8rep-direct")


def load(p: Path) -> dict:
    return json.loads(p.read_text())


def replicas_direct(arm: str) -> int:
    """Replicas an arm named '*-direct' stands for (its one simulated replica is scaled)."""
    if not arm.endswith("direct"):
        return 1
    return {"tp2x2": 2, "4rep": 4, "8rep": 8}[arm.rsplit("-", 1)[0]]


def plan_tables(res: Path) -> list[str]:
    out = ["## Planner what-if (`servelab plan --what-if`): decode tok/s of the whole arm, "
           "per-replica batch, binding ceiling", ""]
    for tag, title in MODELS:
        for gpus, arms in ((4, ("base", "tp2x2", "4rep")), (8, ("base", "tp4x2", "tp2x4", "8rep"))):
            names = ["tp4" if a == "base" and gpus == 4 else "tp8" if a == "base" else a for a in arms]
            out.append(f"### {title}, {gpus} x H200")
            out.append("")
            out.append("| concurrency | context | " + " | ".join(names) + " | roofline's pick |")
            out.append("|---|---|" + "---|" * len(arms) + "---|")
            for c in CONCS:
                for _, _, ctx in WORKLOADS:
                    d = load(res / "plan" / f"plan-{tag}-{gpus}gpu-c{c}-ctx{ctx}.json")
                    by = {a["arm"]: a for a in d["what_if"]}
                    cells = []
                    for a in arms:
                        r = by[a]
                        cells.append(f"{r['decode_tok_s']:,.0f} (b{r['batch_per_replica']}, "
                                     f"{r['step_ms']:.2f} ms, {r['binding']})")
                    best = max(arms, key=lambda a: by[a]["decode_tok_s"] if by[a]["holds_target"] else -1)
                    best = names[arms.index(best)]
                    out.append(f"| {c} | {ctx} | " + " | ".join(cells) + f" | {best} |")
            out.append("")
    return out


def step_tables(res: Path) -> list[str]:
    out = ["## Planner step breakdown per GPU (`servelab plan --batch B --context 512 --json`, "
           "pure roofline, datasheet peaks)", ""]
    for tag, title in MODELS:
        out.append(f"### {title}")
        out.append("")
        out.append("| TP | batch | weights GiB/GPU | bytes/step/GPU (GB) | memory ms | compute ms "
                   "| all-reduce ms | step ms | bound | tok/s per replica |")
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        for tp in (1, 2, 4, 8):
            for b in (1, 2, 4, 8, 16, 32, 64, 128, 256):
                d = load(res / "plan" / f"step-{tag}-tp{tp}-b{b}.json")
                s = d["step"]
                if b in (1, 16, 64, 256):
                    out.append(
                        f"| {tp} | {b} | {d['weights_gib']:.2f} | {s['bytes_read'] / 1e9:.2f} | "
                        f"{s['memory_s'] * 1e3:.3f} | {s['compute_s'] * 1e3:.3f} | "
                        f"{s['allreduce_s'] * 1e3:.3f} | {s['total_s'] * 1e3:.3f} | {s['bound']} | "
                        f"{b / s['total_s']:,.0f} |")
            # memory_s and compute_s are affine in the batch at a fixed context: solve for the
            # batch where they meet (from the batch-1 and batch-256 probes).
            s1 = load(res / "plan" / f"step-{tag}-tp{tp}-b1.json")["step"]
            s2 = load(res / "plan" / f"step-{tag}-tp{tp}-b256.json")["step"]
            km = (s2["memory_s"] - s1["memory_s"]) / 255
            kc = (s2["compute_s"] - s1["compute_s"]) / 255
            m0, c0 = s1["memory_s"] - km, s1["compute_s"] - kc
            bstar = (m0 - c0) / (kc - km) if kc > km else float("inf")
            out.append(f"| {tp} | compute-bound from batch ~{bstar:,.0f} (per replica) | | | | | | | | |")
        out.append("")
    return out


def sim_row(res: Path, tag: str, wl: str, c: int, arm: str) -> dict | None:
    p = res / "sim" / f"{tag}-{wl}-c{c}-{arm}.json"
    if not p.exists():
        return None
    d = load(p)
    k = replicas_direct(arm)
    return {"out": d["output_throughput"] * k, "tot": d["total_token_throughput"] * k,
            "ttft": d["mean_ttft_ms"], "p99ttft": d["p99_ttft_ms"], "tpot": d["mean_tpot_ms"],
            "failed": d["failed"]}


def sim_tables(res: Path) -> list[str]:
    out = ["## Simulator (`servelab sim run`, H200 default calibration, seed 0, Qwen3 tokenizer)",
           "", "Each cell: output tok/s / total tok/s / mean TTFT ms / mean TPOT ms. "
           "`-rr` round_robin, `-ca` cache_aware, `-direct` one replica simulated at c/N with "
           "n/N prompts, throughput x N (a perfect split, no router).", ""]
    for tag, title in MODELS:
        for wl, wtitle, _ in WORKLOADS:
            for gpus, arms in ((4, ARMS4), (8, ARMS8)):
                out.append(f"### {title}, {wtitle}, {gpus} x H200")
                out.append("")
                out.append("| arm | " + " | ".join(f"c{c}" for c in CONCS) + " |")
                out.append("|---|" + "---|" * len(CONCS))
                for arm in arms:
                    cells = []
                    for c in CONCS:
                        r = sim_row(res, tag, wl, c, arm)
                        cells.append("-" if r is None else
                                     f"{r['out']:,.0f} / {r['tot']:,.0f} / {r['ttft']:.1f} / "
                                     f"{r['tpot']:.2f}" + (f" ({r['failed']} failed)" if r["failed"] else ""))
                    out.append(f"| {arm} | " + " | ".join(cells) + " |")
                # ratio of the best replica arm to the TP arm (output tok/s), as the seeds quote
                tp_arm = "tp4" if gpus == 4 else "tp8"
                rep = "4rep" if gpus == 4 else "8rep"
                cells = []
                for c in CONCS:
                    t = sim_row(res, tag, wl, c, tp_arm)
                    rs = [sim_row(res, tag, wl, c, f"{rep}-{p}") for p in ("rr", "ca")]
                    rs = [r for r in rs if r]
                    if t and rs:
                        best = max(r["out"] for r in rs)
                        cells.append(f"{best / t['out']:.2f}x, TTFT {max(rs, key=lambda r: r['out'])['ttft'] / t['ttft']:.2f}x")
                    else:
                        cells.append("-")
                out.append(f"| {rep} (best routed) / {tp_arm} | " + " | ".join(cells) + " |")
                out.append("")
    return out


def same_engine_load(res: Path) -> list[str]:
    """TP engine at concurrency c against N replicas each at c (N x the total load): the
    comparison a per-engine benchmark makes when each engine gets the same --max-concurrency."""
    out = ["## TP engine at c vs N replicas each at c (N x c in total), simulator", "",
           "| model | workload | GPUs | TP arm at c | replicas (round robin) at N x c | "
           "output tok/s ratio | TTFT TP / replicas (ms) |", "|---|---|---|---|---|---|---|"]
    for tag, title in MODELS:
        for wl, wtitle, _ in WORKLOADS:
            for tp_arm, rep, n in (("tp4", "4rep", 4), ("tp8", "8rep", 8)):
                for c in CONCS:
                    if c * n not in CONCS:
                        continue
                    t = sim_row(res, tag, wl, c, tp_arm)
                    r = sim_row(res, tag, wl, c * n, f"{rep}-rr")
                    if not (t and r):
                        continue
                    out.append(f"| {title} | {wtitle.split(' ')[0]} | {n} | {tp_arm} c{c}: "
                               f"{t['out']:,.0f} | {rep} c{c * n}: {r['out']:,.0f} | "
                               f"{r['out'] / t['out']:.2f}x | {t['ttft']:.1f} / {r['ttft']:.1f} |")
    out.append("")
    return out


def main() -> None:
    res = Path(sys.argv[1])
    lines = plan_tables(res) + step_tables(res) + sim_tables(res) + same_engine_load(res)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
