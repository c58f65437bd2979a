"""Arrival schedules: gamma gaps, infinite rate, ramp-up, seeding, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from servelab.workload.arrivals import ArrivalOptions, arrival_times_s, rates_rps


@pytest.mark.parametrize("burstiness, seed", [(0.5, 11), (1.0, 12), (4.0, 13)])
def test_gamma_gaps_match_rate_and_cv(burstiness: float, seed: int) -> None:
    rate = 20.0
    times = arrival_times_s(5001, ArrivalOptions(request_rate=rate, burstiness=burstiness),
                            np.random.default_rng(seed))
    gaps = np.diff(times)
    assert len(gaps) == 5000
    assert abs(1.0 / gaps.mean() - rate) / rate < 0.05
    expected_cv = 1.0 / math.sqrt(burstiness)
    assert abs(gaps.std() / gaps.mean() - expected_cv) / expected_cv < 0.10


def test_schedule_starts_at_zero_and_never_decreases() -> None:
    times = arrival_times_s(1000, ArrivalOptions(request_rate=5.0, burstiness=0.3),
                            np.random.default_rng(0))
    assert times[0] == 0.0
    assert np.all(np.diff(times) >= 0)


def test_infinite_rate_sends_everything_at_once() -> None:
    times = arrival_times_s(100, ArrivalOptions(), np.random.default_rng(0))
    assert times.shape == (100,)
    assert not times.any()


def test_edge_sizes() -> None:
    opts = ArrivalOptions(request_rate=3.0)
    assert arrival_times_s(0, opts, np.random.default_rng(0)).shape == (0,)
    assert arrival_times_s(1, opts, np.random.default_rng(0)).tolist() == [0.0]


def test_same_seed_same_schedule_other_seed_differs() -> None:
    opts = ArrivalOptions(request_rate=7.0, burstiness=2.0)
    a = arrival_times_s(200, opts, np.random.default_rng(42))
    b = arrival_times_s(200, opts, np.random.default_rng(42))
    c = arrival_times_s(200, opts, np.random.default_rng(43))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_linear_ramp_rates_and_gaps() -> None:
    opts = ArrivalOptions(ramp_up_strategy="linear", ramp_up_start_rps=2.0, ramp_up_end_rps=50.0)
    rates = rates_rps(5, opts)
    assert rates.tolist() == [2.0, 14.0, 26.0, 38.0, 50.0]
    n = 4000
    times = arrival_times_s(n, opts, np.random.default_rng(5))
    gaps = np.diff(times)
    expected = 1.0 / rates_rps(n, opts)[1:]
    window_means = [w.mean() for w in np.array_split(gaps, 4)]
    assert window_means == sorted(window_means, reverse=True)  # the rate ramps up
    for got, want in zip(window_means, np.array_split(expected, 4)):
        assert abs(got - want.mean()) / want.mean() < 0.10


def test_exponential_ramp_rates() -> None:
    opts = ArrivalOptions(ramp_up_strategy="exponential", ramp_up_start_rps=1.0,
                          ramp_up_end_rps=16.0)
    assert rates_rps(5, opts).tolist() == pytest.approx([1.0, 2.0, 4.0, 8.0, 16.0])


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"request_rate": 0.0}, "request_rate"),
        ({"request_rate": -1.0}, "request_rate"),
        ({"request_rate": math.nan}, "request_rate"),
        ({"burstiness": 0.0}, "burstiness"),
        ({"burstiness": math.inf}, "burstiness"),
        ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 1.0}, "--ramp-up-end-rps"),
        ({"ramp_up_start_rps": 1.0, "ramp_up_end_rps": 2.0}, "--ramp-up-strategy"),
        ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 1.0, "ramp_up_end_rps": 2.0,
          "request_rate": 5.0}, "--request-rate"),
        ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 3.0, "ramp_up_end_rps": 2.0},
         "--ramp-up-start-rps"),
        ({"ramp_up_strategy": "exponential", "ramp_up_start_rps": 0.0, "ramp_up_end_rps": 2.0},
         "exponential"),
        ({"ramp_up_strategy": "sideways"}, "ramp_up_strategy"),
        ({"rate": 3.0}, "rate"),
    ],
)
def test_bad_options_are_rejected(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValidationError) as info:
        ArrivalOptions(**kwargs)
    assert needle in str(info.value)
