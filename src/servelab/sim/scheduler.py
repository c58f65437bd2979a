"""vLLM V1's scheduling policy on a virtual clock: who runs in the next step, with how many tokens.

One step (`Scheduler.schedule`), as vLLM V1's `Scheduler.schedule()` does it:
1. running requests in admission order, each asking for all its not-yet-computed tokens
   (1 for a decode, the rest of a chunked prefill) capped by the remaining token budget
   (`max_num_batched_tokens`); a request that cannot get a KV block for them preempts the
   most recently admitted running request (recompute: its blocks are freed, its computed
   tokens forgotten, it goes back to the *front* of the waiting queue), repeatedly, until
   it fits or it preempted itself;
2. only if nothing was preempted in this step: waiting requests FCFS while budget and
   `max_num_seqs` allow; a prefix-cache hit skips its full blocks (a request whose prompt KV
   was transferred in, `preloaded`, skips those tokens the same way); the prompt is chunked to
   the remaining budget; a request whose blocks cannot be allocated stops admission
   (head-of-line blocking, as vLLM).
After the step (`Scheduler.finish_step`), every request whose known tokens are all computed
samples one token; a request with `max_tokens` outputs finishes and frees its blocks.

Speculative decoding (vLLM V1's rule): a decoding request with a draft (`num_draft`, set
by the engine's proposer) asks for 1 + draft tokens, capped by the token budget and
max_model_len, and gets KV slots for all of them; after verification it emits its accepted
draft tokens plus one (`accepted`, set by the engine), capped at `max_tokens`, and the
rejected drafts' slots are given back to be overwritten (`num_computed` steps back).

Per-request state lives in `SchedRequest` (slots, ints); nothing is allocated per token.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from servelab.sim.blocks import BlockPool
from servelab.sim.native import by_fields


class SchedRequest:
    """The scheduler's view of one request (mutable, internal to `servelab.sim`)."""

    __slots__ = (
        "request_id", "prompt_len", "max_tokens", "arrival_s", "hashes",
        "num_output", "num_computed", "blocks", "num_registered", "finished", "tag",
        "num_preemptions", "num_draft", "sched_draft", "accepted", "num_new_output", "proposals",
        "preloaded",
    )

    def __init__(self, request_id: str, prompt_len: int, max_tokens: int, arrival_s: float,
                 hashes: list[int], tag: int = -1) -> None:
        self.request_id = request_id
        self.prompt_len = prompt_len
        self.max_tokens = max_tokens
        self.arrival_s = arrival_s
        self.hashes = hashes            # chained hashes of the prompt's full blocks
        self.num_output = 0             # tokens sampled so far
        self.num_computed = 0           # tokens whose KV is in the cache
        self.blocks: list[int] = []
        self.num_registered = 0         # leading blocks registered in the prefix cache
        self.finished = False
        self.tag = tag                  # the driver's handle (e.g. a record index; -1: none)
        self.num_preemptions = 0
        self.num_draft = 0              # draft tokens proposed for the next step
        self.sched_draft = 0            # draft tokens scheduled in the current step
        self.accepted = 0               # of those, accepted by the verification
        self.num_new_output = 0         # tokens emitted by the last step
        self.proposals = 0              # times the proposer was asked for its next draft
        self.preloaded = 0              # prompt tokens whose KV arrives from elsewhere (P/D)


