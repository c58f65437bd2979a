"""Known-answer tests of the metrics calculator (servelab.metrics.summary).

The three successful requests below were chosen so every figure can be worked out by
hand; the expected values are written as the arithmetic that gives them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from array import array

import numpy as np
import pytest

from servelab.errors import ServelabError
from servelab.metrics.records import RequestRecord
from servelab.metrics.summary import (
    GoodputSLO,
    SummaryOptions,
    parse_goodput,
    parse_metric_percentiles,
    parse_percentile_metrics,
    summarize,
)

DURATION_S = 2.0


def ok(index, prompt, send, ttft, itl, intended=None, slot_wait=0.0):
    return RequestRecord(
        index=index,
        prompt_len=prompt,
        intended_send_s=send if intended is None else intended,
        send_s=send,
        slot_wait_ms=slot_wait,
        output_len=len(itl) + 1,
        ttft_ms=ttft,
        itl_ms=list(itl),
        e2el_ms=ttft + sum(itl),
    )


def failed(index, kind, send=1.2, ttft=None):
    return RequestRecord(
        index=index,
        prompt_len=40,
        intended_send_s=send,
        send_s=send,
        ttft_ms=ttft,
        error=f"failure {kind}",
        error_kind=kind,
    )


def records():
    # r0: 4 tokens, TTFT 100, ITL 20/30/40 -> E2EL 190, TPOT 90/3 = 30
    # r1: 2 tokens, TTFT 300, ITL 50 -> E2EL 350, TPOT 50
    # r2: 1 token, TTFT 200 -> E2EL 200, no TPOT (0 for goodput, as vLLM)
    return [
        ok(0, 10, 0.0, 100.0, [20.0, 30.0, 40.0]),
        ok(1, 20, 0.5, 300.0, [50.0]),
        ok(2, 30, 1.0, 200.0, []),
        failed(3, "http_500"),
        failed(4, "timeout", ttft=50.0),
        failed(5, "http_500"),
    ]


def pstd(values):
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def test_counts_tokens_and_throughput():
    res = summarize(records(), DURATION_S, SummaryOptions())
    assert res.completed == 3
    assert res.failed == 3
    assert res.failed_by_reason == {"http_500": 2, "timeout": 1}
    # only completed requests count, as in vLLM
    assert res.total_input_tokens == 10 + 20 + 30
    assert res.total_output_tokens == 4 + 2 + 1
    assert res.request_throughput == pytest.approx(3 / 2.0)
    assert res.output_throughput == pytest.approx(7 / 2.0)
    assert res.total_token_throughput == pytest.approx(67 / 2.0)


def test_latency_statistics_match_hand_computation():
    opts = SummaryOptions(percentile_metrics=("ttft", "tpot", "itl", "e2el"))
    res = summarize(records(), DURATION_S, opts)
    # TTFT [100, 300, 200]: sorted [100, 200, 300]; p99 at rank 0.99*2 = 1.98
    assert res.ttft.mean_ms == pytest.approx(200.0)
    assert res.ttft.median_ms == pytest.approx(200.0)
    assert res.ttft.std_ms == pytest.approx(pstd([100, 300, 200]))
    assert res.ttft.percentiles[0].value_ms == pytest.approx(200 + 0.98 * 100)
    # TPOT per request, only for outputs > 1 token: [30, 50]
    assert res.tpot.mean_ms == pytest.approx(40.0)
    assert res.tpot.std_ms == pytest.approx(10.0)
    assert res.tpot.percentiles[0].value_ms == pytest.approx(30 + 0.99 * 20)
    # ITL pooled over requests: [20, 30, 40, 50]; p99 at rank 0.99*3 = 2.97
    assert res.itl.mean_ms == pytest.approx(35.0)
    assert res.itl.median_ms == pytest.approx(35.0)
    assert res.itl.std_ms == pytest.approx(math.sqrt(125.0))
    assert res.itl.percentiles[0].value_ms == pytest.approx(40 + 0.97 * 10)
    # E2EL [190, 350, 200]: sorted [190, 200, 350]
    assert res.e2el.mean_ms == pytest.approx((190 + 350 + 200) / 3)
    assert res.e2el.median_ms == pytest.approx(200.0)
    assert res.e2el.percentiles[0].value_ms == pytest.approx(200 + 0.98 * 150)


def test_peak_tokens_and_concurrency_use_one_second_buckets():
    res = summarize(records(), DURATION_S, SummaryOptions())
    # token times: r0 0.10 0.12 0.15 0.19, r1 0.80 0.85 -> bucket 0 has 6; r2 1.2 -> bucket 1
    assert res.max_output_tokens_per_s == 6.0
    # r0 (0-0.19 s) and r1 (0.5-0.85 s) are both active in bucket 0, never at one instant
    assert res.max_concurrent_requests == 2
    assert res.peak_in_flight_requests == 1


def test_peak_in_flight_counts_overlap_at_an_instant():
    recs = [
        ok(0, 1, 0.0, 100.0, [100.0]),  # 0.0 - 0.2 s
        ok(1, 1, 0.1, 100.0, [100.0]),  # 0.1 - 0.3 s
        ok(2, 1, 0.15, 10.0, []),  # 0.15 - 0.16 s
        ok(3, 1, 0.3, 10.0, []),  # starts as r1 ends: no overlap
    ]
    res = summarize(recs, 1.0, SummaryOptions())
    assert res.peak_in_flight_requests == 3


@pytest.mark.parametrize(
    ("slo", "good"),
    [
        (GoodputSLO(ttft_ms=200.0), 2),  # r2 sits exactly on the SLO: it counts (<=)
        (GoodputSLO(ttft_ms=199.999), 1),
        (GoodputSLO(tpot_ms=30.0), 2),  # r0 on the boundary, r2's TPOT counts as 0
        (GoodputSLO(tpot_ms=29.999), 1),
        (GoodputSLO(e2el_ms=190.0), 1),
        (GoodputSLO(e2el_ms=350.0), 3),
        (GoodputSLO(ttft_ms=200.0, tpot_ms=30.0), 2),
        (GoodputSLO(ttft_ms=200.0, e2el_ms=199.0), 1),
        (GoodputSLO(ttft_ms=50.0), 0),
    ],
)
def test_goodput_on_both_sides_of_the_slo(slo, good):
    res = summarize(records(), DURATION_S, SummaryOptions(goodput=slo))
    assert res.request_goodput == pytest.approx(good / DURATION_S)


def test_goodput_absent_without_slo():
    res = summarize(records(), DURATION_S, SummaryOptions())
    assert res.request_goodput is None
    assert res.to_json_dict()["request_goodput"] is None


def test_warmups_are_excluded_entirely():
    warm = [
        RequestRecord(
            index=100, prompt_len=999, intended_send_s=0.0, send_s=5.0, output_len=2,
            ttft_ms=9000.0, itl_ms=[9000.0], e2el_ms=18000.0, warmup=True,
        ),
        RequestRecord(
            index=101, prompt_len=999, intended_send_s=0.0, send_s=0.0,
            error="boom", error_kind="connect", warmup=True,
        ),
    ]
    opts = SummaryOptions(goodput=GoodputSLO(ttft_ms=200.0))
    assert summarize(records() + warm, DURATION_S, opts) == summarize(
        records(), DURATION_S, opts
    )


def test_failures_never_enter_latency_or_throughput():
    only_ok = [r for r in records() if r.success]
    with_failures = summarize(records(), DURATION_S, SummaryOptions())
    without = summarize(only_ok, DURATION_S, SummaryOptions())
    for name in ("ttft", "tpot", "itl", "e2el"):
        assert with_failures.latency(name) == without.latency(name)
    assert with_failures.total_output_tokens == without.total_output_tokens
    assert with_failures.max_output_tokens_per_s == without.max_output_tokens_per_s


def test_failure_without_kind_is_grouped_as_unknown():
    rec = RequestRecord(index=0, prompt_len=1, intended_send_s=0, send_s=0, error="x")
    res = summarize([rec], 1.0, SummaryOptions())
    assert res.failed_by_reason == {"unknown": 1}


def test_no_successes_gives_zeros_like_vllm():
    res = summarize([failed(0, "connect")], 1.0, SummaryOptions(metric_percentiles=(50, 99)))
    assert res.completed == 0
    assert res.ttft.mean_ms == 0.0
    assert [p.value_ms for p in res.itl.percentiles] == [0.0, 0.0]
    assert res.max_output_tokens_per_s == 0.0
    assert res.max_concurrent_requests == 0


def test_detailed_lists_follow_request_order_in_seconds():
    shuffled = list(reversed(records()))
    d = summarize(shuffled, DURATION_S, SummaryOptions()).details
    assert d.input_lens == (10, 20, 30, 40, 40, 40)
    assert d.output_lens == (4, 2, 1, 0, 0, 0)
    assert d.ttfts_s == pytest.approx((0.1, 0.3, 0.2, 0.0, 0.05, 0.0))
    assert d.itls_s[0] == pytest.approx((0.02, 0.03, 0.04))
    assert d.errors[:3] == ("", "", "")
    assert d.errors[3] == "failure http_500"
    assert d.error_kinds == (None, None, None, "http_500", "timeout", "http_500")


def lagged(lags_ms, gap_s):
    return [
        ok(i, 1, i * gap_s + lag / 1000.0, 10.0, [], intended=i * gap_s)
        for i, lag in enumerate(lags_ms)
    ]


def test_client_fell_behind_rule():
    # mean intended gap 100 ms -> threshold min(10, max(1, 0.05 * 100)) = 5 ms
    # p99 of [0, 0, 6] = 0.98 * 6 = 5.88 ms > 5 -> behind; of [0, 0, 5] = 4.9 -> not
    behind = summarize(lagged([0, 0, 6], 0.1), 10.0, SummaryOptions()).client
    assert behind.sched_lag_threshold_ms == pytest.approx(5.0)
    assert behind.mean_intended_gap_ms == pytest.approx(100.0)
    assert behind.sched_lag.p99_ms == pytest.approx(5.88)
    assert behind.sched_lag.max_ms == pytest.approx(6.0)
    assert behind.sched_lag.mean_ms == pytest.approx(2.0)
    assert behind.client_fell_behind
    fine = summarize(lagged([0, 0, 5], 0.1), 10.0, SummaryOptions()).client
    assert not fine.client_fell_behind


def test_lag_threshold_caps_at_10ms_and_applies_when_all_sent_at_once():
    slow = summarize(lagged([0, 0, 9], 1.0), 10.0, SummaryOptions()).client
    assert slow.sched_lag_threshold_ms == pytest.approx(10.0)
    assert not slow.client_fell_behind
    burst = summarize(lagged([0, 0, 20], 0.0), 10.0, SummaryOptions()).client
    assert burst.mean_intended_gap_ms is None
    assert burst.sched_lag_threshold_ms == pytest.approx(10.0)
    assert burst.client_fell_behind


def test_slot_wait_is_not_lag():
    # sent 50 ms late, all of it waiting for a concurrency slot
    recs = [ok(0, 1, 0.05, 10.0, [], intended=0.0, slot_wait=50.0), ok(1, 1, 0.06, 10.0, [])]
    client = summarize(recs, 1.0, SummaryOptions()).client
    assert client.sched_lag.max_ms == pytest.approx(0.0)
    assert client.slot_wait.max_ms == pytest.approx(50.0)
    assert client.slot_wait.mean_ms == pytest.approx(25.0)
    assert not client.client_fell_behind


def test_bad_duration_is_an_error():
    with pytest.raises(ServelabError, match="duration"):
        summarize(records(), 0.0, SummaryOptions())


def test_parse_goodput():
    assert parse_goodput(["ttft:250", "tpot:100", "e2el:2000.5"]) == GoodputSLO(
        ttft_ms=250.0, tpot_ms=100.0, e2el_ms=2000.5
    )
    assert parse_goodput(["tpot:0"]) == GoodputSLO(tpot_ms=0.0)


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([], "at least one"),
        (["ttft"], "not KEY:MS"),
        (["itl:5"], "unknown metric 'itl'"),
        (["ttft:fast"], "not a number"),
        (["ttft:-1"], ">= 0"),
        (["ttft:nan"], "finite"),
        (["ttft:1", "ttft:2"], "twice"),
    ],
)
def test_parse_goodput_rejects_bad_input(items, message):
    with pytest.raises(ServelabError, match=message):
        parse_goodput(items)


def test_parse_percentile_options():
    assert parse_percentile_metrics("ttft, e2el,ttft") == ("ttft", "e2el")
    assert parse_metric_percentiles("50,90,99.9") == (50.0, 90.0, 99.9)
    with pytest.raises(ServelabError, match="unknown metric 'latency'"):
        parse_percentile_metrics("ttft,latency")
    with pytest.raises(ServelabError, match="outside"):
        parse_metric_percentiles("99,101")
    with pytest.raises(ServelabError, match="not a number"):
        parse_metric_percentiles("p99")


def test_summary_options_forbid_unknown_fields():
    with pytest.raises(ValueError):
        SummaryOptions(percentiles=(99,))  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        SummaryOptions(percentile_metrics=("latency",))  # type: ignore[arg-type]


def test_trap_counts_and_notes_with_known_answers() -> None:
    from servelab.metrics.records import RequestRecord
    from servelab.metrics.summary import SummaryOptions, summarize
    from servelab.metrics.traps import trap_notes

    # 10 long answers (9 gaps of 10 ms) and 10 two-token ones whose one gap is 300 ms.
    recs = [RequestRecord(index=i, prompt_len=4, intended_send_s=0.0, send_s=0.0,
                          expected_output_len=10, output_len=10, chunks=10, ttft_ms=50.0,
                          itl_ms=[10.0] * 9, e2el_ms=140.0) for i in range(10)]
    recs += [RequestRecord(index=10 + i, prompt_len=4, intended_send_s=0.0, send_s=0.0,
                           expected_output_len=10, output_len=2, chunks=1, ttft_ms=50.0,
                           itl_ms=[300.0], e2el_ms=350.0) for i in range(10)]
    r = summarize(recs, 1.0, SummaryOptions())
    t = r.traps
    assert t.short_outputs == 10 and t.short_tpot_requests == 10
    # TPOT: 10 ms x 10 and 300 ms x 10 -> the short ones hold 3000 / 3100 of the sum.
    assert t.short_tpot_share == pytest.approx(3000 / 3100)
    assert t.tokens_beyond_one_per_chunk == 10  # 2 tokens in one chunk, ten times
    # First gaps: 10 ms x 10 and 300 ms x 10 -> 155 ms; later gaps are all 10 ms.
    assert (t.mean_first_itl_ms, t.mean_later_itl_ms) == (pytest.approx(155.0), pytest.approx(10.0))
    notes = trap_notes(r)
    assert any(n.startswith("the first inter-token gap averages 155.00 ms vs 10.00 ms") for n in notes)
    assert any(n.startswith("10 of 20 requests stopped before") for n in notes)
    # mean TPOT 155 ms vs median (10 + 300) / 2 = 155: no skew note at a median this high
    assert not any(n.startswith("mean TPOT") for n in notes)
    skewed = summarize(recs + recs[:10] + [RequestRecord(
        index=30 + i, prompt_len=4, intended_send_s=0.0, send_s=0.0, expected_output_len=10,
        output_len=10, chunks=10, ttft_ms=50.0, itl_ms=[10.0] * 9, e2el_ms=140.0)
        for i in range(20)], 1.0, SummaryOptions())
    assert any(n.startswith("mean TPOT") and "lead with the median, 10.0 ms" in n
               for n in trap_notes(skewed))


# --- ITLs as array('d') or list, tokens on bucket edges, per-request ITLs kept or not ---


def as_array_itls(recs):
    """The same records with their ITLs as array('d'), the simulator's form."""
    return [dataclasses.replace(r, itl_ms=array("d", r.itl_ms)) for r in recs]


