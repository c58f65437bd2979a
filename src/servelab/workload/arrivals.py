"""Arrival schedules: when each request should be sent, as `vllm bench serve` draws them.

Gaps between requests are gamma-distributed with shape = burstiness and mean 1/rate
(burstiness 1 is a Poisson process; below 1 burstier, above 1 more regular). Unlike recent
vLLM, the drawn times are not rescaled to make the run last exactly num_prompts/rate: the
schedule is a true gamma renewal process, so its realised rate varies from run to run as
real traffic does (by about 1/sqrt(n x burstiness)).
"""

from __future__ import annotations

import math
import secrets
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class ArrivalOptions(BaseModel):
    """How requests arrive (vLLM's flags: --request-rate, --burstiness, --ramp-up-*).

    `request_rate` is in requests/s (`inf` sends everything at once). With a ramp-up the rate
    moves from `ramp_up_start_rps` (first request) to `ramp_up_end_rps` (last request),
    linearly or exponentially in the request index, and `request_rate` must stay `inf`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_rate: float = math.inf
    burstiness: float = Field(1.0, gt=0.0)
    ramp_up_strategy: Literal["linear", "exponential"] | None = None
    ramp_up_start_rps: float | None = Field(None, ge=0.0)
    ramp_up_end_rps: float | None = Field(None, gt=0.0)

    @field_validator("request_rate")
    @classmethod
    def _positive_rate(cls, v: float) -> float:
        if math.isnan(v) or v <= 0:
            raise ValueError("must be a number > 0 or 'inf'")
        return v

    @field_validator("burstiness")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number > 0")
        return v

    @model_validator(mode="after")
    def _ramp(self) -> ArrivalOptions:
        given = (self.ramp_up_start_rps is not None, self.ramp_up_end_rps is not None)
        if self.ramp_up_strategy is None:
            if any(given):
                raise ValueError("--ramp-up-start-rps/--ramp-up-end-rps need --ramp-up-strategy")
            return self
        if not all(given):
            raise ValueError(
                "--ramp-up-strategy needs both --ramp-up-start-rps and --ramp-up-end-rps"
            )
        if not math.isinf(self.request_rate):
            raise ValueError("--request-rate cannot be combined with --ramp-up-strategy "
                             "(the ramp-up rates set the rate)")
        assert self.ramp_up_start_rps is not None and self.ramp_up_end_rps is not None
        if self.ramp_up_start_rps > self.ramp_up_end_rps:
            raise ValueError("--ramp-up-start-rps must not exceed --ramp-up-end-rps")
        if self.ramp_up_strategy == "exponential" and self.ramp_up_start_rps == 0:
            raise ValueError("--ramp-up-strategy exponential needs --ramp-up-start-rps > 0")
        return self


def rates_rps(n: int, opts: ArrivalOptions) -> np.ndarray:
    """The target rate (requests/s) at each request index (vLLM's _get_current_request_rate)."""
    if opts.ramp_up_strategy is None:
        return np.full(n, opts.request_rate)
    assert opts.ramp_up_start_rps is not None and opts.ramp_up_end_rps is not None
    start, end = opts.ramp_up_start_rps, opts.ramp_up_end_rps
    progress = np.arange(n) / max(n - 1, 1)
    if opts.ramp_up_strategy == "linear":
        return start + (end - start) * progress
    return start * (end / start) ** progress


def arrival_times_s(n: int, opts: ArrivalOptions, rng: np.random.Generator) -> np.ndarray:
    """Intended send offsets (seconds from the run's start) of `n` requests.

    Non-decreasing, the first at 0.0. The gap before request i is gamma(shape=burstiness,
    scale=1/(rate_i x burstiness)), rate_i being the target rate at request i; an infinite
    rate gives a zero gap.
    """
    if n <= 0:
        return np.zeros(0)
    rates = rates_rps(n, opts)[1:]
    gaps = np.zeros(n - 1)
    finite = np.isfinite(rates)
    if finite.any():
        scale = 1.0 / (rates[finite] * opts.burstiness)
        gaps[finite] = rng.gamma(shape=opts.burstiness, scale=scale)
    return np.concatenate(([0.0], np.cumsum(gaps)))


def fresh_seed() -> int:
    """A new seed from the OS's entropy (for runs without --seed; the caller records it)."""
    return secrets.randbelow(2**31)
