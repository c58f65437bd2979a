"""Load-balancing policies that know nothing about the prompt: round robin, random,
least requests, power of two choices."""

from __future__ import annotations

import random
from collections.abc import Sequence

from servelab.routing.records import (
    NoFeedback,
    ReadsNoPrompt,
    ReplicaView,
    RouteDecision,
    RouteRequest,
    argmin_rotating,
    healthy_replicas,
)


class RoundRobin(NoFeedback, ReadsNoPrompt):
    """Each replica in turn, in configured order, skipping unhealthy ones (a replica that
    leaves does not shift the others' turns)."""

    name = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    def choose(
        self, req: RouteRequest, replicas: Sequence[ReplicaView], now_s: float
    ) -> RouteDecision:
        healthy_replicas(replicas)
        n = len(replicas)
        for step in range(n):
            pos = (self._next + step) % n
            if replicas[pos].healthy:
                self._next = pos + 1
                return RouteDecision(replicas[pos].index, f"round robin: turn {pos} of {n}")
        raise AssertionError("unreachable: healthy_replicas found one")

    def choose_all_healthy(self, req: RouteRequest, num_replicas: int,
                           now_s: float) -> RouteDecision:
        """`choose` over `num_replicas` healthy replicas (`ReadsCountOnly`): the first
        position tried is taken."""
        pos = self._next % num_replicas
        self._next = pos + 1
        return RouteDecision(pos, f"round robin: turn {pos} of {num_replicas}")


class RandomChoice(NoFeedback, ReadsNoPrompt):
    """A uniformly random healthy replica, from the injected RNG."""

    name = "random"

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def choose(
        self, req: RouteRequest, replicas: Sequence[ReplicaView], now_s: float
    ) -> RouteDecision:
        r = self._rng.choice(healthy_replicas(replicas))
        return RouteDecision(r.index, "random")

    def choose_all_healthy(self, req: RouteRequest, num_replicas: int,
                           now_s: float) -> RouteDecision:
        """`choose` over `num_replicas` healthy replicas (`ReadsCountOnly`): `choice` reads
        only the length and one item, so a range draws the same number from the RNG."""
        return RouteDecision(self._rng.choice(range(num_replicas)), "random")


class LeastRequests(NoFeedback, ReadsNoPrompt):
    """The healthy replica with the fewest requests in flight (ties take turns)."""

    name = "least_requests"

    def __init__(self) -> None:
        self._turn = 0

    def choose(
        self, req: RouteRequest, replicas: Sequence[ReplicaView], now_s: float
    ) -> RouteDecision:
        r = argmin_rotating(healthy_replicas(replicas), lambda v: v.in_flight, self._turn)
        self._turn += 1
        return RouteDecision(r.index, f"least requests: {r.in_flight} in flight")


class PowerOfTwo(NoFeedback, ReadsNoPrompt):
    """Two distinct healthy replicas drawn at random; the one with fewer in flight wins
    (the first drawn on a tie). Needs no global view, and never picks the busiest."""

    name = "power_of_two"

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def choose(
        self, req: RouteRequest, replicas: Sequence[ReplicaView], now_s: float
    ) -> RouteDecision:
        healthy = healthy_replicas(replicas)
        if len(healthy) == 1:
            return RouteDecision(healthy[0].index, "power of two: only one healthy replica")
        a, b = self._rng.sample(healthy, 2)
        win, lose = (b, a) if b.in_flight < a.in_flight else (a, b)
        return RouteDecision(
            win.index,
            f"power of two: replica {win.index} ({win.in_flight} in flight) over "
            f"{lose.index} ({lose.in_flight})",
        )
