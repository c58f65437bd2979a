"""The knee of a throughput curve, and its confidence interval from repetitions.

Definition (docs/sweeps.md): on the steady (not over-saturated) levels x_1 < ... < x_n with
mean output throughput T_i, let T* = max T_i. The knee is the smallest level whose
throughput is at least (1 - tol) x T* (tol = 10 % by default): past it, adding load buys at
most tol of extra throughput while latency keeps climbing. It is reported only when the
curve has flattened (its last bracket step gained less than `flat_gain`); on a curve that is
still growing at the highest level, T* is not a peak and the knee is "not reached".

The interval: the levels' repetitions (distinct seeds) are resampled with replacement, level
by level (a bootstrap of the mean curve), and the knee of each resampled curve is read as
the interpolated crossing of the threshold between adjacent measured levels; the interval
is the 2.5th-97.5th percentile of those knees. One repetition gives no interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_SAMPLES = 2000


@dataclass(frozen=True, slots=True)
class Knee:
    """The knee: `level` (a measured level), `threshold_tok_s` = (1 - tol) x `peak_tok_s`,
    `crossing` the interpolated level where the curve crosses the threshold,
    `marginal_gain` = (dT/dx at the knee) / (T/x there): 1 on a linear rise, near 0 when flat."""

    level: float
    throughput_tok_s: float
    peak_tok_s: float
    peak_level: float
    threshold_tok_s: float
    crossing: float
    marginal_gain: float | None


def find_knee(levels: Sequence[float], throughput: Sequence[float], tolerance: float) -> Knee | None:
    """The knee of the curve (levels ascending, all steady); None for fewer than 2 levels."""
    if len(levels) < 2:
        return None
    xs = np.asarray(levels, dtype=float)
    ts = np.asarray(throughput, dtype=float)
    if np.any(np.diff(xs) <= 0):
        raise ValueError("levels must be strictly ascending")
    i_peak = int(np.argmax(ts))
    peak = float(ts[i_peak])
    thr = (1 - tolerance) * peak
    i = int(np.argmax(ts >= thr))
    gain = None
    crossing = float(xs[i])
    if i > 0:
        slope = (ts[i] - ts[i - 1]) / (xs[i] - xs[i - 1])
        gain = float(slope / (ts[i] / xs[i])) if ts[i] > 0 else None
        if ts[i] > ts[i - 1]:
            crossing = float(xs[i - 1] + (thr - ts[i - 1]) / (ts[i] - ts[i - 1]) * (xs[i] - xs[i - 1]))
    return Knee(level=float(xs[i]), throughput_tok_s=float(ts[i]), peak_tok_s=peak,
                peak_level=float(xs[i_peak]), threshold_tok_s=thr, crossing=crossing,
                marginal_gain=gain)


@dataclass(frozen=True, slots=True)
class KneeInterval:
    """A bootstrap interval of the knee's level (`confidence`, e.g. 0.95)."""

    low: float
    high: float
    confidence: float
    samples: int
    per_repetition: tuple[float, ...]  # each repetition's own knee (its curve alone)


def knee_interval(levels: Sequence[float], reps: Sequence[Sequence[float]], tolerance: float,
                  rng: np.random.Generator, confidence: float = 0.95,
                  samples: int = BOOTSTRAP_SAMPLES) -> KneeInterval | None:
    """Bootstrap interval of the knee's crossing; `reps[i]` holds level i's throughput per
    repetition. None when no level has two repetitions."""
    if len(levels) < 2 or all(len(r) < 2 for r in reps):
        return None
    counts = [len(r) for r in reps]
    arrays = [np.asarray(r, dtype=float) for r in reps]
    knees = np.empty(samples)
    for s in range(samples):
        curve = [float(a[rng.integers(0, n, n)].mean()) for a, n in zip(arrays, counts)]
        k = find_knee(levels, curve, tolerance)
        knees[s] = k.crossing if k is not None else np.nan
    alpha = (1 - confidence) / 2
    lo, hi = np.nanpercentile(knees, [100 * alpha, 100 * (1 - alpha)])
    n_rep = min(counts)
    per_rep = []
    for j in range(n_rep):
        k = find_knee(levels, [float(a[j]) for a in arrays], tolerance)
        if k is not None:
            per_rep.append(k.level)
    return KneeInterval(float(lo), float(hi), confidence, samples, tuple(per_rep))
