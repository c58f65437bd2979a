"""The router: routing policies (pure, shared with the simulator) and the HTTP proxy.

Importing this package loads only the policies; the proxy lives in
`servelab.router.proxy` and is imported by `servelab route`.
"""

from servelab.router.policies import (
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
