"""A sweep's outcome as a rich table, JSON, and the files under `--out`."""

from __future__ import annotations

from typing import Any

from servelab.sweep.runner import SweepOutcome
from servelab.textgrid import FitTable


def sweep_table(o: SweepOutcome) -> FitTable:
    """The levels as a table that fits any console width without cutting a figure."""
    p = o.config.percentile
    headers = (o.config.axis.mode, "why", "out tok/s", "req/s", "goodput req/s", f"TTFT p{p:g}",
               f"TPOT p{p:g}", f"E2EL p{p:g}", "wait avg/max", "run max", "KV peak", "preempt", "SLO")
    why = dict(o.order)
    knee = o.knee.level if o.knee else None
    cap = o.capacity.level if o.capacity else None
    rows = []
    for x in sorted(o.levels):
        lv = o.levels[x]
        s = lv.server
        mark = ("<- knee " if x == knee else "") + ("<- capacity" if x == cap else "")
        slo = "-" if lv.meets_slo is None else ("ok" if lv.meets_slo else "broken")
        if lv.saturated:
            slo = "OVER-SATURATED"
        rows.append((f"{x:g}", f"{why.get(x, '')} {mark}".strip(), f"{lv.throughput:,.1f}",
                     f"{lv.request_throughput:.2f}", "-" if lv.goodput is None else f"{lv.goodput:.2f}",
                     f"{lv.latency_ms('ttft'):,.1f}", f"{lv.latency_ms('tpot'):,.1f}",
                     f"{lv.latency_ms('e2el'):,.1f}",
                     "-" if s.mean_waiting is None else f"{s.mean_waiting:.1f}/{s.max_waiting:.0f}",
                     "-" if s.max_running is None else f"{s.max_running:.0f}",
                     "-" if s.peak_kv_usage is None else f"{100 * s.peak_kv_usage:.0f} %",
                     "-" if s.preemptions is None else f"{s.preemptions:.0f}", slo))
    return FitTable(f"sweep of {o.describe} ({o.config.axis.mode}; latencies in ms)", headers,
                    tuple(rows))


def summary_lines(o: SweepOutcome) -> list[str]:
    lines = [o.knee_note]
    if o.interval is not None:
        iv = o.interval
        lines.append(f"knee {100 * iv.confidence:.0f} % interval (bootstrap over "
                     f"{o.config.repetitions} repetitions): {iv.low:.1f} .. {iv.high:.1f}; "
                     f"per repetition: {', '.join(f'{k:g}' for k in iv.per_repetition)}")
    elif o.knee is not None:
        lines.append("no interval: one repetition (use --repetitions 3 or more)")
    if o.capacity is not None:
        lines.append(o.capacity.message)
    for b in o.bends:
        lines.append(f"why it bends at {o.config.axis.key(b.level)}: {b.kind}")
        lines.extend(f"  {x}" for x in b.lines)
    sat = [x for x, lv in sorted(o.levels.items()) if lv.saturated]
    steady = [x for x, lv in sorted(o.levels.items()) if not lv.saturated]
    if sat and steady and o.config.axis.mode == "rate":
        first = min(sat)
        below = [x for x in steady if x < first]
        if below:
            lines.append(f"highest steady rate: {max(below):g} req/s; {first:g} req/s fell behind")
    if sat:
        lines.append("over-saturated (not steady, left out of knee and capacity): "
                     + ", ".join(o.config.axis.key(x) for x in sat))
    lines.extend(f"note: {n}" for n in o.notes)
    return lines


def outcome_json(o: SweepOutcome) -> dict[str, Any]:
    """The sweep's summary (levels, knee, interval, capacity, bends) as plain JSON."""
    cfg = o.config
    levels = []
    for x in sorted(o.levels):
        lv = o.levels[x]
        s = lv.server
        levels.append({
            "level": x, "why": dict(o.order).get(x), "repetitions": len(lv.points),
            "seeds": [p.seed for p in lv.points],
            "output_throughput": lv.throughput, "request_throughput": lv.request_throughput,
            "request_goodput": lv.goodput,
            "output_throughput_by_repetition": [p.result.output_throughput for p in lv.points],
            **{f"p{cfg.percentile:g}_{m}_ms": lv.latency_ms(m) for m in ("ttft", "tpot", "itl", "e2el")},
            **{f"mean_{m}_ms": lv.mean_ms(m) for m in ("ttft", "tpot", "itl", "e2el")},
            "server": {"max_waiting": s.max_waiting, "mean_waiting": s.mean_waiting,
                       "max_running": s.max_running, "mean_running": s.mean_running,
                       "peak_kv_usage": s.peak_kv_usage, "preemptions": s.preemptions,
                       "prefix_hit_rate": s.prefix_hit_rate},
            "meets_slo": lv.meets_slo, "over_saturated": lv.saturated_reason,
        })
    k = o.knee
    return {
        "target": o.describe, "mode": cfg.axis.mode, "seed": cfg.seed,
        "repetitions": cfg.repetitions, "knee_tolerance": cfg.targets.knee_tolerance,
        "slo": None if cfg.slo is None else {"limits_ms": dict(cfg.slo.limits_ms),
                                             "percentile": cfg.slo.percentile},
        "levels": levels,
        "knee": None if k is None else {
            "level": k.level, "output_throughput": k.throughput_tok_s, "peak": k.peak_tok_s,
            "peak_level": k.peak_level, "threshold": k.threshold_tok_s, "crossing": k.crossing,
            "marginal_gain": k.marginal_gain},
        "knee_note": o.knee_note,
        "knee_interval": None if o.interval is None else {
            "low": o.interval.low, "high": o.interval.high, "confidence": o.interval.confidence,
            "per_repetition": list(o.interval.per_repetition)},
        "capacity": None if o.capacity is None else {
            "level": o.capacity.level, "output_throughput": o.capacity.output_tok_s,
            "request_goodput": o.capacity.request_goodput_rps,
            "first_failure": o.capacity.first_failure, "message": o.capacity.message},
        "bends": [{"level": b.level, "kind": b.kind, "lines": list(b.lines)} for b in o.bends],
        "notes": list(o.notes),
    }
