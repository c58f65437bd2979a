"""The offline driver: a schedule of requests through a simulated cluster on a virtual clock.

Client semantics are the bench client's (`servelab.client.sender`): request i is due at
`intended_s[i]`; with `max_concurrency` it then waits (FIFO) for a free slot, recorded as
`slot_wait_ms`; it reaches its replica `Cluster.ingress_s` after it is sent, then waits its
turn in the replica's API-server frontend, which takes requests one at a time
(`Cluster.frontend_s`: tokenising the prompt; a burst of long prompts queues there, as in
vLLM's single-process API server); a token reaches the client when its step ends and the
same frontend has streamed it (`Cluster.frontend_output_s` per token, in its turn behind
earlier intake and output: under load the API server, not the GPU, can delay first tokens). Warm-ups (copies of the first requests) run first, capped
alike, and their records carry negative times as the client's do.

The discrete-event core is `_run`: a heap of (time, seq, kind, arg) with four kinds:
a request falls due, a request reaches a replica, a replica's step ends, an idle replica is
kicked, and (with frontend costs) a request leaves the frontend for the engine, a step's
tokens leave the frontend for the client. A replica starts a step when its previous step ends and it has work, or, when a
request reaches it idle, after all other events of that instant (so requests arriving
together share the first step, as they do when the online server's loop wakes).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace, dataclass

from servelab.metrics.records import RequestRecord
from servelab.metrics.scrape import SpecDecodeStats, combine_spec_decode, spec_decode_stats
from servelab.router.records import RouteRequest
from servelab.sim.cluster import Cluster
from servelab.sim.engine import RequestRejected, SimEngine
from servelab.sim.scheduler import ScheduledStep
from servelab.sim.speculative import SpecCounters

_STEP_DONE, _REACH, _DUE, _KICK, _ADMIT, _DELIVER = 0, 1, 2, 3, 4, 5


@dataclass(frozen=True, slots=True)
class OfflineRequest:
    """One request to simulate: its prompt token ids, how many tokens to generate, and the
    text a routing policy sees."""

    index: int
    prompt_token_ids: tuple[int, ...]
    output_len: int
    route_text: str = ""
    session_key: str | None = None


StepObserver = Callable[[int, float, float, ScheduledStep, SimEngine], None]
"""Called per step with (replica, start_s, duration_s, step, engine) after scheduling."""


@dataclass(slots=True)
class OfflineRun:
    """The records (warm-ups first) and the run's duration (t0 to the last completion)."""

    records: list[RequestRecord]
    duration_s: float
    num_steps: int
    spec_decode: SpecDecodeStats | None = None  # over the measured phase, all replicas


def simulate(cluster: Cluster, requests: Sequence[OfflineRequest], intended_s: Sequence[float],
             max_concurrency: int | None = None, num_warmups: int = 0,
             on_step: StepObserver | None = None) -> OfflineRun:
    """Simulate the schedule; records follow `RequestRecord`'s client semantics."""
    if len(requests) != len(intended_s):
        raise ValueError("requests and intended_s differ in length")
    records: list[RequestRecord] = []
    steps = 0
    t_warm_end = 0.0
    if num_warmups and requests:
        warm = _warmups(requests, num_warmups)
        wrecs, t_warm_end, n = _run(cluster, warm, [0.0] * len(warm), max_concurrency, on_step, 0.0)
        for r in wrecs:
            r.warmup = True
            r.intended_send_s -= t_warm_end
            r.send_s -= t_warm_end
        records.extend(wrecs)
        steps += n
    before = _spec_counters(cluster)
    recs, t_end, n = _run(cluster, requests, intended_s, max_concurrency, on_step, t_warm_end)
    records.extend(recs)
    return OfflineRun(records, max(t_end - t_warm_end, 1e-9), steps + n,
                      _spec_delta(before, _spec_counters(cluster)))


def _spec_counters(cluster: Cluster) -> list[SpecCounters] | None:
    counters = [e.stats.spec_decode for e in cluster.engines]
    return None if any(c is None for c in counters) else counters  # type: ignore[return-value]


