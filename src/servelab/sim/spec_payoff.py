"""Where speculative decoding pays, from the cost model: steady-state decode at a batch size.

At concurrency C (every sequence decoding, context L tokens), one step of the baseline
engine gives each sequence one token; one step of the speculative engine gives it
1 + p x sum(acceptance[:k]) tokens on average (p: the share of steps that carry a draft)
and costs the verification of C + p C m_k tokens (m_k: the mean proposal cut at k) plus
the drafter's k forwards, under the engine's rules: a full CUDA graph only when every
sequence carries all k tokens (probability (p s_k)^C, s_k the share of whole proposals),
else piecewise graphs; no asynchronous scheduling for n-gram and draft-model methods.
The speed-up is the ratio of the two times per token; it falls with C because verification adds GEMM rows (compute)
while the weight reads it saves are shared by the whole batch. The crossover (the first
C where it falls below 1) and the best draft length per C therefore come out of the same
kernel times and residual that price every simulated step; nothing here is fitted.

With a `Refill` (a closed loop: each request that finishes is replaced by one whose prompt
the engine prefills inside the decode steps, vLLM's chunked prefill), the steps also carry
the replacements' prefills. At t tokens per sequence per step, C t / L requests finish per
step (L output tokens each), so C t / L prompts of P computed tokens (after prefix-cache
hits) join each step on average. They come whole and the requests finish independently,
so a step carries Poisson(C t / L) prompts, and a step that carries one leaves the full
CUDA graph. Speculation finishes requests t times sooner, so it prefills t times
more per step than its baseline: at high load that is what its gain loses first.

Requests finish independently only where their output lengths differ. Where every request
decodes the same L tokens (a fixed output length, as benchmarks set it with `ignore_eos`),
the C requests that start together finish together, and so do their replacements: the loop
runs in waves, one prefill of C prompts every L / t steps, and the decode steps between
carry no prompt. Measured on an H100 (docs/validation/spec-cross-2026-12-07, `start_times`),
the baseline's waves stay within 13-170 ms at c8-c64, a few steps; speculation's spread
(0.2-1.7 s, about half the period at c32 and c64: its requests gain tokens at different
rates, the first wave's decode times at c32 1.46-2.28 s against the baseline's 1.58-1.64 s),
so pricing both arms as waves is exact for the baseline and an approximation for
speculation. The Poisson alternative prices every prompt at the cells' mean length, which
on a GEMM staircase can land each prompt-carrying step on one slow size (224 prompt tokens
plus 32 x 7 verified rows: M = 448 on the H100).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from servelab.sim.cost import OperatorCostModel
from servelab.sim.scheduler import ScheduledStep
from servelab.speculation import Proposals, tokens_per_step


@dataclass(frozen=True, slots=True)
class Payoff:
    """Speculation at one concurrency: ms per token per sequence with and without it,
    their ratio (> 1 pays), the draft length with the most tokens per second, and the
    tokens one verification step yields with the arm's own draft length."""

    concurrency: int
    base_ms_per_token: float
    spec_ms_per_token: float
    speedup: float
    best_k: int
    tokens_per_step: float


@dataclass(frozen=True, slots=True)
class Refill:
    """A closed loop's replacement requests: per request, `prompt_tokens` computed in
    prefill (after prefix-cache hits) over `cached_tokens` found in the cache, and
    `output_tokens` decoded. `waves`: every request decodes exactly `output_tokens`, so the
    loop's requests finish and are replaced together (see the module's docstring)."""

    prompt_tokens: float
    cached_tokens: float
    output_tokens: float
    waves: bool = False

    def __post_init__(self) -> None:
        if not (self.output_tokens > 0 and self.prompt_tokens >= 0 and self.cached_tokens >= 0):
            raise ValueError(f"refill needs output tokens > 0 and prompt tokens >= 0: {self}")


@dataclass(frozen=True, slots=True)
class Prefills:
    """The prefill work one step carries: tokens, prompts, and the attended context as
    `ScheduledStep.prefill_context_tokens` sums it."""

    tokens: int
    prompts: int
    context_tokens: int


NO_PREFILL = Prefills(0, 0, 0)


# Poisson shares below this are dropped (and the rest renormalised); at most this many
# prompt counts are priced per step (wider windows are pooled in equal runs of counts).
_MIN_SHARE = 1e-4
_MAX_COUNTS = 25