def random_records(seed, n=400):
    """Records of 0-60 gaps (a few of 500), some failed (one with gaps), one warm-up, sent
    out of index order: enough variety for every figure."""
    rng = random.Random(seed)
    recs = []
    for i in range(n):
        n_gaps = rng.choice((0, 1, 2, 500)) if i % 97 == 0 else rng.randrange(60)
        gaps = [rng.choice((0.0, rng.uniform(1, 40))) for _ in range(n_gaps)]
        ttft, send = rng.uniform(5, 900), rng.uniform(0, 20)
        rec = RequestRecord(
            index=i, prompt_len=rng.randint(1, 900), intended_send_s=send - rng.uniform(0, 0.01),
            send_s=send, slot_wait_ms=rng.choice((0.0, 3.5)), expected_output_len=64,
            output_len=n_gaps + 1, ttft_ms=ttft, itl_ms=gaps, e2el_ms=ttft + sum(gaps),
            reasoning_tokens=rng.choice((0, 0, 2)), answer_ttft_ms=ttft + 1.0,
            chunks=rng.choice((None, n_gaps)))
        if i % 13 == 0:
            rec = dataclasses.replace(rec, error="boom", error_kind=rng.choice(("http_500", None)),
                                      e2el_ms=None if i % 2 else rec.e2el_ms)
        recs.append(rec)
    recs.append(dataclasses.replace(recs[5], index=-1, warmup=True))
    rng.shuffle(recs)
    return recs


