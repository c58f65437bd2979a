"""Arrival schedules: when each request should be sent, as `vllm bench serve` draws them.

Gaps between requests are gamma-distributed with shape = burstiness and mean 1/rate
(burstiness 1 is a Poisson process; below 1 burstier, above 1 more regular). Unlike recent
vLLM, the drawn times are not rescaled to make the run last exactly num_prompts/rate: the
schedule is a true gamma renewal process, so its realised rate varies from run to run as
real traffic does (by about 1/sqrt(n x burstiness)).

`schedule_s` is what every sender calls: a workload's own times (a timed trace) when it
has them, else the drawn ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servelab.errors import ServelabError


class Schedulable(Protocol):
    """What `schedule_s` reads of a workload (`datasets.Workload` is one): its requests,
    their own send times if it carries them, its sessions if it is multi-turn."""

    @property
    def requests(self) -> Sequence[object]: ...

    @property
    def arrival_s(self) -> tuple[float, ...] | None: ...

    @property
    def sessions(self) -> Sequence[object] | None: ...


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


MULTI_TURN_ONLY_BENCH = (
    "multi-turn sessions (--multi-turn, --dataset-name sessions) are sent only by servelab "
    "bench, where each turn waits for the previous answer; sim run, run, sweep and tune send "
    "independent requests (simulate with servelab sim serve + servelab bench)"
)


def schedule_s(workload: Schedulable, opts: ArrivalOptions, rng: np.random.Generator, *,
               sessions: bool = False) -> list[float]:
    """When to send each independently scheduled unit of `workload` (s after the run's start).

    A workload that carries its own times (a timed trace on its own clock) gets those, and
    a --request-rate, --burstiness or ramp-up other than the defaults is refused (they would
    be ignored). Otherwise `arrival_times_s` draws them with `rng`. For a multi-turn
    workload the units are sessions (their first turns), which only a caller that sends
    sessions may ask for (`sessions=True`); any other caller gets a ServelabError.
    """
    if workload.sessions is not None:
        if not sessions:
            raise ServelabError(MULTI_TURN_ONLY_BENCH)
        if opts.ramp_up_strategy is not None:
            raise ServelabError("--ramp-up-strategy does not apply to multi-turn sessions "
                                "(the rate sets when sessions start; use --request-rate)")
        return arrival_times_s(len(workload.sessions), opts, rng).tolist()
    if workload.arrival_s is not None:
        if opts != ArrivalOptions():
            raise ServelabError(
                "--dataset-name timed_trace sends requests at the trace's own times: "
                "--request-rate, --burstiness and --ramp-up-* do not apply (pass --no-self-timed "
                "to use them instead, or --trace-speedup to replay faster)")
        if len(workload.arrival_s) != len(workload.requests):
            raise ValueError("a workload's arrival_s must have one time per request")
        return list(workload.arrival_s)
    return arrival_times_s(len(workload.requests), opts, rng).tolist()
