"""The offline driver and clusters: client semantics and closed-form timings."""

from __future__ import annotations

import random
from array import array
from dataclasses import replace

import pytest

from servelab.metrics.summary import SummaryOptions, summarize
from servelab.routing.policies import make_policy
from servelab.sim.cluster import Cluster, NetworkCosts
from servelab.sim.cost import AffineCost
from servelab.sim.engine import SimConfig, SimEngine
from servelab.sim.offline import OfflineRequest, _warmups, offline_requests, simulate
from servelab.sim.setup import fit_token_ids
from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.tokenizer import load_tokenizer

# 10 ms per step + 1 ms per prefill token + 0.5 ms per decode sequence.
_COST = AffineCost(step_s=0.010, per_decode_seq_s=0.0005, per_prefill_token_s=0.001)
_NET = NetworkCosts(request_overhead_ms=3.0, router_hop_ms=0.5)


def _engine(seqs: int = 8, mml: int = 512) -> SimEngine:
    return SimEngine(SimConfig(num_gpu_blocks=256, block_size=16, max_num_seqs=seqs,
                               max_num_batched_tokens=256, max_model_len=mml), _COST)


def _req(i: int, plen: int, out: int) -> OfflineRequest:
    return OfflineRequest(i, tuple(range(i * 1000, i * 1000 + plen)), out, route_text=f"p{i}")


def test_one_request_alone_ttft_is_overhead_plus_prefill_step() -> None:
    run = simulate(Cluster([_engine()], None, _NET), [_req(0, 40, 4)], [0.0])
    (rec,) = run.records
    assert rec.ttft_ms == pytest.approx(3.0 + 10.0 + 40.0)
    assert rec.itl_ms == pytest.approx([10.5, 10.5, 10.5])
    assert rec.e2el_ms == pytest.approx(53.0 + 31.5)
    assert rec.output_len == 4 and rec.prompt_len == 40
    assert run.duration_s == pytest.approx(0.0845)


def test_decode_only_batch_step_follows_the_cost_model() -> None:
    # Two requests arriving together: one joint prefill step, then joint decode steps.
    run = simulate(Cluster([_engine()], None, _NET), [_req(0, 10, 3), _req(1, 20, 3)], [0.0, 0.0])
    for rec in run.records:
        assert rec.ttft_ms == pytest.approx(3.0 + 10.0 + 30.0)
        assert rec.itl_ms == pytest.approx([11.0, 11.0])  # 10 ms + 2 x 0.5 ms


def test_concurrency_slot_waits_are_recorded_like_the_client() -> None:
    reqs = [_req(i, 10, 2) for i in range(3)]
    run = simulate(Cluster([_engine()], None, _NET), reqs, [0.0, 0.0, 0.0], max_concurrency=1)
    e2el = 3.0 + 20.0 + 10.5  # overhead, prefill step (10 + 10), one decode
    waits = [r.slot_wait_ms for r in sorted(run.records, key=lambda r: r.index)]
    assert waits == pytest.approx([0.0, e2el, 2 * e2el])
    assert [r.send_s for r in run.records] == pytest.approx([0.0, e2el / 1e3, 2 * e2el / 1e3])


def test_warmups_come_first_with_negative_times_and_are_left_out_of_the_summary() -> None:
    reqs = [_req(i, 10, 2) for i in range(4)]
    run = simulate(Cluster([_engine()], None, _NET), reqs, [0.0, 0.1, 0.2, 0.3], num_warmups=2)
    warm = [r for r in run.records if r.warmup]
    assert len(warm) == 2 and all(r.send_s < 0 for r in warm)
    res = summarize(run.records, run.duration_s, SummaryOptions())
    assert res.completed == 4


def test_warmups_leave_no_prefix_cache_hit_for_the_measured_requests() -> None:
    reqs = [_req(i, 64, 2) for i in range(4)]  # 4 full blocks each, no shared prefix
    eng = _engine()
    simulate(Cluster([eng], None, _NET), reqs, [0.0, 0.1, 0.2, 0.3], num_warmups=4)
    assert eng.stats.prefix_cache_queries_total > 0
    assert eng.stats.prefix_cache_hits_total == 0
    # The same request sent twice does hit: the counter can see a repeat.
    again = _engine()
    simulate(Cluster([again], None, _NET), [reqs[0], reqs[0]], [0.0, 1.0])
    assert again.stats.prefix_cache_hits_total == 48  # 3 full blocks; the last is recomputed


