"""Speculative decoding: an arm's speculative config, and the acceptance arithmetic every
consumer shares (the engine adapters render the config, the planner adds the draft's
memory, the simulator runs verification steps, the report advises K).

Acceptance is given as vLLM counts it: ``acceptance[i]`` is the *unconditional* probability
that draft position i (0-based) is accepted, i.e. that the first i + 1 draft tokens of a
proposal all are (vLLM's `spec_decode_num_accepted_tokens_per_pos_total[i] /
num_drafts_total`; non-increasing). A verification step of one sequence emits its accepted
draft tokens plus one token the target samples itself, so a proposal of K tokens yields
1 + sum(acceptance[:K]) tokens on average.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from servelab.errors import ServelabError
from servelab.models import ModelGeometry, load_model

SpecMethod = Literal["ngram", "draft_model", "eagle", "eagle3", "mtp", "suffix"]

# Methods whose drafts come from a model (a small LM, an EAGLE head, an MTP module), which
# vLLM loads next to the target; n-gram and suffix decoding draft on the CPU from the text.
MODEL_METHODS: frozenset[str] = frozenset({"draft_model", "eagle", "eagle3", "mtp"})
# vLLM 0.25.1 (config/vllm.py) keeps asynchronous scheduling only for EAGLE-type methods
# (eagle, eagle3, mtp, ...); for the others it logs "Async scheduling not supported with
# <method>-based speculative decoding and will be disabled."
ASYNC_METHODS: frozenset[str] = frozenset({"eagle", "eagle3", "mtp"})
# vLLM 0.25.1 gives the drafter CUDA graphs (piecewise) for these methods only: the model
# runner initialises the drafter's graph keys when `use_eagle()`; a draft model's forwards
# find no key and launch every kernel (an engine trace of a draft-model step shows one graph
# launch, the target's, and ~1,400 kernel launches for the drafter's four forwards).
DRAFTER_GRAPH_METHODS: frozenset[str] = ASYNC_METHODS

# Keys of this record that only servelab reads (the simulator's inputs); the rest are
# vLLM's `--speculative-config` keys, passed as they are.
SERVELAB_KEYS = frozenset({"acceptance", "proposal_rate", "proposal_tokens", "warmup_steps", "short_steps"})
# Methods whose proposals come from the sequence's own text: they miss, or run short, until
# its text recurs, so a sequence's misses come first. Measured (vLLM 0.25.1's CUDA-graph
# metrics, n-gram K = 6 on an H200, docs/validation/spec-steps-2026-12-02): each request's
# first two decode steps carry no draft, the next two a 2-token one, every later one all 6.
TEXT_METHODS: frozenset[str] = frozenset({"ngram", "suffix"})


class SpeculativeConfig(BaseModel):
    """An arm's speculative decoding, in vLLM's `--speculative-config` keys.

    `acceptance` (per-position acceptance, see the module doc) and `proposal_rate` (the
    fraction of a sequence's decode steps that carry a proposal: n-gram drafting proposes
    only when the text's last n-gram recurs) are the simulator's inputs; a measured cell
    supplies both (`vllm:spec_decode_*` counters). `rejection_sample_method: synthetic`
    with `synthetic_acceptance_rates` makes vLLM accept drafts at those rates whatever the
    draft says (vLLM >= 0.25: how a dummy-weight model measures a realistic acceptance);
    the simulator then uses those rates.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: SpecMethod
    num_speculative_tokens: int = Field(ge=1, le=32)
    model: str | None = Field(None, description="draft model, EAGLE head or MTP weights (path or name)")
    prompt_lookup_min: int | None = Field(None, ge=1)
    prompt_lookup_max: int | None = Field(None, ge=1)
    draft_tensor_parallel_size: int | None = Field(None, ge=1)
    rejection_sample_method: Literal["standard", "synthetic", "block"] | None = None
    synthetic_acceptance_rates: list[float] | None = None
    acceptance: list[float] | None = None
    proposal_rate: float = Field(1.0, gt=0, le=1)
    proposal_tokens: float | None = Field(
        None, ge=1, description="mean tokens per proposal (vLLM's draft tokens / drafts); "
        "default num_speculative_tokens: every proposal whole")
    warmup_steps: float | None = Field(None, ge=0, description=(
        "decode steps at the start of each sequence without a proposal; with short_steps, "
        "a sequence's misses come first instead of at random (proposal_rate then unused)"))
    short_steps: float | None = Field(None, ge=0, description=(
        "the decode steps after warmup_steps whose proposals are shorter than K"))

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeConfig:
        if self.method in ("draft_model", "eagle", "eagle3") and self.model is None:
            raise ValueError(f"method {self.method} needs `model` (the draft's path or name)")
        if self.method != "ngram" and (self.prompt_lookup_min or self.prompt_lookup_max):
            raise ValueError("prompt_lookup_min/max apply to method ngram only")
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"prompt_lookup_min {lo} exceeds prompt_lookup_max {hi}")
        synthetic = self.rejection_sample_method == "synthetic"
        if synthetic != (self.synthetic_acceptance_rates is not None):
            raise ValueError("synthetic_acceptance_rates goes with rejection_sample_method: synthetic")
        if self.proposal_tokens is not None and self.proposal_tokens > self.num_speculative_tokens + 1e-9:
            raise ValueError(f"proposal_tokens {self.proposal_tokens} exceeds num_speculative_tokens "
                             f"{self.num_speculative_tokens}")
        for key in ("synthetic_acceptance_rates", "acceptance"):
            rates = getattr(self, key)
            if rates is not None:
                check_rates(rates, self.num_speculative_tokens, key)
        return self

    def engine_json(self) -> str:
        """vLLM's `--speculative-config` value: this record less servelab's own keys."""
        data = self.model_dump(exclude_none=True, exclude=set(SERVELAB_KEYS))
        return json.dumps(data, separators=(",", ":"))

    @property
    def uses_draft_model(self) -> bool:
        return self.method in MODEL_METHODS

    @property
    def keeps_async_scheduling(self) -> bool:
        """Whether vLLM 0.25.1 keeps asynchronous scheduling with this method."""
        return self.method in ASYNC_METHODS

    @property
    def drafter_on_graphs(self) -> bool:
        """Whether vLLM 0.25.1 replays CUDA graphs (piecewise) for the drafter's forwards."""
        return self.method in DRAFTER_GRAPH_METHODS

    def with_measured(self, per_position: tuple[float, ...] | list[float],
                      proposal_rate: float, proposal_tokens: float | None = None,
                      drafts_per_seq: float | None = None) -> SpeculativeConfig:
        """This config with an acceptance vLLM counted (per position, cut or padded with 0
        to K, rounding noise that rises with the position flattened), its share of drafted
        decode steps and its mean tokens per proposal, for the simulator to draw from;
        synthetic sampling keys are dropped (what they enforced is now in the counted
        rates). For a text method (`TEXT_METHODS`) with `drafts_per_seq` (drafts per
        completed request), the steps without a draft and those with a short proposal
        become each sequence's first ones (`warmup_steps`, `short_steps`)."""
        k = self.num_speculative_tokens
        rates: list[float] = []
        for r in list(per_position)[:k]:
            rates.append(min(float(r), rates[-1]) if rates else float(r))
        rates += [0.0] * (k - len(rates))
        data = self.model_dump(exclude={"rejection_sample_method", "synthetic_acceptance_rates"})
        tokens = None if proposal_tokens is None else min(float(k), max(1.0, proposal_tokens))
        rate = min(1.0, max(proposal_rate, 1e-6))
        order: dict[str, float | None] = {"warmup_steps": None, "short_steps": None}
        if drafts_per_seq is not None and self.method in TEXT_METHODS:
            whole = split_acceptance(rates, float(k) if tokens is None else tokens).full_share(k)
            order = {"warmup_steps": drafts_per_seq * (1.0 / rate - 1.0),
                     "short_steps": drafts_per_seq * (1.0 - whole)}
        return SpeculativeConfig.model_validate(
            {**data, "acceptance": rates, "proposal_rate": rate, "proposal_tokens": tokens, **order})

    @property
    def misses_first(self) -> bool:
        """Whether a sequence's steps without a proposal and its short proposals come first
        (`warmup_steps` / `short_steps` given) rather than at random."""
        return self.warmup_steps is not None or self.short_steps is not None

    def proposals(self) -> Proposals | None:
        """How long proposals are and how their positions are accepted (None when the
        acceptance is unknown): `split_acceptance` of the rates and `proposal_tokens`."""
        rates = self.rates()
        if rates is None:
            return None
        k = self.num_speculative_tokens
        return split_acceptance(rates, float(k) if self.proposal_tokens is None else self.proposal_tokens)

    def rates(self) -> tuple[float, ...] | None:
        """The per-position acceptance the simulator draws from: the synthetic rates vLLM
        enforces, else `acceptance`; None when neither is known."""
        if self.synthetic_acceptance_rates is not None:
            return tuple(self.synthetic_acceptance_rates)
        return tuple(self.acceptance) if self.acceptance is not None else None


