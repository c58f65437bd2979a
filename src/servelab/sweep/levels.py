"""Adaptive level choice: bracket the curve geometrically, then bisect around what matters.

A sweep wants three boundaries, each the flip of a (nearly) monotone predicate on the level
axis: the knee (throughput reaches `1 - knee_tolerance` of its peak), the SLO capacity (the
first level whose latency breaks the SLO) and, in rate mode, the saturation point (the first
level the server cannot keep up with). `next_level` is a pure function of what has been
measured so far: it walks the geometric chain `lo, lo*g, lo*g^2, ...` until every wanted
boundary is bracketed (or the chain ends), then bisects the measured pair around each
boundary until the pair is one step apart; for the knee it first bisects towards the peak
from both sides (the knee's threshold is a fraction of the peak). Nothing is fixed in advance, so a sweep spends
its levels where the curve bends rather than on an even grid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from servelab.errors import ServelabError

Mode = Literal["concurrency", "rate"]


class LevelView(Protocol):
    """What the level chooser reads of a measured level (means over repetitions)."""

    @property
    def throughput(self) -> float: ...  # output tokens/s

    @property
    def saturated(self) -> bool: ...

    @property
    def meets_slo(self) -> bool | None: ...  # None: no SLO given


@dataclass(frozen=True, slots=True)
class LevelAxis:
    """The level axis: concurrency (integers, step 1) or request rate (req/s, bisected
    geometrically down to `rate_resolution`, a relative step)."""

    mode: Mode
    lo: float
    hi: float
    growth: float = 2.0
    rate_resolution: float = 0.05

    def __post_init__(self) -> None:
        if not 0 < self.lo <= self.hi:
            raise ServelabError(f"levels: need 0 < --min-level ({self.lo:g}) <= --max-level ({self.hi:g})")
        if self.growth <= 1:
            raise ServelabError(f"--growth {self.growth:g}: must be > 1")
        if self.mode == "concurrency" and (self.lo != int(self.lo) or self.hi != int(self.hi)):
            raise ServelabError("concurrency levels must be whole numbers")
        if not 0 < self.rate_resolution < 1:
            raise ServelabError(f"--rate-resolution {self.rate_resolution:g}: must be in (0, 1)")

    def chain(self) -> list[float]:
        """The bracketing levels: lo, lo x growth, ... and hi last."""
        out = [self.lo]
        while out[-1] < self.hi:
            x = out[-1] * self.growth
            x = float(math.ceil(x)) if self.mode == "concurrency" else _round_rate(x)
            out.append(min(x, self.hi))
        return out

    def mid(self, a: float, b: float) -> float | None:
        """The level halfway between a < b, or None when they are one step apart."""
        if self.mode == "concurrency":
            return float((int(a) + int(b)) // 2) if b - a > 1 else None
        if b / a - 1 <= self.rate_resolution:
            return None
        m = _round_rate(math.sqrt(a * b))
        return m if a < m < b else None

    def key(self, level: float) -> str:
        """File-safe name of a level: ``c64``, ``r2.5``."""
        return f"c{int(level)}" if self.mode == "concurrency" else f"r{level:g}"


def _round_rate(x: float) -> float:
    return float(f"{x:.3g}")


@dataclass(frozen=True, slots=True)
class Boundaries:
    """Which boundaries to find and how the knee and flatness are defined."""

    knee: bool = True
    slo: bool = True
    saturation: bool = True
    knee_tolerance: float = 0.10  # knee: smallest level with throughput >= (1 - tol) x peak
    flat_gain: float = 0.05  # throughput "stopped growing": gain below this vs the best so far
    max_levels: int = 40


def flattened(chain_measured: list[tuple[float, float]], flat_gain: float) -> bool:
    """Whether the last chain level gained less than `flat_gain` over the best before it."""
    if len(chain_measured) < 2:
        return False
    best_before = max(t for _, t in chain_measured[:-1])
    return chain_measured[-1][1] < (1 + flat_gain) * best_before


def next_level(axis: LevelAxis, measured: Mapping[float, LevelView],
               targets: Boundaries) -> tuple[float, str] | None:
    """The next level to measure and why (``bracket``, ``knee``, ``slo``, ``saturation``),
    or None when every wanted boundary is resolved to one step."""
    if len(measured) >= targets.max_levels:
        return None
    chain_seen: list[tuple[float, float]] = []
    for x in axis.chain():
        if x not in measured:
            return x, "bracket"
        v = measured[x]
        if v.saturated:
            break  # nothing beyond a level the server could not keep up with is steady
        chain_seen.append((x, v.throughput))
        if _bracketed(chain_seen, measured, targets):
            break
    if targets.knee:
        for pair in peak_gaps(measured):
            m = axis.mid(*pair)
            if m is not None and m not in measured:
                return m, "peak"
    for name, gap in (("knee", knee_gap), ("slo", slo_gap), ("saturation", saturation_gap)):
        if not getattr(targets, name):
            continue
        pair = gap(measured, targets)
        if pair is not None:
            m = axis.mid(*pair)
            if m is not None and m not in measured:
                return m, name
    return None


def peak_gaps(measured: Mapping[float, LevelView]) -> list[tuple[float, float]]:
    """The gaps either side of the highest steady throughput. The knee's threshold is a
    fraction of the peak, so the peak is located (to one step, by bisecting towards it from
    both sides) before the knee: a coarse bracket's peak can sit a few per cent low, and on
    a flat top that moves the knee by several steps."""
    xs = steady(measured)
    if len(xs) < 2:
        return []
    i = max(range(len(xs)), key=lambda j: measured[xs[j]].throughput)
    out = []
    if i > 0:
        out.append((xs[i - 1], xs[i]))
    if i < len(xs) - 1:
        out.append((xs[i], xs[i + 1]))
    return out


def _bracketed(chain_seen: list[tuple[float, float]], measured: Mapping[float, LevelView],
               targets: Boundaries) -> bool:
    knee_done = not targets.knee or flattened(chain_seen, targets.flat_gain)
    slo_done = not targets.slo or any(measured[x].meets_slo is False for x, _ in chain_seen)
    # Saturation is bracketed only by reaching a saturated level (the chain walk breaks there).
    return knee_done and slo_done and not targets.saturation


def steady(measured: Mapping[float, LevelView]) -> list[float]:
    """Measured levels in order, over-saturated ones left out."""
    return sorted(x for x, v in measured.items() if not v.saturated)


def knee_gap(measured: Mapping[float, LevelView], targets: Boundaries) -> tuple[float, float] | None:
    """(last level below the knee threshold, first level at or above it)."""
    xs = steady(measured)
    if len(xs) < 2:
        return None
    peak = max(measured[x].throughput for x in xs)
    thr = (1 - targets.knee_tolerance) * peak
    for a, b in zip(xs, xs[1:]):
        if measured[a].throughput < thr <= measured[b].throughput:
            return a, b
    return None


def slo_gap(measured: Mapping[float, LevelView], targets: Boundaries) -> tuple[float, float] | None:
    """(highest level meeting the SLO below the first failure, the first failure)."""
    xs = sorted(measured)
    for a, b in zip(xs, xs[1:]):
        if measured[a].meets_slo is False:
            return None
        if measured[b].meets_slo is False and measured[a].meets_slo and not measured[a].saturated:
            return a, b
    return None


def saturation_gap(measured: Mapping[float, LevelView], targets: Boundaries) -> tuple[float, float] | None:
    """(highest steady level below the first over-saturated one, that one)."""
    xs = sorted(measured)
    for a, b in zip(xs, xs[1:]):
        if measured[a].saturated:
            return None
        if measured[b].saturated:
            return a, b
    return None


def lookahead(axis: LevelAxis, measured: Mapping[float, LevelView], first: tuple[float, str],
              width: int) -> list[float]:
    """Up to `width` levels to measure at once, `first` (what `next_level` chose) first, then
    those the sequential search may ask for next whatever `first` shows: while bracketing,
    the chain's next levels; while bisecting the gap around `first`, the midpoints of its
    two halves, then of their halves (breadth first). The search still consumes levels in
    its own order, so with deterministic measurements its path is the sequential one; the
    levels it never asks for are extra work, done at the same time."""
    x, why = first
    out = [x]
    if why == "bracket":
        for c in axis.chain():
            if len(out) >= width:
                break
            if c > x and c not in measured:
                out.append(c)
        return out
    below = [m for m in measured if m < x]
    above = [m for m in measured if m > x]
    if not below or not above:
        return out
    gaps = [(max(below), x), (x, min(above))]
    while gaps and len(out) < width:
        a, b = gaps.pop(0)
        m = axis.mid(a, b)
        if m is None or m in measured or m in out:
            continue
        out.append(m)
        gaps += [(a, m), (m, b)]
    return out
