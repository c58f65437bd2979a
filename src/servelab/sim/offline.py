"""The offline simulator: a schedule of requests through a simulated cluster on a virtual
clock, and one run of it from flags to a `BenchResult` (`run_offline`, used by `sim run`
and `sim calibrate`, with the lines `sim run` prints beside it). Arrival times are drawn
exactly as the bench command draws them (`schedule_s(workload, arrivals,
numpy.random.default_rng(seed))`), so a simulated run and a measured run with the same seed
send the same requests at the same intended times.

Client semantics are the bench client's (`servelab.client.sender`): request i is due at
`intended_s[i]`; with `max_concurrency` it then waits (FIFO) for a free slot, recorded as
`slot_wait_ms`; it reaches its replica `Cluster.ingress_s` after it is sent. With API-server
costs (`NetworkCosts.frontend_*`) it then goes through the replica's API server as vLLM's
runs it: one asyncio event loop and one tokenizer worker. The loop takes the request in
(`frontend_request_s`) in its turn among the loop's ready work, the tokenizer worker
tokenises it (`frontend_s`, one request at a time), and the loop hands it to the engine
(`frontend_handoff_s`) in its turn again, behind whatever was queued meanwhile (so a burst
of long prompts reaches the engine one by one, after the burst's first halves). A step's
outputs go back through the same loop: it processes every queued step first
(`frontend_output_s` per token, vLLM's output handler does not yield), then sends each
request's chunk in turn (`frontend_chunk_s` per chunk); tokens that reach a request whose
chunk still waits join it, so a loaded loop sends fewer, larger chunks, as vLLM's per-request
output collector does. Under load the API server, not the GPU, can delay first tokens and
space the later ones. Warm-ups (copies of the first requests) run first, capped alike, and
their records carry negative times as the client's do.

With a decode pool (`Cluster.decode`, prefill/decode disaggregation) a request enters a
prefill replica with max_tokens 1; when that replica is done with it (its one token is the
proxy's, not the client's), its KV crosses the link (`KvTransfer`) and a decode replica
takes it with the prompt computed but for the last token; the client's tokens are the
decode replica's.

The discrete-event core is `_run`: a heap of (time, seq, kind, arg): a request falls due,
reaches a replica, leaves the tokenizer, enters the engine; a replica's step ends; an idle
replica is kicked; a replica's event loop finishes a piece of work; a prefilled request's KV
reaches the decode pool. A replica starts a step
when its previous step ends and it has work, or, when a request reaches it idle, after all
other events of that instant (so requests arriving together share the first step, as they
do when the online server's loop wakes).
"""

from __future__ import annotations

import gc
import heapq
import json
import random
import struct
from array import array
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace, dataclass
from pathlib import Path
from typing import IO, Any, Final

import numpy as np

from servelab.metrics.records import RequestRecord
from servelab.metrics.result import BenchResult, RunInfo
from servelab.metrics.scrape import SpecDecodeStats, combine_spec_decode, spec_decode_stats
from servelab.metrics.summary import SummaryOptions, summarize
from servelab.routing.policies import reads_prompt
from servelab.routing.records import NoFeedback, RouteRequest, count_chooser
from servelab.sim.cluster import Cluster
from servelab.sim.engine import RequestRejected, SimEngine, rejection_message
from servelab.sim.native import by_fields
from servelab.sim.scheduler import SchedRequest, ScheduledStep
from servelab.sim.setup import SimOptions, build_cluster, fit_token_ids, kv_transfer
from servelab.sim.speculative import SpecCounters
from servelab.workload.arrivals import ArrivalOptions, schedule_s
from servelab.workload.datasets import (
    TOKEN_ONLY_DATASETS,
    DatasetOptions,
    build_token_workload,
    build_workload,
)
from servelab.workload.request import RequestSpec
from servelab.workload.tokenizer import load_tokenizer

# Event kinds. `Final`: the compiled build reads them as C constants, not from the module's
# dictionary at every comparison of the event loop.
_STEP_DONE: Final = 0
_REACH: Final = 1
_DUE: Final = 2
_KICK: Final = 3
_ADMIT: Final = 4
_LOOP: Final = 5
_TOKENIZED: Final = 6
_TRANSFERRED: Final = 7


@dataclass(frozen=True, slots=True)
class OfflineRequest:
    """One request to simulate: its prompt token ids, how many tokens to generate, and the
    text a routing policy sees. `offline_requests` gives the ids as an `array.array`
    (shared with the workload's `token_ids`, never changed); any sequence of ints will do."""

    index: int
    prompt_token_ids: Sequence[int]
    output_len: int
    route_text: str = ""
    session_key: str | None = None

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return by_fields(self)  # (compiled: `servelab.sim.native.by_fields`)


StepObserver = Callable[[int, float, float, ScheduledStep, SimEngine], None]
"""Called per step with (replica, start_s, duration_s, step, engine) after scheduling."""


@dataclass(slots=True)
class OfflineRun:
    """The records (warm-ups first) and the run's duration (t0 to the last completion)."""

    records: list[RequestRecord]
    duration_s: float
    num_steps: int
    spec_decode: SpecDecodeStats | None = None  # over the measured phase, all replicas


def simulate(cluster: Cluster, requests: Sequence[OfflineRequest],
             intended_s: Sequence[float] | np.ndarray,
             max_concurrency: int | None = None, num_warmups: int = 0,
             on_step: StepObserver | None = None, stepwise: bool = False) -> OfflineRun:
    """Simulate the schedule; records follow `RequestRecord`'s client semantics.

    `stepwise` runs the reference event loop, which handles every API-server piece of work
    through the generic dispatch and asks every routing policy through its views; the
    default takes the same events in the same order through shortcuts for the frequent ones
    (a chunk sent, a step's outputs processed, a count-only policy asked without views) and
    gives identical records (tests/test_sim_fastpath.py runs both)."""
    if len(requests) != len(intended_s):
        raise ValueError("requests and intended_s differ in length")
    with _collector_paused():
        return _simulate(cluster, requests, intended_s, max_concurrency, num_warmups, on_step,
                         stepwise)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off meanwhile (restored after): a run builds millions of
    acyclic containers (token ids, timestamps, records) that every full collection would
    walk again; at 1,000,000 random-dataset requests that walking was 50 of the 85 s
    `prepare_workload` took."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _simulate(cluster: Cluster, requests: Sequence[OfflineRequest],
              intended_s: Sequence[float] | np.ndarray,
              max_concurrency: int | None, num_warmups: int, on_step: StepObserver | None,
              stepwise: bool) -> OfflineRun:
    records: list[RequestRecord] = []
    steps = 0
    t_warm_end = 0.0
    if num_warmups and requests:
        warm = _warmups(requests, num_warmups)
        wrecs, t_warm_end, n = _run_any(cluster, warm, [0.0] * len(warm), max_concurrency, on_step,
                                          0.0, stepwise)
        for r in wrecs:
            r.warmup = True
            r.intended_send_s -= t_warm_end
            r.send_s -= t_warm_end
        records.extend(wrecs)
        steps += n
    before = _spec_counters(cluster)
    recs, t_end, n = _run_any(cluster, requests, intended_s, max_concurrency, on_step, t_warm_end,
                              stepwise)
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


