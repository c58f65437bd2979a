"""Speculative decoding in the simulated engine: who drafts, how many drafts survive.

vLLM V1's cycle, one step: the target verifies every running sequence's draft (its
scheduled tokens are 1 + the draft's), the rejection sampler keeps the longest accepted
prefix and samples one token after it, and the proposer drafts the next K tokens for every
sequence that continues (a draft model or an EAGLE head on the GPU in the same step; n-gram
lookup on the CPU). This module owns the decisions (the engine applies them, the cost model
prices them):
- `propose`: the draft length of a sequence's next step: 0 when an n-gram proposer finds
  no match, else drawn from the proposals' length survival (an n-gram match can run out
  before K tokens; a batch is uniform, and replays a full CUDA graph, only when every
  sequence carries all K). Misses and short proposals are drawn at random (the arm's
  `proposal_rate`) or, with `warmup_steps` / `short_steps`, come first in each sequence's
  life (an n-gram's text must recur before it matches);
- `verify`: the accepted length of one draft, from the acceptance of the positions it
  has (one uniform draw per draft, `servelab.speculation.accepted_length`);
- the counters vLLM exports (`vllm:spec_decode_*`), so a simulated cell reports acceptance
  as a measured one does.
The random stream is the engine's own (seeded), never a global one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from servelab.speculation import Proposals, SpeculativeConfig, accepted_length


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """vLLM's speculative-decoding counters (totals since the engine started)."""

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: tuple[int, ...]


class SpecDecoder:
    """Draft lengths and accepted lengths for one simulated replica."""

    def __init__(self, config: SpeculativeConfig, proposals: Proposals, seed: int) -> None:
        self.k = config.num_speculative_tokens
        self.survival = proposals.survival  # K of each
        self.accept = proposals.accept
        self.proposal_rate = config.proposal_rate
        self._first = ((config.warmup_steps or 0.0, config.short_steps or 0.0)
                       if config.misses_first else None)
        self._rng = random.Random(seed)
        self._drafts = 0
        self._draft_tokens = 0
        self._accepted = 0
        self._per_pos = [0] * self.k

    def propose(self, age: int) -> int:
        """Draft tokens for one sequence's next step; `age`: the proposals it had before."""
        if self._first is not None:
            return self._propose_in_order(age)
        if self.proposal_rate < 1.0 and self._rng.random() >= self.proposal_rate:
            return 0
        if self.survival[-1] >= 1.0:
            return self.k
        return accepted_length(self.survival, self._rng.random())

    def _propose_in_order(self, age: int) -> int:
        # Steps [0, w0) carry none and [w0, w0 + w1) a short proposal; a fractional bound
        # makes the step it falls in one or the other with that probability.
        assert self._first is not None
        w0, w1 = self._first
        u = self._rng.random()
        if u < min(1.0, max(0.0, w0 - age)):
            return 0
        if u < min(1.0, max(0.0, w0 + w1 - age)):
            return self._short()
        return self.k

    def _short(self) -> int:
        """A proposal shorter than K, its length drawn from the survival below K."""
        s = self.survival
        full = s[-1]
        if full >= 1.0:
            return self.k
        u = full + (1.0 - full) * self._rng.random()  # uniform over the short part
        return accepted_length(s, u)

    def verify(self, drafted: int) -> int:
        """Accepted draft tokens of a `drafted`-token draft (counted as vLLM counts them)."""
        n = accepted_length(self.accept if drafted == self.k else self.accept[:drafted], self._rng.random())
        self._drafts += 1
        self._draft_tokens += drafted
        self._accepted += n
        for i in range(n):
            self._per_pos[i] += 1
        return n

    @property
    def counters(self) -> SpecCounters:
        return SpecCounters(self._drafts, self._draft_tokens, self._accepted, tuple(self._per_pos))
