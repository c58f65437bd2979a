"""What the capacity search may choose, and what the planner's ceilings rule out unsimulated.

The space: weight formats x TP x PP x vLLM's batch limits x expert parallelism x P:D
ratios (the replica's shape, or one prefill/decode unit), then replicas (units) up to a GPU
budget and a router policy. Before anything is simulated, each shape
is read by the planner at its ideal ceilings (datasheet peaks, no efficiency factor: every
bound below is one a real or simulated engine cannot beat):
- memory: the shape must fit (weights, activations, a KV pool for one max-length request;
  under expert parallelism, with the fewest DP ranks that fit, where its search starts);
- TPOT: a token of one request alone takes at least one batch-1 decode step at zero context,
  so the percentile TPOT is at least that;
- TTFT: a request's first token waits at least its own prefill, so the percentile TTFT is at
  least the prefill time of the percentile prompt;
- throughput: one replica decodes at most its largest batch (KV pool over the mean context,
  capped by max_num_seqs) per decode step, so the rate's output tokens need at least that
  many replicas.
A shape that breaks the TPOT or TTFT bound is never simulated; the throughput bound is where
its search over replicas starts.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from servelab.disaggregation import LinkName
from servelab.errors import ServelabError
from servelab.fleet.deployment import DEFAULT_POLICY, Shape
from servelab.hardware.catalog import GPUSpec
from servelab.models import load_model
from servelab.models.geometry import ModelGeometry
from servelab.plan import EngineArgs, plan_memory
from servelab.plan.roofline import decode_ceiling_tok_s, decode_step, prefill_time_s
from servelab.routing.policies import POLICY_NAMES


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """The axes: weight formats (None: bf16 as stored), TP and PP sizes, scheduler limits
    (None: vLLM's default), router policies; at most `max_gpus` GPUs, TP within a node of
    `gpus_per_node`."""

    quantizations: tuple[str | None, ...] = (None, "fp8", "awq")
    tensor_parallel_sizes: tuple[int, ...] = (1, 2, 4, 8)
    pipeline_parallel_sizes: tuple[int, ...] = (1, 2)
    max_num_seqs: tuple[int | None, ...] = (None,)
    max_num_batched_tokens: tuple[int | None, ...] = (None,)
    router_policies: tuple[str, ...] = (DEFAULT_POLICY, "least_requests")
    max_gpus: int = 8
    gpus_per_node: int = 8
    expert_parallel: tuple[bool, ...] = (False,)  # MoE models: also (False, True)
    pd_ratios: tuple[tuple[int, int] | None, ...] = (None,)  # P:D units, e.g. (None, (1, 1), (1, 3))
    pd_link: LinkName = "nvlink"

    def __post_init__(self) -> None:
        if self.max_gpus < 1:
            raise ServelabError(f"--max-gpus {self.max_gpus}: must be >= 1")
        for p in self.router_policies:
            if p not in POLICY_NAMES:
                raise ServelabError(f"--router-policies: unknown policy {p!r} "
                                    f"(one of {', '.join(POLICY_NAMES)})")
        if not self.router_policies or not self.quantizations:
            raise ServelabError("the search needs at least one weight format and one router policy")

    @property
    def default_policy(self) -> str:
        return self.router_policies[0]

    def shapes(self) -> list[Shape]:
        """Every replica shape (or P/D unit) with vLLM's default limits that fits the GPU
        budget and a node (P/D with PP 1 and without EP, as the simulator takes it; an
        NVLink P/D unit within one node)."""
        out = []
        for q, tp, pp, ep, pd in itertools.product(
                self.quantizations, self.tensor_parallel_sizes, self.pipeline_parallel_sizes,
                self.expert_parallel, self.pd_ratios):
            if pd is not None and (pp > 1 or ep):
                continue
            s = Shape(q, tp, pp, expert_parallel=ep, pd_ratio=pd, pd_link=self.pd_link)
            spans = pd is not None and self.pd_link == "nvlink" and s.gpus > self.gpus_per_node
            if tp <= self.gpus_per_node and s.gpus <= self.max_gpus and not spans:
                out.append(s)
        return out

    def knob_variants(self, shape: Shape) -> list[Shape]:
        """`shape` with every other combination of the scheduler limits."""
        return [shape.with_knobs(s, t) for s in self.max_num_seqs for t in self.max_num_batched_tokens
                if (s, t) != (shape.max_num_seqs, shape.max_num_batched_tokens)]

    def max_replicas(self, shape: Shape) -> int:
        return self.max_gpus // shape.gpus


@dataclass(frozen=True, slots=True)
class Traffic:
    """The figures of the workload the ceilings need: rate (req/s), mean prompt and output
    tokens, and the prompt length at the SLO's percentile."""

    rate_rps: float
    mean_prompt_tokens: float
    mean_output_tokens: float
    percentile_prompt_tokens: int

    @classmethod
    def of(cls, rate_rps: float, prompt_lens: Sequence[int], output_lens: Sequence[int],
           percentile: float) -> Traffic:
        if not prompt_lens:
            raise ServelabError("the workload has no requests")
        return cls(rate_rps, sum(prompt_lens) / len(prompt_lens),
                   sum(output_lens) / len(output_lens), nearest_rank(prompt_lens, percentile))

    @property
    def mean_context_tokens(self) -> float:
        """Context a decoding request holds on average: its prompt and half its output."""
        return self.mean_prompt_tokens + self.mean_output_tokens / 2


def nearest_rank(values: Sequence[int], percentile: float) -> int:
    """The nearest-rank percentile of `values` (a value that occurs in them)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(percentile / 100 * len(ordered)) - 1))]


@dataclass(frozen=True, slots=True)
class Ceilings:
    """A shape's planner reading: `runs` False when vLLM could not serve it at all (it does
    not fit, heads or layers do not split: the planner's reason); `reason` None when it may meet the SLO (then
    `min_replicas` is where the search starts); the bounds in ms and tok/s."""

    shape: Shape
    runs: bool
    reason: str | None
    min_tpot_ms: float
    min_ttft_ms: float
    replica_tok_s: float
    min_replicas: int


def read_ceilings(model_name: str, gpu: GPUSpec, shape: Shape, traffic: Traffic,
                  slo_ms: dict[str, float], max_replicas: int) -> Ceilings:
    """The module docstring's bounds for `shape` at `traffic` under `slo_ms` (ttft, tpot)."""
    model = load_model(model_name, shape.quantization)
    # EP's memory per GPU falls with its DP ranks: the fewest ranks that fit are where the
    # search may start, and where the latency floors are lowest (the all-to-all grows with EP)
    fit_from = 1
    if shape.expert_parallel:
        fit_from = next((r for r in range(1, max(1, max_replicas) + 1)
                         if plan_memory(model, gpu, shape.engine_args(r)).fits), max(1, max_replicas))
    args = shape.engine_args(fit_from)
    mem = plan_memory(model, gpu, args)
    if not mem.fits:  # vLLM would not start it (memory, or heads or layers that do not split)
        return Ceilings(shape, False, mem.reason, math.inf, math.inf, 0.0, 0)
    tpot = 1e3 / decode_ceiling_tok_s(model, gpu, args, 0)
    ttft = prefill_time_s(model, gpu, args, traffic.percentile_prompt_tokens) * 1e3
    tok_s = _replica_tok_s(model, gpu, args, mem.kv_cache_tokens, mem.max_num_seqs, traffic)
    if shape.pd_ratio is not None:
        tok_s *= shape.pd_ratio[1]  # a P/D unit decodes on its D decode replicas
    need = traffic.rate_rps * traffic.mean_output_tokens
    lo = max(fit_from, math.ceil(need / tok_s)) if tok_s > 0 else max_replicas + 1
    reason = None
    if "tpot" in slo_ms and tpot > slo_ms["tpot"]:
        reason = f"TPOT floor {tpot:.1f} ms (one request, batch 1) > SLO {slo_ms['tpot']:g} ms"
    elif "ttft" in slo_ms and ttft > slo_ms["ttft"]:
        reason = (f"TTFT floor {ttft:.1f} ms (prefill of the {traffic.percentile_prompt_tokens}-token "
                  f"percentile prompt) > SLO {slo_ms['ttft']:g} ms")
    elif lo > max_replicas:
        reason = (f"needs >= {lo} replicas for {need:,.0f} output tok/s ({tok_s:,.0f} per replica "
                  f"at most), {max_replicas} fit the GPU budget")
    return Ceilings(shape, True, reason, tpot, ttft, tok_s, lo)


def _replica_tok_s(model: ModelGeometry, gpu: GPUSpec, args: EngineArgs, kv_tokens: int,
                   max_num_seqs: int, traffic: Traffic) -> float:
    context = traffic.mean_context_tokens
    batch = max(1, min(max_num_seqs, int(kv_tokens // max(1.0, context))))
    step = decode_step(model, gpu, args, batch, int(context))
    # PP keeps pp micro-batches in flight: a stage's time per token batch, not the pass's.
    return batch / max(step.total_s, 1e-12)