def _run_any(cluster: Cluster, requests: Sequence[OfflineRequest],
             intended_s: Sequence[float] | np.ndarray,
             max_concurrency: int | None, on_step: StepObserver | None,
             t0: float, stepwise: bool) -> tuple[list[RequestRecord], float, int]:
    """`_run`, or `_run` once per replica when the replicas cannot influence one another
    (`_independent`): the same records, duration and steps."""
    if stepwise or not _independent(cluster, max_concurrency, on_step):
        return _run(cluster, requests, intended_s, max_concurrency, on_step, t0, stepwise)
    # Request i reaches the proxy at its due time + ingress, so in the order of (due time,
    # i), the order `_run` takes them in; the policy, which reads nothing of the replicas'
    # state, is asked in that order, as `_run` would ask it.
    due_s = [t0 + float(t) for t in intended_s]
    ingress = cluster.ingress_s
    choose = count_chooser(cluster.policy)
    assert choose is not None
    n = len(cluster.engines)
    mine: list[list[int]] = [[] for _ in range(n)]
    routes: list[RouteRequest | None] = [None] * len(requests)
    for i in sorted(range(len(due_s)), key=due_s.__getitem__):
        req = requests[i]
        route = routes[i] = RouteRequest(req.route_text, len(req.prompt_token_ids), req.session_key)
        mine[choose(route, n, due_s[i] + ingress).index].append(i)
    records: list[RequestRecord | None] = [None] * len(requests)
    t_last, steps = t0, 0
    for k, idx in enumerate(mine):
        if not idx:
            continue
        idx.sort()  # the replica's requests in request order: its ties fall as in `_run`
        recs, t_end, n_steps = _run(_OneOfFleet(cluster, k), [requests[i] for i in idx],
                                    [intended_s[i] for i in idx], None, None, t0,
                                    routes=[routes[i] for i in idx])
        for i, rec in zip(idx, recs):
            records[i] = rec
        t_last = max(t_last, t_end)
        steps += n_steps
    return records, t_last, steps  # type: ignore[return-value]


def _independent(cluster: Cluster, max_concurrency: int | None, on_step: StepObserver | None) -> bool:
    """True when each replica's events touch nothing another replica's events read, so
    that each replica can be simulated alone (`_run_any`): several replicas behind a policy
    that reads nothing of them (`ReadsCountOnly`: round robin, random) and learns nothing
    from finished requests (`NoFeedback`), no client concurrency limit (a completion
    would free a slot for any replica's next request), no decode pool, no per-step
    observer (it sees the steps in time order across replicas). What is left shared is
    commutative: the in-flight counts, the duration (a maximum), the step count (a sum).
    Within a replica, events keep their order: `_run` orders events of one instant by
    when they were pushed, and a replica alone pushes its own events in the same order."""
    return (len(cluster.engines) > 1 and cluster.decode is None and max_concurrency is None
            and on_step is None and count_chooser(cluster.policy) is not None
            and isinstance(cluster.policy, NoFeedback))


class _OneOfFleet:
    """Replica `index` of `cluster` as the one-replica cluster `_run` needs (`_run_any`):
    the fleet's ingress (the router's hop included) and API-server costs, requests
    already routed here (counted in the fleet's in-flight counts as `Cluster.route` does),
    finished requests reported to the fleet as this replica's."""

    def __init__(self, cluster: Cluster, index: int) -> None:
        self.fleet = cluster
        self.index = index
        self.engines = [cluster.engines[index]]
        self.decode = None
        self.ingress_s = cluster.ingress_s
        self.frontend_output_s = cluster.frontend_output_s
        self.frontend_chunk_s = cluster.frontend_chunk_s
        self.frontend_request_s = cluster.frontend_request_s
        self.frontend_handoff_s = cluster.frontend_handoff_s
        self.learns = cluster.learns

    def frontend_s(self, prompt_tokens: int) -> float:
        return self.fleet.frontend_s(prompt_tokens)

    def is_prefill(self, index: int) -> bool:
        return False

    def route(self, req: RouteRequest, now_s: float, with_views: bool = False) -> int:
        self.fleet.in_flight[self.index] += 1
        self.fleet.routed[self.index] += 1
        return 0

    def finished(self, index: int, req: RouteRequest, ttft_ms: float | None,
                 mean_itl_ms: float | None, ok: bool, now_s: float) -> None:
        self.fleet.finished(self.index, req, ttft_ms, mean_itl_ms, ok, now_s)


class _Flight:
    __slots__ = ("rec", "route", "replica", "times", "chunks", "engine_done", "prefill_started",
                 "prefill_start_s")

    def __init__(self, rec: RequestRecord, route: RouteRequest) -> None:
        self.rec = rec
        self.route = route
        self.replica = -1
        self.prefill_started = False  # a P/D prefill replica has run its first chunk
        self.prefill_start_s = 0.0    # ... at this time (a layer-wise transfer overlaps from it)
        self.times: list[float] = []
        self.chunks = 0  # SSE chunks that carried tokens (several tokens with speculation)
        self.engine_done = False  # the engine finished it; its last chunk may still wait


# What a replica's event loop is doing (`_EventLoop.current`).
_IDLE: Final = 0
_OUTPUTS: Final = 1
_CHUNK: Final = 2
_TAKE_IN: Final = 3
_HAND_OFF: Final = 4


