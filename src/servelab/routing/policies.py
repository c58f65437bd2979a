"""The routing policies by name: `make_policy` builds one, `POLICY_NAMES` lists them.

Every policy is a pure function of (request, replica views, `now_s`) plus state it owns,
so the proxy (`servelab route`) and the simulator's clusters run the same code. The
records and the `RoutingPolicy` protocol are re-exported from `servelab.routing.records`.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable

from servelab.errors import ServelabError
from servelab.routing.affinity import ConsistentHash
from servelab.routing.balance import LeastRequests, PowerOfTwo, RandomChoice, RoundRobin
from servelab.routing.cache_aware import CacheAware
from servelab.routing.records import (
    NoHealthyReplicaError,
    ReadsNoPrompt,
    ReplicaView,
    RouteDecision,
    RouteRequest,
    RoutingPolicy,
)
from servelab.routing.signals import KvAware, LatencyAware

__all__ = [
    "POLICY_NAMES",
    "NoHealthyReplicaError",
    "ReplicaView",
    "RouteDecision",
    "RouteRequest",
    "RoutingPolicy",
    "make_policy",
    "policy_params",
    "reads_prompt",
]

_FACTORIES: dict[str, Callable[..., RoutingPolicy]] = {
    "round_robin": RoundRobin,
    "random": RandomChoice,
    "least_requests": LeastRequests,
    "power_of_two": PowerOfTwo,
    "consistent_hash": ConsistentHash,
    "cache_aware": CacheAware,
    "latency": LatencyAware,
    "kv_aware": KvAware,
}

POLICY_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def policy_params(name: str) -> dict[str, object]:
    """The tunable parameters of policy `name` and their defaults."""
    factory = _factory(name)
    return {
        p.name: p.default
        for p in inspect.signature(factory).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def reads_prompt(name: str) -> bool:
    """Whether policy `name` may read a request's prompt text (every policy but those
    declaring `ReadsNoPrompt`)."""
    factory = _factory(name)
    return not (isinstance(factory, type) and issubclass(factory, ReadsNoPrompt))


def make_policy(name: str, rng: random.Random, **params: object) -> RoutingPolicy:
    """A fresh policy `name` with its own state; `rng` feeds the random policies.

    Raises ServelabError for an unknown policy or parameter (naming it) or a bad value.
    """
    factory = _factory(name)
    allowed = policy_params(name)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        takes = ", ".join(allowed) or "no parameters"
        raise ServelabError(f"policy {name!r} has no parameter {unknown[0]!r} (it takes: {takes})")
    if "rng" in inspect.signature(factory).parameters:
        return factory(rng, **params)
    return factory(**params)


def _factory(name: str) -> Callable[..., RoutingPolicy]:
    try:
        return _FACTORIES[name]
    except KeyError:
        raise ServelabError(
            f"unknown routing policy {name!r}; choose one of: {', '.join(POLICY_NAMES)}"
        ) from None