FULL = SummaryOptions(percentile_metrics=("ttft", "tpot", "itl", "e2el"),
                      metric_percentiles=(0.0, 33.3, 50.0, 90.0, 99.0, 100.0),
                      goodput=GoodputSLO(ttft_ms=400.0, tpot_ms=20.0, e2el_ms=900.0))


@pytest.mark.parametrize("recs", [records(), random_records(1), random_records(2)],
                         ids=["hand", "random1", "random2"])
def test_list_and_array_itls_give_identical_results(recs):
    with_lists = summarize(recs, DURATION_S, FULL)
    with_arrays = summarize(as_array_itls(recs), DURATION_S, FULL)
    assert with_arrays == with_lists
    assert json.dumps(with_arrays.to_json_dict(detailed=True)) == json.dumps(
        with_lists.to_json_dict(detailed=True))


def test_a_token_on_a_bucket_edge_counts_in_the_later_bucket():
    # Every token time below is exact in binary: A's at 0.4, 0.7, 1.0 s; B's, D's and E's
    # one token at 1.0 s; C's at 0.9 s. Bucket 0 = [0, 1) s holds A0, A1, C0 (3); bucket 1
    # holds A2, B0, D0, E0 (4). Had the edge tokens gone to bucket 0, it would hold 7.
    recs = [
        ok(0, 1, 0.0, 400.0, [300.0, 300.0]),  # A
        ok(1, 1, 0.25, 750.0, []),  # B
        ok(2, 1, 0.0, 900.0, []),  # C
        ok(3, 1, 0.5, 500.0, []),  # D
        ok(4, 1, 0.0, 1000.0, []),  # E
    ]
    res = summarize(recs, 1.0, SummaryOptions())
    assert res.max_output_tokens_per_s == 4.0
    # active: A, B, D, E in buckets 0 and 1, C in bucket 0 only
    assert res.max_concurrent_requests == 5