class _EventLoop:
    """A replica's API-server event loop: one CPU with two kinds of work. A step's outputs
    are processed first (vLLM's output handler takes every engine output already queued
    without yielding), then the ready coroutines in turn: a request's chunk send (in the
    order its first waiting token arrived; tokens processed while it waits join it), a
    request's intake, a tokenised request's hand-off to the engine."""

    __slots__ = ("steps", "tasks", "waiting", "current", "item")

    def __init__(self) -> None:
        # outputs not yet processed: (emitted, tokens each, finished)
        self.steps: deque[tuple[list[SchedRequest], list[int], list[SchedRequest]]] = deque()
        self.tasks: deque[tuple[int, int]] = deque()    # (_CHUNK | _TAKE_IN | _HAND_OFF, request)
        self.waiting: dict[int, int] = {}                # request -> tokens waiting to be sent
        self.current = _IDLE
        self.item: tuple = ()  # what `current` works on: (emitted, counts, done), (request, tokens), (request,)

    @property
    def busy(self) -> bool:
        return self.current != _IDLE


def _run(cluster: Cluster | _OneOfFleet, requests: Sequence[OfflineRequest],
         intended_s: Sequence[float] | np.ndarray,
         max_concurrency: int | None, on_step: StepObserver | None,
         t0: float, stepwise: bool = False, routes: Sequence[RouteRequest | None] | None = None,
         ) -> tuple[list[RequestRecord], float, int]:
    """One phase starting at virtual time t0; record times are relative to t0 (`stepwise`:
    see `simulate`). `routes`: the requests' routing views where the caller made them
    already (`_run_any`), else made here."""
    # Request i falls due at due_s[i] with sequence number i (before any other event of that
    # instant). The reference keeps those events in the heap; the default takes them in
    # order from `due_order` beside it (the same order: ties go to the lower sequence
    # number), so the heap holds only the events in flight, not one per request.
    due_s = [t0 + float(t) for t in intended_s]
    seq = len(due_s)
    if stepwise:
        heap: list[tuple[float, int, int, int]] = [(t, i, _DUE, i) for i, t in enumerate(due_s)]
        heapq.heapify(heap)
        due_order: list[int] = []
    else:
        heap = []
        due_order = sorted(range(len(due_s)), key=due_s.__getitem__)  # stable: by (time, i)
    flights: list[_Flight | None] = [None] * len(requests)
    free_slots = max_concurrency if max_concurrency else len(requests) + 1
    slot_queue: deque[tuple[int, float]] = deque()
    engines = cluster.engines
    busy = [False] * len(engines)
    step_end = [float("inf")] * len(engines)  # when each busy engine's step ends
    # a step's (emitted, tokens each, finished): the counts are read when the step is
    # applied, since the engine applies its next step (and rewrites `num_new_output`)
    # before the API server's loop gets to this one's outputs
    pending: list[tuple[list[SchedRequest], list[int], list[SchedRequest]]] = (
        [([], [], [])] * len(engines))
    ingress = cluster.ingress_s
    learns = cluster.learns  # (the mean ITL a finish reports is read only then)
    intake_free = [t0] * len(engines)  # when each replica's tokenizer worker is next free
    tok_cost, chunk_cost = cluster.frontend_output_s, cluster.frontend_chunk_s
    req_cost, handoff_cost = cluster.frontend_request_s, cluster.frontend_handoff_s
    # without speculation every emitted request got one token (`loop_next` counts them so
    # unless stepwise)
    plain = [not stepwise and e.spec is None for e in engines]
    loops = ([_EventLoop() for _ in engines]
             if (tok_cost or chunk_cost or req_cost or handoff_cost) else [])
    t_last = t0
    steps = 0
    prefill_role = [cluster.is_prefill(k) for k in range(len(engines))]
    transfer = cluster.decode.transfer if cluster.decode is not None else None
    link_free = [t0] * len(engines)
    # the whole request must fit the decode replica, though the prefill sees max_tokens 1
    decode_len = engines[-1].config.max_model_len if transfer is not None else 0

    # the next request falling due (`due_order[di]`, at `next_due`), read by `drain_dues`
    inf = float("inf")
    n_due, next_due = len(due_order), (due_s[due_order[0]] if due_order else inf)
    di = 0

    packers: dict[int, Callable[..., bytes]] = {}  # `struct` packers of n doubles, by n

    def send(i: int, now: float, wait_ms: float) -> None:
        nonlocal seq
        req = requests[i]
        rec = RequestRecord(index=req.index, prompt_len=len(req.prompt_token_ids),
                            intended_send_s=float(intended_s[i]), send_s=now - t0,
                            slot_wait_ms=wait_ms, expected_output_len=req.output_len)
        route = routes[i] if routes is not None else None
        if route is None:
            route = RouteRequest(req.route_text, len(req.prompt_token_ids), req.session_key)
        flights[i] = _Flight(rec, route)
        heapq.heappush(heap, (now + ingress, seq, _REACH, i))
        seq += 1

    def start_step(k: int, now: float) -> None:
        nonlocal seq, steps
        dur, step, emitted, done = engines[k].advance(stepwise)
        if on_step is not None:
            on_step(k, now - t0, dur, step, engines[k])
        pending[k] = (emitted, [1] * len(emitted) if plain[k] else [r.num_new_output for r in emitted],
                      done)
        busy[k] = True
        step_end[k] = now + dur
        steps += 1
        if prefill_role[k]:
            # a layer-wise transfer overlaps the prefill itself, timed from its first chunk
            for r in step.reqs:
                fl = flights[r.tag]
                if not fl.prefill_started:  # type: ignore[union-attr]
                    fl.prefill_started, fl.prefill_start_s = True, now  # type: ignore[union-attr]
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
            # the gaps as 8-byte floats (a fleet's records hold a million timelines), the
            # same differences and products in numpy's one pass or Python's; numpy reads
            # the times from their bytes as `struct` packs them (half the time
            # `numpy.fromiter` takes to read the floats one by one)
            n_times = len(times)
            if n_times > 32:
                pack = packers.get(n_times)
                if pack is None:
                    pack = packers[n_times] = struct.Struct(f"{n_times}d").pack
                gaps = np.frombuffer(pack(*times))
                rec.itl_ms = array("d", ((gaps[1:] - gaps[:-1]) * 1e3).tobytes())
            else:
                rec.itl_ms = array("d", [(b - a) * 1e3 for a, b in zip(times, times[1:])])
            fl.times = []  # its record holds them now: a fleet's million timelines need not stay
        else:
            rec.error, rec.error_kind = error, "http_400"
        if fl.replica >= 0:
            mean_itl = (sum(rec.itl_ms) / len(rec.itl_ms)) if learns and rec.itl_ms else None
            cluster.finished(fl.replica, fl.route, rec.ttft_ms, mean_itl, error is None, now)
        if slot_queue:
            j, due = slot_queue.popleft()
            send(j, now, (now - due) * 1e3)
        else:
            free_slots += 1

    def hand_off(i: int, k: int, now: float) -> None:
        """Prefill replica k finished request i: its KV starts for the decode pool."""
        nonlocal seq
        fl = flights[i]
        assert fl is not None and transfer is not None
        cluster.finished(k, fl.route, None, None, True, now)
        # one prefill replica's KV transfers share its links: one after another
        start = max(now, link_free[k])
        link_free[k] = start + transfer.seconds(len(requests[i].prompt_token_ids), now - fl.prefill_start_s)
        heapq.heappush(heap, (link_free[k], seq, _TRANSFERRED, i))
        seq += 1

    def enter(i: int, k: int, now: float, max_tokens: int, preloaded: int = 0) -> None:
        """Request i enters replica k's engine (or is refused with vLLM's 400); an idle
        engine starts after every other event of this instant (same-time arrivals batch)."""
        nonlocal seq, t_last
        fl = flights[i]
        assert fl is not None
        req = requests[i]
        try:
            engines[k].add(f"{id(fl)}-{req.index}", req.prompt_token_ids, max_tokens, now,
                           tag=i, preloaded_tokens=preloaded)
        except RequestRejected as exc:
            complete(i, now, str(exc))
            t_last = max(t_last, now)
            return
        if not busy[k]:
            busy[k] = True
            heapq.heappush(heap, (now, seq, _KICK, k))
            seq += 1

    def tokenize(i: int, k: int, now: float) -> None:
        """Request i queues for replica k's tokenizer worker, then enters the engine."""
        nonlocal seq
        intake_free[k] = max(now, intake_free[k]) + cluster.frontend_s(len(requests[i].prompt_token_ids))
        heapq.heappush(heap, (intake_free[k], seq, _TOKENIZED if loops else _ADMIT, i))
        seq += 1

    def to_loop(k: int, task: tuple[int, int], now: float) -> None:
        lp = loops[k]
        lp.tasks.append(task)
        if not lp.busy:
            loop_next(k, now)

    def loop_next(k: int, now: float) -> None:
        """Start replica k's event loop on its next piece of work, if any."""
        nonlocal seq
        lp = loops[k]
        if lp.steps:
            lp.current, lp.item = _OUTPUTS, lp.steps.popleft()
            # one token each where the engine does not speculate (`plain`)
            dt = tok_cost * (len(lp.item[0]) if plain[k] else sum(lp.item[1]))
        elif lp.tasks:
            lp.current, tag = lp.tasks.popleft()
            if lp.current == _CHUNK:
                lp.item, dt = (tag, lp.waiting.pop(tag)), chunk_cost
            else:
                lp.item, dt = (tag,), (req_cost if lp.current == _TAKE_IN else handoff_cost)
        else:
            lp.current, lp.item = _IDLE, ()
            return
        heapq.heappush(heap, (now + dt, seq, _LOOP, k))
        seq += 1

    def loop_done(k: int, now: float) -> None:
        """Replica k's event loop finished its current piece of work at `now`."""
        nonlocal t_last, seq
        lp = loops[k]
        if lp.current == _OUTPUTS:
            emitted, counts, done = lp.item
            if prefill_role[k]:
                # the proxy keeps a prefill replica's one token; the KV moves on
                for r in done:
                    hand_off(r.tag, k, now)
                loop_next(k, now)
                return
            for r, n in zip(emitted, counts):
                if r.tag in lp.waiting:
                    lp.waiting[r.tag] += n
                else:
                    lp.waiting[r.tag] = n
                    lp.tasks.append((_CHUNK, r.tag))
            for r in done:
                fl = flights[r.tag]
                assert fl is not None
                fl.engine_done = True
                if r.tag not in lp.waiting:
                    complete(r.tag, now)
                    t_last = max(t_last, now)
        elif lp.current == _TAKE_IN:
            tokenize(lp.item[0], k, now)
        elif lp.current == _HAND_OFF:
            heapq.heappush(heap, (now, seq, _ADMIT, lp.item[0]))
            seq += 1
        else:
            tag, n_tokens = lp.item
            fl = flights[tag]
            assert fl is not None
            _arrive(fl, now, n_tokens)
            if fl.engine_done and tag not in lp.waiting:
                complete(tag, now)
            t_last = max(t_last, now)
        loop_next(k, now)

    def drain_dues(t: float) -> None:
        """The requests due at or before `t`, as the loop below takes them (a due request
        goes before every other event of its instant)."""
        nonlocal di, next_due, free_slots
        while next_due <= t:
            i, d = due_order[di], next_due
            di += 1
            next_due = due_s[due_order[di]] if di < n_due else inf
            if free_slots > 0:
                free_slots -= 1
                send(i, d, 0.0)
            else:
                slot_queue.append((i, d))

    def decode_run(k: int, s: float, out: list[SchedRequest]) -> tuple[float, list[SchedRequest]]:
        """Within a decode stretch (`decode_stretch`), at `s`: step s's outputs `out` (the
        running batch, none of them finished) wait for the loop, and the batch stays the
        same until the step that finishes its first request. Take the leading steps of
        that run that `decode_stretch` would take (the same tests, the same float sums),
        with the engine's side in one call (`advance_decodes`) and each request's token
        times appended at once: a token's time `prev + (c - prev)` is c exactly when
        c <= 2 prev (Sterbenz), checked for the whole run. No completion falls in these
        windows (the run's last step's outputs are the next unit's), so the horizon stays
        put. Returns where the stretch goes on (s when nothing was taken) and what its
        last step finished (the batch is `out` still)."""
        nonlocal steps, t_last
        eng = engines[k]
        b = len(out)
        if not b or len(eng.scheduler.running) != b:
            return s, []
        # (plain loops over typed values rather than `min`, `sum` and `accumulate` over
        # generators: the compiled build runs them in C doubles and ints; the same sums)
        n = out[0].max_tokens - out[0].num_output
        ctx = b
        for r in out:
            togo = r.max_tokens - r.num_output
            if togo < n:
                n = togo
            ctx += r.num_computed
        if n < 2:
            return s, []
        h = heap[0][0] if heap else inf
        if free_slots > 0:
            reach = next_due + ingress
            if reach < h:
                h = reach
        times = eng.decode_times
        known = times.table(b)  # the memo read inline; a miss asks `seconds_for`
        known_to = len(known)  # (a miss may lengthen it: read again then)
        dt = tok_cost * b
        w = b + 1
        # per step taken: the outputs piece's end, then each request's chunk end, one flat
        # list (row j at j * w); a step that fails leaves its row past the taken ones
        flat: list[float] = []
        taken = 0
        e = s
        for _ in range(n):
            d = known[ctx] if ctx < known_to else None
            if d is None:
                d = times.seconds_for(b, ctx)
                known_to = len(known)
            e_next = e + d
            if e_next >= h:
                break
            c = e + dt
            flat.append(c)
            for _m in range(b):
                c += chunk_cost
                flat.append(c)
            if not c < e_next:
                break
            taken += 1
            e = e_next
            ctx += b
        if taken < 2:
            return s, []
        flights_: list[_Flight] = []
        lowest = inf
        for r in out:
            fl = flights[r.tag]
            assert fl is not None
            if not fl.times:
                return s, []
            prev = fl.times[-1]
            if prev < lowest:
                lowest = prev
            flights_.append(fl)
        end = taken * w
        last = flat[end - 1]
        if not last <= 2.0 * lowest:
            return s, []
        fin = eng.advance_decodes(taken)
        if fin is None:
            return s, []
        for m in range(b):
            fl = flights_[m]
            fl.times.extend(flat[m + 1:end:w])
            fl.chunks += taken
        if last > t_last:
            t_last = last
        steps += taken
        return e, fin

    def decode_stretch(k: int, s: float) -> None:
        """Replica k's step ended at `s` with its event loop idle (nothing queued, nothing
        waiting to be sent) and its engine `decode_ready`: what the `_STEP_DONE` branch
        below does, and then, without heap events, as many of the steps that follow as
        are sure to see nothing but themselves. Such a step j (start s_j, end e_j) is
        taken here when (a) its batch is the running one, one decode token each
        (`advance_decode`: nothing can join it before the next event from outside); (b)
        the loop's work on step j-1's outputs (one outputs piece, then one chunk per
        request in emission order, the same float sums as the pieces' heap events) ends
        before e_j, so at e_j the loop is idle again; (c) e_j is before the horizon: the
        first event in the heap (anything that could touch this replica: in a fleet's
        shared heap, any replica's), and the earliest REACH a request could cause:
        a due request's when a client slot is free (the due request itself goes first at
        its instant: `drain_dues`), a completion's that sends a queued request (every
        completion in the window is assumed to). Completions in the window happen here,
        at their chunk's time, after the requests due by then. The first step that fails
        (a)-(c) gets the branch's own treatment at its start s_j, where nothing else is
        pending before s_j: the outputs piece and the step's end go into the heap in the
        branch's order, after every push made so far (all from instants before s_j), so
        the heap orders them as the reference does (`step_window`)."""
        nonlocal steps
        eng = engines[k]
        out, _counts, fin = pending[k]
        adv = None
        while True:
            if not eng.has_work():
                break
            adv = eng.advance_decode()
            if adv is None:
                break
            dur, e_out, e_fin = adv
            e = s + dur
            cs, h = window(s, out, fin)
            if not (cs[-1] < e < h):
                break
            send_window(out, cs, fin)
            steps += 1
            s, out, fin, adv = e, e_out, e_fin, None
            if not fin:
                s, fin = decode_run(k, s, out)
        # the `_STEP_DONE` branch at s (nothing is pending before s once the requests due
        # by then are sent)
        drain_dues(s)
        step_window(k, s, out, fin, adv)

    def step_window(k: int, s: float, out: list[SchedRequest], fin: list[SchedRequest],
                    adv: tuple[float, list[SchedRequest], list[SchedRequest]] | None = None) -> None:
        """The `_STEP_DONE` branch at `s` for replica k whose loop is idle (the step that
        ended there emitted `out`, of which `fin` finished), when no decode stretch goes
        on from there: the next step started as `start_step` starts it (`adv`: already
        advanced, the engine's (duration, emitted, finished)), and the loop's work
        on `out` (the outputs piece, then one chunk per request in emission order, the same
        float sums as their heap events) done here when it ends before that next step does
        and before anything else can happen: the heap's next event, the REACH a due
        request would cause when a client slot is free or a completion may free one, the
        REACH a completion would cause by sending a queued request (as in
        `decode_stretch`). Else the branch's own way: the loop's pieces through the heap,
        pushed before the next step's end as the branch pushes them."""
        nonlocal seq, steps
        eng = engines[k]
        if adv is None and eng.has_work():
            adv = eng.advance_holding()
            if adv is None:
                dur, _step, emitted, done = eng.advance()
                adv = (dur, emitted, done)
        e = s + adv[0] if adv is not None else inf
        cs, h = window(s, out, fin)
        here = cs[-1] < e and cs[-1] < h
        if not here:
            loops[k].steps.append((out, [1] * len(out), fin))
            loop_next(k, s)
        if adv is not None:  # `start_step` with the step already advanced
            _dur, e_out, e_fin = adv
            pending[k] = (e_out, [1] * len(e_out), e_fin)
            step_end[k] = e
            steps += 1
            heappush(heap, (e, seq, _STEP_DONE, k))
            seq += 1
        else:
            busy[k] = False
            step_end[k] = inf
        if here:
            send_window(out, cs, fin)

    def first_at(t: float) -> bool:
        """True when nothing pending (a heap event, the next due request) comes at or
        before `t`: an event at t would be the next one taken."""
        return t < next_due and (not heap or t < heap[0][0])

    def window(s: float, out: list[SchedRequest],
               fin: list[SchedRequest]) -> tuple[list[float], float]:
        """The loop's work from `s` (idle then) on a step's outputs `out` (`fin` finished):
        when its pieces end (the outputs piece at s + dt, as `loop_next` times it, then each
        chunk `chunk_cost` later, added in order), and the horizon: the heap's next event,
        the REACH a due request would cause when a client slot is free or a completion may
        free one, the REACH the first completion would cause by sending a queued request."""
        h = heap[0][0] if heap else inf
        if free_slots > 0 or fin:
            reach = next_due + ingress
            if reach < h:
                h = reach
        # (`accumulate`'s sums written out: the compiled build adds C doubles)
        c = s + tok_cost * len(out)
        cs = [c]
        for _ in range(len(out)):
            c += chunk_cost
            cs.append(c)
        if fin and slot_queue:
            reach = cs[1] + ingress
            if reach < h:
                h = reach
        return cs, h

    def send_window(out: list[SchedRequest], cs: list[float], fin: list[SchedRequest]) -> None:
        """`window`'s chunks sent: each request's token at its chunk's end, the finished
        ones completed there (after the requests due by then)."""
        nonlocal t_last
        for m in range(len(out)):
            r = out[m]
            c = cs[m + 1]
            tag = r.tag
            fl = flights[tag]
            assert fl is not None
            fl.chunks += 1
            times = fl.times
            if times:
                prev = times[-1]
                times.append(prev + (c - prev))  # `_arrive`'s gap / 1 x 1: exact
            else:
                times.append(c)
            if fin and r in fin:  # (`fin` holds a request or two, mostly none)
                fl.engine_done = True
                drain_dues(c)
                complete(tag, c)
        if cs[-1] > t_last:
            t_last = cs[-1]

    # The shortcuts below (`fast`) do what `loop_done` and `loop_next` do for the two most
    # frequent pieces of work, a chunk sent and a step's outputs processed, without their
    # generic dispatch: the same heap pushes in the same order (so the same sequence numbers
    # break the same ties) and the same float operations, hence identical records.
    fast = bool(loops) and not stepwise
    no_decode_pool = transfer is None  # (2) of the chunk chain below needs it
    # decode stretches (`decode_stretch`): not with speculation, a decode pool, or a
    # per-step observer, which must see every step's engine
    stretches = fast and no_decode_pool and on_step is None and all(plain)
    heappop, heappush = heapq.heappop, heapq.heappush
    while heap or next_due < inf:
        if heap and heap[0][0] < next_due:
            now, _s, kind, arg = heappop(heap)
        else:
            arg = due_order[di]
            now, kind = next_due, _DUE
            di += 1
            next_due = due_s[due_order[di]] if di < n_due else inf
        if fast and kind == _LOOP:
            lp = loops[arg]
            cur = lp.current
            if cur == _CHUNK:
                waiting = lp.waiting
                tasks = lp.tasks
                while True:
                    tag, n_tokens = lp.item
                    fl = flights[tag]
                    assert fl is not None
                    # `_arrive(fl, now, n_tokens)`, one chunk of one token written out
                    fl.chunks += 1
                    times = fl.times
                    if not times:
                        times.extend([now] * n_tokens)
                    elif n_tokens == 1:
                        prev = times[-1]
                        times.append(prev + (now - prev))  # `_arrive`'s gap / 1 x 1: exact
                    else:
                        prev = times[-1]
                        gap = (now - prev) / n_tokens
                        times.extend([prev + gap * j for j in range(1, n_tokens + 1)])
                    if fl.engine_done and tag not in waiting:
                        complete(tag, now)
                    if now > t_last:
                        t_last = now
                    # The next chunk's send, here rather than through the heap, (1) when it
                    # ends before every pending event: its event would be the next one popped
                    # (at a tie the pending event goes first: it has the lower sequence
                    # number, and a due request the lowest), so nothing can happen between;
                    # or (2) when nothing that happens before it ends can change it or see
                    # it: only this replica's next step end puts work ahead of it (a step's
                    # outputs go first; an intake or a hand-off queued meanwhile waits behind
                    # every chunk already queued); only a chunk that finishes its request
                    # touches shared state (slots, routing counts); and the loop must stay
                    # busy past it, so another piece must follow (its event goes through the
                    # heap): events in between see a busy loop, as they would. Not with a
                    # decode pool, where a KV transfer can start an idle engine. The piece
                    # after (2) is pushed before events of other replicas that the reference
                    # pushes first; only an exact tie of its end with one of theirs could
                    # then order the two otherwise (tests/test_sim_fastpath.py's "ties" case
                    # runs identical replicas on round numbers and finds the same records).
                    if lp.steps or not tasks or tasks[0][0] != _CHUNK:
                        break
                    t_next = now + chunk_cost
                    if t_next >= next_due or (heap and heap[0][0] <= t_next):
                        if (len(tasks) < 2 or t_next >= step_end[arg] or not no_decode_pool
                                or flights[tasks[0][1]].engine_done):  # type: ignore[union-attr]
                            break
                    tag = tasks.popleft()[1]
                    lp.item = (tag, waiting.pop(tag))
                    now = t_next
            elif cur == _OUTPUTS and not prefill_role[arg]:
                emitted, counts, done = lp.item
                waiting = lp.waiting
                add_task = lp.tasks.append
                for r, n in zip(emitted, counts):
                    tag = r.tag
                    if tag in waiting:
                        waiting[tag] += n
                    else:
                        waiting[tag] = n
                        add_task((_CHUNK, tag))
                for r in done:
                    fl = flights[r.tag]
                    assert fl is not None
                    fl.engine_done = True
                    if r.tag not in waiting:
                        complete(r.tag, now)
                        if now > t_last:
                            t_last = now
            else:
                loop_done(arg, now)
                continue
            # `loop_next` when the next piece is a chunk (no step's outputs queued first)
            tasks = lp.tasks
            if not lp.steps and tasks and tasks[0][0] == _CHUNK:
                lp.current = _CHUNK
                tag = tasks.popleft()[1]
                lp.item = (tag, lp.waiting.pop(tag))
                heappush(heap, (now + chunk_cost, seq, _LOOP, arg))
                seq += 1
            else:
                loop_next(arg, now)
            continue
        if kind == _STEP_DONE:
            emitted, counts, done = pending[arg]
            if stretches and emitted:
                lp = loops[arg]
                if lp.current == _IDLE and not lp.tasks and not lp.steps:
                    if engines[arg].decode_ready():
                        decode_stretch(arg, now)
                    else:
                        step_window(arg, now, emitted, done)
                    continue
            if loops and (emitted or done):
                # The API server's event loop takes the step's outputs in its turn; the
                # engine steps on meanwhile.
                loops[arg].steps.append(pending[arg])
                if not loops[arg].busy:
                    loop_next(arg, now)
            elif prefill_role[arg]:
                for r in done:
                    hand_off(r.tag, arg, now)
            else:
                for r, n in zip(emitted, counts):
                    _arrive(flights[r.tag], now, n)  # type: ignore[arg-type]
                for r in done:
                    complete(r.tag, now)
                t_last = now
            if engines[arg].has_work():
                start_step(arg, now)
            else:
                busy[arg] = False
                step_end[arg] = inf
        elif kind == _LOOP:
            loop_done(arg, now)
        elif kind == _TOKENIZED:
            # back on the event loop, behind what is queued there, for the hand-off
            fl = flights[arg]
            assert fl is not None
            k = fl.replica
            if fast and loops[k].current == _IDLE and not prefill_role[k]:
                # an idle loop hands it off at once: the request enters the engine at the
                # piece's end, here, when nothing comes first (the ADMIT the piece's end
                # would push is the next event then)
                entered = now + handoff_cost
                if first_at(entered):
                    enter(arg, k, entered, requests[arg].output_len)
                    continue
            to_loop(k, (_HAND_OFF, arg), now)
        elif kind in (_REACH, _ADMIT):
            fl = flights[arg]
            assert fl is not None
            req = requests[arg]
            if kind == _REACH:
                k = cluster.route(fl.route, now, stepwise)
                fl.replica = k
                if loops:
                    # The event loop takes the request in (HTTP, validation) in its turn;
                    # an idle one at once, and the tokenizer gets it at the piece's end,
                    # here, when nothing comes first (the piece's own event would be next)
                    if fast and loops[k].current == _IDLE:
                        taken_in = now + req_cost
                        if first_at(taken_in):
                            tokenize(arg, k, taken_in)
                            continue
                    to_loop(k, (_TAKE_IN, arg), now)
                    continue
                if cluster.frontend_s(len(req.prompt_token_ids)) > 0 or intake_free[k] > now:
                    tokenize(arg, k, now)
                    continue
            k = fl.replica
            if prefill_role[k]:
                # the proxy asks the prefill replica for one token; the whole request must
                # still fit the decode replica
                n = len(req.prompt_token_ids)
                if n + req.output_len > decode_len or n >= decode_len:
                    complete(arg, now, rejection_message(n, req.output_len, decode_len))
                    t_last = max(t_last, now)
                    continue
                enter(arg, k, now, 1)
            else:
                enter(arg, k, now, req.output_len)
        elif kind == _TRANSFERRED:
            # the KV is at the decode pool: a decode replica takes the request, its prompt
            # computed but for the last token
            fl = flights[arg]
            assert fl is not None
            req = requests[arg]
            assert isinstance(cluster, Cluster)  # (a fleet's replica alone has no decode pool)
            fl.replica = cluster.route_decode(fl.route, now, stepwise)
            enter(arg, fl.replica, now, req.output_len, len(req.prompt_token_ids) - 1)
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
        ids = array("q", r.prompt_token_ids)  # 8-byte ids: the warm-up id is >= 2**40
        if ids:
            ids[0] = _WARMUP_FIRST_ID + i
        out.append(replace(r, prompt_token_ids=ids))
    return out


