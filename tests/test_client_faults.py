"""Failures mid-run are recorded with their reason and the run goes on (real sockets)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter

import pytest
from conftest import start_token_server, stop_process
from conftest import client_target, request_specs, run_client

from servelab.client.sender import send_schedule
from servelab.client.target import check_reachable
from servelab.errors import ServelabError


def test_http_500_is_recorded_with_its_body(token_server) -> None:
    srv = token_server(fail_every=4, itl_ms=1)
    records = run_client(send_schedule(client_target(srv.url), request_specs(16, 5), [0.0] * 16, 4))
    kinds = Counter(r.error_kind for r in records)
    assert kinds == {"http_500": 4, None: 12}
    failed = [r for r in records if r.error_kind]
    assert all("injected failure" in (r.error or "") for r in failed)
    assert all(not r.success and r.ttft_ms is None for r in failed)
    assert all(r.output_len == 5 for r in records if r.success)


def test_broken_streams_are_recorded_and_connections_recover(token_server) -> None:
    srv = token_server(break_every=5, break_after_tokens=3, itl_ms=1)
    records = run_client(send_schedule(client_target(srv.url), request_specs(20, 8), [0.0] * 20, 2))
    assert Counter(r.error_kind for r in records) == {"stream_broken": 4, None: 16}
    assert all(r.output_len == 8 for r in records if r.success)


def test_timeout_is_recorded(token_server) -> None:
    srv = token_server(stall_every=3, stall_ms=3000, itl_ms=1)
    records = run_client(send_schedule(client_target(srv.url, request_timeout_s=0.5), request_specs(6, 4), [0.0] * 6, 6))
    assert Counter(r.error_kind for r in records) == {"timeout": 2, None: 4}


def test_server_gone_mid_run_gives_connect_errors_and_the_run_ends() -> None:
    srv = start_token_server(itl_ms=5)
    try:
        async def go():  # type: ignore[no-untyped-def]
            loop = asyncio.get_running_loop()
            loop.call_later(0.6, os.kill, srv.proc.pid, signal.SIGKILL)
            return await send_schedule(client_target(srv.url), request_specs(30, 4), [i * 0.05 for i in range(30)], 4)

        records = run_client(go())
    finally:
        stop_process(srv.proc)
    kinds = Counter(r.error_kind for r in records)
    assert len(records) == 30
    assert kinds[None] >= 5 and kinds["connect"] >= 10
    assert set(kinds) <= {None, "connect", "stream_broken"}


def test_unreachable_target_is_a_clear_error() -> None:
    srv = start_token_server()
    url = srv.url
    stop_process(srv.proc)
    with pytest.raises(ServelabError, match=f"cannot reach {url}: connection refused"):
        run_client(check_reachable(url, {}))
