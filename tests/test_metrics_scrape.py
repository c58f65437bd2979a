"""/metrics parsing and sampling, against real aiohttp servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from servelab.errors import ServelabError
from servelab.metrics.scrape import MetricsScraper, ServerSeries, ServerSnapshot, parse_server_metrics

FIXTURE = Path(__file__).parent / "data" / "metrics" / "vllm-0.32.0-cpu-metrics.prom"


def test_parse_vllm_cpu_fixture():
    snap = parse_server_metrics(FIXTURE.read_text())
    assert snap == ServerSnapshot(
        num_requests_running=0.0,
        num_requests_waiting=0.0,
        kv_cache_usage_perc=0.0,
        num_preemptions_total=0.0,
        prefix_cache_queries_total=6443.0,
        prefix_cache_hits_total=0.0,
        prompt_tokens_total=6443.0,
        generation_tokens_total=1620.0,
        prefix_cache_hit_rate=None,
        ttft_seconds_sum=3.4426636695861816,
        ttft_seconds_count=53.0,
    )


def test_counts_sum_and_fractions_take_max_across_engines():
    text = """\
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m"} 4.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
vllm:num_preemptions_total{engine="1",model_name="m"} 5.0
"""
    snap = parse_server_metrics(text)
    assert snap.num_requests_waiting == 7.0
    assert snap.kv_cache_usage_perc == 0.75
    assert snap.num_preemptions_total == 7.0
    assert snap.num_requests_running is None


def test_older_vllm_names_and_current_name_preferred():
    old = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{model_name="m"} 100.0
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{model_name="m"} 40.0
"""
    snap = parse_server_metrics(old)
    assert (snap.kv_cache_usage_perc, snap.prefix_cache_queries_total) == (0.5, 100.0)
    assert snap.prefix_cache_hits_total == 40.0
    both = old + '# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name="m"} 0.2\n'
    assert parse_server_metrics(both).kv_cache_usage_perc == 0.2