@dataclass(frozen=True, slots=True)
class SchedulerLimits:
    """vLLM's scheduler knobs (same names as its flags)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_chunked_prefill: bool = True

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return by_fields(self)  # (compiled: `servelab.sim.native.by_fields`)


@dataclass(slots=True)
class ScheduledStep:
    """What one step computes: parallel lists of requests and their new token counts.

    `decode_context_tokens` sums the context each decode attends to; `prefill_context_tokens`
    sums, over prefill chunks, chunk tokens x attended context (causal: c x n + n(n+1)/2 for a
    chunk of n tokens after c cached ones), as the planner's `StepShape` defines it.
    """

    reqs: list[SchedRequest]
    num_new: list[int]
    decode_seqs: int
    decode_context_tokens: int
    prefill_tokens: int
    prefill_context_tokens: int
    preempted: int
    prefill_seqs: int = 0  # requests in the step with prompt tokens (each samples one logit row)
    draft_tokens: int = 0  # draft tokens verified, on top of one token per decode
    drafting_seqs: int = 0  # decodes that carry a draft


class Scheduler:
    """Waiting and running queues over one `BlockPool`."""

    def __init__(self, limits: SchedulerLimits, pool: BlockPool) -> None:
        self.limits = limits
        self.pool = pool
        self.waiting: deque[SchedRequest] = deque()
        self.running: list[SchedRequest] = []
        self.num_preemptions_total = 0
        self.prefix_queries_tokens = 0
        self.prefix_hits_tokens = 0
        self._preempted_now = 0

    def add(self, req: SchedRequest) -> None:
        self.waiting.append(req)

    def remove(self, req: SchedRequest) -> None:
        """Drop a request wherever it is (abort), freeing its blocks."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self._release(req)
        req.finished = True

    def _release(self, req: SchedRequest) -> None:
        if req.blocks:
            self.pool.free(req.blocks)
        req.blocks = []
        req.num_registered = 0

    def _allocate(self, req: SchedRequest, num_new: int, hit: list[int]) -> bool:
        """vLLM's `allocate_slots`: room for `num_new` more tokens after the hit blocks."""
        pool, bs = self.pool, self.pool.block_size
        total = req.num_computed + len(hit) * bs + num_new
        need = -(-total // bs) - len(req.blocks) - len(hit)
        if hit:
            if need > pool.num_free_blocks - pool.num_evictable(hit):
                return False
            pool.touch(hit)
            req.blocks.extend(hit)
        elif need > pool.num_free_blocks:
            return False
        if need > 0:
            req.blocks.extend(pool.allocate(need))
        full = min(len(req.hashes), total // bs)
        if pool.enable_caching and full > req.num_registered:
            blocks, hashes = req.blocks, req.hashes
            for i in range(req.num_registered, full):
                pool.register(blocks[i], hashes[i])
            req.num_registered = full
        return True

    def _allocate_or_preempt(self, req: SchedRequest, n: int) -> bool:
        """Allocate for `req`, preempting the latest admitted running requests until it fits;
        False when `req` itself was preempted (not counted in `_preempted_now`)."""
        running = self.running
        while not self._allocate(req, n, []):
            victim = running.pop()
            self._release(victim)
            victim.num_computed = 0
            victim.num_draft = 0
            victim.preloaded = 0  # its transferred KV is gone: recomputed here
            victim.num_preemptions += 1
            self.waiting.appendleft(victim)
            if victim is req:
                return False
            self._preempted_now += 1
        return True

    def schedule(self, stepwise: bool = False) -> ScheduledStep:
        """Choose the next step's batch (see the module docstring for the policy).

        Unless `stepwise`, a batch whose running requests are all one-token decodes that fit
        their blocks takes a shortcut (`_decode_context`) to the same step."""
        lim = self.limits
        if not stepwise and self.running and len(self.running) <= lim.max_num_batched_tokens:
            d_ctx = self._decode_context()
            if d_ctx >= 0:
                # what the loop below gives such a batch: every request one decode token,
                # no allocation, no preemption (`_preempted_now` is 0 between steps); then
                # admission as usual
                reqs: list[SchedRequest] = self.running[:]
                d_seqs = len(reqs)
                nums: list[int] = [1] * d_seqs
                if not self.waiting:  # (`_admit` would admit nothing)
                    return ScheduledStep(reqs, nums, d_seqs, d_ctx, 0, 0, 0, 0, 0, 0)
                p_tok, p_ctx = self._admit(reqs, nums, lim.max_num_batched_tokens - d_seqs, 0, 0)
                return ScheduledStep(reqs, nums, d_seqs, d_ctx, p_tok, p_ctx, 0, len(reqs) - d_seqs, 0, 0)
        budget = lim.max_num_batched_tokens
        reqs = []
        nums = []
        d_seqs = d_ctx = p_tok = p_ctx = drafts = drafting = 0
        preempted = 0
        max_len = lim.max_model_len
        running = self.running
        bs = self.pool.block_size
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            n = req.prompt_len + req.num_output - req.num_computed
            draft = 0
            if n == 1 and req.num_draft and req.num_computed >= req.prompt_len:
                draft = min(req.num_draft, budget - 1, max_len - 1 - req.num_computed - 1)
                draft = max(draft, 0)
                n += draft
            if n > budget:
                n = budget
            if n <= 0:
                i += 1
                continue
            # Most decodes fit in the request's last block: skip the allocator then.
            fits = (req.num_computed + n <= len(req.blocks) * bs
                    and req.num_registered >= len(req.hashes))
            if not fits and not self._allocate_or_preempt(req, n):
                preempted += 1
                break  # the request preempted itself: nothing after it can run either
            reqs.append(req)
            nums.append(n)
            budget -= n
            if n == 1 + draft and req.num_computed >= req.prompt_len:
                d_seqs += 1
                d_ctx += req.num_computed + 1
                if draft:
                    req.sched_draft = draft
                    drafts += draft
                    drafting += 1
            else:
                p_tok += n
                p_ctx += n * req.num_computed + n * (n + 1) // 2
            i += 1
        preempted += self._preempted_now
        self._preempted_now = 0
        self.num_preemptions_total += preempted
        if not preempted:
            p_tok, p_ctx = self._admit(reqs, nums, budget, p_tok, p_ctx)
        return ScheduledStep(reqs, nums, d_seqs, d_ctx, p_tok, p_ctx, preempted, len(reqs) - d_seqs,
                             drafts, drafting)

    def _decode_context(self) -> int:
        """The decode context tokens of the running batch (`ScheduledStep.
        decode_context_tokens`) when every running request asks for exactly one decode token
        (all its known tokens but the last computed, no draft, past its prompt) with nothing
        left to register, and its blocks hold that token or a free block can take it; -1
        when any does not, and `schedule` takes its general loop. A request whose last
        block is full gets one new block here, in running order, as `_allocate` gives it;
        when -1 follows, the general loop finds those requests fitting and goes on from
        the same pool."""
        pool = self.pool
        bs = pool.block_size
        d_ctx = 0
        for r in self.running:
            nc = r.num_computed
            if (nc + 1 != r.prompt_len + r.num_output or nc < r.prompt_len or r.num_draft
                    or r.num_registered < len(r.hashes)):
                return -1
            if nc >= len(r.blocks) * bs:
                if not pool.num_free_blocks:
                    return -1  # the general loop preempts
                r.blocks.extend(pool.allocate(1))
            d_ctx += nc + 1
        return d_ctx

    def _admit(self, reqs: list[SchedRequest], nums: list[int], budget: int,
               p_tok: int, p_ctx: int) -> tuple[int, int]:
        lim, pool, bs = self.limits, self.pool, self.pool.block_size
        waiting, running = self.waiting, self.running
        while waiting and budget > 0 and len(running) < lim.max_num_seqs:
            req = waiting[0]
            num_tokens = req.prompt_len + req.num_output
            if req.preloaded:
                # KV moved in from a prefill replica: computed, but its blocks are new here
                hit, base = [], req.preloaded
            else:
                hit = pool.lookup(req.hashes, (num_tokens - 1) // bs) if pool.enable_caching else []
                base = len(hit) * bs
            n = num_tokens - base
            if n > budget:
                if not lim.enable_chunked_prefill:
                    break
                n = budget
            req.num_computed = req.preloaded  # what _allocate counts besides the hit
            if not self._allocate(req, n, hit):
                req.num_computed = 0
                break
            waiting.popleft()
            running.append(req)
            if pool.enable_caching and not req.preloaded:
                self.prefix_queries_tokens += num_tokens
                self.prefix_hits_tokens += len(hit) * bs
            req.num_computed = base
            reqs.append(req)
            nums.append(n)
            budget -= n
            p_tok += n
            p_ctx += n * req.num_computed + n * (n + 1) // 2
        return p_tok, p_ctx

    def finish_step(self, step: ScheduledStep,
                    stepwise: bool = False) -> tuple[list[SchedRequest], list[SchedRequest]]:
        """Apply a computed step: returns (requests that sampled tokens, those that finished);
        each emitted request's `num_new_output` says how many (1 + accepted drafts).

        Unless `stepwise`, a step without prefill tokens and drafts (every request one
        decode token, each short of its max_tokens) takes a shortcut to the same updates."""
        emitted: list[SchedRequest]
        done: list[SchedRequest] = []
        if not stepwise and not step.prefill_tokens and not step.draft_tokens:
            emitted = step.reqs[:]
            for req in emitted:
                req.num_computed += 1
                out = req.num_output + 1
                req.num_output = out
                req.num_new_output = 1
                if out >= req.max_tokens:
                    done.append(req)
            self._retire(done)
            return emitted, done
        emitted = []
        for req, n in zip(step.reqs, step.num_new):
            req.num_computed += n
            draft = req.sched_draft
            if req.num_computed >= req.prompt_len + req.num_output + draft:
                k = 1
                if draft:
                    a = req.accepted
                    req.num_computed -= draft - a  # rejected drafts' slots are overwritten
                    k += a
                    req.sched_draft = req.accepted = 0
                k = min(k, req.max_tokens - req.num_output)
                req.num_output += k
                req.num_new_output = k
                emitted.append(req)
                if req.num_output >= req.max_tokens:
                    done.append(req)
        self._retire(done)
        return emitted, done

    def _retire(self, done: list[SchedRequest]) -> None:
        """Finished requests leave the running queue and free their blocks."""
        if done:
            running = self.running
            for req in done:
                running.remove(req)
                self._release(req)
                req.finished = True
