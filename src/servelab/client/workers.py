"""Multi-process sending: a schedule split over N client processes sharing one t0.

For request rates one event loop cannot keep up with. Request i goes to process i mod N;
the concurrency cap is split as evenly as integers allow (so the total in flight never
exceeds it; a process's free slots are not lent to another). Each process has its own
event loop (uvloop when installed), opens its connections and sends its share of the
warm-ups, reports ready; the parent then picks t0 a little ahead on `time.perf_counter`
(the system-wide monotonic clock on Linux, so all processes read the same time) and every
process sends its share at `t0 + intended_s`. Processes share nothing; their records are
merged, in schedule order, with times relative to the common t0. Progress counters come
back every `PROGRESS_INTERVAL_S`. Children ignore SIGINT: the parent owns Ctrl-C and
tells them to stop.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from servelab.client.sender import ScheduleSender, SendControls, SendStatus, release_heap
from servelab.client.target import TargetConfig
from servelab.errors import ServelabError
from servelab.metrics.records import RequestRecord
from servelab.workload.request import RequestSpec
from servelab.workload.warmup import warmup_requests

PROGRESS_INTERVAL_S = 0.25
START_LEAD_S = 0.05


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop when installed (faster I/O callbacks), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def split_cap(cap: int | None, n: int) -> list[int | None]:
    """Per-process caps summing to `cap` (None: no cap anywhere)."""
    if cap is None:
        return [None] * n
    return [cap // n + (1 if p < cap % n else 0) for p in range(n)]


@dataclass(frozen=True, slots=True)
class Share:
    """One replica's part of a run the client splits itself (``routing: direct``): the
    indices of its requests (and of its warm-ups among the run's), its concurrency cap."""

    requests: range
    warmups: range
    max_concurrency: int | None


def direct_shares(num_requests: int, max_concurrency: int | None, num_warmups: int,
                  replicas: int) -> list[Share]:
    """Request i (and warm-up i) to replica i mod n, caps split as evenly as integers allow;
    n = `replicas`, fewer when there are fewer requests. The one definition of the split,
    which the simulator repeats for direct arms."""
    n = max(1, min(replicas, num_requests))
    warm = num_warmups if num_requests else 0  # warm-ups are copies of requests
    return [Share(range(k, num_requests, n), range(k, warm, n), cap)
            for k, cap in enumerate(split_cap(max_concurrency, n))]


@dataclass(frozen=True, slots=True)
class SenderShare:
    """What one of several clients sends: its requests and their intended times (s after
    the shared t0), its concurrency cap, its warm-ups."""

    requests: list[RequestSpec]
    intended_s: list[float]
    max_concurrency: int | None
    warmups: list[RequestSpec]


def split_schedule(requests: Sequence[RequestSpec], intended_s: Sequence[float], clients: int,
                   max_concurrency: int | None, num_warmups: int) -> list[SenderShare]:
    """The schedule over `clients` senders (client processes, remote clients): the split
    of `direct_shares`, with no more senders than the cap has slots."""
    warm_all = warmup_requests(requests, num_warmups)
    shares = direct_shares(len(requests), max_concurrency, num_warmups,
                           min(clients, max_concurrency or clients))
    return [SenderShare([requests[i] for i in s.requests], [float(intended_s[i]) for i in s.requests],
                        s.max_concurrency, [warm_all[i] for i in s.warmups]) for s in shares]


def _child(
    conn: Connection,
    target: TargetConfig,
    requests: list[RequestSpec],
    intended_s: list[float],
    cap: int | None,
    warmups: list[RequestSpec],
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    loop = new_event_loop()
    try:
        loop.run_until_complete(_child_run(conn, target, requests, intended_s, cap, warmups))
    finally:
        loop.close()
        conn.close()


async def _child_run(
    conn: Connection,
    target: TargetConfig,
    requests: list[RequestSpec],
    intended_s: list[float],
    cap: int | None,
    warmups: list[RequestSpec],
) -> None:
    loop = asyncio.get_running_loop()
    try:
        async with ScheduleSender(target, cap) as sender:
            ready = await sender.prepare(requests, warmups)
            conn.send(("ready", None))
            kind, t0 = await loop.run_in_executor(None, conn.recv)
            if kind != "go":
                return
            warm = sender.begin(ready, t0)
            stop = asyncio.Event()

            async def report() -> None:
                while True:
                    await asyncio.sleep(PROGRESS_INTERVAL_S)
                    while conn.poll():
                        if conn.recv()[0] == "stop":
                            stop.set()
                    s = sender.status
                    conn.send(("progress", (s.done, s.failed, s.in_flight, s.output_tokens)))

            reporter = asyncio.ensure_future(report())
            try:
                records = await sender.run(requests, ready.bodies, intended_s, t0, stop)
            finally:
                release_heap()
            reporter.cancel()
            conn.send(("records", warm + records))
    except ServelabError as exc:
        conn.send(("error", str(exc)))


async def send_schedule_processes(
    target: TargetConfig,
    requests: Sequence[RequestSpec],
    intended_s: Sequence[float],
    num_processes: int,
    max_concurrency: int | None = None,
    num_warmups: int = 0,
    controls: SendControls = SendControls(),
) -> list[RequestRecord]:
    """Like `send_schedule`, over `num_processes` client processes (see the module doc).

    `controls.clock` must be `time.perf_counter` (the children read it); it is there only so
    callers can pass the same clock to everything that lines up with t0.
    """
    on_progress, stop, clock = controls.on_progress, controls.stop, controls.clock
    on_start, before_t0 = controls.on_start, controls.before_t0
    shares = split_schedule(requests, intended_s, num_processes, max_concurrency, num_warmups)
    n = len(shares)
    ctx = mp.get_context("spawn")
    pipes: list[Connection] = []
    procs = []
    for share in shares:
        parent, child = ctx.Pipe()
        proc = ctx.Process(
            target=_child,
            args=(child, target, share.requests, share.intended_s, share.max_concurrency, share.warmups),
            daemon=True,
        )
        proc.start()
        child.close()
        pipes.append(parent)
        procs.append(proc)
    loop = asyncio.get_running_loop()
    records: list[RequestRecord] = []
    try:
        ready = 0
        while ready < n:
            for conn in await loop.run_in_executor(None, wait, pipes):
                kind, payload = conn.recv()
                if kind == "error":
                    raise ServelabError(payload)
                ready += 1
        if stop is not None and stop.is_set():
            for conn in pipes:
                conn.send(("halt", None))
            return []
        if before_t0 is not None:
            await before_t0()
        t0 = clock() + START_LEAD_S
        if on_start is not None:
            on_start(t0)
        for conn in pipes:
            conn.send(("go", t0))
        progress = {i: (0, 0, 0, 0) for i in range(n)}
        open_pipes = dict(enumerate(pipes))
        stop_sent = False
        while open_pipes:
            if stop is not None and stop.is_set() and not stop_sent:
                for conn in open_pipes.values():
                    conn.send(("stop", None))
                stop_sent = True
            ready_conns = await loop.run_in_executor(None, wait, list(open_pipes.values()), 0.1)
            for i, conn in list(open_pipes.items()):
                if conn not in ready_conns:
                    continue
                try:
                    kind, payload = conn.recv()
                except EOFError:
                    raise ServelabError(f"client process {i} ended without its records") from None
                if kind == "progress":
                    progress[i] = payload
                elif kind == "records":
                    records.extend(payload)
                    del open_pipes[i]
                elif kind == "error":
                    raise ServelabError(payload)
            if on_progress is not None:
                sums = [sum(x) for x in zip(*progress.values())]
                on_progress(SendStatus(done=sums[0], failed=sums[1], in_flight=sums[2],
                                       output_tokens=sums[3]))
    finally:
        for conn in pipes:
            conn.close()
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
    records.sort(key=lambda r: (not r.warmup, r.intended_send_s, r.index))
    return records