def test_figures_are_numpys_on_the_pooled_values():
    """Each latency figure is numpy's statistic of the values the definitions pool (in
    request order), and the peaks follow their definitions request by request."""
    recs = random_records(3, n=1500)
    res = summarize(recs, DURATION_S, FULL)
    done = sorted((r for r in recs if not r.warmup and r.success), key=lambda r: r.index)
    pooled = {
        "ttft": [r.ttft_ms for r in done],
        "tpot": [r.tpot_ms for r in done if r.tpot_ms is not None],
        "itl": [g for r in done for g in r.itl_ms],
        "e2el": [r.e2el_ms for r in done],
    }
    later = [g for r in done for g in r.itl_ms[1:]]
    for name, stats in [*((m, res.latency(m)) for m in pooled), ("later", res.traps.itl_excl_first)]:
        values = np.asarray(later if name == "later" else pooled[name])
        assert stats.mean_ms == float(np.mean(values)), name
        assert stats.median_ms == float(np.median(values)), name
        assert stats.std_ms == float(np.std(values)), name
        assert [p.value_ms for p in stats.percentiles] == [
            float(np.percentile(values, p)) for p in FULL.metric_percentiles], name
    assert res.traps.mean_first_itl_ms == float(np.mean([r.itl_ms[0] for r in done if r.itl_ms]))
    tokens, active = peaks_one_by_one(done)
    assert (res.max_output_tokens_per_s, res.max_concurrent_requests) == (tokens, active)


