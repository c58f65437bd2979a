"""What-if arms side by side: which ceiling binds at a target concurrency and context.

For each arm (model, GPU, EngineArgs with `data_parallel_size` replicas) at a target of
C concurrent requests of L tokens of context:
- capacity: requests of L tokens one replica's KV pool holds (and max_num_seqs caps);
- per-replica batch = min(ceil(C / replicas), capacity, max_num_seqs);
- the decode step at that batch from the roofline, and tokens per GPU-second
  (replicas x batch / step time / GPUs).
The binding ceiling is "capacity" when a replica cannot hold its share of C, else the
roofline's "memory" (bandwidth) or "compute" term, or "interconnect" when TP's all-reduce
costs more than the step's roofline time.
The seeds' rule (DOMAIN.md 7): if one replica holds the target concurrency, replicas win
on throughput; if not, TP's pooled KV wins. The roofline reading (tokens per GPU-second)
is reported next to it, since at bandwidth-bound batches TP can win anyway, and arms on the
same number of GPUs are ranked by decode throughput. Measured on two NVLink H200s
(docs/validation/h200x2-2026-11-30, Qwen3-14B bf16, concurrency 10-64) the ranking held
(TP2 > two replicas > PP2) and the rule did not: TP2 made 1.14-1.45x the tokens of two
replicas, less than the roofline's 1.6-1.7x.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servelab.hardware.catalog import GPUSpec
from servelab.models.costs import kv_bytes_for_context, kv_bytes_per_token
from servelab.models.geometry import ModelGeometry
from servelab.plan.args import EngineArgs
from servelab.plan.memory import MemoryPlan, plan_memory
from servelab.plan.roofline import decode_ceiling_tok_s, decode_step


@dataclass(frozen=True, slots=True)
class Arm:
    """One configuration to compare."""

    name: str
    model: ModelGeometry
    gpu: GPUSpec
    args: EngineArgs


@dataclass(frozen=True, slots=True)
class ArmReading:
    """An arm's ceilings at the target concurrency and context."""

    name: str
    memory: MemoryPlan
    gpus: int
    replicas: int
    requests_per_replica: int
    batch_per_replica: int
    holds_target: bool
    step_ms: float
    decode_tok_s: float
    tok_per_gpu_s: float
    decode_ceiling_tok_s: float
    binding: str


def read_arm(arm: Arm, target_concurrency: int, context_tokens: int) -> ArmReading:
    """The arm's plan and roofline at `target_concurrency` requests of `context_tokens`."""
    args = arm.args
    mem = plan_memory(arm.model, arm.gpu, args)
    replicas = args.data_parallel_size
    gpus = replicas * args.tensor_parallel_size * args.pipeline_parallel_size
    per_request = kv_bytes_for_context(arm.model, context_tokens, args.kv_cache_dtype)
    pool = mem.all_layer_blocks * mem.block_size * kv_bytes_per_token(arm.model, args.kv_cache_dtype)
    held = int(pool // per_request) if mem.fits and per_request else 0
    share = math.ceil(target_concurrency / replicas)
    batch = max(0, min(share, held, mem.max_num_seqs))
    if batch == 0:
        return ArmReading(arm.name, mem, gpus, replicas, held, 0, False, math.inf, 0.0, 0.0,
                          0.0, "capacity")
    step = decode_step(arm.model, arm.gpu, args, batch, context_tokens)
    pp = args.pipeline_parallel_size
    decode = replicas * batch / (step.total_s * pp)
    if held < share or mem.max_num_seqs < share:
        binding = "capacity"
    elif step.allreduce_s > max(step.memory_s, step.compute_s):
        binding = "interconnect"
    else:
        binding = step.bound
    return ArmReading(
        name=arm.name, memory=mem, gpus=gpus, replicas=replicas, requests_per_replica=held,
        batch_per_replica=batch, holds_target=held >= share and mem.max_num_seqs >= share,
        step_ms=step.token_latency_s * 1e3, decode_tok_s=decode, tok_per_gpu_s=decode / gpus,
        decode_ceiling_tok_s=decode_ceiling_tok_s(arm.model, arm.gpu, args, context_tokens),
        binding=binding)


def verdict(readings: list[ArmReading], target_concurrency: int) -> list[str]:
    """Plain-language conclusions: the seeds' rule, then the roofline's reading."""
    lines: list[str] = []
    single = [r for r in readings if r.memory.tensor_parallel_size == 1
              and r.memory.pipeline_parallel_size == 1 and r.memory.fits]
    one_holds = any(r.requests_per_replica >= target_concurrency for r in single)
    if single:
        lines.append(
            "rule (DOMAIN.md 7): one replica holds the target concurrency -> replicas win on "
            "throughput" if one_holds else
            "rule (DOMAIN.md 7): one replica cannot hold the target concurrency -> TP's "
            "pooled KV wins")
    ok = [r for r in readings if r.holds_target]
    for gpus in sorted({r.gpus for r in ok}):
        same = sorted((r for r in ok if r.gpus == gpus), key=lambda r: -r.decode_tok_s)
        if len(same) > 1:
            ranked = " > ".join(f"{r.name} {r.decode_tok_s:,.0f}" for r in same)
            lines.append(f"on {gpus} GPU{'s' if gpus > 1 else ''}, decode tok/s (roofline): {ranked}")
    if ok:
        best = max(ok, key=lambda r: r.tok_per_gpu_s)
        lines.append(f"roofline: {best.name} makes the most tokens per GPU-second "
                     f"({best.tok_per_gpu_s:.0f}) among arms that hold {target_concurrency} "
                     f"requests; its step is {best.binding}-bound")
    else:
        lines.append(f"no arm holds {target_concurrency} concurrent requests at this context")
    for r in readings:
        if not r.holds_target:
            lines.append(f"{r.name}: capacity binds ({r.requests_per_replica} requests per "
                         f"replica, max_num_seqs {r.memory.max_num_seqs})")
    return lines
