"""The simulated engine: one vLLM-like replica on a virtual clock (both drivers call this).

The engine holds no clock. A driver calls `step(now_s)`; the engine schedules one step,
prices it with its `CostModel` and says when its tokens leave the GPU
(`now_s + duration_s`). The offline driver (`servelab.sim.offline`) advances a virtual
clock by these durations; the online server sleeps them in real time.

Asynchronous scheduling (`SimConfig.async_scheduling`, vLLM's default since V1's async
scheduler: "Asynchronous scheduling is enabled" in the 0.25.1 logs): vLLM schedules step
k+1 right after it launches step k, so that the GPU never waits for the CPU. A request that
reaches a busy engine while step k runs therefore misses step k+1 (already scheduled) and
joins step k+2; an idle engine schedules it at once. The engine keeps such requests in an
inbox for one step (`_inbox` -> `_held` -> the scheduler). Tokens still leave at their
step's end: the output of step k is processed while step k+1 runs (docs/simulator.md).

Speculative decoding (`SimConfig` with a `SpecDecoder`): before a step's tokens are applied
the decoder says how many of each draft were accepted; after, it drafts for every request
that continues (`servelab.sim.speculative`). A request then receives 1 + accepted tokens
in one event, as vLLM streams them in one chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servelab.errors import ServelabError
from servelab.hardware.catalog import NodeLayout
from servelab.sim.blocks import BlockPool, prompt_block_hashes
from servelab.sim.cost import (
    Calibration,
    CostModel,
    OperatorCostModel,
    SpecCost,
    default_calibration,
    kernel_times,
)
from servelab.plan.args import uses_v1_model_runner
from servelab.sim.kernel_profile import KernelProfile
from servelab.sim.native import by_fields
from servelab.sim.scheduler import SchedRequest, ScheduledStep, Scheduler, SchedulerLimits
from servelab.sim.operators import OperatorModel
from servelab.sim.speculative import SpecCounters, SpecDecoder
from servelab.speculation import SpeculativeConfig, draft_geometry


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One request as the engine receives it (token ids drive the prefix cache)."""

    request_id: str
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    arrival_s: float

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return by_fields(self)  # (compiled: `servelab.sim.native.by_fields`)


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """Tokens a request received in one step (emitted at the step's end)."""

    request_id: str
    num_tokens: int
    finished: bool
    first: bool
    finish_reason: str | None  # "length" when max_tokens was reached

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return by_fields(self)  # (compiled: `servelab.sim.native.by_fields`)


@dataclass(frozen=True, slots=True)
class StepResult:
    """One step: when it started, how long it took, who got tokens, the engine state after."""

    start_s: float
    duration_s: float
    events: tuple[TokenEvent, ...]
    batch_size: int
    num_prefill_tokens: int
    num_decode_tokens: int
    kv_usage_frac: float
    num_running: int
    num_waiting: int
    num_preempted: int = 0

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return by_fields(self)  # (compiled: `servelab.sim.native.by_fields`)


@dataclass(frozen=True, slots=True)
class EngineStats:
    """Counters and gauges in vLLM's sense (`/metrics` names in docs/simulator.md)."""

    running: int
    waiting: int
    kv_usage_frac: float
    num_preemptions_total: int
    prefix_cache_queries_total: int  # tokens
    prefix_cache_hits_total: int     # tokens
    prompt_tokens_total: int
    generation_tokens_total: int
    num_gpu_blocks: int
    block_size: int
    spec_decode: SpecCounters | None = None

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return by_fields(self)  # (compiled: `servelab.sim.native.by_fields`)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The engine's shape: KV pool (from the planner) and vLLM's scheduler limits."""

    num_gpu_blocks: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    async_scheduling: bool = True  # vLLM's --async-scheduling (its default)
    memory: Any = None  # the planner's MemoryPlan, for vLLM-style startup lines
    speculative: SpeculativeConfig | None = None  # with per-position rates (build_engine checks)
    seed: int = 0  # the engine's own random stream (acceptance draws)

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return by_fields(self)  # (compiled: `servelab.sim.native.by_fields`)


class RequestRejected(ServelabError):
    """vLLM answers such a request with HTTP 400 before it reaches the scheduler."""

    http_status = 400


def rejection_message(prompt_len: int, max_tokens: int, max_model_len: int) -> str:
    """vLLM's 400 message for a request longer than `max_model_len` (its wording)."""
    if prompt_len >= max_model_len:
        return (f"The decoder prompt (length {prompt_len}) is longer than the maximum model "
                f"length of {max_model_len}. Make sure that `max_model_len` is no smaller "
                "than the number of text tokens.")
    return (f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
            f"model's maximum context length is {max_model_len} tokens and your request has "
            f"{prompt_len} input tokens ({max_tokens} > {max_model_len} - {prompt_len}).")