def test_too_long_request_fails_with_http_400_and_the_rest_complete() -> None:
    reqs = [_req(0, 100, 10), _req(1, 40, 10)]
    run = simulate(Cluster([_engine(mml=64)], None, _NET), reqs, [0.0, 0.0])
    by_index = {r.index: r for r in run.records}
    assert by_index[0].error_kind == "http_400"
    assert "longer than the maximum model length of 64" in (by_index[0].error or "")
    assert by_index[1].success and by_index[1].output_len == 10


def test_round_robin_cluster_spreads_requests_evenly() -> None:
    engines = [_engine() for _ in range(4)]
    cluster = Cluster(engines, make_policy("round_robin", random.Random(0)), _NET)
    reqs = [_req(i, 10, 2) for i in range(12)]
    run = simulate(cluster, reqs, [0.01 * i for i in range(12)])
    assert cluster.routed == [3, 3, 3, 3]
    assert cluster.in_flight == [0, 0, 0, 0]
    assert all(r.success for r in run.records)
    # The router hop is paid on top of the request overhead.
    first = min(run.records, key=lambda r: r.index)
    assert first.ttft_ms == pytest.approx(3.5 + 10.0 + 10.0)


def test_every_request_finishes_under_load_with_a_small_pool() -> None:
    eng = SimEngine(SimConfig(num_gpu_blocks=40, block_size=16, max_num_seqs=16,
                              max_num_batched_tokens=128, max_model_len=512), _COST)
    rng = random.Random(5)
    reqs = [_req(i, rng.randrange(1, 200), rng.randrange(1, 200)) for i in range(80)]
    run = simulate(Cluster([eng], None, _NET), reqs, [0.0] * 80)
    assert sorted(r.index for r in run.records) == list(range(80))
    assert all(r.success and r.output_len == q.output_len for r, q in
               zip(sorted(run.records, key=lambda r: r.index), reqs))
    assert eng.stats.num_preemptions_total > 0


def test_the_frontend_takes_requests_one_at_a_time() -> None:
    # Known answer: 100 us per prompt token = 10 ms per 100-token prompt, one request at a
    # time; three requests sent together reach the engine 10, 20 and 30 ms after the 3 ms
    # overhead, each finds it idle (1 ms steps, one output token) and samples at once.
    quick = SimEngine(SimConfig(num_gpu_blocks=256, block_size=16, max_num_seqs=8,
                                max_num_batched_tokens=256, max_model_len=512),
                      AffineCost(step_s=0.001))
    net = NetworkCosts(request_overhead_ms=3.0, router_hop_ms=0.5, frontend_us_per_prompt_token=100.0)
    run = simulate(Cluster([quick], None, net), [_req(i, 100, 1) for i in range(3)], [0.0] * 3)
    got = sorted(r.ttft_ms for r in run.records)
    assert got == pytest.approx([3.0 + 10.0 + 1.0, 3.0 + 20.0 + 1.0, 3.0 + 30.0 + 1.0])


def _sync_quick(step_s: float) -> SimEngine:
    return SimEngine(SimConfig(num_gpu_blocks=256, block_size=16, max_num_seqs=8,
                               max_num_batched_tokens=256, max_model_len=512,
                               async_scheduling=False), AffineCost(step_s=step_s))


def test_a_lagging_event_loop_merges_tokens_into_one_chunk() -> None:
    # Known answer: 1 ms steps, 2.5 ms per chunk, nothing else. The request enters the
    # engine at 3 ms; tokens are sampled at 4, 5, 6, 7 ms. Token 1's chunk is sent 4 -> 6.5;
    # tokens 2 and 3, processed meanwhile, wait and go in one chunk 6.5 -> 9.0 (the client
    # splits its gap: 7.75, 9.0); token 4 (sampled at 7) 9.0 -> 11.5, and the request ends.
    net = NetworkCosts(request_overhead_ms=3.0, frontend_us_per_chunk=2500.0)
    run = simulate(Cluster([_sync_quick(0.001)], None, net), [_req(0, 10, 4)], [0.0])
    rec = run.records[0]
    assert rec.ttft_ms == pytest.approx(6.5)
    assert rec.itl_ms == pytest.approx([1.25, 1.25, 2.5])
    assert rec.chunks == 3 and rec.output_len == 4
    assert run.duration_s == pytest.approx(0.0115)


