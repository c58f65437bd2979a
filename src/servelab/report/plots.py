"""The report's plots as PNG bytes (matplotlib, Agg backend: no display needed).

Per workload: output throughput vs load per arm; mean and p99 TTFT vs load; mean and p99
ITL vs load; latency CDFs (TTFT and ITL) of each arm at the heaviest load. Loads are
concurrency levels (or request rates when a spec has no concurrency loads).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from servelab.report.data import CellFigures, ExperimentData  # noqa: E402


@dataclass(frozen=True, slots=True)
class Plot:
    name: str  # file-safe, e.g. "sharegpt-throughput"
    title: str
    png: bytes


def _png(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _series(data: ExperimentData, workload: str) -> tuple[str, dict[str, list[CellFigures]]]:
    cells = [c for c in data.cells if c.workload == workload]
    closed = [c for c in cells if c.concurrency is not None]
    chosen, xlabel = (closed, "concurrency") if closed else (cells, "request rate (req/s)")
    by_arm: dict[str, list[CellFigures]] = {}
    for arm in data.arms:
        mine = sorted((c for c in chosen if c.arm == arm.name), key=lambda c: c.x_value)
        if mine:
            by_arm[arm.name] = mine
    return xlabel, by_arm


def _vs_load(data: ExperimentData, workload: str, metrics: list[tuple[str, str]], ylabel: str,
             title: str, log_y: bool) -> plt.Figure:
    xlabel, by_arm = _series(data, workload)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for arm, cells in by_arm.items():
        xs = [c.x_value for c in cells]
        for key, style in metrics:
            ax.plot(xs, [getattr(c, key) for c in cells], style, marker="o",
                    label=f"{arm} ({key.split('_')[0]})" if len(metrics) > 1 else arm)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log_y:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def _cdf(data: ExperimentData, workload: str, attr: str, label: str) -> plt.Figure:
    _, by_arm = _series(data, workload)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    load = ""
    for arm, cells in by_arm.items():
        heaviest = cells[-1]
        load = heaviest.load
        values = np.sort(np.asarray(getattr(heaviest, attr), dtype=float))
        values = values[values > 0]  # log axis; a multi-token chunk gives 0 ms gaps
        if values.size:
            ax.plot(values, np.arange(1, values.size + 1) / values.size, label=arm)
    ax.set_xlabel(f"{label} (ms)")
    ax.set_ylabel("fraction of values <= x")
    ax.set_xscale("log")
    ax.set_title(f"{workload}: {label} CDF at the heaviest load ({load})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def make_plots(data: ExperimentData) -> list[Plot]:
    """Every plot of the report, in display order."""
    plots: list[Plot] = []
    for wl in data.workloads:
        if not any(c.workload == wl for c in data.cells):
            continue
        plots.append(Plot(f"{wl}-throughput", f"{wl}: output throughput", _png(_vs_load(
            data, wl, [("output_tok_s", "-")], "output tok/s", f"{wl}: output throughput", False))))
        plots.append(Plot(f"{wl}-ttft", f"{wl}: TTFT", _png(_vs_load(
            data, wl, [("mean_ttft_ms", "-"), ("p99_ttft_ms", "--")], "TTFT (ms)",
            f"{wl}: TTFT mean (solid) and p99 (dashed)", True))))
        plots.append(Plot(f"{wl}-itl", f"{wl}: ITL", _png(_vs_load(
            data, wl, [("mean_itl_ms", "-"), ("p99_itl_ms", "--")], "ITL (ms)",
            f"{wl}: ITL mean (solid) and p99 (dashed)", False))))
        plots.append(Plot(f"{wl}-ttft-cdf", f"{wl}: TTFT CDF", _png(_cdf(data, wl, "ttfts_ms", "TTFT"))))
        plots.append(Plot(f"{wl}-itl-cdf", f"{wl}: ITL CDF", _png(_cdf(data, wl, "itls_ms", "ITL"))))
    return plots
