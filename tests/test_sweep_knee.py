"""Knee detection and the adaptive level chooser on synthetic curves with known knees."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from servelab.errors import ServelabError
from servelab.sweep.knee import find_knee, knee_interval
from servelab.sweep.levels import LevelAxis, Boundaries, lookahead, next_level


@dataclass(frozen=True)
class View:
    throughput: float
    saturated: bool = False
    meets_slo: bool | None = None


def ramp(x: float) -> float:  # linear to 50, flat after: the knee at 0.9 x 50 = 45
    return 10.0 * min(x, 50.0)


def smooth(x: float) -> float:  # 1000 (1 - exp(-x / 20))
    return 1000.0 * (1 - math.exp(-x / 20))


def test_knee_of_a_ramp_is_where_it_reaches_ninety_percent():
    xs = list(range(1, 201))
    k = find_knee(xs, [ramp(x) for x in xs], 0.10)
    assert k is not None and k.level == 45 and k.peak_tok_s == 500
    assert k.crossing == pytest.approx(45.0)


def test_knee_of_a_smooth_curve_matches_the_closed_form():
    xs = list(range(1, 201))
    k = find_knee(xs, [smooth(x) for x in xs], 0.10)
    exact = -20 * math.log(1 - 0.9 * (1 - math.exp(-200 / 20)))
    assert k is not None and k.level == math.ceil(exact)
    assert k.crossing == pytest.approx(exact, abs=0.05)
    assert 0 < k.marginal_gain < 1  # flattening: less than proportional gain


def test_knee_ignores_a_decline_after_the_peak():
    xs = [1, 2, 4, 8, 16, 32]
    ts = [10, 20, 40, 80, 100, 60]
    k = find_knee(xs, ts, 0.10)
    assert k is not None and k.level == 16 and k.peak_level == 16


def _adaptive(curve, lo=1, hi=256, **kw):
    axis = LevelAxis("concurrency", lo, hi)
    measured: dict[float, View] = {}
    order = []
    while (step := next_level(axis, measured, Boundaries(slo=False, saturation=False, **kw))) is not None:
        x, why = step
        measured[x] = View(curve(x))
        order.append((x, why))
    return measured, order


@pytest.mark.parametrize("curve", [ramp, smooth])
def test_adaptive_levels_find_the_exhaustive_knee_within_one_step(curve):
    measured, order = _adaptive(curve)
    xs = sorted(measured)
    k = find_knee(xs, [measured[x].throughput for x in xs], 0.10)
    full = list(range(1, 257))
    exh = find_knee(full, [curve(x) for x in full], 0.10)
    # The bracket stops once growth is < 5 %, so its peak may sit a little below the fine
    # sweep's (which runs to 256): the threshold, and so the knee, may move by one step.
    assert abs(k.level - exh.level) <= 1
    assert len(measured) < 20  # far fewer than the 256 levels of the fine sweep
    assert order[0] == (1, "bracket") and any(why == "knee" for _, why in order)


def test_bracket_stops_when_throughput_stops_growing():
    measured, order = _adaptive(ramp)
    bracket = [x for x, why in order if why == "bracket"]
    assert bracket == [1, 2, 4, 8, 16, 32, 64, 128]  # 128 gained < 5 % over 64: stop


def test_slo_boundary_is_bisected_to_one_step():
    axis = LevelAxis("concurrency", 1, 512)
    measured: dict[float, View] = {}
    while (step := next_level(axis, measured, Boundaries(knee=False, saturation=False))) is not None:
        x = step[0]
        measured[x] = View(ramp(x), meets_slo=x <= 37)
    assert 37 in measured and 38 in measured
    assert max(measured) == 64  # the bracket stopped at the first failure


def test_rate_axis_bisects_geometrically_to_its_resolution():
    axis = LevelAxis("rate", 0.5, 64, rate_resolution=0.05)
    measured: dict[float, View] = {}
    while (step := next_level(axis, measured, Boundaries(knee=False, slo=False))) is not None:
        x = step[0]
        measured[x] = View(min(x, 6.3) * 100, saturated=x > 6.3)
    ok = max(x for x, v in measured.items() if not v.saturated)
    bad = min(x for x, v in measured.items() if v.saturated)
    assert ok <= 6.3 < bad and bad / ok - 1 <= 0.05 + 1e-9


def test_bad_axis_is_refused():
    with pytest.raises(ServelabError, match="--min-level"):
        LevelAxis("concurrency", 8, 4)
    with pytest.raises(ServelabError, match="--growth"):
        LevelAxis("concurrency", 1, 4, growth=1.0)


def test_bootstrap_interval_covers_the_knee_and_is_empty_for_one_repetition():
    rng = np.random.default_rng(0)
    xs = list(range(30, 61))
    reps = [[ramp(x) * (1 + 0.01 * rng.standard_normal()) for _ in range(5)] for x in xs]
    iv = knee_interval(xs, reps, 0.10, np.random.default_rng(1), samples=400)
    assert iv is not None and iv.low <= 45 <= iv.high + 1 and iv.high - iv.low < 5
    assert len(iv.per_repetition) == 5
    assert knee_interval(xs, [[ramp(x)] for x in xs], 0.10, np.random.default_rng(1)) is None


def test_lookahead_is_the_chain_then_the_bisection_tree():
    axis = LevelAxis("concurrency", 1, 64)
    assert lookahead(axis, {}, (1.0, "bracket"), 4) == [1.0, 2.0, 4.0, 8.0]
    assert lookahead(axis, {1.0: View(1), 2.0: View(2)}, (4.0, "bracket"), 1) == [4.0]
    seen = {x: View(x) for x in (1.0, 2.0, 4.0, 8.0, 16.0)}
    # bisecting 8..16 at 12: then 10 and 14 (the halves' midpoints), then 9, 11, 13, 15
    assert lookahead(axis, seen, (12.0, "knee"), 7) == [12.0, 10.0, 14.0, 9.0, 11.0, 13.0, 15.0]
    assert lookahead(axis, seen, (12.0, "knee"), 9) == [12.0, 10.0, 14.0, 9.0, 11.0, 13.0, 15.0]


@pytest.mark.parametrize("curve", [ramp, smooth])
@pytest.mark.parametrize("width", [2, 3, 7])
def test_levels_taken_from_a_lookahead_follow_the_sequential_path(curve, width):
    """Measuring `width` levels at once and taking them in the search's order changes
    nothing the search sees: the same levels in the same order."""
    _, alone = _adaptive(curve)
    axis = LevelAxis("concurrency", 1, 256)
    targets = Boundaries(slo=False, saturation=False)
    measured: dict[float, View] = {}
    ahead: dict[float, View] = {}
    order, batches = [], 0
    while (step := next_level(axis, measured, targets)) is not None:
        if step[0] not in ahead:
            batches += 1
            ahead.update({x: View(curve(x)) for x in lookahead(axis, measured, step, width)})
        measured[step[0]] = ahead.pop(step[0])
        order.append(step)
    assert order == alone
    assert batches < len(alone)  # fewer rounds than levels