def peaks_one_by_one(done):
    """The peak figures' definitions (docs/metrics.md), one request at a time."""
    start = min(r.send_s for r in done)
    n = int(np.ceil(max(r.send_s + r.e2el_ms / 1000.0 for r in done) - start)) + 1
    tokens, active = np.zeros(n), np.zeros(n, dtype=int)
    for r in done:
        times = r.send_s + np.cumsum([r.ttft_ms, *r.itl_ms]) / 1000.0 - start
        np.add.at(tokens, times.astype(int), 1)
        active[int(r.send_s - start) : int(r.send_s + r.e2el_ms / 1000.0 - start) + 1] += 1
    return float(tokens.max()), int(active.max())


def test_per_request_itls_can_be_left_out():
    recs = records()
    kept = summarize(recs, DURATION_S, SummaryOptions())
    skipped = summarize(recs, DURATION_S, SummaryOptions(per_request_itls=False))
    assert kept.details.itls_s == ((0.02, 0.03, 0.04), (0.05,), (), (), (), ())
    assert skipped.details.itls_s is None
    assert skipped == kept.model_copy(
        update={"details": kept.details.model_copy(update={"itls_s": None})})
    assert skipped.to_json_dict() == kept.to_json_dict()  # the plain result never had them
    with pytest.raises(ValueError, match=r"per_request_itls=True"):
        skipped.to_json_dict(detailed=True)