def _spec_delta(before: list[SpecCounters] | None,
                after: list[SpecCounters] | None) -> SpecDecodeStats | None:
    """What vLLM's counters would say over the measured phase (replicas combined)."""
    if before is None or after is None:
        return None
    return combine_spec_decode([
        spec_decode_stats(a.num_drafts - b.num_drafts, a.num_draft_tokens - b.num_draft_tokens,
                          a.num_accepted_tokens - b.num_accepted_tokens,
                          tuple(float(x - y) for x, y in zip(a.accepted_per_pos, b.accepted_per_pos)))
        for a, b in zip(after, before)])


class _Flight:
    __slots__ = ("rec", "route", "replica", "times", "chunks")

    def __init__(self, rec: RequestRecord, route: RouteRequest) -> None:
        self.rec = rec
        self.route = route
        self.replica = -1
        self.times: list[float] = []
        self.chunks = 0  # SSE chunks that carried tokens (several tokens with speculation)


def _run(cluster: Cluster, requests: Sequence[OfflineRequest], intended_s: Sequence[float],
         max_concurrency: int | None, on_step: StepObserver | None,
         t0: float) -> tuple[list[RequestRecord], float, int]:
    """One phase starting at virtual time t0; record times are relative to t0."""
    heap: list[tuple[float, int, int, int]] = []
    seq = 0
    for i, t in enumerate(intended_s):
        heap.append((t0 + float(t), seq, _DUE, i))
        seq += 1
    heapq.heapify(heap)
    flights: list[_Flight | None] = [None] * len(requests)
    free_slots = max_concurrency if max_concurrency else len(requests) + 1
    slot_queue: deque[tuple[int, float]] = deque()
    engines = cluster.engines
    busy = [False] * len(engines)
    pending: list[tuple[list, list]] = [([], [])] * len(engines)
    ingress = cluster.ingress_s
    frontend_free = [t0] * len(engines)  # when each replica's frontend is next free
    out_cost = cluster.frontend_output_s
    outbox: dict[int, tuple[list, list]] = {}  # a step's tokens waiting for the frontend
    t_last = t0
    steps = 0

    def send(i: int, now: float, wait_ms: float) -> None:
        nonlocal seq
        req = requests[i]
        rec = RequestRecord(index=req.index, prompt_len=len(req.prompt_token_ids),
                            intended_send_s=float(intended_s[i]), send_s=now - t0,
                            slot_wait_ms=wait_ms, expected_output_len=req.output_len)
        flights[i] = _Flight(rec, RouteRequest(req.route_text, len(req.prompt_token_ids),
                                               req.session_key))
        heapq.heappush(heap, (now + ingress, seq, _REACH, i))
        seq += 1

    def start_step(k: int, now: float) -> None:
        nonlocal seq, steps
        dur, step, emitted, done = engines[k].advance()
        if on_step is not None:
            on_step(k, now - t0, dur, step, engines[k])
        pending[k] = (emitted, done)
        busy[k] = True
        steps += 1
        heapq.heappush(heap, (now + dur, seq, _STEP_DONE, k))
        seq += 1

    def complete(i: int, now: float, error: str | None = None) -> None:
        nonlocal free_slots
        fl = flights[i]
        assert fl is not None
        rec = fl.rec
        if error is None:
            times = fl.times
            send_abs = rec.send_s + t0
            rec.output_len = len(times)
            rec.chunks = fl.chunks
            rec.ttft_ms = (times[0] - send_abs) * 1e3
            rec.e2el_ms = (times[-1] - send_abs) * 1e3
            rec.itl_ms = [(b - a) * 1e3 for a, b in zip(times, times[1:])]
        else:
            rec.error, rec.error_kind = error, "http_400"
        if fl.replica >= 0:
            mean_itl = (sum(rec.itl_ms) / len(rec.itl_ms)) if rec.itl_ms else None
            cluster.finished(fl.replica, fl.route, rec.ttft_ms, mean_itl, error is None, now)
        if slot_queue:
            j, due = slot_queue.popleft()
            send(j, now, (now - due) * 1e3)
        else:
            free_slots += 1

    while heap:
        now, _s, kind, arg = heapq.heappop(heap)
        if kind == _STEP_DONE:
            emitted, done = pending[arg]
            if emitted and out_cost:
                # The frontend streams the step's tokens (detokenise, SSE) in its turn, after
                # what it already had to do; the engine steps on meanwhile.
                frontend_free[arg] = max(now, frontend_free[arg]) + out_cost * len(emitted)
                outbox[seq] = (emitted, done)
                heapq.heappush(heap, (frontend_free[arg], seq, _DELIVER, seq))
                seq += 1
            else:
                for r in emitted:
                    _arrive(flights[r.tag], now, r.num_new_output)  # type: ignore[arg-type, index]
                for r in done:
                    complete(r.tag, now)  # type: ignore[arg-type]
                t_last = now
            if engines[arg].has_work():
                start_step(arg, now)
            else:
                busy[arg] = False
        elif kind == _DELIVER:
            emitted, done = outbox.pop(arg)
            for r in emitted:
                _arrive(flights[r.tag], now, r.num_new_output)  # type: ignore[arg-type, index]
            for r in done:
                complete(r.tag, now)  # type: ignore[arg-type]
            t_last = max(t_last, now)
        elif kind in (_REACH, _ADMIT):
            fl = flights[arg]
            assert fl is not None
            req = requests[arg]
            if kind == _REACH:
                k = cluster.route(fl.route, now)
                fl.replica = k
                cost = cluster.frontend_s(len(req.prompt_token_ids))
                if cost > 0 or frontend_free[k] > now:
                    frontend_free[k] = max(now, frontend_free[k]) + cost
                    heapq.heappush(heap, (frontend_free[k], seq, _ADMIT, arg))
                    seq += 1
                    continue
            k = fl.replica
            try:
                engines[k].add(f"{id(fl)}-{req.index}", req.prompt_token_ids, req.output_len,
                               now, tag=arg)
            except RequestRejected as exc:
                complete(arg, now, str(exc))
                t_last = max(t_last, now)
                continue
            if not busy[k]:
                # Start after every other event of this instant (same-time arrivals batch).
                busy[k] = True
                heapq.heappush(heap, (now, seq, _KICK, k))
                seq += 1
        elif kind == _KICK:
            start_step(arg, now)
        else:
            if free_slots > 0:
                free_slots -= 1
                send(arg, now, 0.0)
            else:
                slot_queue.append((arg, now))
    return [f.rec for f in flights if f is not None], t_last, steps


def _arrive(fl: _Flight, now: float, k: int) -> None:
    """`k` tokens reached the client in one chunk at `now`: as the client counts a chunk of
    k tokens (k ITLs of gap / k, `servelab.client.tally.timeline` owns that rule), their
    times split the gap."""
    fl.chunks += 1
    times = fl.times
    if not times:  # a first chunk: its tokens arrive together (TTFT is the first of them)
        times.extend([now] * k)
        return
    prev = times[-1]
    gap = (now - prev) / k
    times.extend(prev + gap * j for j in range(1, k + 1))


# Above every vocabulary and away from the negative padding ids of `sim.setup`.
_WARMUP_FIRST_ID = 1 << 40


def _warmups(requests: Sequence[OfflineRequest], n: int) -> list[OfflineRequest]:
    """Warm-ups as the HTTP client sends them (`servelab.workload.warmup`): the first
    requests, cycled, with a first token of their own so that no prompt block they cache
    is a block of a measured request."""
    out = []
    for i in range(n):
        r = requests[i % len(requests)]
        ids = (_WARMUP_FIRST_ID + i, *r.prompt_token_ids[1:]) if r.prompt_token_ids else ()
        out.append(replace(r, prompt_token_ids=ids))
    return out

