"""Sweep and tune plots as PNG files (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from servelab.sweep.runner import SweepOutcome  # noqa: E402


def _save(fig: plt.Figure, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=90, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(path)


def sweep_plot(o: SweepOutcome, path: Path) -> None:
    """Left: throughput vs level with the knee. Right: the throughput-latency curve (TTFT
    and TPOT at the SLO's percentile vs output throughput) with the SLO lines."""
    p = o.config.percentile
    steady = o.steady()
    sat = [lv for x, lv in sorted(o.levels.items()) if lv.saturated]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    a.plot([lv.level for lv in steady], [lv.throughput for lv in steady], "o-", label="steady")
    if sat:
        a.plot([lv.level for lv in sat], [lv.throughput for lv in sat], "x", color="red",
               label="over-saturated")
    if o.knee is not None:
        a.axvline(o.knee.level, color="green", ls="--", label=f"knee {o.knee.level:g}")
        a.axhline(o.knee.threshold_tok_s, color="green", ls=":", lw=0.8)
        if o.interval is not None:
            a.axvspan(o.interval.low, o.interval.high, color="green", alpha=0.12, label="knee interval")
    if o.capacity is not None and o.capacity.level is not None:
        a.axvline(o.capacity.level, color="purple", ls="-.", label=f"SLO capacity {o.capacity.level:g}")
    a.set_xscale("log", base=2)
    a.set_xlabel(o.config.axis.mode if o.config.axis.mode == "concurrency" else "request rate (req/s)")
    a.set_ylabel("output tokens/s")
    a.legend(fontsize=8)
    a.grid(alpha=0.3)
    by_tput = sorted(steady, key=lambda lv: lv.throughput)
    tput = [lv.throughput for lv in by_tput]
    for metric, style in (("ttft", "o-"), ("tpot", "s-")):
        b.plot(tput, [lv.latency_ms(metric) for lv in by_tput], style, label=f"{metric.upper()} p{p:g}")
    if o.config.slo is not None:
        for metric, limit in o.config.slo.limits_ms:
            b.axhline(limit, ls="--", color="red", lw=1)
            b.annotate(f"SLO {metric} {limit:g} ms", (min(tput or [0]), limit), fontsize=8, color="red")
    if o.knee is not None:
        b.axvline(o.knee.throughput_tok_s, color="green", ls="--", label="knee")
    b.set_yscale("log")
    b.set_xlabel("output tokens/s")
    b.set_ylabel("latency (ms)")
    b.legend(fontsize=8)
    b.grid(alpha=0.3)
    fig.suptitle(o.describe)
    _save(fig, path)


def pareto_plot(points: Sequence[tuple[float, float, str, bool]], tpot_slo_ms: float | None,
                best: tuple[float, float] | None, path: Path, title: str) -> None:
    """Throughput per GPU vs per-user tokens/s (1000 / mean TPOT); `points` are
    (per-user tok/s, tok/s per GPU, label, meets SLO). The Pareto front is drawn, the
    region the TPOT SLO allows is shaded."""
    fig, ax = plt.subplots(figsize=(7.5, 5))
    ok = [p for p in points if p[3]]
    bad = [p for p in points if not p[3]]
    if bad:
        ax.plot([p[0] for p in bad], [p[1] for p in bad], ".", color="grey", alpha=0.5, label="breaks SLO")
    if ok:
        ax.plot([p[0] for p in ok], [p[1] for p in ok], "o", color="tab:blue", ms=4, label="meets SLO")
    front = []
    for p in sorted(points, key=lambda q: -q[0]):
        if not front or p[1] > front[-1][1]:
            front.append(p)
    if front:
        ax.plot([p[0] for p in front], [p[1] for p in front], "-", color="black", lw=1, label="Pareto front")
    if tpot_slo_ms:
        x0 = 1000.0 / tpot_slo_ms
        ax.axvspan(x0, max([p[0] for p in points] + [x0]) * 1.05, color="green", alpha=0.08,
                   label=f"TPOT <= {tpot_slo_ms:g} ms")
    if best is not None:
        ax.plot([best[0]], [best[1]], "*", color="red", ms=14, label="best")
    ax.set_xlabel("per-user tokens/s (1000 / mean TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)