def offline_requests(specs: Sequence[RequestSpec], tokenizer: Any,
                     token_ids: Sequence[Sequence[int]] | None = None) -> list[OfflineRequest]:
    """The engines' view of `specs`: token ids from `tokenizer.encode_batch`, fitted to
    each spec's `prompt_len` (`fit_token_ids`: arrays); the text is what a routing policy
    sees. `token_ids`, when given, are those encodings already made (`Workload.token_ids`),
    used instead: an array of the right length is shared, not copied, so a million
    requests' ids are held once."""
    if token_ids is not None:
        if len(token_ids) != len(specs):
            raise ValueError(f"{len(token_ids)} token id lists for {len(specs)} requests")
        encoded: Sequence[Sequence[int]] = token_ids
    elif specs:
        typecode = tokenizer.id_typecode()
        encoded = [array(typecode, ids)
                   for ids in tokenizer.encode_batch([s.text for s in specs])]
    else:
        encoded = []
    return [
        OfflineRequest(s.index, fit_token_ids(ids, s.prompt_len, s.index), s.output_len, s.text)
        for s, ids in zip(specs, encoded)
    ]


# -- one run from flags ---------------------------------------------------------------

BACKEND = "servelab-sim"


@dataclass(frozen=True, slots=True)
class PreparedWorkload:
    """Requests as token ids plus their intended send times (s) and how they were made.
    `texts`: whether the requests carry their prompts' texts (`route_text`); without them
    only a routing policy that reads no prompt may route them (`simulate_prepared` checks)."""

    requests: list[OfflineRequest]
    intended_s: np.ndarray
    tokenizer_name: str
    tokenizer_source: str
    notes: tuple[str, ...]
    texts: bool = True

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return by_fields(self)  # (compiled: `servelab.sim.native.by_fields`)


