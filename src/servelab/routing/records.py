"""The records a routing policy reads and returns, and the interface every policy has.

The consumer of these records is both the HTTP proxy (`servelab route`) and the
simulator's clusters (`servelab.sim.cluster`), so a policy sees only these records plus
state it owns: no clock (time arrives as `now_s`), no I/O, no global RNG.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from servelab.errors import ServelabError


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What a policy may know about one request.

    `prompt` is the text whose shared prefixes stand for shared KV prefixes (the proxy
    flattens chat messages into it); `prompt_len` is its length in tokens where the host
    knows them (the simulator) or in characters (the proxy); `session_key` comes from the
    `x-session-id` header or the body's `user` field.
    """

    prompt: str
    prompt_len: int
    session_key: str | None


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica as the host sees it at decision time.

    `in_flight` is the host's own live count of requests it sent there and that have not
    finished; the telemetry fields (`running`, `waiting`, `kv_usage_frac` in 0..1) come
    from the replica's `/metrics` and are `telemetry_age_s` seconds old (None: never read).
    `ewma_*` are informational (shown by `--explain`); the latency policy keeps its own.
    """

    index: int
    healthy: bool
    in_flight: int
    running: int | None = None
    waiting: int | None = None
    kv_usage_frac: float | None = None
    telemetry_age_s: float | None = None
    ewma_ttft_ms: float | None = None
    ewma_itl_ms: float | None = None


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """The chosen replica, why (one human-readable line), and, for cache_aware, how many
    prompt characters the chosen replica was believed to hold already."""

    index: int
    reason: str
    prefix_match_chars: int | None = None


class RoutingPolicy(Protocol):
    """A routing policy: `choose` picks a healthy replica; `on_finished` reports back.

    Hosts (the router's relay, the simulated cluster) call `on_finished` exactly once per
    `choose`, with the same `req` object, when that attempt is over (policies may key
    per-request state on it)."""

    name: str

    def choose(
        self, req: RouteRequest, replicas: Sequence[ReplicaView], now_s: float
    ) -> RouteDecision: ...

    def on_finished(
        self,
        index: int,
        req: RouteRequest,
        ttft_ms: float | None,
        itl_ms: float | None,
        ok: bool,
        now_s: float,
    ) -> None: ...


CountChooser = Callable[[RouteRequest, int, float], RouteDecision]
"""`choose_all_healthy(req, num_replicas, now_s)` of a `ReadsCountOnly` policy."""


@runtime_checkable
class ReadsCountOnly(Protocol):
    """A policy that reads nothing of the replicas but how many there are and which are
    healthy (round robin, random). A host whose replicas are all healthy (the simulator)
    may call `choose_all_healthy(req, n, now_s)` instead of building `n` views for `choose`:
    it must return exactly what `choose(req, views, now_s)` returns, and leave the policy
    in the same state, for `n` healthy views whose `index` is their position."""

    def choose_all_healthy(self, req: RouteRequest, num_replicas: int,
                           now_s: float) -> RouteDecision: ...


def count_chooser(policy: object) -> CountChooser | None:
    """The policy's `choose_all_healthy` when it declares it reads only the replicas' count
    (`ReadsCountOnly`), else None: the host must build the views."""
    return policy.choose_all_healthy if isinstance(policy, ReadsCountOnly) else None


class NoHealthyReplicaError(ServelabError):
    """No replica is healthy: the proxy answers 503."""


def healthy_replicas(replicas: Sequence[ReplicaView]) -> list[ReplicaView]:
    """The healthy replicas, in order; raises NoHealthyReplicaError when there are none."""
    healthy = [r for r in replicas if r.healthy]
    if not healthy:
        raise NoHealthyReplicaError(f"no healthy replica among {len(replicas)}")
    return healthy


def argmin_rotating(
    candidates: Sequence[ReplicaView], key: Callable[[ReplicaView], Any], turn: int
) -> ReplicaView:
    """The candidate with the smallest `key`; ties go to the first tied candidate at or
    after position `turn` (mod the number of ties), so equal replicas share the work
    instead of the lowest index taking it all."""
    best = min(key(r) for r in candidates)
    tied = [r for r in candidates if key(r) == best]
    return tied[turn % len(tied)]


class ReadsNoPrompt:
    """Mixin for policies that never read `RouteRequest.prompt` (load balancers: round
    robin, random, least requests...). A host may route such a policy's requests without
    making their prompts' texts: the simulator then builds a random workload as token ids
    alone (`servelab.sim.offline.prepare_workload`, `texts=False`)."""


class NoFeedback:
    """Mixin for policies that learn nothing from finished requests."""

    def on_finished(
        self,
        index: int,
        req: RouteRequest,
        ttft_ms: float | None,
        itl_ms: float | None,
        ok: bool,
        now_s: float,
    ) -> None:
        return None
