"""The experiment's grid: loads, cells (arm x workload x load) and each cell's seed.

A cell's seed is derived from the spec's base seed, the workload and the load, not the
arm: every arm sees the same requests at a given (workload, load), so arms compare on
identical traffic, while two cells run against one server never share prompts (the second
would find the first's prefixes in the cache and look faster than it is).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from servelab.errors import ServelabError
from servelab.experiment.spec import ExperimentSpec, LoadsSpec


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """One load: closed loop at `concurrency`, or open loop at `request_rate` (req/s,
    optionally capped at `max_concurrency`). `key` names its file: ``c10``, ``r2.5``,
    ``r2.5-c32``, ``rinf``."""

    key: str
    num_prompts: int
    concurrency: int | None = None
    request_rate: float = math.inf
    max_concurrency: int | None = None
    burstiness: float = 1.0

    @property
    def x_value(self) -> float:
        """The number a plot puts this load at: concurrency, or the rate."""
        return float(self.concurrency) if self.concurrency is not None else self.request_rate


def _rate_word(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


def load_points(loads: LoadsSpec) -> list[LoadPoint]:
    """The spec's loads in order: concurrency levels first, then rates."""
    rule = loads.num_prompts
    points: list[LoadPoint] = []
    for c in loads.concurrency:
        n = rule if isinstance(rule, int) else rule.for_concurrency(c)
        points.append(LoadPoint(key=f"c{c}", num_prompts=n, concurrency=c, max_concurrency=c,
                                burstiness=loads.burstiness))
    for r in loads.request_rate:
        n = rule if isinstance(rule, int) else rule.for_rate(r)
        cap = loads.max_concurrency
        key = f"r{_rate_word(r)}" + (f"-c{cap}" if cap is not None else "")
        points.append(LoadPoint(key=key, num_prompts=n, request_rate=r, max_concurrency=cap,
                                burstiness=loads.burstiness))
    return points


def cell_seed(base_seed: int, workload: str, load_key: str) -> int:
    """A seed in [0, 2**31) from the base seed and the cell's workload and load."""
    digest = hashlib.sha256(f"{base_seed}/{workload}/{load_key}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class Cell:
    """One measurement: an arm driven with one workload at one load."""

    arm: str
    workload: str
    load: LoadPoint
    seed: int

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.arm, self.workload, self.load.key)

    @property
    def label(self) -> str:
        return f"{self.arm}/{self.workload}/{self.load.key}"


def cells_of_arm(spec: ExperimentSpec, arm: str) -> list[Cell]:
    """The arm's cells, workload by workload, loads in the spec's order."""
    points = load_points(spec.loads)
    return [
        Cell(arm=arm, workload=w.name, load=p, seed=cell_seed(spec.seed, w.name, p.key))
        for w in spec.workloads
        for p in points
    ]


def all_cells(spec: ExperimentSpec) -> list[Cell]:
    """Every cell of the experiment, arm by arm."""
    return [c for a in spec.arms for c in cells_of_arm(spec, a.name)]


@dataclass(frozen=True, slots=True)
class CellSelection:
    """Which cells a run measures: arm, workload and load names (an empty set: all).

    Seeds do not depend on the selection, so cells measured in separate runs of one spec
    (an arm added later, one load re-run) see the same requests as the rest.
    """

    arms: frozenset[str] = frozenset()
    workloads: frozenset[str] = frozenset()
    loads: frozenset[str] = frozenset()

    def check(self, spec: ExperimentSpec) -> None:
        """Refuse a name the spec does not have, naming the flag and the choices."""
        choices = {"--arm": [a.name for a in spec.arms],
                   "--workload": [w.name for w in spec.workloads],
                   "--load": [p.key for p in load_points(spec.loads)]}
        for flag, given in (("--arm", self.arms), ("--workload", self.workloads), ("--load", self.loads)):
            unknown = sorted(given - set(choices[flag]))
            if unknown:
                raise ServelabError(f"{flag} {unknown[0]}: the spec has {', '.join(choices[flag])}")

    def admits_arm(self, arm: str) -> bool:
        return not self.arms or arm in self.arms

    def admits(self, cell: Cell) -> bool:
        return (self.admits_arm(cell.arm) and (not self.workloads or cell.workload in self.workloads)
                and (not self.loads or cell.load.key in self.loads))