def prepare_workload(dataset: DatasetOptions, seed: int, arrivals: ArrivalOptions,
                     texts: bool = True) -> PreparedWorkload:
    """The workload `dataset` describes as the engines see it (`offline_requests`: token
    ids as arrays, the random dataset's shared with the workload rather than copied) and
    its intended send times in seconds, drawn as bench draws them.

    `texts=False`, for a routing policy that reads no prompt (`reads_prompt`): a dataset
    that can be built as token ids alone (`TOKEN_ONLY_DATASETS`: random) is built so, its
    requests' `route_text` empty; the same ids, output lengths, send times and notes
    (tests/test_sim_token_workload.py), without the texts, which at a million random
    prompts are 2.8 GB of fresh memory (seconds of system time on a VM). Other datasets
    keep their texts."""
    tok = load_tokenizer(dataset.tokenizer)
    if not texts and dataset.dataset_name in TOKEN_ONLY_DATASETS:
        with _collector_paused():
            tw = build_token_workload(dataset, tok, seed)
            reqs = [OfflineRequest(i, ids, out) for i, (ids, out)
                    in enumerate(zip(tw.token_ids, tw.output_lens))]
        intended = np.asarray(schedule_s(tw, arrivals, np.random.default_rng(seed)))
        return PreparedWorkload(reqs, intended, tw.tokenizer.name, tw.tokenizer.source,
                                tuple(tw.notes), texts=False)
    with _collector_paused():
        wl = build_workload(dataset, tok, seed)
        reqs = offline_requests(wl.requests, tok, wl.token_ids)
    intended = np.asarray(schedule_s(wl, arrivals, np.random.default_rng(seed)))
    return PreparedWorkload(reqs, intended, wl.tokenizer.name, wl.tokenizer.source, tuple(wl.notes))


