"""SLO parsing, capacity on known levels, the "no level meets" answer, over-saturation."""

from __future__ import annotations

import pytest

from servelab.errors import ServelabError
from servelab.metrics.records import RequestRecord
from servelab.metrics.summary import SummaryOptions, summarize
from servelab.sweep.points import saturation_reason
from servelab.sweep.slo import SloLevel, capacity, parse_slo


def lv(level, ttft, tpot=10.0, sat=False):
    return SloLevel(level, {"ttft": ttft, "tpot": tpot, "e2el": 1000.0}, 100.0 * level, level / 2, sat)


def test_parse_slo_and_its_errors():
    s = parse_slo(["ttft:500", "tpot:50,e2el:9000"], 95)
    assert dict(s.limits_ms) == {"ttft": 500, "tpot": 50, "e2el": 9000} and s.percentile == 95
    for bad, msg in ((["ttft"], "METRIC:MS"), (["itl:5"], "METRIC:MS"), (["ttft:x"], "not a number"),
                     (["ttft:5", "ttft:6"], "twice"), (["ttft:-1"], "> 0")):
        with pytest.raises(ServelabError, match=msg):
            parse_slo(bad, 99)
    with pytest.raises(ServelabError, match="--slo-percentile"):
        parse_slo(["ttft:5"], 0)


def test_capacity_is_the_last_level_before_the_first_breach():
    slo = parse_slo(["ttft:100", "tpot:20"], 99)
    levels = [lv(1, 20), lv(2, 40), lv(4, 90), lv(8, 150), lv(16, 90), lv(6, 95), lv(7, 99, tpot=25)]
    cap = capacity(slo, levels, "concurrency")
    assert cap.level == 6 and cap.first_failure == 7 and cap.output_tok_s == 600
    assert cap.request_goodput_rps == 3 and "tpot p99 25.0 ms > 20 ms" in cap.message


def test_saturated_level_bounds_the_capacity():
    slo = parse_slo(["ttft:100"], 99)
    cap = capacity(slo, [lv(1, 20), lv(2, 30, sat=True), lv(4, 40)], "rate")
    assert cap.level == 1 and "over-saturated" in cap.message


def test_no_level_meets_the_slo_is_an_answer_not_an_error():
    slo = parse_slo(["ttft:50"], 99)
    cap = capacity(slo, [lv(2, 120), lv(1, 83)], "concurrency")
    assert cap.level is None
    assert cap.message == ("no level meets ttft p99 <= 50 ms; the lowest level (concurrency 1) "
                           "gave ttft p99 83.0 ms")


def test_every_level_meeting_says_raise_max_level():
    cap = capacity(parse_slo(["ttft:500"], 99), [lv(1, 20), lv(2, 30)], "concurrency")
    assert cap.level == 2 and "raise --max-level" in cap.message


def _records(n: int, rate: float, e2el_ms) -> list[RequestRecord]:
    out = []
    for i in range(n):
        t = i / rate
        e = e2el_ms(t)
        out.append(RequestRecord(index=i, prompt_len=10, intended_send_s=t, send_s=t, output_len=2,
                                 ttft_ms=e / 2, itl_ms=[e / 2], e2el_ms=e))
    return out


def _result(recs):
    dur = max(r.send_s + r.e2el_ms / 1e3 for r in recs)
    return summarize(recs, dur, SummaryOptions())


def test_a_growing_queue_is_flagged_over_saturated():
    # 10 req/s arrive; the server serves 5 req/s: request i finishes at i / 5 s.
    recs = _records(200, 10.0, lambda t: 1000.0 * t + 100.0)
    reason = saturation_reason(recs, _result(recs), open_loop=True)
    assert reason is not None and "fell behind" in reason


def test_a_steady_server_is_not_flagged_and_closed_loop_is_not_judged_by_rate():
    recs = _records(200, 10.0, lambda t: 300.0)
    assert saturation_reason(recs, _result(recs), open_loop=True) is None
    grow = _records(200, 10.0, lambda t: 1000.0 * t + 100.0)
    assert saturation_reason(grow, _result(grow), open_loop=False) is None


def test_a_steady_server_slower_than_half_the_window_is_not_flagged():
    # 20 s of arrivals, every request takes 15 s: completions trail arrivals by 15 s, so the
    # unshifted second half [10, 20] s would see 50 of 100 completions (a false "fell behind").
    recs = _records(200, 10.0, lambda t: 15_000.0)
    assert saturation_reason(recs, _result(recs), open_loop=True) is None


def test_a_queue_that_grows_in_decode_is_counted_while_requests_take_under_half_the_window():
    # e2el 5 s + 0.4 s per second of arrivals (TTFT grows only 1.5x): the first half's p90
    # latency (8.6 s) is under half the 20 s window, so completions are counted: 71 for 100
    # arrivals in the second half
    recs = _records(200, 10.0, lambda t: 5000.0 + 400.0 * t)
    reason = saturation_reason(recs, _result(recs), open_loop=True)
    assert reason is not None and "completions for" in reason


def test_many_failures_are_flagged():
    recs = _records(100, 10.0, lambda t: 300.0)
    for r in recs[:10]:
        r.error, r.error_kind, r.ttft_ms, r.e2el_ms, r.itl_ms = "boom", "http_500", None, None, []
    res = summarize(recs, 10.0, SummaryOptions())
    assert "10 of 100 requests failed" in saturation_reason(recs, res, open_loop=True)
