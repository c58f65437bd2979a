"""Capacity search: the deployments that meet an SLO at a rate with the fewest GPUs.

The ranking: fewest GPUs, then the highest goodput per GPU (requests/s meeting every SLO),
then the fastest tokens per user (1000 / mean TPOT). The search simulates far fewer
deployments than the grid by three rules, each an assumption stated here:
1. The planner's ceilings (`servelab.fleet.space`) rule shapes out unsimulated and give
   each shape the fewest replicas that could carry the rate.
2. Meeting the SLO is monotone in replicas at a fixed rate (more copies, less load each), so
   "some shape meets it within G GPUs" is monotone in G: G is bisected between the
   planner's bound and the budget, each G asking every shape at its most
   replicas within G, and a shape's own answers are reused (a fail at r answers every
   count below, a pass every count above), so most shapes are simulated once or twice.
3. Router policies and scheduler limits refine: they are tried at the best GPU count (and
   one replica fewer) on the shapes that reach it with the defaults, not over the grid.
Each GPU count's evaluations go to the `Evaluator` together, so a process pool (or a Ray
cluster) runs them side by side; the outcome does not depend on how many at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from servelab.fleet.deployment import Deployment, Shape
from servelab.fleet.space import Ceilings, SearchSpace


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One simulated deployment at the search's rate: latency at the SLO's percentile (ms),
    means, throughput, goodput; `meets_slo` includes not being saturated."""

    deployment: Deployment
    meets_slo: bool
    ttft_ms: float          # at the percentile
    tpot_ms: float          # at the percentile
    mean_ttft_ms: float
    mean_tpot_ms: float
    output_tok_s: float
    goodput_rps: float
    failed_why: str | None  # the SLOs broken or the saturation, None when it meets them
    binding: str            # the planner's binding ceiling at the measured concurrency

    @property
    def gpus(self) -> int:
        return self.deployment.gpus

    @property
    def tok_s_per_gpu(self) -> float:
        return self.output_tok_s / self.gpus

    @property
    def tok_s_per_user(self) -> float:
        return 1e3 / self.mean_tpot_ms if self.mean_tpot_ms > 0 else 0.0

    @property
    def goodput_per_gpu(self) -> float:
        return self.goodput_rps / self.gpus


class Evaluator(Protocol):
    """Simulates deployments (in any order or in parallel); one Evaluation per deployment,
    in the order given."""

    def evaluate(self, deployments: Sequence[Deployment]) -> list[Evaluation]: ...


def rank_key(e: Evaluation) -> tuple[int, float, float]:
    """Smaller is better: GPUs, then -goodput per GPU, then -tokens per user."""
    return (e.gpus, -round(e.goodput_per_gpu, 9), -round(e.tok_s_per_user, 9))


def best_of(evaluations: Sequence[Evaluation]) -> Evaluation | None:
    passing = [e for e in evaluations if e.meets_slo]
    return min(passing, key=rank_key) if passing else None


def pareto_front(evaluations: Sequence[Evaluation]) -> list[Evaluation]:
    """The deployments meeting the SLO that no other beats on both tokens/s per GPU and
    tokens/s per user, by tokens per user descending."""
    front: list[Evaluation] = []
    for e in sorted((e for e in evaluations if e.meets_slo),
                    key=lambda e: (-e.tok_s_per_user, -e.tok_s_per_gpu)):
        if not front or e.tok_s_per_gpu > front[-1].tok_s_per_gpu:
            front.append(e)
    return front


@dataclass(slots=True)
class SearchOutcome:
    """Everything simulated, every shape ruled out unsimulated, the winner and the front."""

    evaluations: list[Evaluation]
    ceilings: list[Ceilings]
    grid_size: int  # the deployments a brute-force grid simulates (`grid`)
    winner: Evaluation | None = None
    front: list[Evaluation] = field(default_factory=list)

    @property
    def simulations(self) -> int:
        return len(self.evaluations)

    @property
    def ruled_out(self) -> list[Ceilings]:
        """The shapes the planner's ceilings kept from being simulated."""
        return [c for c in self.ceilings if c.reason is not None]