@dataclass(slots=True)
class OfflineOutcome:
    result: BenchResult
    run: OfflineRun
    memory: Any
    max_model_len: int
    num_steps: int
    preemptions: int
    date: str
    notes: tuple[str, ...]
    cost_source: str  # which kernels priced the steps and where their times come from


class TraceWriter:
    """Per-step JSON lines: replica, start (s), duration (ms), batch, tokens (prefill,
    decode, verified drafts), KV, queues."""

    def __init__(self, fh: IO[str]) -> None:
        self._fh = fh

    def __call__(self, replica: int, start_s: float, duration_s: float, step: ScheduledStep,
                 engine: SimEngine) -> None:
        s = engine.scheduler
        self._fh.write(json.dumps({
            "replica": replica, "start_s": round(start_s, 6), "duration_ms": round(duration_s * 1e3, 4),
            "batch_size": len(step.reqs), "prefill_tokens": step.prefill_tokens,
            "decode_tokens": step.decode_seqs, "draft_tokens": step.draft_tokens,
            "kv_usage": round(engine.pool.usage_frac, 5),
            "running": len(s.running), "waiting": len(s.waiting), "preempted": step.preempted,
        }) + "\n")


def simulate_prepared(opts: SimOptions, wl: PreparedWorkload, seed: int,
                      max_concurrency: int | None, num_warmups: int,
                      trace: TraceWriter | None = None) -> tuple[OfflineRun, Any, int, int, str]:
    """(run, memory plan, max_model_len, preemptions, cost source) of one simulation with
    fresh engines."""
    if not wl.texts and reads_prompt(opts.router_policy):
        raise ValueError(f"routing policy {opts.router_policy} reads prompts: the workload "
                         "must be prepared with its texts")
    cluster = build_cluster(opts, random.Random(seed))
    run = simulate(cluster, wl.requests, wl.intended_s, max_concurrency, num_warmups, trace)
    engine = cluster.engines[0]
    preemptions = sum(e.stats.num_preemptions_total for e in cluster.engines)
    return run, engine.memory, engine.config.max_model_len, preemptions, engine.cost.source


