"""The fine-grid profiles against the shipped ones (issues 14 and 17, 2026-12-06).

    .venv/bin/python docs/validation/sim-grid-2026-12-06/summarise.py results-h200/profile.json [results-h100/profile.json ...]
    .venv/bin/python docs/validation/sim-grid-2026-12-06/summarise.py --baseline OLD.json NEW.json

Per profile (its GPU's shipped profile alongside, or the one profile given as --baseline,
"shipped" then reading "baseline"):
- how long it took and how many points of each family it holds;
- reproducibility: on the points both profiles hold, new / shipped time, median and range
  per family;
- the staircase: on the GEMM points only the new grid holds, the measured time over what the
  shipped profile gives there (the cost model's interpolation between its points), median
  and range, and the largest per layer shape.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from servelab.hardware.catalog import match_gpu
from servelab.sim.cost import kernel_times, shipped_profile
from servelab.sim.kernel_profile import KernelProfile

def _spread(ratios: list[float]) -> str:
    if not ratios:
        return "-"
    return f"x{statistics.median(ratios):.2f} (x{min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} points)"


def _keyed(p: KernelProfile) -> dict[str, dict[tuple, float]]:
    return {
        "gemm": {(g.family, g.m, g.n, g.k): g.time_us for g in p.gemm},
        "decode attention": {(a.backend, a.batch, a.context, a.q_heads, a.kv_heads, a.head_dim,
                              a.queries): a.time_us for a in p.attention_decode},
        "prefill attention": {(a.backend, a.tokens, a.cached, a.q_heads, a.kv_heads, a.head_dim): a.time_us
                              for a in p.attention_prefill},
        "moe": {(m.tokens, m.experts, m.topk, m.hidden, m.intermediate): m.time_us for m in p.moe},
        "elementwise": {(e.bytes,): e.time_us for e in p.elementwise},
    }


def summarise(path: Path, baseline: Path | None) -> list[str]:
    new = KernelProfile.load(path)
    gpu = match_gpu(new.device.gpu_name, new.device.memory_total_mib)
    if gpu is None:
        raise SystemExit(f"{path}: no catalog GPU for {new.device.gpu_name!r}")
    name = gpu.name
    old = KernelProfile.load(baseline) if baseline else shipped_profile(gpu)
    if old is None:
        raise SystemExit(f"{path}: servelab ships no profile for {name} to compare with")
    was = "baseline" if baseline else "shipped"
    out = [f"## {name}: {path}", "",
           f"{new.device.gpu_name}, driver {new.device.driver}, CUDA {new.device.cuda}, torch "
           f"{new.device.torch}, vLLM {new.device.vllm}; measured in {new.took_s:.1f} s "
           f"({was}: {old.took_s:.1f} s, {old.measured_at[:10]}).", "",
           f"| family | points (new / {was}) | on shared points, new / {was} |", "|---|---:|---|"]
    kn, ko = _keyed(new), _keyed(old)
    for fam in kn:
        shared = [kn[fam][k] / ko[fam][k] for k in kn[fam].keys() & ko[fam].keys()]
        out.append(f"| {fam} | {len(kn[fam])} / {len(ko[fam])} | {_spread(shared)} |")
    shipped = kernel_times(gpu, old)
    old_ms = {(g.family, g.n, g.k): set() for g in old.gemm}
    for g in old.gemm:
        old_ms[(g.family, g.n, g.k)].add(g.m)
    stair: dict[str, list[float]] = {}
    worst: list[tuple[float, str]] = []
    for g in new.gemm:
        ms = old_ms.get((g.family, g.n, g.k))
        if ms is None or g.m in ms or g.m > max(ms) or g.m < min(ms):
            continue
        r = g.time_us * 1e-6 / shipped.gemm_s(g.family, g.m, g.n, g.k)
        band = "M < 256" if g.m < 256 else "M 256-1,024" if g.m <= 1024 else "M > 1,024"
        stair.setdefault(f"{g.family}, {band}", []).append(r)
        worst.append((r, f"{g.family} M={g.m} N={g.n} K={g.k}"))
    out += ["", f"Between the {was} points: measured / the {was} profile's interpolation.", "",
            "| GEMMs | ratio |", "|---|---|"]
    for key in sorted(stair):
        out.append(f"| {key} | {_spread(stair[key])} |")
    worst.sort(reverse=True)
    out += ["", "Largest: " + "; ".join(f"{w} x{r:.2f}" for r, w in worst[:5]) + ".",
            "Smallest: " + "; ".join(f"{w} x{r:.2f}" for r, w in worst[-3:]) + ".", ""]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profiles", nargs="+", type=Path)
    ap.add_argument("--baseline", type=Path, help="compare with this profile instead of the shipped one")
    a = ap.parse_args()
    for p in a.profiles:
        print("\n".join(summarise(p, a.baseline)))


if __name__ == "__main__":
    main()