class DecodeStepTimes:
    """Seconds of decode-only steps (no prefill tokens, no drafts) by (sequences, context
    tokens), the only counts such a step's price depends on, memoised from one cost model:
    replicas that share the cost model share this too (`servelab.sim.setup` builds them
    so), and a fleet's replicas run the same decode shapes over and over. At most
    `max_slots` slots are kept (then the rest are priced each time), so a long run's
    memory stays bounded."""

    __slots__ = ("cost", "max_slots", "_by_seqs", "_slots")

    def __init__(self, cost: CostModel, max_slots: int = 1 << 22) -> None:
        self.cost = cost
        self.max_slots = max_slots
        # seconds by context tokens, one list per batch size indexed by the context tokens
        # (None: not priced yet): a decode run reads the contexts of one batch size one
        # step apart, neighbours in one list rather than entries scattered over a hash
        # table (a memo read was a third of a decode run's time as a dict)
        self._by_seqs: dict[int, list[float | None]] = {}
        self._slots = 0

    def table(self, seqs: int) -> list[float | None]:
        """The memo of decode steps of `seqs` sequences: item c, where the list reaches
        it and not None, is `seconds_for(seqs, c)` (else ask `seconds_for`, which fills
        it while the slots last)."""
        got = self._by_seqs.get(seqs)
        if got is None:
            got = self._by_seqs[seqs] = []
        return got

    def seconds(self, step: ScheduledStep) -> float:
        """`cost.step_duration_s(step)` for a decode-only step."""
        return self.seconds_for(step.decode_seqs, step.decode_context_tokens, step)

    def seconds_for(self, seqs: int, context_tokens: int, step: ScheduledStep | None = None) -> float:
        """`seconds` of a decode-only step of `seqs` sequences attending to
        `context_tokens` in all (`step`: that step, when the caller has it; else one is
        built only if the shape is priced)."""
        table = self.table(seqs)
        if context_tokens < len(table):
            got = table[context_tokens]
            if got is not None:
                return got
        if step is None:
            step = ScheduledStep([], [], seqs, context_tokens, 0, 0, 0)
        priced = self.cost.step_duration_s(step)
        short = context_tokens + 1 - len(table)
        if short <= 0:
            table[context_tokens] = priced
        elif self._slots + short <= self.max_slots:
            table.extend([None] * short)
            self._slots += short
            table[context_tokens] = priced
        return priced