def test_sglang_names():
    text = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 12.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 3.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.6
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="m"} 0.3
"""
    snap = parse_server_metrics(text)
    assert snap.num_requests_running == 12.0
    assert snap.num_requests_waiting == 3.0
    assert snap.kv_cache_usage_perc == 0.6
    assert snap.prefix_cache_hit_rate == 0.3


def test_malformed_text_names_its_source():
    with pytest.raises(ServelabError, match="http://x/metrics"):
        parse_server_metrics("vllm:num_requests_running{engine=} oops\n", "http://x/metrics")


def changing_text(n: int) -> str:
    """The n-th scrape (0-based) of a server whose state moves between scrapes."""
    waiting = [3, 7, 2, 1, 1, 1, 1, 1][min(n, 7)]
    kv = [0.2, 0.9, 0.5, 0.1, 0.1, 0.1, 0.1, 0.1][min(n, 7)]
    return (
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}\n'
        "# TYPE vllm:num_preemptions_total counter\n"
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {10 + n}\n'
        "# TYPE vllm:prefix_cache_queries_total counter\n"
        f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {1000 + 100 * n}\n'
        "# TYPE vllm:prefix_cache_hits_total counter\n"
        f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {500 + 25 * n}\n'
    )


class MetricsServer:
    """A real HTTP server on 127.0.0.1 whose /metrics answer is chosen per request."""

    def __init__(self, body=None, status=200, route="/metrics"):
        self.served = 0
        self._body = body
        self._status = status
        self._route = route

    async def __aenter__(self):
        app = web.Application()
        app.router.add_get(self._route, self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc):
        await self._runner.cleanup()

    async def _handle(self, request):
        n = self.served
        self.served += 1
        body = self._body(n) if callable(self._body) else self._body
        return web.Response(text=body, status=self._status, content_type="text/plain")


def test_scrape_once_reads_the_fixture_over_http():
    async def main():
        async with MetricsServer(FIXTURE.read_text()) as srv, aiohttp.ClientSession() as s:
            scraper = MetricsScraper(s, srv.base_url + "/", interval_s=1.0)
            snap = await scraper.scrape_once()
            return scraper, snap

    scraper, snap = asyncio.run(main())
    assert snap is not None and snap.generation_tokens_total == 1620.0
    series = scraper.series()
    assert series.available and series.reason is None
    assert series.url.endswith("/metrics") and "//metrics" not in series.url
    assert len(series.samples) == 1


def test_series_over_a_changing_server():
    times = iter([0.0, 1.0, 2.5, 4.0])

    async def main():
        async with MetricsServer(changing_text) as srv, aiohttp.ClientSession() as s:
            scraper = MetricsScraper(s, srv.base_url, clock=lambda: next(times))
            for _ in range(3):
                await scraper.scrape_once()
            return scraper.series()

    series = asyncio.run(main())
    assert [s.t_s for s in series.samples] == [1.0, 2.5, 4.0]
    assert series.peak_kv_cache_usage_perc == 0.9
    assert series.max_num_requests_waiting == 7
    assert series.preemptions_delta == 2
    # (550 - 500) hits / (1200 - 1000) queries
    assert series.prefix_cache_hit_rate == pytest.approx(0.25)
    js = series.to_json_dict()
    assert js["series"]["num_requests_waiting"] == [3, 7, 2]
    assert js["series"]["t_s"] == [1.0, 2.5, 4.0]
    assert js["prefix_cache_hit_rate"] == pytest.approx(0.25)
    # No running gauge: every sample had work (waiting > 0) and none is a ramp: (3 + 7 + 2) / 3.
    assert series.mean_num_requests_waiting == js["mean_num_requests_waiting"] == 4
    assert series.mean_num_requests_running is None and js["mean_num_requests_running"] is None
    assert ServerSeries.from_json_dict(js) == series


def test_run_samples_until_stopped_and_once_after():
    async def main():
        async with MetricsServer(changing_text) as srv, aiohttp.ClientSession() as s:
            scraper = MetricsScraper(s, srv.base_url, interval_s=0.01)
            stop = asyncio.Event()
            task = asyncio.create_task(scraper.run(stop))
            while srv.served < 3:
                await asyncio.sleep(0.005)
            stop.set()
            await asyncio.wait_for(task, timeout=30)
            return scraper.series(), srv.served

    series, served = asyncio.run(main())
    assert served >= 4  # at least three while running, then the one after the stop
    assert len(series.samples) == served
    assert series.failed_scrapes == 0
    ts = [s.t_s for s in series.samples]
    assert ts == sorted(ts)
    assert series.preemptions_delta == served - 1


def test_target_without_metrics_is_unavailable_not_an_error():
    async def main():
        async with MetricsServer("nothing", route="/health") as srv, aiohttp.ClientSession() as s:
            scraper = MetricsScraper(s, srv.base_url, interval_s=0.01)
            # a 404 ends sampling by itself, without the stop event
            await asyncio.wait_for(scraper.run(asyncio.Event()), timeout=30)
            return scraper.series()

    series = asyncio.run(main())
    assert not series.available
    assert "404" in series.reason
    assert series.samples == ()


def test_server_error_is_recorded():
    async def main():
        async with MetricsServer("oops", status=500) as srv, aiohttp.ClientSession() as s:
            scraper = MetricsScraper(s, srv.base_url)
            assert await scraper.scrape_once() is None
            return scraper.series()

    series = asyncio.run(main())
    assert not series.available and "HTTP 500" in series.reason
    assert series.failed_scrapes == 1


def test_connection_refused_is_unavailable():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # the port is closed again: nothing listens there

    async def main():
        async with aiohttp.ClientSession() as s:
            scraper = MetricsScraper(s, f"http://127.0.0.1:{port}")
            assert await scraper.scrape_once() is None
            return scraper.series()

    series = asyncio.run(main())
    assert not series.available
    assert "cannot fetch" in series.reason and str(port) in series.reason


def test_garbage_body_is_recorded_as_unparsable():
    async def main():
        async with MetricsServer("{not prometheus") as srv, aiohttp.ClientSession() as s:
            scraper = MetricsScraper(s, srv.base_url)
            await scraper.scrape_once()
            return scraper.series()

    series = asyncio.run(main())
    assert not series.available and "not Prometheus text" in series.reason


def _spec_text(drafts: int, proposed: int, accepted: int, per_pos: tuple[int, ...]) -> str:
    lines = ["# TYPE vllm:spec_decode_num_drafts_total counter",
             f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}',
             "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
             f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {proposed}',
             "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
             f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}',
             "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="{k}"}} {v}'
              for k, v in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


def test_speculative_decoding_counters_give_vllms_figures():
    from servelab.client.console import summary_lines
    from servelab.metrics.records import RequestRecord
    from servelab.metrics.scrape import TimedSnapshot
    from servelab.metrics.summary import SummaryOptions, summarize

    before = parse_server_metrics(_spec_text(10, 30, 18, (8, 6, 4)))
    after = parse_server_metrics(_spec_text(110, 330, 198, (88, 66, 44)))
    series = ServerSeries(url="u", available=True, reason=None, failed_scrapes=0,
                          samples=(TimedSnapshot(0.0, before), TimedSnapshot(1.0, after)))
    sd = series.spec_decode
    assert sd is not None
    # 100 verification steps, 300 draft tokens, 180 accepted.
    assert (sd.num_drafts, sd.draft_tokens, sd.accepted_tokens) == (100, 300, 180)
    assert sd.acceptance_rate_pct == pytest.approx(60.0)
    assert sd.acceptance_length == pytest.approx(2.8)
    assert sd.per_position_acceptance == pytest.approx((0.8, 0.6, 0.4))
    rec = RequestRecord(index=0, prompt_len=4, intended_send_s=0.0, send_s=0.0, output_len=3,
                        ttft_ms=10.0, itl_ms=[1.0, 1.0], e2el_ms=12.0)
    res = summarize([rec], 1.0, SummaryOptions()).with_server(series)
    out = res.to_json_dict()
    assert out["spec_decode_acceptance_length"] == pytest.approx(2.8)
    assert out["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.8, 0.6, 0.4])
    lines = summary_lines(res)
    # vLLM's own format strings for these rows: "{:<40} {:<10.2f}".
    assert "{:<40} {:<10.2f}".format("Acceptance rate (%):", 60.0) in lines
    assert "{:<40} {:<10.2f}".format("  Position 2:", 40.0) in lines
    assert lines.index("Per-position acceptance (%):") < lines.index("=" * 50)
    back = ServerSeries.from_json_dict(series.to_json_dict())
    assert back.spec_decode == sd


def test_no_speculation_no_figures():
    assert ServerSeries(url="u", available=True, reason=None, failed_scrapes=0,
                        samples=()).spec_decode is None