def run_offline(opts: SimOptions, dataset: DatasetOptions, seed: int, arrivals: ArrivalOptions,
                max_concurrency: int | None, num_warmups: int, summary_opts: SummaryOptions,
                trace_path: Path | None, date: str, label: str | None = None,
                metadata: dict[str, str] | None = None) -> OfflineOutcome:
    """Build the workload, simulate it, summarise it like a bench run. The workload keeps
    its prompts' texts only for a routing policy that reads them (`prepare_workload`).

    The cyclic garbage collector stays paused throughout (restored after), not only in the
    workload's build and the simulation: resumed between them, its first collections walk
    every record, request and id array made while it was paused (all acyclic), a few
    seconds at a million requests."""
    with _collector_paused():
        wl = prepare_workload(dataset, seed, arrivals, texts=reads_prompt(opts.router_policy))
        if trace_path is not None:
            with trace_path.open("w") as fh:
                run, memory, mml, pre, source = simulate_prepared(opts, wl, seed, max_concurrency,
                                                                  num_warmups, TraceWriter(fh))
        else:
            run, memory, mml, pre, source = simulate_prepared(opts, wl, seed, max_concurrency,
                                                              num_warmups)
        info = RunInfo.now(backend=BACKEND, label=label, model_id=opts.model,
                           tokenizer_id=wl.tokenizer_name, num_prompts=len(wl.requests),
                           metadata=metadata, arrivals=arrivals, max_concurrency=max_concurrency,
                           seed=seed, tokenizer=wl.tokenizer_source, date=date)
        notes = wl.notes
        # the requests' ids are read no more: their memory is free again for the summary's
        del wl
        result = summarize(run.records, run.duration_s, summary_opts).with_run(info)
        if run.spec_decode is not None:
            result = result.model_copy(update={"engine_spec_decode": run.spec_decode})
        return OfflineOutcome(result, run, memory, mml, run.num_steps, pre, date, notes, source)