@dataclasses.dataclass(frozen=True, slots=True)
class Proposals:
    """A proposer's draft lengths and the verifier's acceptance, position by position:
    `survival[i]` = P(a proposal has more than i tokens) (survival[0] = 1: vLLM counts
    only non-empty drafts), `accept[i]` = P(its first i + 1 tokens are accepted | it has
    them). Their product is vLLM's per-position counter."""

    survival: tuple[float, ...]
    accept: tuple[float, ...]

    def full_share(self, k: int) -> float:
        """The share of proposals that carry all k tokens (k <= K)."""
        return self.survival[k - 1]

    def mean_tokens(self, k: int) -> float:
        """Mean tokens of a proposal cut at k."""
        return float(sum(self.survival[:k]))


def split_acceptance(per_position: tuple[float, ...] | list[float], proposal_tokens: float) -> Proposals:
    """Split vLLM's per-position counts p[i] into proposal survival s[i] and acceptance
    a[i] (p = s x a) so that the mean proposal length sum(s) is `proposal_tokens`.

    The counters tell how often position i was accepted and how many tokens were proposed,
    not why a later position was missing (the proposal ended, or the verifier rejected
    it). Each step's drop p[i] / p[i-1] = q is shared as s[i] / s[i-1] = q^t and
    a[i] / a[i-1] = q^(1-t), one t in [0, 1] for all positions, found by bisection:
    t = 1 puts every drop on short proposals (an n-gram match that runs out: dummy
    weights give p = 1, 1, .895, .895, .895, .895 with 5.58 tokens per proposal, i.e.
    10.5 % of proposals have 2 tokens), t = 0 on rejection (a model's drafts of full
    length). Both sequences come out non-increasing and their product is p exactly."""
    k = len(per_position)
    p = [max(float(x), 1e-12) for x in per_position]

    def survival(t: float) -> list[float]:
        s = [1.0]
        for i in range(1, k):
            s.append(s[-1] * min(1.0, p[i] / p[i - 1]) ** t)
        return s

    target = min(float(k), max(1.0, proposal_tokens))
    lo, hi = 0.0, 1.0  # sum(survival(t)) falls from K at t = 0 to sum(p) / p[0] at t = 1
    if sum(survival(hi)) >= target:
        lo = hi
    else:
        for _ in range(60):
            mid = (lo + hi) / 2
            if sum(survival(mid)) > target:
                lo = mid
            else:
                hi = mid
    s = survival(lo)
    return Proposals(tuple(s), tuple(min(1.0, pi / si) for pi, si in zip(p, s)))


