"""Step-time roofline: how long one engine step takes on one GPU of a replica.

    memory_s    = bytes read / (bandwidth x bandwidth_frac)
    compute_s   = FLOPs / (peak x compute_frac)
    allreduce_s = 2 per layer x (tokens x hidden x 2 B x 2(TP-1)/TP / one-way link bandwidth
                  + per-call latency), only with TP > 1
    total_s     = max(memory_s, compute_s) + allreduce_s

Per GPU under TP: weights / TP (replicated parts whole), KV / TP (heads split), FLOPs / TP.
Under PP every figure is one stage's (ceil(layers / PP) layers); `total_s` is the stage time
and `token_latency_s` = PP x `total_s` (a token crosses every stage).
Bytes read: the weights the step's tokens touch (MoE: expected distinct experts per layer),
the KV of every decoding sequence, the KV written for prefill tokens.
The peak rate follows the weight format: fp8 / int8 weights use the fp8 / int8 tensor rate
where the GPU has it (W8A8); 4-bit and 16-bit formats compute in 16 bit.
Pure functions: the simulator's cost model calls `step_time` for every step shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servelab.hardware.catalog import GPUSpec
from servelab.models.costs import (
    attention_flops,
    kv_bytes_per_layer_token,
    weights_read_bytes,
)
from servelab.models.geometry import ModelGeometry
from servelab.plan.args import EngineArgs

ALLREDUCES_PER_LAYER = 2


@dataclass(frozen=True, slots=True)
class StepShape:
    """One engine step: decoding sequences and prefill chunks.

    `decode_context_tokens` sums the contexts of the decoding sequences;
    `prefill_context_tokens` sums chunk_len x attended context over the prefill chunks
    (the attention work of the chunks).
    """

    decode_seqs: int = 0
    decode_context_tokens: int = 0
    prefill_tokens: int = 0
    prefill_context_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Fractions of the datasheet peaks reached (1.0 = the ideal ceiling)."""

    bandwidth_frac: float = 1.0
    compute_frac: float = 1.0
    interconnect_frac: float = 1.0


@dataclass(frozen=True, slots=True)
class StepTime:
    """Cost of one step on one GPU (bytes, FLOPs, seconds)."""

    bytes_read: float
    flops: float
    memory_s: float
    compute_s: float
    allreduce_s: float
    total_s: float
    pipeline_stages: int

    @property
    def token_latency_s(self) -> float:
        return self.total_s * self.pipeline_stages

    @property
    def bound(self) -> str:
        """"memory" or "compute": which roofline term dominates."""
        return "memory" if self.memory_s >= self.compute_s else "compute"


def peak_flops(model: ModelGeometry, gpu: GPUSpec) -> float:
    """Dense FLOP/s the step's matmuls run at, from the weight format."""
    if model.weight_format == "fp8" and gpu.dense_fp8_tflops:
        return gpu.dense_fp8_tflops * 1e12
    if model.weight_format == "int8":
        return gpu.dense_int8_tops * 1e12
    return gpu.dense_bf16_tflops * 1e12


def step_time(model: ModelGeometry, gpu: GPUSpec, args: EngineArgs, shape: StepShape,
              eff: Efficiency = Efficiency()) -> StepTime:
    """The roofline time of one step of `shape` on one GPU (see module docstring)."""
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    stage = math.ceil(model.layers / pp) / model.layers
    tokens = shape.decode_seqs + shape.prefill_tokens
    kv_layer = kv_bytes_per_layer_token(model, args.kv_cache_dtype, tp)
    window = model.sliding_window or 0
    ctx = shape.decode_context_tokens
    kv_layers_x_tokens = model.full_attention_layers * ctx + len(model.sliding_layers) * min(
        ctx, shape.decode_seqs * window)
    kv_read = kv_layer * kv_layers_x_tokens * stage
    kv_write = kv_layer * model.layers * stage * tokens
    ep = args.expert_parallel_size
    bytes_read = (weights_read_bytes(model, tokens, tp, pp, ep, args.data_parallel_size if ep > 1 else 1)
                  + kv_read + kv_write)
    flops = (2.0 * model.active_params * tokens
             + attention_flops(model, ctx, shape.decode_seqs, decode=True)
             + attention_flops(model, shape.prefill_context_tokens, shape.prefill_tokens,
                               decode=False)) * stage / tp
    memory_s = bytes_read / (gpu.memory_bandwidth_gbs * 1e9 * eff.bandwidth_frac)
    compute_s = flops / (peak_flops(model, gpu) * eff.compute_frac)
    allreduce_s = allreduce_time_s(model, gpu, args, tokens, eff)
    return StepTime(bytes_read=bytes_read, flops=flops, memory_s=memory_s, compute_s=compute_s,
                    allreduce_s=allreduce_s, total_s=max(memory_s, compute_s) + allreduce_s,
                    pipeline_stages=pp)