# Text lines for `servelab sim run` beside bench's own result table.

def memory_lines(memory: Any, max_model_len: int, replicas: int) -> list[str]:
    """The planner's KV budget in the words vLLM's startup log uses (per replica)."""
    tokens = int(memory.kv_cache_tokens)
    return [
        f"memory budget per replica ({replicas} replica{'s' if replicas > 1 else ''}):",
        f"Model loading took {memory.weights_gib:.4f} GiB (simulated, per GPU)",
        f"Available KV cache memory: {memory.kv_cache_gib:.2f} GiB",
        f"GPU KV cache size: {tokens:,} tokens",
        f"Maximum concurrency for {max_model_len:,} tokens per request: "
        f"{memory.max_concurrency:.2f}x",
    ]


def disaggregation_lines(opts: SimOptions, mean_prompt_tokens: float) -> list[str]:
    """A disaggregated deployment's pools and KV link, and the mean prompt's transfer."""
    pd = opts.disaggregated
    if pd is None:
        return []
    tr = kv_transfer(opts.model, opts.quantization, opts.gpu, opts.engine_args, pd)
    ms = tr.seconds(round(mean_prompt_tokens)) * 1e3
    return [f"disaggregated: {pd.describe()} ({pd.gpus} GPUs; the memory budget above is the "
            "prefill pool's replica)",
            f"KV link: {tr.link.name} {tr.link.bandwidth_gbs:g} GB/s one way per GPU x {tr.ranks} "
            f"rank(s) ({tr.link.source}); {tr.kv_bytes_per_token:,} B of KV per token: the mean "
            f"prompt ({mean_prompt_tokens:,.0f} tokens) moves in {ms:.2f} ms"
            + (" before any overlap" if tr.layerwise else "")]


def sim_lines(num_steps: int, preemptions: int, duration_s: float, cost_source: str,
              build: str) -> list[str]:
    """What only a simulator knows: engine steps and preemptions over the run, what priced
    the steps (kernel family; profiled GPU or datasheet), and which build of the simulator
    ran (`servelab.sim.BUILD.describe()`)."""
    return [f"simulated {duration_s:.1f} s in {num_steps:,} engine steps; preemptions: {preemptions:,}",
            f"step costs: {cost_source}",
            f"simulator build: {build}"]
