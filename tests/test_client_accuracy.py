"""The client measures what the token server does, over real sockets: TTFT, TPOT and ITL
within 2 ms of the server's truth at concurrency 1 and 32, token counts exact.

The truth is what the server did, as it measured itself with `time.perf_counter` when it
wrote each chunk (`/stats`): on a busy shared machine its timers fire late now and then, so
its intended schedule (50 ms, 20 ms) is only approximately what went on the wire.
"""

from __future__ import annotations

import statistics

import pytest

from servelab.client.sender import send_schedule
from servelab.client.workers import send_schedule_processes
from servelab.metrics.records import RequestRecord

from conftest import client_target, request_specs, run_client

TTFT_MS = 50.0
ITL_MS = 20.0
BOUND_MS = 2.0


def measured(records: list[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if not r.warmup]


def check_truth(records: list[RequestRecord], output_len: int, stats: dict) -> None:
    ok = records  # warm-ups too: the server's figures include them
    true_ttft, true_itl = stats["mean_ttft_ms"], stats["mean_chunk_gap_ms"]
    assert all(r.success for r in ok), {r.error for r in ok}
    assert all(r.output_len == output_len and len(r.itl_ms) == output_len - 1 for r in ok)
    ttft = statistics.fmean(r.ttft_ms for r in ok)  # type: ignore[misc]
    tpot = statistics.fmean(r.tpot_ms for r in ok)  # type: ignore[misc]
    itl = statistics.fmean(x for r in ok for x in r.itl_ms)
    assert abs(ttft - true_ttft) <= BOUND_MS, (ttft, true_ttft)
    assert abs(tpot - true_itl) <= BOUND_MS, (tpot, true_itl)
    assert abs(itl - true_itl) <= BOUND_MS, (itl, true_itl)


@pytest.mark.parametrize("backend", ["vllm", "openai", "openai-chat"])
def test_concurrency_1_matches_the_schedule(token_server, backend: str) -> None:
    srv = token_server(ttft_ms=TTFT_MS, itl_ms=ITL_MS)
    reqs = request_specs(8, 16, chat=backend == "openai-chat")
    records = run_client(send_schedule(client_target(srv.url, backend), reqs, [0.0] * 8, max_concurrency=1,
                                num_warmups=1))
    assert [r.warmup for r in records] == [True] + [False] * 8
    check_truth(records, 16, srv.stats())
    assert srv.stats()["max_in_flight"] == 1


def test_concurrency_32_matches_the_schedule_and_the_cap_holds(token_server) -> None:
    srv = token_server(ttft_ms=TTFT_MS, itl_ms=ITL_MS)
    n = 96
    # Arrivals 4 ms apart: the cap of 32 binds (each request lasts ~430 ms), so this is
    # concurrency 32 without the single 32-request burst of the very first instant.
    records = run_client(send_schedule(client_target(srv.url), request_specs(n, 20), [i * 0.004 for i in range(n)],
                                max_concurrency=32, num_warmups=4))
    check_truth(records, 20, srv.stats())
    assert srv.stats()["max_in_flight"] == 32


def test_multi_token_chunks_count_tokens_not_chunks(token_server) -> None:
    srv = token_server(ttft_ms=TTFT_MS, itl_ms=ITL_MS, tokens_per_chunk=4)
    for backend in ("vllm", "openai"):  # continuous usage, and final usage only
        records = run_client(send_schedule(client_target(srv.url, backend), request_specs(8, 18),
                                    [i * 0.01 for i in range(8)], 4, num_warmups=2))
        for r in records:
            assert r.success and r.output_len == 18 and len(r.itl_ms) == 17
            assert sum(r.itl_ms) == pytest.approx(r.e2el_ms - r.ttft_ms)  # type: ignore[operator]
        stats = srv.stats()
        srv.reset()
        ttft = statistics.fmean(r.ttft_ms for r in records)  # type: ignore[misc]
        e2el = statistics.fmean(r.e2el_ms for r in records)  # type: ignore[misc]
        assert abs(ttft - stats["mean_ttft_ms"]) <= BOUND_MS
        # 5 chunks: the last 4 chunks carry the 17 later tokens.
        assert abs(e2el - (stats["mean_ttft_ms"] + 4 * stats["mean_chunk_gap_ms"])) <= BOUND_MS


def test_reasoning_tokens_count_toward_ttft(token_server) -> None:
    srv = token_server(ttft_ms=TTFT_MS, itl_ms=ITL_MS, reasoning_tokens=3)
    records = run_client(send_schedule(client_target(srv.url, "openai-chat"), request_specs(4, 6, chat=True),
                                [0.0] * 4, 2, num_warmups=2))
    assert all(r.output_len == 6 for r in records)
    ttft = statistics.fmean(r.ttft_ms for r in records)  # type: ignore[misc]
    assert abs(ttft - srv.stats()["mean_ttft_ms"]) <= BOUND_MS


def test_multi_process_mode_merges_records_on_one_clock(token_server) -> None:
    srv = token_server(ttft_ms=TTFT_MS, itl_ms=ITL_MS)
    n = 40
    intended = [i * 0.005 for i in range(n)]
    records = run_client(send_schedule_processes(client_target(srv.url), request_specs(n, 10), intended, 2,
                                          max_concurrency=8, num_warmups=2))
    assert sum(r.warmup for r in records) == 2
    ok = measured(records)
    assert sorted(r.index for r in ok) == list(range(n))
    for r in ok:
        assert r.send_s >= r.intended_send_s - 0.001
    check_truth(records, 10, srv.stats())
    assert srv.stats()["max_in_flight"] <= 8
