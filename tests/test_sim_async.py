"""Asynchronous scheduling: a request reaching a busy engine misses the step already scheduled.

Costs as in test_sim_offline: a step is 10 ms + 1 ms per prefill token + 0.5 ms per decode
sequence; requests reach the engine 3 ms after they are sent.
"""

from __future__ import annotations

import pytest

from servelab.sim.cluster import Cluster, NetworkCosts
from servelab.sim.cost import AffineCost
from servelab.sim.engine import SimConfig, SimEngine, SimRequest
from servelab.sim.offline import OfflineRequest, simulate

_COST = AffineCost(step_s=0.010, per_decode_seq_s=0.0005, per_prefill_token_s=0.001)
_NET = NetworkCosts(request_overhead_ms=3.0, router_hop_ms=0.5)


def _engine(async_scheduling: bool) -> SimEngine:
    return SimEngine(SimConfig(num_gpu_blocks=256, block_size=16, max_num_seqs=8,
                               max_num_batched_tokens=256, max_model_len=512,
                               async_scheduling=async_scheduling), _COST)


def _req(i: int, plen: int, out: int) -> OfflineRequest:
    return OfflineRequest(i, tuple(range(i * 1000, i * 1000 + plen)), out)


def _two(async_scheduling: bool, a_out: int) -> list:
    # A (40 prompt tokens) reaches the idle engine at 3 ms: prefill step 3..53 ms.
    # B (20 prompt tokens) is sent at 15 ms and reaches the engine at 18 ms, mid-step.
    run = simulate(Cluster([_engine(async_scheduling)], None, _NET),
                   [_req(0, 40, a_out), _req(1, 20, 2)], [0.0, 0.015])
    return sorted(run.records, key=lambda r: r.index)


def test_busy_engine_admits_a_new_request_one_step_later() -> None:
    a, b = _two(True, 4)
    # Step 2 (53..63.5 ms) was scheduled when step 1 began: A's decode alone. B joins step 3:
    # 63.5 + 10 + 20 (prefill) + 0.5 (A's decode) = 94 ms; TTFT from its send at 15 ms.
    assert b.ttft_ms == pytest.approx(94.0 - 15.0)
    assert a.ttft_ms == pytest.approx(53.0)
    assert a.itl_ms == pytest.approx([10.5, 30.5, 11.0])


def test_synchronous_scheduling_admits_it_at_the_next_step() -> None:
    a, b = _two(False, 4)
    # B joins step 2 (53..83.5 ms) with A's decode.
    assert b.ttft_ms == pytest.approx(83.5 - 15.0)
    assert a.itl_ms == pytest.approx([30.5, 11.0, 10.5])


def test_engine_with_nothing_else_scheduled_takes_the_request_at_once() -> None:
    # A finishes in its prefill step, so vLLM has no step scheduled after it: B's prefill
    # starts when step 1 ends (53 ms) and ends at 83 ms, as without async scheduling.
    _a, b = _two(True, 1)
    assert b.ttft_ms == pytest.approx(83.0 - 15.0)


def test_idle_engine_schedules_at_once() -> None:
    eng = _engine(True)
    eng.add_request(SimRequest("r", tuple(range(30)), 2, 0.0))
    first = eng.step(0.0)
    assert first.num_prefill_tokens == 30 and first.events[0].first


def test_requests_added_during_a_step_wait_out_the_next_one_and_can_be_aborted() -> None:
    eng = _engine(True)
    eng.add_request(SimRequest("a", tuple(range(30)), 5, 0.0))
    eng.step(0.0)                                             # a's prefill
    eng.add_request(SimRequest("b", tuple(range(100, 120)), 2, 0.01))
    eng.add_request(SimRequest("c", tuple(range(200, 220)), 2, 0.01))
    second = eng.step(0.04)                                   # scheduled before b, c arrived
    assert second.num_prefill_tokens == 0 and second.num_waiting == 0
    assert eng.num_inbox == 2
    eng.abort("c")
    third = eng.step(0.05)
    assert third.num_prefill_tokens == 20 and eng.num_inbox == 0
    assert {e.request_id for e in third.events} == {"a", "b"}
    while eng.has_work():
        eng.step(0.1)
    assert eng.stats.generation_tokens_total == 5 + 2
