"""N simulated replicas behind a routing policy (the router's own policies, unchanged).

Each replica is its own `SimEngine` (optionally TP/PP: that lives in its cost model and KV
pool). The policy sees what the proxy would see: `ReplicaView`s with the host's live
in-flight count and fresh telemetry (running, waiting, KV usage; age 0, because the
simulator reads its engines directly where the proxy scrapes `/metrics`). With one replica
no policy is consulted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servelab.disaggregation import KvTransfer
from servelab.routing.records import (
    CountChooser,
    NoFeedback,
    ReplicaView,
    RouteRequest,
    RoutingPolicy,
    count_chooser,
)
from servelab.sim.engine import SimEngine


@dataclass(frozen=True, slots=True)
class NetworkCosts:
    """Per-request time outside the engine (ms), added before the request reaches a replica.

    `request_overhead_ms`: client -> server HTTP, JSON parsing, tokenisation, detokenise
    and SSE of the first token (fitted by `sim calibrate`, as part of a `Calibration`);
    `router_hop_ms`: the extra proxy hop when there is more than one replica.
    `frontend_us_per_request`: the replica's API server's event-loop time per request
    before tokenising (HTTP, validation), in turn with its chunk sends, and
    `frontend_handoff_us` after it (processing, the hand-off to the engine), queued behind
    what the loop has to do by then (a burst's later intakes included);
    `frontend_tokenize_us` + `frontend_us_per_prompt_token` x prompt tokens: its time per
    request on its tokenizer worker (vLLM's renderer thread pool, one worker by
    default), one request at a time, so concurrent arrivals queue there, apart from the
    event loop that streams;
    `frontend_us_per_output_token`: the event loop's time per output token of a step
    (vLLM's output handler: detokenise, per-request output), paid for every token;
    `frontend_us_per_chunk`: its time per SSE chunk sent (response object, JSON, socket
    write). Tokens that reach a request whose previous chunk still waits to be sent join
    that chunk (vLLM's per-request output collector merges them), so a lagging event
    loop sends fewer, larger chunks.
    """

    request_overhead_ms: float = 3.0
    router_hop_ms: float = 0.5
    frontend_us_per_prompt_token: float = 0.0
    frontend_us_per_output_token: float = 0.0
    frontend_us_per_chunk: float = 0.0
    frontend_us_per_request: float = 0.0
    frontend_tokenize_us: float = 0.0
    frontend_handoff_us: float = 0.0


@dataclass(slots=True)
class DecodePool:
    """Prefill/decode disaggregation (`servelab.disaggregation`): the decode replicas, the
    policy that picks one for a prefilled request, and the KV transfer to them."""

    engines: list[SimEngine]
    policy: RoutingPolicy | None
    transfer: KvTransfer


class Cluster:
    """Replicas, their in-flight counts and the routing policy. With a `decode` pool the
    replicas given are the prefill pool: `engines` lists prefill replicas first, then the
    decode pool's (`num_prefill` of them prefill), and every request goes through both."""

    def __init__(self, engines: Sequence[SimEngine], policy: RoutingPolicy | None,
                 network: NetworkCosts, decode: DecodePool | None = None) -> None:
        if not engines:
            raise ValueError("a cluster needs at least one replica")
        if len(engines) > 1 and policy is None:
            raise ValueError("several replicas need a routing policy")
        if decode is not None and (not decode.engines or
                                   (len(decode.engines) > 1 and decode.policy is None)):
            raise ValueError("a decode pool needs at least one replica, and a policy for several")
        self.num_prefill = len(engines)
        self.decode = decode
        self.engines = list(engines) + (decode.engines if decode is not None else [])
        self.policy = policy
        self.network = network
        self.in_flight = [0] * len(self.engines)
        self.routed = [0] * len(self.engines)
        self._views: list[tuple[tuple[int, int, int, int], ReplicaView] | None] = [None] * len(self.engines)
        # Policies that read only the replicas' count (all healthy here) are asked without
        # views: building one per replica per request is most of routing's cost in a fleet.
        self._count_choose = count_chooser(policy)
        self._decode_count_choose = count_chooser(decode.policy) if decode is not None else None

    @property
    def learns(self) -> bool:
        """True when a policy learns from finished requests (`finished`'s TTFT and mean
        ITL); else `finished` may be given None for them."""
        return any(p is not None and not isinstance(p, NoFeedback)
                   for p in (self.policy, self.decode.policy if self.decode is not None else None))

    def is_prefill(self, index: int) -> bool:
        """True for a prefill replica of a disaggregated cluster."""
        return self.decode is not None and index < self.num_prefill

    @property
    def ingress_s(self) -> float:
        """Seconds from the client's send to the replica's queue."""
        hop = self.network.router_hop_ms if len(self.engines) > 1 else 0.0  # a P/D proxy too
        return (self.network.request_overhead_ms + hop) / 1e3

    def frontend_s(self, prompt_tokens: int) -> float:
        """Seconds a replica's tokenizer worker spends on one request before the engine."""
        n = self.network
        return (n.frontend_tokenize_us + n.frontend_us_per_prompt_token * prompt_tokens) * 1e-6

    @property
    def frontend_handoff_s(self) -> float:
        """Seconds of a replica's event loop per request it hands to the engine."""
        return self.network.frontend_handoff_us * 1e-6

    @property
    def frontend_request_s(self) -> float:
        """Seconds of a replica's event loop per request it takes in."""
        return self.network.frontend_us_per_request * 1e-6

    @property
    def frontend_output_s(self) -> float:
        """Seconds of a replica's event loop per output token of a step."""
        return self.network.frontend_us_per_output_token * 1e-6

    @property
    def frontend_chunk_s(self) -> float:
        """Seconds of a replica's event loop per SSE chunk it sends."""
        return self.network.frontend_us_per_chunk * 1e-6

    def route(self, req: RouteRequest, now_s: float, with_views: bool = False) -> int:
        """The replica index for `req` (counted in flight until `finished`); with a decode
        pool, a prefill replica. `with_views` asks every policy through its views (the
        stepwise reference: the same choices)."""
        count = None if with_views else self._count_choose
        return self._choose(self.policy, count, 0, self.num_prefill, req, now_s)

    def route_decode(self, req: RouteRequest, now_s: float, with_views: bool = False) -> int:
        """The decode replica (its index in `engines`) for a prefilled request."""
        assert self.decode is not None
        count = None if with_views else self._decode_count_choose
        return self._choose(self.decode.policy, count, self.num_prefill, len(self.engines), req, now_s)

    def _choose(self, policy: RoutingPolicy | None, count_choose: CountChooser | None, lo: int,
                hi: int, req: RouteRequest, now_s: float) -> int:
        if policy is None or hi - lo == 1:
            index = lo
        elif count_choose is not None:
            index = lo + count_choose(req, hi - lo, now_s).index
        else:
            views = [self._view(i, lo) for i in range(lo, hi)]
            index = lo + policy.choose(req, views, now_s).index
        self.in_flight[index] += 1
        self.routed[index] += 1
        return index

    def _view(self, i: int, lo: int) -> ReplicaView:
        """Replica i as its policy sees it (index relative to its pool's first, `lo`). A
        view is immutable and a fleet's replicas mostly stand still between two requests,
        so a replica's last view is handed out again while what it shows is unchanged
        (in flight, running, waiting, free blocks: its KV usage is a function of those)."""
        e = self.engines[i]
        sched = e.scheduler
        key = (self.in_flight[i], len(sched.running), len(sched.waiting), e.pool.num_free_blocks)
        last = self._views[i]
        if last is not None and last[0] == key:
            return last[1]
        view = ReplicaView(index=i - lo, healthy=True, in_flight=key[0], running=key[1],
                           waiting=key[2], kv_usage_frac=e.pool.usage_frac, telemetry_age_s=0.0)
        self._views[i] = (key, view)
        return view

    def finished(self, index: int, req: RouteRequest, ttft_ms: float | None,
                 mean_itl_ms: float | None, ok: bool, now_s: float) -> None:
        self.in_flight[index] -= 1
        if self.decode is not None and index >= self.num_prefill:
            if self.decode.policy is not None:
                self.decode.policy.on_finished(index - self.num_prefill, req, ttft_ms,
                                               mean_itl_ms, ok, now_s)
        elif self.policy is not None:
            self.policy.on_finished(index, req, ttft_ms, mean_itl_ms, ok, now_s)