class SimEngine:
    """A scheduler, a KV block pool and a cost model: one simulated replica. Replicas
    built on one cost model can share its `DecodeStepTimes` (`decode_times`; None: their
    own)."""

    def __init__(self, config: SimConfig, cost: CostModel,
                 decode_times: DecodeStepTimes | None = None) -> None:
        if decode_times is not None and decode_times.cost is not cost:
            raise ValueError("decode_times memoises another cost model")
        if config.num_gpu_blocks * config.block_size < config.max_model_len:
            raise ServelabError(
                f"the KV pool ({config.num_gpu_blocks * config.block_size} tokens) cannot hold "
                f"one request of max_model_len {config.max_model_len}: lower --max-model-len "
                "or raise --gpu-memory-utilization (vLLM refuses to start here too)")
        self.config = config
        self.cost = cost
        self.decode_times = decode_times if decode_times is not None else DecodeStepTimes(cost)
        self.memory = config.memory
        self.pool = BlockPool(config.num_gpu_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(
            SchedulerLimits(config.max_num_seqs, config.max_num_batched_tokens,
                            config.max_model_len, config.enable_chunked_prefill), self.pool)
        self._live: dict[str, SchedRequest] = {}
        # Async scheduling: added during the step in flight (_inbox), then waiting out the
        # step that was scheduled when they arrived (_held); see the module docstring.
        self._inbox: list[SchedRequest] = []
        self._held: list[SchedRequest] = []
        self._prompt_tokens_total = 0
        self._generation_tokens_total = 0
        self.spec: SpecDecoder | None = None
        if config.speculative is not None:
            proposals = config.speculative.proposals()
            if proposals is None:
                raise ValueError("a speculative SimConfig needs its per-position acceptance")
            self.spec = SpecDecoder(config.speculative, proposals, config.seed)

    def add_request(self, req: SimRequest) -> None:
        """Queue a request; raises `RequestRejected` (HTTP 400 in vLLM) when
        prompt + max_tokens exceeds max_model_len, and ValueError for a duplicate id."""
        self.add(req.request_id, req.prompt_token_ids, req.max_tokens, req.arrival_s)

    def add(self, request_id: str, prompt_token_ids: Sequence[int],
            max_tokens: int, arrival_s: float, tag: int = -1,
            preloaded_tokens: int = 0) -> SchedRequest:
        """`add_request` for drivers that keep a handle (`tag` is theirs to read back);
        `preloaded_tokens` of the prompt have their KV already (moved in from a prefill
        replica: the engine allocates their blocks and does not compute them)."""
        n = len(prompt_token_ids)
        limit = self.config.max_model_len
        if n + max_tokens > limit or n >= limit:
            raise RequestRejected(rejection_message(n, max_tokens, limit))
        if max_tokens < 1 or n < 1:
            raise RequestRejected(f"request {request_id}: needs >= 1 prompt token and max_tokens >= 1")
        if request_id in self._live:
            raise ValueError(f"request id {request_id!r} is already in the engine")
        hashes = (prompt_block_hashes(prompt_token_ids, self.config.block_size)
                  if self.config.enable_prefix_caching else [])
        sreq = SchedRequest(request_id, n, max_tokens, arrival_s, hashes, tag)
        sreq.preloaded = min(max(0, preloaded_tokens), n - 1)
        self._live[request_id] = sreq
        if self.config.async_scheduling:
            self._inbox.append(sreq)
        else:
            self.scheduler.add(sreq)
        return sreq

    def reset_prefix_cache(self) -> bool:
        """Empty the prefix cache (False, nothing changed, while requests are in the engine)."""
        return not self._live and self.pool.reset_prefix_cache()

    def abort(self, request_id: str) -> None:
        """Remove a request (client went away); unknown or finished ids are ignored."""
        sreq = self._live.pop(request_id, None)
        if sreq is None:
            return
        for box in (self._inbox, self._held):
            if sreq in box:
                box.remove(sreq)
                return
        self.scheduler.remove(sreq)

    def has_work(self) -> bool:
        return bool(self._live)

    def advance(self, stepwise: bool = False) -> tuple[float, ScheduledStep, list[SchedRequest],
                                                       list[SchedRequest]]:
        """Schedule, price and apply one step: (duration_s, step, emitted, finished).

        The hot path of both drivers: no per-token objects. `stepwise` keeps the
        scheduler's general loops for every step (the reference the shortcuts are tested
        against; the same steps either way).
        """
        sched = self.scheduler
        # (with nothing received since the last step, `_admit_async` changes nothing)
        if self.config.async_scheduling and (stepwise or self._held or self._inbox):
            self._admit_async(sched)
        step = sched.schedule(stepwise)
        if not step.reqs:
            raise RuntimeError("engine has work but could schedule nothing (a bug)")
        if stepwise or step.prefill_tokens or step.draft_tokens:
            duration = self.cost.step_duration_s(step)
        else:
            duration = self.decode_times.seconds(step)
        spec = self.spec
        if spec is not None and step.drafting_seqs:
            for r in step.reqs:
                if r.sched_draft:
                    r.accepted = spec.verify(r.sched_draft)
        emitted, done = sched.finish_step(step, stepwise)
        if spec is None:
            self._generation_tokens_total += len(emitted)
        else:
            for r in emitted:
                self._generation_tokens_total += r.num_new_output
                if not r.finished:
                    r.num_draft = spec.propose(r.proposals)
                    r.proposals += 1
        # a first token can only come out of a prompt's last chunk (a step's prefill tokens)
        if stepwise or step.prefill_tokens:
            for r in emitted:
                if r.num_output == 1:
                    self._prompt_tokens_total += r.prompt_len
        self._forget(done)
        return duration, step, emitted, done

    def _forget(self, done: list[SchedRequest]) -> None:
        """Finished requests leave the engine's id map (the scheduler has retired them)."""
        live = self._live
        for r in done:
            del live[r.request_id]

    def decode_ready(self) -> bool:
        """True when the next step is a plain decode step of the whole running batch and
        nothing else can join it: nothing received (inbox, held) or waiting, no speculation,
        a batch within the token budget, every running request one decode token short of
        its known tokens, past its prompt, with its prompt blocks registered (`Scheduler._decode_context`'s
        conditions but the block). Until a request is added, `advance_decode` keeps it so."""
        return not (self._inbox or self._held) and self._running_decode_ready()

    def _running_decode_ready(self) -> bool:
        """`decode_ready` but for what was received (inbox, held)."""
        sched = self.scheduler
        if (self.spec is not None or sched.waiting or not sched.running
                or len(sched.running) > sched.limits.max_num_batched_tokens):
            return False
        for r in sched.running:
            nc = r.num_computed
            if (nc + 1 != r.prompt_len + r.num_output or nc < r.prompt_len or r.num_draft
                    or r.num_registered < len(r.hashes)):
                return False
        return True

    def advance_holding(self) -> tuple[float, list[SchedRequest], list[SchedRequest]] | None:
        """`advance()` as `advance_decode` takes it, also when requests were received during
        the last step and nothing is held from before (asynchronous scheduling: they wait
        out this step, which is the running batch's plain decode, `_admit_async`): the
        same (duration_s, emitted, finished). None, with nothing changed, when the step is
        not such a step or the pool may run short (`advance_decode`)."""
        # (the pool is checked here, as `advance_decode` would, because the inbox moves
        # before it runs; only asynchronous scheduling fills the inbox)
        if (self._held or not self._running_decode_ready()
                or self.pool.num_free_blocks < len(self.scheduler.running)):
            return None
        self._held, self._inbox = self._inbox, []
        return self.advance_decode()

    def advance_decode(self) -> tuple[float, list[SchedRequest], list[SchedRequest]] | None:
        """`advance()` when `decode_ready()`: (duration_s, emitted, finished) of the same
        step, in one pass over the batch (the same block allocations in the same order,
        the same retirements). None, with nothing stepped, when the pool holds fewer free
        blocks than the batch has requests (the most a step can need; then `advance` takes
        the general path, which preempts as vLLM does)."""
        sched = self.scheduler
        running = sched.running
        pool = self.pool
        if pool.num_free_blocks < len(running):
            return None
        bs = pool.block_size
        ctx = 0
        done: list[SchedRequest] = []
        for r in running:
            nc = r.num_computed
            if nc >= len(r.blocks) * bs:  # its last block is full: one more, in running order
                r.blocks.extend(pool.allocate(1))
            ctx += nc + 1
            r.num_computed = nc + 1
            out = r.num_output + 1
            r.num_output = out
            r.num_new_output = 1
            if out >= r.max_tokens:
                done.append(r)
        emitted = running[:]
        duration = self.decode_times.seconds_for(len(emitted), ctx)
        self._generation_tokens_total += len(emitted)
        if done:
            sched._retire(done)
            self._forget(done)
        return duration, emitted, done

    def advance_decodes(self, n: int) -> list[SchedRequest] | None:
        """`n` calls of `advance_decode` on a batch that none of them but the last can
        finish (n <= every running request's tokens to go), at once: the same block
        allocations in the same order (step by step, in running order), the same
        retirements after the last; what the n-th step finished. None, with nothing
        stepped, when the pool might run short of blocks."""
        sched = self.scheduler
        running = sched.running
        pool = self.pool
        bs = pool.block_size
        # (step, position) of each block a request takes: when its computed tokens reach
        # its blocks' end (a decode-ready request's blocks hold all its computed tokens)
        needs: list[tuple[int, int]] = []
        for m, r in enumerate(running):
            t = len(r.blocks) * bs - r.num_computed
            if t < n:  # (most take none or one in a run shorter than a block)
                if t + bs < n:
                    needs.extend((u, m) for u in range(t, n, bs))
                else:
                    needs.append((t, m))
        if len(needs) > pool.num_free_blocks:
            return None
        if needs:
            needs.sort()
            for (_t, m), b in zip(needs, pool.allocate(len(needs))):
                running[m].blocks.append(b)
        done: list[SchedRequest] = []
        for r in running:
            r.num_computed += n
            out = r.num_output + n
            r.num_output = out
            r.num_new_output = 1
            if out >= r.max_tokens:
                done.append(r)
        self._generation_tokens_total += n * len(running)
        if done:
            sched._retire(done)
            self._forget(done)
        return done

    def _admit_async(self, sched: Scheduler) -> None:
        """Requests held through one step join now; those added during the last step wait
        one more, unless the engine had nothing scheduled (an idle vLLM engine schedules a
        new request at once; a busy one has already scheduled the step after the current)."""
        for r in self._held:
            sched.add(r)
        self._held = []
        if sched.running or sched.waiting:
            self._held, self._inbox = self._inbox, []
        else:
            for r in self._inbox:
                sched.add(r)
            self._inbox = []

    @property
    def num_inbox(self) -> int:
        """Requests received but not yet visible to the scheduler (async scheduling)."""
        return len(self._inbox) + len(self._held)

    def step(self, now_s: float) -> StepResult:
        """Run one step starting at virtual time `now_s`; its tokens arrive at
        `now_s + duration_s`. Call only when `has_work()`."""
        duration, step, emitted, _done = self.advance()
        events = tuple(
            TokenEvent(r.request_id, r.num_new_output, r.finished, r.num_output == r.num_new_output,
                       "length" if r.finished else None)
            for r in emitted)
        return StepResult(
            start_s=now_s, duration_s=duration, events=events, batch_size=len(step.reqs),
            num_prefill_tokens=step.prefill_tokens, num_decode_tokens=step.decode_seqs,
            kv_usage_frac=self.pool.usage_frac, num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting), num_preempted=step.preempted)

    @property
    def stats(self) -> EngineStats:
        s = self.scheduler
        return EngineStats(
            running=len(s.running), waiting=len(s.waiting), kv_usage_frac=self.pool.usage_frac,
            num_preemptions_total=s.num_preemptions_total,
            prefix_cache_queries_total=s.prefix_queries_tokens,
            prefix_cache_hits_total=s.prefix_hits_tokens,
            prompt_tokens_total=self._prompt_tokens_total,
            generation_tokens_total=self._generation_tokens_total,
            num_gpu_blocks=self.config.num_gpu_blocks, block_size=self.config.block_size,
            spec_decode=self.spec.counters if self.spec is not None else None)


