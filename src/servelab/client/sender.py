"""Sending a schedule: requests leave at their intended times, under a concurrency cap.

One keep-alive connection pool per run (`connection.py`; one connection per request in
flight). Before the run's t0 the sender opens as many connections as the concurrency cap
(up to `PREOPEN_MAX`), probes each once with `GET /v1/models`, and sends the warm-ups, so
connection set-up and first-request code do not inflate the first burst's TTFT. Requests
are encoded to bytes before t0 too. Then each request waits for its intended time
(`t0 + intended_s`), then for a concurrency slot (`slot_wait_ms`, counted from when it was
due), and is sent (`send_s`, stamped just before its bytes are written); the lag beyond the
slot wait is the client's own scheduling lag.

Times are seconds on `clock` (default `time.perf_counter`, which on Linux is the
system-wide monotonic clock, so processes can share a t0). Records give times relative to
t0; warm-up records (`warmup=True`) come before t0 and so have negative times.

Failures never stop the run: HTTP status != 200 (`http_<code>`, first 200 chars of the
body), a stream that breaks or ends before `[DONE]` (`stream_broken`), an error object in
the stream (`server_error`), a stream without tokens (`empty_stream`), the per-request
timeout (`timeout`), a refused connection (`connect`). Setting `stop` ends the run: no
more requests are sent and those in flight are cancelled (`cancelled`).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from servelab.client.connection import ConnectionPool, Exchange, StreamBroken
from servelab.client.target import TargetConfig
from servelab.errors import ServelabError
from servelab.metrics.records import RequestRecord
from servelab.workload.request import RequestSpec
from servelab.workload.warmup import warmup_requests

PREOPEN_MAX = 512


@dataclass(slots=True)
class SendStatus:
    """Running counters of a send, handed to `on_progress` after each request ends."""

    done: int = 0
    failed: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    output_tokens: int = 0


OnProgress = Callable[[SendStatus], None]


class ScheduleSender:
    """Owns one run's session, counters and in-flight tasks (use as an async context)."""

    def __init__(
        self,
        target: TargetConfig,
        max_concurrency: int | None,
        on_progress: OnProgress | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        self.target = target
        self.max_concurrency = max_concurrency
        self.on_progress = on_progress
        self.clock = clock
        self.status = SendStatus()
        self._pool: ConnectionPool
        self._headers = target.headers()

    async def __aenter__(self) -> ScheduleSender:
        self._pool = ConnectionPool(self.target.base_url, self.clock, self.target.verify_tls)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._pool.close()

    async def preopen(self, n: int) -> None:
        """Open `n` keep-alive connections before t0 (so set-up is not in any TTFT)."""
        try:
            await self._pool.preopen(n, self._pool.encode_get("/v1/models", self._headers))
        except OSError as exc:
            raise ServelabError(
                f"cannot reach {self.target.base_url}: {(exc.strerror or str(exc)).lower()}"
            ) from None

    def encode(self, requests: Sequence[RequestSpec], tag: str = "") -> list[bytes]:
        """The requests' HTTP messages; call it before t0 (JSON for a few hundred long
        prompts takes tens of milliseconds, which would delay the first wave). `tag` goes
        into request ids between the prefix and the index."""
        t = self.target
        return [
            self._pool.encode(t.endpoint, t.request_headers(s.index, self._headers, tag), t.body(s))
            for s in requests
        ]

    async def start(self, n: int, warm: Sequence[RequestSpec],
                    before_t0: Callable[[], Awaitable[object]] | None,
                    on_start: Callable[[float], None] | None) -> tuple[list[RequestRecord], float]:
        """Everything before t0, for a run of `n` requests: open the connections (as many
        as the cap allows), send the warm-ups `warm`, await `before_t0`, take t0 and call
        `on_start(t0)`. Returns the warm-up records (times relative to t0, so negative)
        and t0 (s, on the sender's clock); the counters start afresh at t0."""
        await self.preopen(min(self.max_concurrency or n, n, PREOPEN_MAX))
        t_warm = self.clock()
        records = await self.warmup(warm, t_warm) if warm else []
        if before_t0 is not None:
            await before_t0()
        settle_heap()
        t0 = self.clock()
        self.begin(Ready([], records, t_warm), t0)
        if on_start is not None:
            on_start(t0)
        return records, t0

    async def prepare(self, requests: Sequence[RequestSpec], warm: Sequence[RequestSpec]) -> Ready:
        """Everything before a t0 someone else picks (a client process, a remote client):
        open the connections, send the warm-ups `warm`, encode `requests`, settle the heap."""
        n = len(requests)
        await self.preopen(min(self.max_concurrency or n, n, PREOPEN_MAX))
        t_warm = self.clock()
        records = await self.warmup(warm, t_warm) if warm else []
        bodies = self.encode(requests)
        settle_heap()
        return Ready(bodies, records, t_warm)

    def begin(self, ready: Ready, t0: float) -> list[RequestRecord]:
        """The run starts at `t0` (on the sender's clock): the warm-up records become
        relative to it (negative times) and the counters start afresh; the warm-up records."""
        for r in ready.warm:
            r.send_s -= t0 - ready.t_warm
            r.intended_send_s -= t0 - ready.t_warm
        self.status = SendStatus()
        return ready.warm

    async def single(self, spec: RequestSpec, tag: str = "") -> RequestRecord:
        """Send `spec` now and return its record (times relative to its own send)."""
        body = self.encode([spec], tag)[0]
        return await self._request(spec, body, 0.0, 0.0, self.clock())

    async def send_now(self, spec: RequestSpec, intended_s: float, slot_wait_ms: float,
                       t0: float) -> RequestRecord:
        """Encode and send `spec` now; its record's times are relative to the run's `t0`
        (`intended_s`, s, when it was due; `slot_wait_ms` spent waiting for a slot). For
        requests built during the run, such as a session's next turn."""
        return await self._request(spec, self.encode([spec])[0], intended_s, slot_wait_ms, t0)

    async def warmup(self, requests: Sequence[RequestSpec], t0: float) -> list[RequestRecord]:
        """Send `requests` (each awaited, capped like the run); records marked warmup."""
        bodies = self.encode(requests, tag="warmup-")
        sem = asyncio.Semaphore(self.max_concurrency or max(1, len(requests)))

        async def one(spec: RequestSpec, body: bytes) -> RequestRecord:
            async with sem:
                rec = await self._request(spec, body, self.clock() - t0, 0.0, t0)
            rec.warmup = True
            return rec

        return list(await asyncio.gather(*(one(s, b) for s, b in zip(requests, bodies))))

    async def run(
        self,
        requests: Sequence[RequestSpec],
        bodies: Sequence[bytes],
        intended_s: Sequence[float],
        t0: float,
        stop: asyncio.Event | None = None,
    ) -> list[RequestRecord]:
        """Send `requests[i]` (`bodies[i]`, from `encode`) at `t0 + intended_s[i]`; return
        one record per request sent, in schedule order. Returns early (in-flight requests
        cancelled) when `stop` is set."""
        if not len(requests) == len(bodies) == len(intended_s):
            raise ValueError("requests, bodies and intended_s differ in length")
        tasks: list[asyncio.Task[RequestRecord]] = []
        schedule = asyncio.ensure_future(self._schedule(requests, bodies, intended_s, t0, tasks))

        async def until_all_answered() -> None:
            await schedule
            if tasks:
                await asyncio.wait(tasks)

        main = asyncio.ensure_future(until_all_answered())
        if stop is None:
            await main
        else:
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({main, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if not main.done():
                main.cancel()
                schedule.cancel()
                for t in tasks:
                    t.cancel()
            else:
                main.result()  # re-raise a bug in the scheduling loop
        done = await asyncio.gather(*tasks, return_exceptions=True)
        # A task cancelled before it started never sent anything: it has no record.
        return [r for r in done if isinstance(r, RequestRecord)]

    async def _schedule(
        self,
        requests: Sequence[RequestSpec],
        bodies: Sequence[bytes],
        intended_s: Sequence[float],
        t0: float,
        tasks: list[asyncio.Task[RequestRecord]],
    ) -> None:
        clock = self.clock
        sem = asyncio.Semaphore(self.max_concurrency) if self.max_concurrency else None
        # When the loop last got past a wait for a free slot. A request that fell due while
        # the loop was held there (by its own wait or an earlier request's) waited for the
        # cap, not for the client: only what comes after that moment is scheduling lag.
        unblocked_at = float("-inf")
        for spec, body, it in zip(requests, bodies, intended_s):
            due = t0 + it
            delay = due - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            slot_wait_ms = 0.0
            if sem is not None:
                if sem.locked():
                    await sem.acquire()
                    unblocked_at = clock()
                else:
                    await sem.acquire()
                slot_wait_ms = max(0.0, unblocked_at - due) * 1000.0
            task = asyncio.ensure_future(self._request(spec, body, it, slot_wait_ms, t0))
            if sem is not None:
                task.add_done_callback(lambda _t, s=sem: s.release())
            tasks.append(task)

    async def _request(
        self, spec: RequestSpec, body: bytes, intended_s: float, slot_wait_ms: float, t0: float
    ) -> RequestRecord:
        clock = self.clock
        status = self.status
        status.in_flight += 1
        if status.in_flight > status.max_in_flight:
            status.max_in_flight = status.in_flight
        send_t = clock()
        rec = RequestRecord(
            index=spec.index,
            prompt_len=spec.prompt_len,
            intended_send_s=intended_s,
            send_s=send_t - t0,
            slot_wait_ms=slot_wait_ms,
            expected_output_len=spec.output_len,
        )
        try:
            await self._exchange(body, send_t, rec)
        except asyncio.CancelledError:
            _fail(rec, "cancelled", "cancelled before it finished (run stopped)")
        except asyncio.TimeoutError:
            _fail(rec, "timeout", f"no complete answer within {self.target.request_timeout_s:g} s")
        except StreamBroken as exc:
            _fail(rec, "stream_broken", str(exc)[:200])
        except OSError as exc:
            _fail(rec, "connect", f"{type(exc).__name__}: {exc}"[:200])
        status.in_flight -= 1
        if rec.error is None:
            status.done += 1
            status.output_tokens += rec.output_len
        else:
            status.failed += 1
        if self.on_progress is not None:
            self.on_progress(status)
        return rec

    async def _exchange(self, request: bytes, send_t: float, rec: RequestRecord) -> None:
        loop = asyncio.get_running_loop()
        pool = self._pool
        timeout_s = self.target.request_timeout_s
        for attempt in (0, 1):
            conn = pool.take_idle()
            if conn is None:
                conn = await pool.open()
            ex = Exchange(loop.create_future(), self.target.keep_text)
            remaining = timeout_s - (self.clock() - send_t)
            timer = loop.call_later(max(0.0, remaining), ex.fail, asyncio.TimeoutError())
            conn.start(request, ex)
            try:
                await ex.future
            except StreamBroken as exc:
                if exc.retryable and attempt == 0:
                    continue  # a kept-alive connection the server had closed: resend once
                raise
            except BaseException:
                conn.abort()
                raise
            finally:
                timer.cancel()
            break
        if ex.status != 200:
            _fail(rec, f"http_{ex.status}", ex.error_body.decode("utf-8", "replace")[:200])
            return
        tally = ex.tally
        if tally.error is not None:
            _fail(rec, "server_error", tally.error)
        elif not tally.done:
            _fail(rec, "stream_broken", "the stream ended before data: [DONE]")
        elif not tally.has_tokens:
            _fail(rec, "empty_stream", "the stream carried no tokens")
        else:
            rec.output_len, rec.ttft_ms, rec.itl_ms, rec.e2el_ms = tally.timeline(send_t)
            rec.chunks = len(tally.times)
            said = tally.text()
            if said is not None:
                rec.generated_text = said.text
                rec.reasoning_text = said.reasoning or None
                rec.reasoning_tokens = said.reasoning_tokens
                if said.reasoning and said.first_answer_chunk is not None:
                    rec.answer_ttft_ms = (tally.times[said.first_answer_chunk] - send_t) * 1000.0


def _fail(rec: RequestRecord, kind: str, message: str) -> None:
    rec.error_kind = kind
    rec.error = message or kind


@dataclass(slots=True)
class Ready:
    """A sender ready for t0 (`ScheduleSender.prepare`): the encoded bodies, the warm-up
    records (times relative to `t_warm`), and `t_warm` (s, on the sender's clock)."""

    bodies: list[bytes]
    warm: list[RequestRecord]
    t_warm: float


def settle_heap() -> None:
    """Collect, then freeze what is alive now (the workload, the tokenizer, the encoded
    bodies): just before t0, so that no full collection walks that heap during the run. One
    landing in the first wave held 6 of 16 sends back by 50 ms (its p99 scheduling lag went
    from 2 to 52 ms when an unrelated change moved the allocation count)."""
    gc.collect()
    gc.freeze()


def release_heap() -> None:
    """After the run: what `settle_heap` froze goes back to the collector (a long-lived
    process sends many runs; what died since must still be collectable)."""
    gc.unfreeze()


@dataclass(frozen=True, slots=True)
class SendControls:
    """How a caller steers and watches a send, the same for every sender (one loop, client
    processes, sessions, remote clients): `on_progress` gets the counters, setting `stop`
    ends the run early, `before_t0` is awaited after the warm-ups just before t0 is taken,
    `on_start` is called with t0 (on `clock`) just before the first request is due."""

    on_progress: OnProgress | None = None
    stop: asyncio.Event | None = None
    on_start: Callable[[float], None] | None = None
    before_t0: Callable[[], Awaitable[object]] | None = None
    clock: Callable[[], float] = time.perf_counter


async def send_schedule(
    target: TargetConfig,
    requests: Sequence[RequestSpec],
    intended_s: Sequence[float],
    max_concurrency: int | None = None,
    num_warmups: int = 0,
    controls: SendControls = SendControls(),
) -> list[RequestRecord]:
    """Send `requests` on their schedule (`intended_s`, seconds after t0) to `target`.

    Opens the connections and sends `num_warmups` warm-ups (the first requests with a marker in front: `servelab.workload.warmup`)
    before t0, never has more than `max_concurrency` requests in flight, and returns the
    warm-up records (`warmup=True`) followed by one record per request sent. `controls`
    steers and watches it (`SendControls`: `before_t0` is where a caller reads the server's
    counters, so that they leave the warm-ups out; `stop`: see the module docstring).
    """
    c = controls
    async with ScheduleSender(target, max_concurrency, c.on_progress, c.clock) as sender:
        bodies = sender.encode(requests)
        records, t0 = await sender.start(len(requests), warmup_requests(requests, num_warmups),
                                         c.before_t0, c.on_start)
        try:
            records.extend(await sender.run(requests, bodies, intended_s, t0, c.stop))
        finally:
            release_heap()
        return records
