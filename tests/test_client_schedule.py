"""Every request's bytes are built before t0, on each of the client's paths, so that the
first wave leaves at t0 instead of after JSON-encoding the whole run (on the H200 run of
2026-11-30 that took 98 ms for 440 prompts of 3,000 tokens, and every cell's first wave
lagged by it). The known answer is an order of events: the backend's `body()` calls and
the moment t0 is taken, logged by the test over real sockets to a token server."""

from __future__ import annotations

import asyncio

from servelab.client.backends import Backend, SamplingParams, get_backend
from servelab.client.sender import SendControls, send_schedule
from servelab.client.target import TargetConfig
from servelab.client.workers import new_event_loop
from servelab.experiment.targets import _send_split
from servelab.workload.request import RequestSpec

N = 12


def logging_backend(events: list[tuple[str, int]]) -> Backend:
    base = get_backend("vllm")

    class Logged(Backend):
        __slots__ = ()

        def body(self, spec: RequestSpec, model: str, ignore_eos: bool,
                 sampling: SamplingParams | None = None, **extras: object) -> bytes:
            events.append(("body", spec.index))
            return super().body(spec, model, ignore_eos, sampling, **extras)  # type: ignore[arg-type]

    return Logged(base.name, base.default_endpoint, base.chat, base.engine_extras)


def target(url: str, be: Backend) -> TargetConfig:
    return TargetConfig(base_url=url, endpoint=be.default_endpoint, backend=be, model="m",
                        ignore_eos=True)


def specs() -> list[RequestSpec]:
    return [RequestSpec(i, f"prompt {i} words", None, 3, 4) for i in range(N)]


def run(coro):  # type: ignore[no-untyped-def]
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)


def check(events: list[tuple[str, int]]) -> None:
    t0 = events.index(("t0", -1))
    before = [i for kind, i in events[:t0] if kind == "body"]
    after = [i for kind, i in events[t0:] if kind == "body"]
    assert after == []
    assert set(range(N)) <= set(before)  # every measured request (warm-ups too, as copies)


def test_send_schedule_encodes_every_request_before_t0(token_server):
    srv = token_server(ttft_ms=1, itl_ms=1)
    events: list[tuple[str, int]] = []
    records = run(send_schedule(target(srv.url, logging_backend(events)), specs(), [0.0] * N,
                                max_concurrency=4, num_warmups=2,
                                controls=SendControls(on_start=lambda _t0: events.append(("t0", -1)))))
    assert sum(1 for r in records if not r.warmup and r.success) == N
    check(events)


def test_split_send_encodes_every_request_before_t0(token_server):
    # The experiment's path (HttpTarget): one sender per URL, `before_t0` just before t0.
    a, b = token_server(ttft_ms=1, itl_ms=1), token_server(ttft_ms=1, itl_ms=2)
    events: list[tuple[str, int]] = []
    be = logging_backend(events)

    async def before_t0() -> None:
        events.append(("t0", -1))

    records, _, _ = run(_send_split([target(a.url, be), target(b.url, be)], specs(),
                                    [0.0] * N, 4, 2, before_t0))
    assert sum(1 for r in records if not r.warmup and r.success) == N
    check(events)
