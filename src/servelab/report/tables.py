"""The report's tables as data (title, headers, rows of text); markdown and HTML render them.

- comparison, per workload: for each load, each arm's total and output tok/s, mean and p99
  TTFT, mean and p99 ITL, duration, failed requests (the seeds' table);
- ratios, per workload: each other arm's figures divided by the baseline arm's at the same
  load (x1.25 = 25 % more; for latencies below 1 is better);
- memory: per arm, the planner's prediction beside the engine's figure (weights, KV GiB,
  KV tokens, maximum concurrency);
- SLO: per arm and workload, the highest load whose latency percentiles meet the SLO;
- failed arms with their reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from servelab.report.data import CellFigures, ExperimentData
from servelab.textgrid import FitTable


@dataclass(frozen=True, slots=True)
class Table:
    """A table as text cells; `keys` leading columns identify a row (load and arm)."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""
    keys: int = 1

    def to_text(self) -> FitTable:
        """The table for a console: one grid, column groups or stacked rows, whichever
        fits its width without cutting a figure."""
        return FitTable(self.title, self.headers, self.rows, keys=self.keys, note=self.note)

    def to_markdown(self) -> str:
        lines = [f"### {self.title}", "", "| " + " | ".join(self.headers) + " |",
                 "|" + "|".join("---" if i == 0 else "---:" for i in range(len(self.headers))) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows]
        if self.note:
            lines += ["", self.note]
        return "\n".join(lines)


METRICS: tuple[tuple[str, str], ...] = (
    ("total_tok_s", "total tok/s"),
    ("output_tok_s", "output tok/s"),
    ("mean_ttft_ms", "mean TTFT ms"),
    ("p99_ttft_ms", "p99 TTFT ms"),
    ("mean_itl_ms", "mean ITL ms"),
    ("p99_itl_ms", "p99 ITL ms"),
    ("duration_s", "duration s"),
)


def fmt(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def ratio(value: float, base: float) -> float | None:
    """value / base, None when the base is 0 or missing."""
    if base is None or value is None or base == 0 or math.isnan(base) or math.isnan(value):
        return None
    return value / base


def _arms_with_cells(data: ExperimentData) -> list[str]:
    names = {c.arm for c in data.cells}
    return [a.name for a in data.arms if a.name in names]


def comparison_table(data: ExperimentData, workload: str) -> Table:
    rows = []
    for load in data.loads:
        for arm in _arms_with_cells(data):
            c = data.cell(arm, workload, load)
            if c is None:
                continue
            rows.append((load, arm, *(fmt(getattr(c, k)) for k, _ in METRICS),
                         f"{c.failed}" if c.failed else "0"))
    return Table(f"{workload}: arms x loads", ("load", "arm", *(h for _, h in METRICS), "failed"),
                 tuple(rows), keys=2)


def ratio_table(data: ExperimentData, workload: str) -> Table:
    base = data.baseline
    rows = []
    for load in data.loads:
        b = data.cell(base, workload, load)
        if b is None:
            continue
        for arm in _arms_with_cells(data):
            c = data.cell(arm, workload, load)
            if arm == base or c is None:
                continue
            vals = (ratio(getattr(c, k), getattr(b, k)) for k, _ in METRICS)
            rows.append((load, arm, *(("x" + fmt(v, 2)) if v is not None else "-" for v in vals)))
    return Table(f"{workload}: ratios vs baseline {base}", ("load", "arm", *(h for _, h in METRICS)),
                 tuple(rows), note="x1.25 = 1.25 times the baseline's figure at the same load "
                 "(throughput: higher is better; latency and duration: lower is better).", keys=2)


def _get(d: dict[str, Any] | None, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def memory_table(data: ExperimentData) -> Table:
    rows = []
    for arm in data.arms:
        mem = _get(arm.plan, "memory")
        eng = arm.startup or {}
        pair = lambda plan_v, eng_v, d=2: f"{fmt(plan_v, d)} / {fmt(eng_v, d)}"  # noqa: E731
        mml = eng.get("max_concurrency_context_tokens") or eng.get("max_model_len") or _get(mem, "max_model_len")
        rows.append((
            arm.name,
            pair(_get(mem, "weights_gib"), eng.get("model_loading_gib")),
            pair(_get(mem, "kv_cache_gib"), eng.get("available_kv_gib")),
            pair(_get(mem, "kv_cache_tokens"), eng.get("kv_cache_tokens"), 0),
            pair(_get(mem, "max_concurrency"), eng.get("max_concurrency")),
            fmt(mml, 0),
            fmt(_get(mem, "max_num_seqs"), 0),
        ))
    note = ("planner / engine: the planner's prediction, then the engine's own startup figure "
            "('-' when absent; the simulator's engine builds its pool from the plan). Maximum "
            "concurrency = KV tokens / max_model_len: how many full-length requests fit, not "
            "the batch width, which max_num_seqs caps.")
    return Table("memory budget per arm (per GPU)",
                 ("arm", "weights GiB", "KV GiB", "KV tokens", "max concurrency",
                  "max_model_len", "max_num_seqs"), tuple(rows), note)


def meets_slo(c: CellFigures, slo: dict[str, Any]) -> bool:
    p = slo.get("percentile", 99.0)
    word = str(int(p)) if float(p).is_integer() else str(p)
    for metric in ("ttft", "tpot", "e2el"):
        limit = slo.get(f"{metric}_ms")
        if limit is None:
            continue
        value = c.percentiles.get(f"p{word}_{metric}")
        if value is None or value > limit or c.failed:
            return False
    return True


def slo_table(data: ExperimentData) -> Table | None:
    slo = data.manifest["spec"].get("slo")
    if not slo:
        return None
    p = slo.get("percentile", 99.0)
    limits = ", ".join(f"{m} <= {slo[f'{m}_ms']:g} ms" for m in ("ttft", "tpot", "e2el") if slo.get(f"{m}_ms"))
    rows = []
    for wl in data.workloads:
        for arm in _arms_with_cells(data):
            ok = [c for c in (data.cell(arm, wl, ld) for ld in data.loads) if c and meets_slo(c, slo)]
            best = max(ok, key=lambda c: c.output_tok_s) if ok else None
            rows.append((wl, arm, best.load if best else "none",
                         fmt(best.output_tok_s) if best else "-",
                         fmt(best.goodput_s, 2) if best else "-"))
    return Table(f"SLO (p{p:g}: {limits}): best load that meets it",
                 ("workload", "arm", "load", "output tok/s", "goodput req/s"), tuple(rows),
                 note="A load with failed requests does not meet the SLO.", keys=2)


def failed_arms_table(data: ExperimentData) -> Table | None:
    rows = tuple((a.name, (a.status.reason or "").splitlines()[0] if a.status and a.status.reason else "")
                 for a in data.arms if a.status is not None and a.status.state == "failed")
    if not rows:
        return None
    return Table("failed arms", ("arm", "reason (first line; full text in arms/<arm>/status.json)"), rows)


def all_tables(data: ExperimentData) -> list[Table]:
    tables: list[Table] = []
    for wl in data.workloads:
        if any(c.workload == wl for c in data.cells):
            tables += [comparison_table(data, wl), ratio_table(data, wl)]
    tables.append(memory_table(data))
    for extra in (slo_table(data), failed_arms_table(data)):
        if extra is not None:
            tables.append(extra)
    return tables
