"""The online driver: runs the simulated engine in real time and hands tokens to streams.

One asyncio task owns the engine. Virtual time is wall time since the server started
(times `time_scale`). While work exists the task calls `engine.step(t)`, sleeps until the
step's end mapped to wall time (absolute deadlines: a late wake-up never shifts later
steps), then delivers each `TokenEvent` to its request's queue. The next step starts at the
previous step's end; a request that arrived during a step joins the next one, as in vLLM.
An idle engine waits on an event; the first request to arrive starts a step at its own
arrival time. This is exactly the offline driver's rule (next step at max(previous end,
next arrival)), so both give the same per-request timings for the same arrivals, up to the
event loop's timer resolution.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from servelab.errors import ServelabError
from servelab.sim.engine import SimRequest, StepResult, TokenEvent
from servelab.sim.serve.metrics import EngineCounters


class ServedEngine(Protocol):
    """What the server needs of a simulated engine (`servelab.sim.engine.SimEngine`)."""

    def add_request(self, req: SimRequest) -> None: ...
    def abort(self, request_id: str) -> None: ...
    def has_work(self) -> bool: ...
    def reset_prefix_cache(self) -> bool: ...
    def step(self, now_s: float) -> StepResult: ...
    @property
    def stats(self) -> EngineCounters: ...


class VirtualClock:
    """Maps wall time (a monotonic clock, injectable) to simulated seconds since start."""

    def __init__(self, time_scale: float = 1.0, monotonic: Callable[[], float] = time.monotonic) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0 (got {time_scale})")
        self.time_scale = time_scale
        self._monotonic = monotonic
        self._origin = monotonic()

    def now_s(self) -> float:
        """Simulated seconds since the clock started."""
        return (self._monotonic() - self._origin) * self.time_scale

    async def sleep_until(self, virtual_s: float) -> None:
        """Sleep until the wall moment of simulated time `virtual_s` (no-op if passed)."""
        delay = self._origin + virtual_s / self.time_scale - self._monotonic()
        if delay > 0:
            await asyncio.sleep(delay)


@dataclass(frozen=True, slots=True)
class Delivery:
    """Tokens of one request, emitted at simulated time `at_s`."""

    event: TokenEvent
    at_s: float


@dataclass(frozen=True, slots=True)
class Ended:
    """The stream ended before the request finished: `aborted` (server shutting down), or
    an error answered with HTTP `status` (400: the engine rejected the request; 500: the
    engine failed); `message` says why."""

    aborted: bool
    message: str
    status: int = 400


@dataclass(slots=True)
class RequestStream:
    """One in-flight request: what the HTTP handler reads, and its timeline so far."""

    request_id: str
    prompt_ids: tuple[int, ...]
    max_tokens: int
    arrival_s: float
    admitted: bool = False
    queue: asyncio.Queue[Delivery | Ended] = field(default_factory=asyncio.Queue)
    scheduled_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    num_tokens: int = 0


class DriverObserver(Protocol):
    """Told about token deliveries (the metrics exporter); times in simulated seconds."""

    def on_tokens(self, stream: RequestStream, delivery: Delivery) -> None:
        """Called before `stream.last_token_s` moves to `delivery.at_s`."""
        ...

    def on_aborted(self, stream: RequestStream) -> None: ...


class RealtimeDriver:
    """Feeds arrivals to the engine and steps it on the simulated schedule, in real time."""

    def __init__(self, engine: ServedEngine, clock: VirtualClock, observer: DriverObserver) -> None:
        self._engine = engine
        self.clock = clock
        self._observer = observer
        self._pending: deque[RequestStream] = deque()
        self._streams: dict[str, RequestStream] = {}
        self._wake = asyncio.Event()
        self._closing = False
        self._last_end_s = 0.0
        self.steps = 0

    @property
    def num_pending(self) -> int:
        """Requests received but not yet given to the engine (they join the next step)."""
        return len(self._pending)

    @property
    def num_in_flight(self) -> int:
        return len(self._streams)

    def submit(self, request_id: str, prompt_ids: tuple[int, ...], max_tokens: int) -> RequestStream:
        """Register a request arriving now; its tokens will appear on the returned stream."""
        if self._closing:
            raise RuntimeError("the server is not accepting requests (shutting down, or the "
                               "simulated engine failed)")
        stream = RequestStream(request_id, prompt_ids, max_tokens, self.clock.now_s())
        self._streams[request_id] = stream
        self._pending.append(stream)
        self._wake.set()
        return stream

    def abort(self, request_id: str) -> None:
        """Drop a request (client gone): the engine frees its blocks at once."""
        stream = self._streams.pop(request_id, None)
        if stream is None:
            return
        if not stream.admitted:
            self._pending.remove(stream)
        else:
            self._engine.abort(request_id)
        self._observer.on_aborted(stream)

    def close(self) -> None:
        """Stop stepping; abort every open request and end its stream with `Ended`."""
        self._closing = True
        for request_id in list(self._streams):
            stream = self._streams[request_id]
            self.abort(request_id)
            stream.queue.put_nowait(Ended(True, "the server is shutting down"))
        self._wake.set()

    def _admit(self, until_s: float) -> None:
        # Arrival order is submit order, so the deque is sorted by arrival_s.
        while self._pending and self._pending[0].arrival_s <= until_s:
            stream = self._pending.popleft()
            stream.admitted = True
            try:
                self._engine.add_request(SimRequest(
                    stream.request_id, stream.prompt_ids, stream.max_tokens, stream.arrival_s))
            except (ServelabError, ValueError) as exc:
                # The server validates first; this catches limits only the engine knows.
                del self._streams[stream.request_id]
                stream.queue.put_nowait(Ended(False, str(exc)))

    def _next_start_s(self) -> float | None:
        """When the next step starts, or None when there is nothing to do."""
        if self._engine.has_work():
            return self._last_end_s
        if self._pending:
            return max(self._last_end_s, self._pending[0].arrival_s)
        return None

    async def run(self) -> None:
        """The engine loop; returns after `close()`. If the engine raises, every open
        stream ends with the error (HTTP 500 / an error event) and new requests get 503."""
        try:
            await self._loop()
        except Exception as exc:
            self._closing = True
            for request_id in list(self._streams):
                self._streams.pop(request_id).queue.put_nowait(
                    Ended(False, f"the simulated engine failed: {exc!r}", 500))
            raise

    async def _loop(self) -> None:
        while not self._closing:
            start_s = self._next_start_s()
            if start_s is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            self._admit(start_s)
            if not self._engine.has_work():  # the engine refused what was admitted
                continue
            result = self._engine.step(start_s)
            self.steps += 1
            end_s = result.start_s + result.duration_s
            self._last_end_s = end_s
            await self.clock.sleep_until(end_s)
            self._deliver(result, end_s)
            if not result.events and result.duration_s <= 0 and not self._pending:
                # An engine that has work but cannot progress would spin: wait for news.
                self._wake.clear()
                await self._wake.wait()

    def _deliver(self, result: StepResult, end_s: float) -> None:
        for event in result.events:
            stream = self._streams.get(event.request_id)
            if stream is None:  # aborted while the step ran
                continue
            delivery = Delivery(event, end_s)
            if stream.first_token_s is None:
                stream.scheduled_s = result.start_s
                stream.first_token_s = end_s
            stream.num_tokens += event.num_tokens
            self._observer.on_tokens(stream, delivery)
            stream.last_token_s = end_s
            stream.queue.put_nowait(delivery)
            if event.finished:
                del self._streams[event.request_id]