def steady_prefills(refill: Refill, seqs: int, tokens_per_seq: float) -> tuple[tuple[float, Prefills], ...]:
    """(share of steps, what such a step prefills) in a closed loop of `seqs` decodes
    yielding `tokens_per_seq` tokens each per step: r = seqs x tokens_per_seq /
    output_tokens prompts start per step on average, each request finishing independently
    of the others, so the whole prompts a step carries are Poisson(r): the counts within
    six standard deviations of r, from the log of the mass (no underflow at large r),
    pooled into at most `_MAX_COUNTS` runs. The step budget is not applied: a prompt the
    engine splits over several steps (chunked prefill) costs about the same time, and the
    payoff is time per token."""
    rate = seqs * tokens_per_seq / refill.output_tokens
    if rate <= 0.0 or refill.prompt_tokens < 1.0:
        return ((1.0, NO_PREFILL),)
    spread = 6.0 * math.sqrt(rate) + 1.0
    lo, hi = max(0, math.floor(rate - spread)), math.ceil(rate + spread)
    log_rate = math.log(rate)
    mass = [(j, math.exp(j * log_rate - rate - math.lgamma(j + 1))) for j in range(lo, hi + 1)]
    stride = math.ceil(len(mass) / _MAX_COUNTS)
    pooled = []
    for i in range(0, len(mass), stride):
        run = mass[i:i + stride]
        weight = sum(w for _, w in run)
        pooled.append((weight, round(sum(j * w for j, w in run) / weight) if weight > 0 else run[0][0]))
    kept = [(w, j) for w, j in pooled if w >= _MIN_SHARE]
    total = sum(w for w, _ in kept)
    return tuple((w / total, _prompts(refill, j)) for w, j in kept)


