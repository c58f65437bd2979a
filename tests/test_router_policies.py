"""Routing policies: known answers on constructed replica states (no sockets)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from servelab.errors import ServelabError
from servelab.routing.affinity import HashRing
from servelab.routing.policies import (
    POLICY_NAMES,
    NoHealthyReplicaError,
    ReplicaView,
    RouteRequest,
    make_policy,
)


def views(loads, healthy=None, **extra):
    healthy = healthy or [True] * len(loads)
    return [ReplicaView(i, h, n, **{k: v[i] for k, v in extra.items()})
            for i, (n, h) in enumerate(zip(loads, healthy))]


def req(prompt="hello", session=None):
    return RouteRequest(prompt=prompt, prompt_len=len(prompt), session_key=session)


def test_round_robin_exact_order_and_skips_unhealthy():
    p = make_policy("round_robin", random.Random(0))
    reps = views([0, 0, 0])
    assert [p.choose(req(), reps, 0.0).index for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    down = views([0, 0, 0], healthy=[True, False, True])
    assert [p.choose(req(), down, 0.0).index for _ in range(4)] == [2, 0, 2, 0]


def test_every_policy_refuses_when_none_healthy():
    for name in POLICY_NAMES:
        p = make_policy(name, random.Random(0))
        with pytest.raises(NoHealthyReplicaError):
            p.choose(req(), views([0, 0], healthy=[False, False]), 0.0)


def test_every_policy_only_chooses_healthy():
    for name in POLICY_NAMES:
        p = make_policy(name, random.Random(1))
        reps = views([5, 0, 3, 9], healthy=[False, False, True, True])
        for k in range(50):
            assert p.choose(req(f"p{k}" * 40, f"s{k}"), reps, 0.0).index in (2, 3), name


def test_least_requests_balances_unequal_lengths():
    # Long requests (100 ticks) and short ones (1 tick) arrive alternately, one per tick.
    # least_requests must keep in-flight counts within one of each other, unlike round
    # robin which puts all long requests on replica 0.
    def run(name):
        p = make_policy(name, random.Random(0))
        ends: list[list[int]] = [[], []]
        sent = Counter()
        worst_gap = 0
        for t in range(400):
            for e in ends:
                e[:] = [x for x in e if x > t]
            reps = views([len(e) for e in ends])
            worst_gap = max(worst_gap, abs(len(ends[0]) - len(ends[1])))
            i = p.choose(req(), reps, float(t)).index
            ends[i].append(t + (100 if t % 2 == 0 else 1))
            sent[i] += 1
        return worst_gap, sent

    gap, sent = run("least_requests")
    assert gap <= 1
    rr_gap, _ = run("round_robin")
    assert rr_gap >= 49  # ~50 long requests stacked on replica 0


def test_least_requests_ties_take_turns():
    p = make_policy("least_requests", random.Random(0))
    assert [p.choose(req(), views([0, 0, 0]), 0.0).index for _ in range(4)] == [0, 1, 2, 0]


def test_power_of_two_seeded_never_busiest_and_favours_idle():
    p = make_policy("power_of_two", random.Random(42))
    reps = views([0, 5, 9])
    picks = Counter(p.choose(req(), reps, 0.0).index for _ in range(3000))
    assert picks[2] == 0  # the busiest loses every pair it is drawn in
    # replica 0 wins whenever drawn: 2 of 3 pairs; replica 1 wins only the pair {1, 2}.
    assert 1900 < picks[0] < 2100 and picks[0] + picks[1] == 3000


def test_power_of_two_same_seed_same_choices():
    reps = views([1, 1, 1, 1])
    a = make_policy("power_of_two", random.Random(7))
    b = make_policy("power_of_two", random.Random(7))
    sa = [a.choose(req(), reps, 0.0).index for _ in range(100)]
    sb = [b.choose(req(), reps, 0.0).index for _ in range(100)]
    assert sa == sb and len(set(sa)) == 4


def test_consistent_hash_sticks_per_key():
    p = make_policy("consistent_hash", random.Random(0))
    reps = views([0, 0, 0, 0])
    first = {k: p.choose(req("x", f"user-{k}"), reps, 0.0).index for k in range(200)}
    assert len(set(first.values())) == 4
    for k in range(200):
        busy = views([50 if i == first[k] else 0 for i in range(4)])
        assert p.choose(req("y", f"user-{k}"), busy, 1.0).index == first[k]


def test_consistent_hash_uses_prompt_prefix_without_session():
    p = make_policy("consistent_hash", random.Random(0), prefix_chars=8)
    reps = views([0] * 5)
    a = p.choose(req("SYSTEM01 question one"), reps, 0.0).index
    assert all(p.choose(req(f"SYSTEM01 q{k}"), reps, 0.0).index == a for k in range(20))


def test_consistent_hash_removing_a_replica_moves_only_its_keys():
    n = 8
    p = make_policy("consistent_hash", random.Random(0))
    keys = [f"session-{k}" for k in range(4000)]
    before = {k: p.choose(req("", k), views([0] * n), 0.0).index for k in keys}
    gone = views([0] * n, healthy=[i != 3 for i in range(n)])
    after = {k: p.choose(req("", k), gone, 0.0).index for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert all(before[k] == 3 for k in moved)
    assert all(after[k] != 3 for k in keys)
    assert 0.08 < len(moved) / len(keys) < 0.18  # ~1/8 with 160 virtual nodes
    back = {k: p.choose(req("", k), views([0] * n), 0.0).index for k in keys}
    assert back == before


def test_hash_ring_is_stable_across_instances():
    a, b = HashRing([0, 1, 2], 50), HashRing([0, 1, 2], 50)
    assert [a.owner(f"k{i}") for i in range(100)] == [b.owner(f"k{i}") for i in range(100)]


PREFIX_A = "A" * 64 * 4  # four whole 64-char chunks
PREFIX_B = "B" * 64 * 4


def test_cache_aware_repeated_prefix_goes_to_same_replica():
    p = make_policy("cache_aware", random.Random(0))
    reps = views([0, 0, 0])
    first = p.choose(req(PREFIX_A + "q0"), reps, 0.0)
    assert first.prefix_match_chars == 0
    for k in range(1, 10):
        d = p.choose(req(PREFIX_A + f"q{k}"), views([2, 2, 2]), 0.0)
        assert d.index == first.index and d.prefix_match_chars == 256
    other = p.choose(req(PREFIX_B + "q"), reps, 0.0)
    assert other.index != first.index  # a new prefix goes to a replica holding least


def test_cache_aware_falls_back_when_imbalance_passes_both_thresholds():
    p = make_policy("cache_aware", random.Random(0),
                    balance_abs_threshold=4, balance_rel_threshold=1.5)
    home = p.choose(req(PREFIX_A + "q0"), views([0, 0]), 0.0).index
    other = 1 - home

    def loads(h, o):
        v = [0, 0]
        v[home], v[other] = h, o
        return views(v)

    # Up to +4 is not past the absolute threshold: stay (A now has 5 in flight at home).
    for k in range(1, 5):
        assert p.choose(req(PREFIX_A + f"q{k}"), loads(k, 0), 0.0).index == home
    # +5, 5 > 1.5 x 0, and 5 (> 4) of home's requests share the prefix: fall back.
    d = p.choose(req(PREFIX_A + "q5"), loads(5, 0), 0.0)
    assert d.index == other and "fell back" in d.reason and "5 of them sharing" in d.reason
    # Past the absolute threshold but not the relative one (25 <= 1.5 x 20): stay... on the
    # least loaded holder: both now hold the prefix, so the idler one wins the tie.
    assert p.choose(req(PREFIX_A + "q6"), loads(25, 20), 0.0).index == other


def test_cache_aware_imbalance_of_other_prefixes_does_not_move_a_prefix():
    # Home is 9 requests ahead, but only 1 of them shares A: the load is other prefixes',
    # so A stays where it is cached (a fallback would copy A onto the other replica).
    p = make_policy("cache_aware", random.Random(0),
                    balance_abs_threshold=4, balance_rel_threshold=1.5)
    home = p.choose(req(PREFIX_A + "q0"), views([0, 0]), 0.0).index
    v = [0, 0]
    v[home] = 9
    d = p.choose(req(PREFIX_A + "q1"), views(v), 0.0)
    assert d.index == home and "2 sharing" not in d.reason and "1 sharing it" in d.reason


def test_cache_aware_counts_a_prefix_in_flight_until_finished():
    p = make_policy("cache_aware", random.Random(0),
                    balance_abs_threshold=4, balance_rel_threshold=1.5)
    sent = [req(PREFIX_A + f"q{k}") for k in range(5)]
    home = p.choose(sent[0], views([0, 0]), 0.0).index
    for r in sent[1:]:
        assert p.choose(r, views([0, 0]), 0.0).index == home
    v = [0, 0]
    v[home] = 9
    # One of the five finishes: 4 share A, not more than the threshold: stay.
    p.on_finished(home, sent[0], 10.0, 1.0, True, 0.0)
    assert p.choose(req(PREFIX_A + "x"), views(v), 0.0).index == home
    # That one makes 5 again: now A is what piles up, and it spreads.
    assert p.choose(req(PREFIX_A + "y"), views(v), 0.0).index == 1 - home


def test_cache_aware_noise_imbalance_keeps_one_home_per_prefix():
    # Known answer: 8 cold prefixes over 2 replicas, loads swinging 12 vs 2 either way
    # (past both thresholds), each request finished before the next: no prefix ever has
    # more than one request in flight, so no fallback fires and every prefix keeps the one
    # replica it was first sent to.
    p = make_policy("cache_aware", random.Random(0),
                    balance_abs_threshold=4, balance_rel_threshold=1.5)
    prefixes = [chr(ord("a") + k) * 256 for k in range(8)]
    homes: dict[int, set[int]] = {k: set() for k in range(8)}
    rng = random.Random(1)
    for step in range(400):
        k = rng.randrange(8)
        r = req(prefixes[k] + f"q{step}")
        load = [12, 2] if step % 2 else [2, 12]
        d = p.choose(r, views(load), 0.0)
        homes[k].add(d.index)
        p.on_finished(d.index, r, 10.0, 1.0, True, 0.0)
    assert all(len(h) == 1 for h in homes.values())
    assert {next(iter(h)) for h in homes.values()} == {0, 1}


def test_cache_aware_relative_threshold_alone_does_not_trigger():
    p = make_policy("cache_aware", random.Random(0),
                    balance_abs_threshold=4, balance_rel_threshold=1.5)
    home = p.choose(req(PREFIX_A), views([0, 0]), 0.0).index
    v = [0, 0]
    v[home], v[1 - home] = 3, 0  # x infinity relative, but only +3
    assert p.choose(req(PREFIX_A + "x"), views(v), 0.0).index == home
    v[home], v[1 - home] = 30, 21  # +9 absolute, but 30 < 1.5 x 21
    assert p.choose(req(PREFIX_A + "y"), views(v), 0.0).index == home


def test_cache_aware_hot_prefix_spreads_instead_of_piling():
    # One hot prefix, 4 replicas, in-flight grows with each decision and nothing finishes:
    # the spread of in-flight stays within the absolute threshold + 1.
    p = make_policy("cache_aware", random.Random(0), balance_abs_threshold=4)
    load = [0, 0, 0, 0]
    for k in range(200):
        i = p.choose(req(PREFIX_A + f"user {k}"), views(load), 0.0).index
        load[i] += 1
    assert max(load) - min(load) <= 5


def test_cache_aware_prefix_tree_evicts_lru():
    p = make_policy("cache_aware", random.Random(0), max_chunks_per_replica=4)
    home = p.choose(req(PREFIX_A), views([0]), 0.0).index
    p.choose(req(PREFIX_B), views([0]), 0.0)  # B's 4 chunks evict A's
    assert p.choose(req(PREFIX_A), views([0]), 0.0).prefix_match_chars == 0
    assert home == 0


def test_kv_aware_ignores_stale_telemetry():
    p = make_policy("kv_aware", random.Random(0), max_telemetry_age_s=2.0)
    # Replica 0 claims 50 waiting, but the reading is 10 s old: only its 1 in flight counts.
    reps = views([1, 2], running=[1, 2], waiting=[50, 0], kv_usage_frac=[0.9, 0.1],
                 telemetry_age_s=[10.0, 0.5])
    assert p.choose(req(), reps, 0.0).index == 0
    fresh = views([1, 2], running=[1, 2], waiting=[50, 0], kv_usage_frac=[0.9, 0.1],
                  telemetry_age_s=[0.5, 0.5])
    assert p.choose(req(), fresh, 0.0).index == 1


def test_kv_aware_never_trusts_telemetry_over_in_flight():
    p = make_policy("kv_aware", random.Random(0))
    # Fresh telemetry says replica 0 is idle, but the router has 10 in flight there.
    reps = views([10, 3], running=[0, 3], waiting=[0, 0], kv_usage_frac=[0.0, 0.2],
                 telemetry_age_s=[0.1, 0.1])
    assert p.choose(req(), reps, 0.0).index == 1


def test_kv_aware_prefers_lower_kv_usage_at_equal_queue():
    p = make_policy("kv_aware", random.Random(0))
    reps = views([2, 2], running=[2, 2], waiting=[0, 0], kv_usage_frac=[0.8, 0.3],
                 telemetry_age_s=[0.1, 0.1])
    assert p.choose(req(), reps, 0.0).index == 1


def test_latency_prefers_fast_replica_and_accounts_for_load():
    p = make_policy("latency", random.Random(0), alpha=1.0, itl_tokens=10)
    p.on_finished(0, req(), ttft_ms=100.0, itl_ms=10.0, ok=True, now_s=0.0)  # 200 ms
    p.on_finished(1, req(), ttft_ms=40.0, itl_ms=6.0, ok=True, now_s=0.0)  # 100 ms
    assert p.choose(req(), views([0, 0]), 0.0).index == 1
    # 100 x (1 + 2) = 300 > 200 x (1 + 0): the slower idle replica wins.
    assert p.choose(req(), views([0, 2]), 0.0).index == 0
    p.on_finished(1, req(), ttft_ms=9999.0, itl_ms=None, ok=False, now_s=0.0)  # ignored
    assert p.choose(req(), views([0, 0]), 0.0).index == 1


def test_latency_tries_replicas_without_samples():
    p = make_policy("latency", random.Random(0), alpha=1.0)
    p.on_finished(0, req(), ttft_ms=50.0, itl_ms=5.0, ok=True, now_s=0.0)
    assert p.choose(req(), views([1, 0]), 0.0).index == 1


def test_random_uses_injected_rng():
    a = make_policy("random", random.Random(3))
    b = make_policy("random", random.Random(3))
    reps = views([0, 0, 0])
    sa = [a.choose(req(), reps, 0.0).index for _ in range(60)]
    assert sa == [b.choose(req(), reps, 0.0).index for _ in range(60)]
    assert set(sa) == {0, 1, 2}


def test_make_policy_rejects_unknowns_by_name():
    with pytest.raises(ServelabError, match="unknown routing policy 'fastest'"):
        make_policy("fastest", random.Random(0))
    with pytest.raises(ServelabError, match="no parameter 'threshold'.*balance_abs_threshold"):
        make_policy("cache_aware", random.Random(0), threshold=3)
    with pytest.raises(ServelabError, match="max_telemetry_age_s must be > 0"):
        make_policy("kv_aware", random.Random(0), max_telemetry_age_s=0)
