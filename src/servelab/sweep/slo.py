"""The SLO (`--slo ttft:MS tpot:MS e2el:MS` at a percentile) and the capacity under it.

Capacity: walking the measured levels upward, the last level before the first one that
breaks any SLO at the chosen percentile (or is over-saturated). A noisy pass above a failure
is not counted: the capacity is the load the service holds with every lower load holding too.
When the lowest level already breaks the SLO the answer says so, with the figure it gave.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servelab.errors import ServelabError
from servelab.metrics.result import GoodputSLO

SLO_METRICS = ("ttft", "tpot", "e2el")


@dataclass(frozen=True, slots=True)
class Slo:
    """Objectives in ms per metric, judged at `percentile` (e.g. 99)."""

    limits_ms: tuple[tuple[str, float], ...]
    percentile: float = 99.0

    def goodput_slo(self) -> GoodputSLO:
        return GoodputSLO(**{f"{m}_ms": v for m, v in self.limits_ms})

    def describe(self) -> str:
        return ", ".join(f"{m} p{self.percentile:g} <= {v:g} ms" for m, v in self.limits_ms)


def parse_slo(items: Sequence[str], percentile: float,
              percentile_flag: str = "--slo-percentile") -> Slo:
    """Parse ``--slo ttft:500 tpot:50`` (items may also be comma-separated); errors name
    `percentile_flag` for the percentile."""
    if not 0 < percentile <= 100:
        raise ServelabError(f"{percentile_flag} {percentile:g}: must be in (0, 100]")
    parts = [p.strip() for item in items for p in item.split(",") if p.strip()]
    if not parts:
        raise ServelabError("--slo: give at least one METRIC:MS pair (ttft, tpot, e2el)")
    limits: dict[str, float] = {}
    for part in parts:
        key, sep, raw = part.partition(":")
        key = key.strip().lower()
        if not sep or key not in SLO_METRICS:
            raise ServelabError(f"--slo: {part!r} is not METRIC:MS with METRIC one of ttft, tpot, e2el")
        if key in limits:
            raise ServelabError(f"--slo: {key} given twice")
        try:
            value = float(raw)
        except ValueError:
            raise ServelabError(f"--slo: {raw!r} in {part!r} is not a number of milliseconds") from None
        if not math.isfinite(value) or value <= 0:
            raise ServelabError(f"--slo: {part!r} must be a finite number > 0 ms")
        limits[key] = value
    return Slo(tuple(limits.items()), percentile)


@dataclass(frozen=True, slots=True)
class SloLevel:
    """A level's figures as the capacity reads them: latency (ms) at the SLO's percentile
    per metric (mean over repetitions), throughput, goodput, saturation."""

    level: float
    latency_ms: Mapping[str, float]
    output_tok_s: float
    request_goodput_rps: float | None
    saturated: bool


def breaches(slo: Slo, lv: SloLevel) -> list[str]:
    """The SLOs `lv` breaks, as ``"ttft p99 83.0 ms > 50 ms"``."""
    out = []
    for m, limit in slo.limits_ms:
        v = lv.latency_ms[m]
        if v > limit:
            out.append(f"{m} p{slo.percentile:g} {v:.1f} ms > {limit:g} ms")
    return out


@dataclass(frozen=True, slots=True)
class Capacity:
    """The answer: `level` None when no level meets the SLO; `message` says it in words."""

    level: float | None
    output_tok_s: float | None
    request_goodput_rps: float | None
    first_failure: float | None
    message: str


def capacity(slo: Slo, levels: Sequence[SloLevel], unit: str) -> Capacity:
    """Capacity under `slo` of `levels` (any order); `unit` names the level ("concurrency")."""
    ordered = sorted(levels, key=lambda lv: lv.level)
    if not ordered:
        raise ValueError("no levels")
    best: SloLevel | None = None
    for lv in ordered:
        broken = breaches(slo, lv)
        if broken or lv.saturated:
            why = "; ".join(broken) if broken else "over-saturated"
            if best is None:
                first = "; ".join(f"{m} p{slo.percentile:g} {lv.latency_ms[m]:.1f} ms"
                                  for m, _ in slo.limits_ms)
                msg = (f"no level meets {slo.describe()}; the lowest level ({unit} {lv.level:g}) "
                       f"gave {first}" + (" (over-saturated)" if lv.saturated else ""))
                return Capacity(None, None, None, lv.level, msg)
            return Capacity(best.level, best.output_tok_s, best.request_goodput_rps, lv.level,
                            f"capacity under {slo.describe()}: {unit} {best.level:g} "
                            f"({best.output_tok_s:.1f} output tok/s); {unit} {lv.level:g} breaks it ({why})")
        best = lv
    assert best is not None
    return Capacity(best.level, best.output_tok_s, best.request_goodput_rps, None,
                    f"every measured level meets {slo.describe()}; capacity is at least {unit} "
                    f"{best.level:g} ({best.output_tok_s:.1f} output tok/s): raise --max-level")