@dataclass(slots=True)
class _ShapeSearch:
    """What is known of one shape: every replica count below `lo` fails, `passed` and above
    pass (None: no pass yet); `max_replicas` is the budget's."""

    shape: Shape
    lo: int
    max_replicas: int
    passed: int | None = None

    def replicas_within(self, gpus: int) -> int:
        return min(gpus // self.shape.gpus, self.max_replicas)

    def known(self, replicas: int) -> bool | None:
        """True / False when monotonicity already answers for `replicas`, else None."""
        if replicas < self.lo:
            return False
        if self.passed is not None and replicas >= self.passed:
            return True
        return None

    def record(self, replicas: int, ok: bool) -> None:
        if ok:
            self.passed = replicas if self.passed is None else min(self.passed, replicas)
        else:
            self.lo = max(self.lo, replicas + 1)


def search(space: SearchSpace, ceilings: Sequence[Ceilings], evaluator: Evaluator,
           echo: Callable[[str], None] = lambda _line: None) -> SearchOutcome:
    """Run the module docstring's search over `ceilings` (one per shape of `space`)."""
    outcome = SearchOutcome([], list(ceilings), len(grid(space, ceilings)))
    seen: dict[Deployment, Evaluation] = {}

    def run(batch: list[Deployment]) -> None:
        fresh = [d for d in dict.fromkeys(batch) if d not in seen]
        if not fresh:
            return
        for d, e in zip(fresh, evaluator.evaluate(fresh)):
            seen[d] = e
            outcome.evaluations.append(e)
            echo(f"{d.label}: {d.gpus} GPUs, " + ("meets the SLO" if e.meets_slo else
                                                   f"breaks it ({e.failed_why})"))

    policy = space.default_policy
    shapes = sorted((_ShapeSearch(c.shape, c.min_replicas, space.max_replicas(c.shape))
                     for c in ceilings if c.reason is None), key=lambda s: s.shape.sort_key)

    def holds(gpus: int) -> bool:
        """Some shape meets the SLO within `gpus` GPUs (monotone in `gpus`): every shape at
        its most replicas within them, simulated at once where monotonicity does not answer."""
        asked = [(s, r) for s in shapes if (r := s.replicas_within(gpus)) >= 1 and s.known(r) is None]
        run([Deployment(s.shape, r, policy) for s, r in asked])
        for s, r in asked:
            s.record(r, seen[Deployment(s.shape, r, policy)].meets_slo)
        return any(s.known(r) for s in shapes if (r := s.replicas_within(gpus)) >= 1)

    # Phase 1: the fewest GPUs with which some shape meets the SLO, bisected between the
    # planner's bound and the budget.
    if shapes:
        lo = min(s.lo * s.shape.gpus for s in shapes)
        hi = space.max_gpus
        while lo < hi:
            mid = (lo + hi) // 2
            if holds(mid):
                hi = mid
            else:
                lo = mid + 1
        if lo <= hi:
            holds(lo)  # the budget itself when nothing below held; otherwise answered already

    # Phase 2: policies and limits on the shapes that reach the best GPU count, there and at
    # one replica fewer.
    first = best_of(outcome.evaluations)
    if first is not None:
        target = first.gpus
        refine: list[Deployment] = []
        for s in shapes:
            d = Deployment(s.shape, s.replicas_within(target), policy)
            if d.gpus != target or d not in seen or not seen[d].meets_slo:
                continue
            for shape in [s.shape, *space.knob_variants(s.shape)]:
                for r in {d.replicas, d.replicas - 1} - {0}:
                    policies = space.router_policies if r > 1 else (policy,)
                    refine += [Deployment(shape, r, p) for p in policies]
        run(refine)
    outcome.winner = best_of(outcome.evaluations)
    outcome.front = pareto_front(outcome.evaluations)
    return outcome


def grid(space: SearchSpace, ceilings: Sequence[Ceilings]) -> list[Deployment]:
    """Every deployment of the space whose shape fits (what a brute force simulates)."""
    out: list[Deployment] = []
    for c in ceilings:
        if not c.runs:
            continue
        for shape in [c.shape, *space.knob_variants(c.shape)]:
            for r in range(1, space.max_replicas(shape) + 1):
                policies = space.router_policies if r > 1 else (space.default_policy,)
                out += [Deployment(shape, r, p) for p in policies]
    return out
