"""Policies that read only the replicas' count are asked without views, with the same choices.

`round_robin` and `random` declare `ReadsCountOnly`; the simulated cluster then calls
`choose_all_healthy(req, n, now_s)` instead of building `n` `ReplicaView`s per request.
Both ways must choose the same replicas and leave the policy (and its RNG) in the same state.
"""

from __future__ import annotations

import random

import pytest

from servelab.routing.balance import RandomChoice, RoundRobin
from servelab.routing.policies import POLICY_NAMES, make_policy
from servelab.routing.records import (
    ReplicaView,
    RouteRequest,
    RoutingPolicy,
    count_chooser,
)
from servelab.sim.cluster import Cluster, NetworkCosts
from servelab.sim.cost import AffineCost
from servelab.sim.engine import SimConfig, SimEngine
from servelab.sim.offline import OfflineRequest, simulate
from servelab.sim.scheduler import ScheduledStep

_REQ = RouteRequest("a prompt", 8, None)


def _views(n: int) -> list[ReplicaView]:
    return [ReplicaView(index=i, healthy=True, in_flight=0) for i in range(n)]


def test_only_round_robin_and_random_declare_reading_the_count_alone() -> None:
    declared = {name for name in POLICY_NAMES
                if count_chooser(make_policy(name, random.Random(0))) is not None}
    assert declared == {"round_robin", "random"}


def test_round_robin_without_views_takes_the_same_turns() -> None:
    views, counts = RoundRobin(), RoundRobin()
    sizes = [3] * 7 + [5, 2, 2, 4, 1, 6]
    got = [counts.choose_all_healthy(_REQ, n, 0.0) for n in sizes]
    assert got == [views.choose(_REQ, _views(n), 0.0) for n in sizes]
    assert [d.index for d in got[:7]] == [0, 1, 2, 0, 1, 2, 0]
    assert got[0].reason == "round robin: turn 0 of 3"


@pytest.mark.parametrize("seed", range(4))
def test_random_without_views_draws_the_same_replicas(seed: int) -> None:
    rng_views, rng_counts = random.Random(seed), random.Random(seed)
    views, counts = RandomChoice(rng_views), RandomChoice(rng_counts)
    sizes = [64] * 50 + [3, 7, 1, 2, 1000]
    got = [counts.choose_all_healthy(_REQ, n, 0.0) for n in sizes]
    assert got == [views.choose(_REQ, _views(n), 0.0) for n in sizes]
    assert rng_views.getstate() == rng_counts.getstate()
    assert got[0].index == random.Random(seed).choice(list(range(64)))


def _fleet(policy: RoutingPolicy, stepwise: bool) -> tuple[list, list[int], dict[str, int]]:
    """A run on 6 replicas behind `policy`: its records, the per-replica routed counts and
    the replica that stepped each request (`stepwise`: every policy asked through views)."""
    cost = AffineCost(step_s=0.003, per_decode_seq_s=2e-4, per_prefill_token_s=5e-5)
    engines = [SimEngine(SimConfig(num_gpu_blocks=200, block_size=16, max_num_seqs=8,
                                   max_num_batched_tokens=512, max_model_len=600,
                                   enable_chunked_prefill=True, async_scheduling=True, seed=j),
                         cost) for j in range(6)]
    cluster = Cluster(engines, policy, NetworkCosts(request_overhead_ms=1.0, router_hop_ms=0.2))
    rng = random.Random(11)
    reqs = [OfflineRequest(i, tuple(range(i * 1000, i * 1000 + rng.randint(1, 200))),
                           rng.randint(1, 60), route_text=f"p{i}") for i in range(90)]
    intended = [i * 0.004 for i in range(90)]
    where: dict[str, int] = {}

    def seen(replica: int, start_s: float, duration_s: float, step: ScheduledStep,
             engine: SimEngine) -> None:
        for r in step.reqs:
            # ids are "<host object id>-<request index>": the index is what both runs share
            where.setdefault(str(r.request_id).rsplit("-", 1)[1], replica)

    run = simulate(cluster, reqs, intended, None, 0, seen, stepwise=stepwise)
    return run.records, list(cluster.routed), where


@pytest.mark.parametrize("name", ["round_robin", "random"])
def test_the_cluster_routes_the_same_requests_without_views(name: str) -> None:
    records, routed, where = _fleet(make_policy(name, random.Random(5)), stepwise=False)
    ref_records, ref_routed, ref_where = _fleet(make_policy(name, random.Random(5)), stepwise=True)
    assert routed == ref_routed and sum(routed) == 90
    assert where == ref_where and len(where) == 90
    assert records == ref_records
    if name == "round_robin":
        assert routed == [15] * 6
