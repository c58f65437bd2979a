"""Routing policies: pure decisions over replica views (round robin, least requests, power
of two, consistent hash, cache-aware with a prefix tree, KV- and latency-aware). What the
simulator's cluster and the HTTP proxy (`servelab.router`) share; no I/O here."""

from servelab.routing.policies import (
    POLICY_NAMES,
    NoHealthyReplicaError,
    ReplicaView,
    RouteDecision,
    RouteRequest,
    RoutingPolicy,
    make_policy,
    policy_params,
)

__all__ = [
    "POLICY_NAMES",
    "NoHealthyReplicaError",
    "ReplicaView",
    "RouteDecision",
    "RouteRequest",
    "RoutingPolicy",
    "make_policy",
    "policy_params",
]