def build_engine(model: str, gpu: str, quantization: str | None, args: Any,
                 calibration: Calibration | None, async_scheduling: bool = True,
                 profile: KernelProfile | None = None,
                 speculative: SpeculativeConfig | None = None, seed: int = 0,
                 layout: NodeLayout | None = None, expert_skew: float = 0.0) -> SimEngine:
    """The simulated replica for `model` on `gpu` with vLLM `EngineArgs` `args`.

    KV pool and limits come from the planner (`plan_memory`), so they equal what
    `servelab plan` prints; step costs from the operator model with the GPU's kernel
    `profile` (None: the shipped one, else the datasheet) and `calibration` (None: the
    shipped residual for the GPU class). `speculative` adds speculative decoding with its
    per-position acceptance (required) and vLLM's rule on asynchronous scheduling
    (kept only for EAGLE-type methods). `layout` places a replica's GPUs in nodes (None:
    one node), so pipeline hops and TP all-reduces that cross nodes go over the fabric.
    `expert_skew`: with expert parallelism, the busiest GPU's extra share of the MoE work.
    """
    from servelab.hardware.catalog import get_gpu
    from servelab.models import load_model
    from servelab.plan import plan_memory

    geometry = load_model(model, quantization)
    spec = get_gpu(gpu)
    draft = None
    if speculative is not None:
        _check_speculative(speculative, args)
        async_scheduling = async_scheduling and speculative.keeps_async_scheduling
        draft = draft_geometry(speculative, geometry)
    mem = plan_memory(geometry, spec, args, draft=draft)
    if not mem.fits:
        raise ServelabError(f"{model} on {spec.name}: {mem.reason}")
    cal = calibration if calibration is not None else default_calibration(spec.name)
    kernels = kernel_times(spec, profile)
    spec_cost = None
    v1 = uses_v1_model_runner(geometry, speculative.method if speculative is not None else None)
    if speculative is not None:
        # the drafter replays the graphs of the engine's sizes (rounded to K + 1 on the V1 runner)
        drafter = (OperatorModel(draft, spec, args, kernels, num_speculative_tokens=speculative.num_speculative_tokens,
                                 v1_runner=v1) if draft is not None else None)
        spec_cost = SpecCost(speculative.num_speculative_tokens, drafter,
                             drafter_graphs=speculative.drafter_on_graphs)
    cost = OperatorCostModel(geometry, spec, args, cal, kernels, spec_cost, async_scheduling, v1,
                             layout, expert_skew)
    config = SimConfig(
        num_gpu_blocks=mem.all_layer_blocks, block_size=mem.block_size,
        max_num_seqs=mem.max_num_seqs, max_num_batched_tokens=mem.max_num_batched_tokens,
        max_model_len=mem.max_model_len, enable_prefix_caching=args.enable_prefix_caching,
        async_scheduling=async_scheduling, memory=mem, speculative=speculative, seed=seed)
    return SimEngine(config, cost)


def _check_speculative(speculative: SpeculativeConfig, args: Any) -> None:
    if speculative.rates() is None:
        raise ServelabError(
            "speculative decoding needs its per-position acceptance in the simulator: "
            "--spec-acceptance 0.8,0.7,... (sim run/serve) or `acceptance:` in the arm's "
            "speculative block (a measured cell's spec_decode_per_position_acceptance_rates)")
    if args.pipeline_parallel_size > 1:
        raise ServelabError("the simulator models speculative decoding at pipeline_parallel_size 1 only")