def allreduce_time_s(model: ModelGeometry, gpu: GPUSpec, args: EngineArgs, tokens: int,
                     eff: Efficiency = Efficiency()) -> float:
    """TP all-reduce time of one step on one stage: 2 per layer, ring traffic
    2(TP-1)/TP x message over one direction of the link, plus a latency per call; with
    expert parallelism, each MoE layer's all-to-all dispatch and combine too."""
    tp = args.tensor_parallel_size
    link = gpu.interconnect
    ep = args.expert_parallel_size if model.is_moe else 1
    a2a = 0.0
    if ep > 1 and tokens:
        # dispatch and combine per MoE layer: the GPU's token share to its top-k experts'
        # ranks, the (EP - 1) / EP of them elsewhere, each way
        moe_layers = model.moe_layers * math.ceil(model.layers / args.pipeline_parallel_size) / model.layers
        sent = tokens / tp * model.experts_per_token * model.hidden * model.activation_dtype_bytes * (ep - 1) / ep
        a2a = 2 * moe_layers * (sent / (link.unidirectional_gbs * 1e9 * eff.interconnect_frac)
                                + link.allreduce_latency_us * 1e-6)
    if tp == 1 or tokens == 0:
        return a2a
    calls = ALLREDUCES_PER_LAYER * math.ceil(model.layers / args.pipeline_parallel_size)
    message = tokens * model.hidden * model.activation_dtype_bytes
    wire = message * 2 * (tp - 1) / tp / (link.unidirectional_gbs * 1e9 * eff.interconnect_frac)
    return calls * (wire + link.allreduce_latency_us * 1e-6) + a2a


def decode_step(model: ModelGeometry, gpu: GPUSpec, args: EngineArgs, batch: int,
                context_tokens: int, eff: Efficiency = Efficiency()) -> StepTime:
    """A pure decode step of `batch` sequences at `context_tokens` each."""
    return step_time(model, gpu, args,
                     StepShape(decode_seqs=batch, decode_context_tokens=batch * context_tokens),
                     eff)


def decode_ceiling_tok_s(model: ModelGeometry, gpu: GPUSpec, args: EngineArgs,
                         context_tokens: int = 0, eff: Efficiency = Efficiency()) -> float:
    """Single-request decode ceiling, tokens/s: one token per pass through every stage."""
    return 1.0 / decode_step(model, gpu, args, 1, context_tokens, eff).token_latency_s


def decode_throughput_tok_s(model: ModelGeometry, gpu: GPUSpec, args: EngineArgs, batch: int,
                            context_tokens: int, eff: Efficiency = Efficiency()) -> float:
    """Decode tokens/s of one replica running `batch` sequences; with PP the batch is split
    into PP micro-batches that keep every stage busy."""
    pp = args.pipeline_parallel_size
    micro = max(1, math.ceil(batch / pp))
    step = decode_step(model, gpu, args, micro, context_tokens, eff)
    return batch / (pp * step.total_s)


def prefill_time_s(model: ModelGeometry, gpu: GPUSpec, args: EngineArgs, tokens: int,
                   chunk_tokens: int | None = None, eff: Efficiency = Efficiency()) -> float:
    """Seconds to prefill one prompt of `tokens` in chunks of `chunk_tokens` (default
    max_num_batched_tokens or 8192), each chunk attending everything before it."""
    chunk = chunk_tokens or args.max_num_batched_tokens or 8192
    total, start = 0.0, 0
    while start < tokens:
        n = min(chunk, tokens - start)
        context = n * start + n * (n + 1) // 2
        step = step_time(model, gpu, args, StepShape(prefill_tokens=n,
                                                     prefill_context_tokens=context), eff)
        total += step.token_latency_s
        start += n
    return total


def mbu(model: ModelGeometry, gpu: GPUSpec, args: EngineArgs, tpot_ms: float, batch: int,
        context_tokens: int) -> float:
    """Model bandwidth utilization: bytes a decode step must read per GPU / measured TPOT,
    over the GPU's peak bandwidth (0..1; above 1 means the inputs are inconsistent)."""
    if tpot_ms <= 0:
        raise ValueError("tpot_ms must be positive")
    step = decode_step(model, gpu, args, batch, context_tokens)
    per_stage_s = tpot_ms / 1e3 / args.pipeline_parallel_size
    return step.bytes_read / per_stage_s / (gpu.memory_bandwidth_gbs * 1e9)