def test_a_burst_hands_its_first_request_over_after_the_others_are_taken_in() -> None:
    # Known answer: three requests reach the API server together at 3 ms. Its loop takes
    # each in for 3 ms (3 -> 6, 6 -> 9, 9 -> 12); the tokenizer does 2.4 ms each as they come
    # (6 -> 8.4, 9 -> 11.4, 12 -> 14.4); each hand-off (1 ms) queues behind the loop's work:
    # request 0's behind request 2's intake (12 -> 13), request 1's next (13 -> 14), request
    # 2's at 14.4 -> 15.4. Steps of 1.5 ms: request 0 alone 13 -> 14.5, its token sent when
    # the loop is free again at 15.4; request 1 at 14.5 -> 16.0; request 2 at 16.0 -> 17.5.
    net = NetworkCosts(request_overhead_ms=3.0, frontend_us_per_request=3000.0,
                       frontend_handoff_us=1000.0, frontend_tokenize_us=2400.0)
    run = simulate(Cluster([_sync_quick(0.0015)], None, net), [_req(i, 10, 1) for i in range(3)],
                   [0.0] * 3)
    by = {r.index: r for r in run.records}
    assert [by[i].ttft_ms for i in range(3)] == pytest.approx([15.4, 16.0, 17.5])


def test_fit_token_ids_cuts_pads_and_keeps_arrays() -> None:
    """An array of the right length is the request's own (no copy); a cut keeps its
    typecode; padding ids are negative, unique to the request, in 8-byte ids."""
    ids = array("H", [7, 8, 9, 10])
    assert fit_token_ids(ids, 4, 0) is ids
    cut = fit_token_ids(ids, 2, 0)
    assert (cut.typecode, cut.tolist()) == ("H", [7, 8])
    padded = fit_token_ids(ids, 7, 2)
    assert (padded.typecode, padded.tolist()) == ("q", [7, 8, 9, 10, -3_000_000, -3_000_001, -3_000_002])
    assert ids.tolist() == [7, 8, 9, 10]
    from_list = fit_token_ids([1, 2, 3], 2, 0)
    assert (type(from_list), from_list.tolist()) == (array, [1, 2])
    assert fit_token_ids((), 2, 999_999).tolist() == [-1_000_000_000_000, -1_000_000_000_001]


def test_warmups_get_their_own_first_id_and_leave_the_requests_alone() -> None:
    reqs = [OfflineRequest(0, array("H", [5, 6, 7]), 3, "a"), OfflineRequest(1, (8, 9), 2, "b"),
            OfflineRequest(2, array("H"), 1, "c")]
    warm = _warmups(reqs, 4)
    assert [w.prompt_token_ids.tolist() for w in warm] == [
        [(1 << 40) + 0, 6, 7], [(1 << 40) + 1, 9], [], [(1 << 40) + 3, 6, 7]]
    assert all(w.prompt_token_ids.typecode == "q" for w in warm)
    assert [(w.index, w.output_len, w.route_text) for w in warm] == [
        (0, 3, "a"), (1, 2, "b"), (2, 1, "c"), (0, 3, "a")]
    assert reqs[0].prompt_token_ids.tolist() == [5, 6, 7] and reqs[1].prompt_token_ids == (8, 9)


def test_random_requests_share_the_workloads_ids_and_simulate_as_tuples_do() -> None:
    """`offline_requests` keeps each random request's ids once (the workload's array, not
    a copy), gives the same ids as encoding the texts again, and a fleet serves them as it
    serves the same ids in tuples: the same records and prefix-cache counts."""
    tok = load_tokenizer(None)
    work = build_workload(DatasetOptions(dataset_name="random", num_prompts=60,
                                         random_input_len=40, random_output_len=6,
                                         random_range_ratio=0.5), tok, 1)
    assert work.token_ids is not None
    reqs = offline_requests(work.requests, tok, work.token_ids)
    assert all(r.prompt_token_ids is ids for r, ids in zip(reqs, work.token_ids))
    again = offline_requests(work.requests, tok)
    assert again == reqs
    assert {(type(r.prompt_token_ids), r.prompt_token_ids.typecode) for r in again} == {(array, "H")}
    # every third request opens with the block of the one two before it (the same replica
    # under round robin): prefix-cache hits
    reqs = [replace(r, prompt_token_ids=reqs[i - 2].prompt_token_ids[:16]
                    + r.prompt_token_ids[16:]) if i % 3 == 2 else r for i, r in enumerate(reqs)]
    as_tuples = [replace(r, prompt_token_ids=tuple(r.prompt_token_ids)) for r in reqs]

    def serve(requests: list[OfflineRequest]) -> tuple[list, list[int]]:
        engines = [_engine() for _ in range(2)]
        cluster = Cluster(engines, make_policy("round_robin", random.Random(0)), _NET)
        run = simulate(cluster, requests, [0.05 * i for i in range(len(requests))], num_warmups=3)
        return run.records, [e.stats.prefix_cache_hits_total for e in engines]

    records, hits = serve(reqs)
    assert sum(hits) > 0
    assert (records, hits) == serve(as_tuples)