def _prompts(refill: Refill, count: int) -> Prefills:
    """`count` of the loop's replacement prompts, prefilled whole in one step."""
    n, cached = round(refill.prompt_tokens), round(refill.cached_tokens)
    return Prefills(count * n, count, count * (cached * n + n * (n + 1) // 2))


def wave_s(cost: OperatorCostModel, seqs: int, refill: Refill, tokens_per_seq: float) -> float:
    """Seconds a loop in waves adds to each of its decode steps: the prefill of its `seqs`
    replacement prompts, once every `refill.output_tokens` / `tokens_per_seq` steps (none
    where the prefix cache holds every prompt token, as in `steady_prefills`). The wave is
    priced as one step: the engine splits one larger than its token budget over several,
    each with its own step overhead (and, speculating, its per-step cost), so at high loads
    this prices the wave a few step overheads short."""
    if refill.prompt_tokens < 1.0:
        return 0.0
    prefill = cost.step_duration_s(_decode_step(0, 0.0, 0, 0, _prompts(refill, seqs)))
    return prefill * tokens_per_seq / refill.output_tokens


def _decode_step(seqs: int, context: float, drafting: int, draft_tokens: int,
                 pre: Prefills = NO_PREFILL) -> ScheduledStep:
    # all `seqs` decode beside the prefills: the loop's prompts join the running batch,
    # they do not take decode slots (a closed loop of C in flight decodes C - j only while
    # j of them prefill; at C >> j the difference is below the model's resolution)
    return ScheduledStep(reqs=[], num_new=[], decode_seqs=seqs,
                         decode_context_tokens=int(seqs * context), prefill_tokens=pre.tokens,
                         prefill_context_tokens=pre.context_tokens, preempted=0,
                         prefill_seqs=pre.prompts, draft_tokens=draft_tokens, drafting_seqs=drafting)


class PayoffModel:
    """Steady-state decode payoff of a speculative engine against its baseline."""

    def __init__(self, base: OperatorCostModel, spec: OperatorCostModel,
                 proposals: Proposals, proposal_rate: float = 1.0) -> None:
        if spec.spec is None:
            raise ValueError("the speculative cost model has no SpecCost")
        self.base = base
        self.spec = spec
        self.k = spec.spec.num_speculative_tokens
        self.proposals = proposals
        self.rates = tuple(s * a for s, a in zip(proposals.survival, proposals.accept))[: self.k]
        self.proposal_rate = proposal_rate
        self._by_k: dict[int, OperatorCostModel] = {self.k: spec}

    def _cost(self, k: int) -> OperatorCostModel:
        got = self._by_k.get(k)
        if got is None:
            got = copy.copy(self.spec)
            got.spec = replace(self.spec.spec, num_speculative_tokens=k)  # type: ignore[arg-type]
            got.ops = self.spec.ops.with_draft_length(k)  # vLLM's graph sizes follow K
            self._by_k[k] = got
        return got

    def spec_step_s(self, seqs: int, context: float, k: int, refill: Refill | None = None) -> float:
        """Expected seconds of one verification step: a uniform batch (every sequence with a
        whole k-token proposal, on a full graph) with its probability, else a piecewise one
        carrying the draft tokens and drafting sequences expected given that it is not;
        with `refill`, a share of the steps carries the replacements' prefills (piecewise,
        with the expected drafts, or in waves their prefill spread over the steps between)."""
        cost = self._cost(k)
        whole = self.proposal_rate * self.proposals.full_share(k)
        p_uniform = whole ** seqs
        uniform = cost.step_duration_s(_decode_step(seqs, context, seqs, seqs * k))
        mean_drafting = self.proposal_rate * seqs
        mean_tokens = mean_drafting * self.proposals.mean_tokens(k)
        if p_uniform >= 1.0:
            decode = uniform
        else:
            # E[x] = p_u x (x of the uniform batch) + (1 - p_u) x E[x | not uniform]
            drafting = min(seqs, round((mean_drafting - p_uniform * seqs) / (1.0 - p_uniform)))
            tokens = round((mean_tokens - p_uniform * seqs * k) / (1.0 - p_uniform))
            # a batch that is not uniform misses at least one draft token
            tokens = max(0, min(tokens, drafting * k - (drafting == seqs)))
            mixed = cost.step_duration_s(_decode_step(seqs, context, drafting, tokens))
            decode = p_uniform * uniform + (1.0 - p_uniform) * mixed
        if refill is None:
            return decode
        if refill.waves:
            return decode + wave_s(cost, seqs, refill, self.tokens_per_step(k))
        drafting, draft_tokens = round(mean_drafting), round(mean_tokens)
        return _mixture(decode, lambda pre: cost.step_duration_s(
            _decode_step(seqs, context, drafting, draft_tokens, pre)),
            steady_prefills(refill, seqs, self.tokens_per_step(k)))

    def base_step_s(self, seqs: int, context: float, refill: Refill | None = None) -> float:
        """Expected seconds of one baseline step (one token per sequence), with `refill`'s
        prefills on a share of the steps (in waves: spread over the steps between)."""
        decode = self.base.step_duration_s(_decode_step(seqs, context, 0, 0))
        if refill is None:
            return decode
        if refill.waves:
            return decode + wave_s(self.base, seqs, refill, 1.0)
        return _mixture(decode, lambda pre: self.base.step_duration_s(_decode_step(seqs, context, 0, 0, pre)),
                        steady_prefills(refill, seqs, 1.0))

    def tokens_per_step(self, k: int) -> float:
        """Tokens one sequence gets per verification step with draft length k."""
        # with a draft on a share p of the steps, position i yields p x rate[i] tokens
        return tokens_per_step(tuple(self.proposal_rate * r for r in self.rates), k)

    def at(self, concurrency: int, context: float, refill: Refill | None = None) -> Payoff:
        """The payoff at `concurrency` sequences of `context` tokens (with `refill`: a
        closed loop's replacement prefills in the steps too)."""
        base = self.base_step_s(concurrency, context, refill)
        best_k, best, own_s = self.k, 0.0, 0.0
        for k in range(1, self.k + 1):
            step_s = self.spec_step_s(concurrency, context, k, refill)
            rate = self.tokens_per_step(k) / step_s
            if rate > best * (1 + 1e-9):
                best_k, best = k, rate
            if k == self.k:
                own_s = step_s
        spec_ms = own_s / self.tokens_per_step(self.k) * 1e3
        base_ms = base * 1e3
        return Payoff(concurrency, base_ms, spec_ms, base_ms / spec_ms, best_k, self.tokens_per_step(self.k))

    def crossover(self, context: float, max_concurrency: int, refill: Refill | None = None) -> int | None:
        """The smallest concurrency at which speculation stops paying (speed-up < 1), None
        when it pays up to `max_concurrency`; 1 when it never pays. Every batch is priced:
        the speed-up is not monotone in the batch where steps pass a CUDA-graph size, so a
        bisection could step over a dip."""
        for c in range(1, max_concurrency + 1):
            if self.speedup(c, context, refill) < 1.0:
                return c
        return None

    def speedup(self, concurrency: int, context: float, refill: Refill | None = None) -> float:
        """`at(...).speedup` alone (the crossover's scan): the arm's own draft length, no
        search over K."""
        spec_s = self.spec_step_s(concurrency, context, self.k, refill) / self.tokens_per_step(self.k)
        return self.base_step_s(concurrency, context, refill) / spec_s


def _mixture(decode_s: float, with_prefill_s: Callable[[Prefills], float],
             shares: tuple[tuple[float, Prefills], ...]) -> float:
    """Expected step seconds over `shares`: `decode_s` where a step carries no prompt."""
    return sum(share * (with_prefill_s(pre) if pre.prompts else decode_s) for share, pre in shares)