def check_rates(rates: list[float] | tuple[float, ...], k: int, what: str) -> None:
    """Raise ValueError unless `rates` are K non-increasing probabilities."""
    if len(rates) != k:
        raise ValueError(f"{what} has {len(rates)} entries; num_speculative_tokens is {k}")
    if any(not 0.0 <= r <= 1.0 for r in rates):
        raise ValueError(f"{what} entries must lie in [0, 1], got {list(rates)}")
    if any(b > a + 1e-9 for a, b in zip(rates, rates[1:])):
        raise ValueError(f"{what} must be non-increasing (position i+1 is accepted only after "
                         f"position i), got {list(rates)}")


def parse_rates(text: str, what: str) -> tuple[float, ...]:
    """``"0.8,0.7,0.6"`` -> (0.8, 0.7, 0.6); ValueError naming `what` on anything else."""
    try:
        rates = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a comma-separated list of numbers") from None
    if not rates:
        raise ValueError(f"{what}: give at least one rate")
    check_rates(rates, len(rates), what)
    return rates


def tokens_per_step(rates: tuple[float, ...] | list[float], k: int | None = None) -> float:
    """Expected tokens one verification of a K-token proposal emits: 1 + sum of the first K
    rates (K: all of them)."""
    use = rates if k is None else rates[:k]
    return 1.0 + float(sum(use))


def accepted_length(rates: tuple[float, ...], u: float) -> int:
    """Draft tokens accepted in one verification for a uniform draw `u` in [0, 1): the
    positions whose unconditional rate exceeds `u` (one draw per proposal keeps the
    positions nested, so P(length >= i + 1) = rates[i] exactly)."""
    n = 0
    for r in rates:
        if u < r:
            n += 1
        else:
            break
    return n


def draft_geometry(spec: SpeculativeConfig, target: ModelGeometry) -> ModelGeometry | None:
    """The drafter's shape: the draft model's (catalog name, config.json or model
    directory); for an EAGLE head or MTP module without a readable config, one decoder
    layer of the target's shape (its embeddings counted: heads that share the target's
    over-state memory by vocab x hidden x 2 B); None for drafting without a model."""
    if not spec.uses_draft_model:
        return None
    if spec.model is not None:
        try:
            return load_model(spec.model)
        except ServelabError:  # an EAGLE/MTP head without a readable config: the rule below
            if spec.method == "draft_model":
                raise
    return dataclasses.replace(
        target, name=f"{target.name} {spec.method} head", layers=1, sliding_layers=(),
        dense_layers=min(target.dense_layers, 1))
