"""The host's CPU: what it is and how fast it runs single-threaded Python.

vLLM's API server, its scheduler and its launches outside CUDA graphs are single-threaded
Python on the host, and two machines of the same GPU kind can differ there: on two
`nvidia-h200` VMs the same offline step probe measured the same GPU span within 3 % and
1.4-1.7x the serial CPU (docs/validation/spec-gil-2026-12-04). `probe_host` records the CPU
model and a speed figure, so measured runs on different hosts can be told apart and the
simulator's host figures scaled (`--host-cpu-scale`, `Calibration.on_host`).

The speed figure is the best of a few rounds of a fixed pure-Python loop (dict stores and
lookups, integer arithmetic, branches: the interpreter's dispatch, as the scheduler's and
the API server's per-request code exercises it), in ns per iteration. It is a comparison
between hosts, not a prediction: the ratio of two hosts' figures is a first estimate of
their ratio of host CPU time, not yet checked against engine timings.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

LOOP_ITERATIONS = 200_000
LOOP_ROUNDS = 5


class HostInfo(BaseModel):
    """The host's CPU as `probe_host` found it."""

    model_config = ConfigDict(extra="forbid")

    cpu_model: str | None  # /proc/cpuinfo's "model name" (None: not reported, e.g. some VMs)
    logical_cpus: int | None  # os.cpu_count()
    python_loop_ns: float  # best round of the fixed loop, ns per iteration (lower is faster)
    loop_iterations: int
    loop_rounds: int


def _loop(n: int) -> int:
    """The fixed workload: n iterations of dict stores and lookups and integer arithmetic."""
    table: dict[int, int] = {}
    acc = 0
    for i in range(n):
        key = (i * 7) & 1023
        table[i & 1023] = i
        if key in table:
            acc += table[key] - (acc >> 3)
        else:
            acc += 1
    return acc


def cpu_model(cpuinfo: str) -> str | None:
    """The first "model name" of /proc/cpuinfo's text, or None."""
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == "model name" and value.strip():
            return value.strip()
    return None


def _read_cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ""


def probe_host(clock_ns: Callable[[], int] = time.perf_counter_ns,
               cpuinfo: Callable[[], str] = _read_cpuinfo,
               iterations: int = LOOP_ITERATIONS, rounds: int = LOOP_ROUNDS) -> HostInfo:
    """The host's CPU model and `python_loop_ns` (best of `rounds` rounds of `iterations`,
    timed with `clock_ns`, nanoseconds). About 0.1-0.2 s on a current server CPU."""
    if iterations < 1 or rounds < 1:
        raise ValueError("iterations and rounds must be >= 1")
    best = None
    for _ in range(rounds):
        t0 = clock_ns()
        _loop(iterations)
        dt = clock_ns() - t0
        best = dt if best is None or dt < best else best
    assert best is not None
    return HostInfo(cpu_model=cpu_model(cpuinfo()), logical_cpus=os.cpu_count(),
                    python_loop_ns=best / iterations, loop_iterations=iterations, loop_rounds=rounds)
