"""The engine's memory budget per GPU, the KV pool and the maximum concurrency (vLLM's way).

    budget    = CUDA total x gpu_memory_utilization        (CUDA total = nvidia-smi total
                                                             - driver-reserved memory)
    available = budget - weights - activation peak - non-torch memory
    blocks    = floor(available / (KV bytes per token per GPU x block_size))
    tokens    = blocks x block_size;   max concurrency = tokens / max_model_len

Sliding-window models (gemma-2/3, ...) use vLLM's hybrid allocator instead: the layers fall
into KV cache groups of equal size (one block table per group, one pool tensor per slot of
a group shared by a layer of every group), the pool holds available / (page x group size)
blocks shared by all groups, and a request at max_model_len needs a full group's blocks
for its whole context but a sliding group's only for window - 1 + max_num_batched_tokens
tokens (+1 block). vLLM's "GPU KV cache size" is then max concurrency x max_model_len.

vLLM 0.25.1 captures CUDA graphs after the KV cache is allocated (the logs print the KV size
first, then "Graph capturing ... took 0.90 GiB"), so graph memory is estimated and reported
but not subtracted. The activation and non-torch terms are a model calibrated on the
recorded logs (docs/planner.md): non-torch 0.9 GiB (+0.25 GiB with several GPUs, not
calibrated) and a profile peak of max(max_num_batched_tokens x per-token activation bytes,
max_num_seqs x vocab x 4 B of fp32 logits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from servelab.hardware.catalog import GPUSpec
from servelab.models.costs import kv_bytes_per_layer_token, kv_bytes_per_token, kv_bytes_per_token_per_gpu
from servelab.models.geometry import ModelGeometry
from servelab.models.weights import weight_bytes_per_gpu
from servelab.plan.args import EngineArgs, cudagraph_capture_sizes, resolve_limits

GIB = 2**30
NON_TORCH_GIB = 0.9
MULTI_GPU_NON_TORCH_GIB = 0.25
GRAPH_BASE_GIB = 0.0574
GRAPH_PER_SIZE_LAYER_GIB = 0.000413
LOGITS_BYTES = 4
MOE_WORKSPACE_FACTOR = 4.4


class MemoryPlan(BaseModel):
    """The planner's memory figures for one GPU of one replica (GiB unless named)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    gpu: str
    weight_format: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    gpu_memory_utilization: float
    total_gib: float
    cuda_total_gib: float
    budget_gib: float
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    kv_cache_gib: float
    kv_bytes_per_token: int
    kv_bytes_per_token_per_gpu: int
    block_size: int
    num_gpu_blocks: int
    kv_cache_tokens: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_concurrency: float
    kv_cache_groups: int  # vLLM's KV cache groups (1 unless sliding and full layers mix)
    fits: bool
    reason: str
    draft_weights_gib: float = 0.0
    draft_kv_bytes_per_token_per_gpu: int = 0
    expert_parallel_size: int = 1
    experts_per_gpu: int | None = None  # routed experts held per GPU (None: a dense model)

    @property
    def all_layer_blocks(self) -> int:
        """Blocks of `block_size` tokens held in every layer: what a context within the
        sliding window takes (vLLM's blocks are per group; such a token takes one in each)."""
        return self.num_gpu_blocks // self.kv_cache_groups


@dataclass(frozen=True, slots=True)
class KVCacheGroups:
    """vLLM's KV cache groups of one GPU's layers (`_get_kv_cache_groups_uniform_page_size`):
    `group_size` layers per group, `full` groups of full-attention layers, `sliding` groups
    of sliding-window layers (padding layers fill the last group of a type)."""

    group_size: int
    full: int
    sliding: int

    @property
    def count(self) -> int:
        return self.full + self.sliding


def kv_cache_groups(model: ModelGeometry, pp: int = 1) -> KVCacheGroups:
    """The KV cache groups vLLM forms for the layers of one pipeline stage."""
    full = math.ceil(model.full_attention_layers / pp)
    sliding = math.ceil(len(model.sliding_layers) / pp)
    if not sliding or not full:
        return KVCacheGroups(group_size=full + sliding, full=1 if full else 0, sliding=1 if sliding else 0)
    size = min(full, sliding)
    if max(full, sliding) < 1.5 * size:  # vLLM: nearly equal counts share one size
        size = max(full, sliding)
    return KVCacheGroups(group_size=size, full=math.ceil(full / size), sliding=math.ceil(sliding / size))


def blocks_per_request(model: ModelGeometry, groups: KVCacheGroups, max_model_len: int,
                       max_num_batched_tokens: int, block_size: int) -> int:
    """Blocks (summed over groups) vLLM reserves for one request of `max_model_len` tokens
    when it reports the maximum concurrency (`get_max_concurrency_for_kv_cache_config`)."""
    full = math.ceil(max_model_len / block_size)
    if not groups.sliding:
        return full * groups.full
    window = min(model.sliding_window - 1 + max_num_batched_tokens, max_model_len)
    return groups.full * full + groups.sliding * (math.ceil(window / block_size) + 1)


def kv_pool_blocks(model: ModelGeometry, args: EngineArgs, available_bytes: float,
                   draft: ModelGeometry | None = None) -> tuple[KVCacheGroups, int]:
    """vLLM's KV cache groups and pool blocks made of `available_bytes` on one GPU.

    One group: a block holds `block_size` tokens of every layer (and the drafter's: vLLM
    keeps the drafter's KV in the same pool). Several (sliding and full layers): a block is
    one group's page, available / (page x group size) of them shared by every group. A
    drafter beside a hybrid pool is not modelled: it is priced as one group."""
    tp, pp, dtype = args.tensor_parallel_size, args.pipeline_parallel_size, args.kv_cache_dtype
    groups = kv_cache_groups(model, pp)
    if groups.count > 1 and draft is None:
        page = kv_bytes_per_layer_token(model, dtype, tp) * args.block_size
        return groups, max(int(available_bytes // page // groups.group_size), 0)
    if draft is not None:
        groups = KVCacheGroups(group_size=groups.group_size, full=1, sliding=0)
    per_token = kv_bytes_per_token_per_gpu(model, dtype, tp, pp) + (
        kv_bytes_per_token_per_gpu(draft, dtype, tp, pp) if draft is not None else 0)
    return groups, max(int(available_bytes // (per_token * args.block_size)), 0)


def kv_tokens_from_available(model: ModelGeometry, args: EngineArgs, available_gib: float) -> int:
    """KV tokens vLLM makes of `available_gib` per GPU, held in every layer (whole blocks,
    floored): vLLM's "GPU KV cache size" for one-group models."""
    groups, blocks = kv_pool_blocks(model, args, available_gib * GIB)
    return blocks // groups.count * args.block_size


def kv_tokens_range_from_logged(model: ModelGeometry, args: EngineArgs,
                                logged_gib: float, decimals: int = 2) -> tuple[int, int]:
    """The KV tokens consistent with a GiB figure the log rounded to `decimals` places:
    (lowest, highest) over [logged - half a unit, logged + half a unit)."""
    half = 0.5 * 10.0 ** -decimals
    low = kv_tokens_from_available(model, args, logged_gib - half)
    high = kv_tokens_from_available(model, args, logged_gib + half - 1e-12)
    return low, high


def loaded_weights_bytes(model: ModelGeometry, args: EngineArgs) -> int:
    """What vLLM's "Model loading took" counts on one GPU: the checkpoint's share plus the
    rotary cos/sin table (max_position x rotary dim, 16 bit) and, for AWQ with zero points,
    the fp16 zeros its mixed-precision kernels keep instead of the packed 4-bit ones."""
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    held = weight_bytes_per_gpu(model, tp, pp, args.expert_parallel_size, args.num_redundant_experts)
    rotary = model.qk_rope_head_dim if model.is_mla else model.head_dim
    held += model.max_position_embeddings * rotary * 2
    if model.weight_format == "awq" and model.quant_zero_point:
        groups = sum(math.ceil(s.in_features / model.quant_group_size) * s.out_features * s.count
                     for s in model.linear_shapes())
        held += int(1.5 * groups / tp * math.ceil(model.layers / pp) / model.layers)
    return held


def activation_bytes(model: ModelGeometry, args: EngineArgs, max_num_batched_tokens: int,
                     max_num_seqs: int) -> int:
    """Peak of vLLM's profiling forward pass: MLP intermediates of the token budget, or the
    fp32 logits of one sampling step, whichever is larger."""
    tp, nbytes = args.tensor_parallel_size, model.activation_dtype_bytes
    per_token = 3 * model.intermediate / tp + 2 * model.hidden if (
        not model.is_moe or model.dense_layers) else 0.0
    if model.is_moe:
        # The fused-MoE kernel's three caches per (token, chosen expert): gate-up output
        # (2I), activation (I) and expert output (H), times MOE_WORKSPACE_FACTOR: vLLM 0.25.1's
        # profile run peaked 3.8x (OLMoE-1B-7B) and 5.0x (Qwen3-30B-A3B) above the caches
        # alone on one H200 (docs/validation/sim-transfer-2026-12-01/planner_check.json:
        # logged overhead 3.27 / 3.56 GiB); the factor is the mean of the two, so these two
        # logs are its fit, not a check.
        width = model.moe_intermediate / (1 if args.expert_parallel_size > 1 else tp)
        per_token = max(per_token, MOE_WORKSPACE_FACTOR * model.experts_per_token
                        * (3 * width + model.hidden))
    forward = max_num_batched_tokens * per_token * nbytes
    sampler = max_num_seqs * model.vocab * LOGITS_BYTES
    return int(max(forward, sampler))


def cuda_graph_bytes(model: ModelGeometry, args: EngineArgs, max_num_seqs: int,
                     max_num_batched_tokens: int | None = None) -> int:
    """CUDA-graph pool estimate: fitted to the 0.25.1 logs (0.90 GiB for 51 sizes, 0.14 GiB
    for 5, Qwen3-14B's 40 layers), scaled by capture sizes x layers on the GPU (vLLM's
    sizes for these limits; a speculative arm's are not counted apart)."""
    if args.enforce_eager:
        return 0
    sizes = len(cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens))
    layers = math.ceil(model.layers / args.pipeline_parallel_size)
    return int((GRAPH_BASE_GIB + GRAPH_PER_SIZE_LAYER_GIB * sizes * layers) * GIB)


def plan_memory(model: ModelGeometry, gpu: GPUSpec, args: EngineArgs,
                draft: ModelGeometry | None = None) -> MemoryPlan:
    """The memory plan of one GPU for `model` on `gpu` with `args` (see module docstring).

    `draft`: a speculative drafter vLLM loads next to the model (draft model, EAGLE head);
    its weights come out of the budget and its layers' KV joins every block (vLLM keeps
    the drafter's KV in the same paged pool, one block table for both), so each token
    costs the sum of both models' KV bytes."""
    limits = resolve_limits(model, gpu, args)
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    cuda_total = gpu.cuda_total_bytes
    budget = math.ceil(cuda_total * args.gpu_memory_utilization)
    weights = loaded_weights_bytes(model, args)
    draft_weights = loaded_weights_bytes(draft, args) if draft is not None else 0
    weights += draft_weights
    act = activation_bytes(model, args, limits.max_num_batched_tokens, limits.max_num_seqs)
    non_torch = NON_TORCH_GIB * GIB + (MULTI_GPU_NON_TORCH_GIB * GIB if tp * pp > 1 else 0)
    available = max(budget - weights - act - non_torch, 0.0)
    draft_kv = (kv_bytes_per_token_per_gpu(draft, args.kv_cache_dtype, tp, pp)
                if draft is not None else 0)
    per_token_gpu = kv_bytes_per_token_per_gpu(model, args.kv_cache_dtype, tp, pp) + draft_kv
    groups, blocks = kv_pool_blocks(model, args, available, draft)
    per_request = blocks_per_request(model, groups, limits.max_model_len,
                                     limits.max_num_batched_tokens, args.block_size)
    concurrency = blocks / per_request
    tokens = int(concurrency * limits.max_model_len)
    ep = args.expert_parallel_size
    refused = parallelism_error(model, tp, pp)
    if refused is None and args.enable_expert_parallel and not model.is_moe:
        refused = f"--enable-expert-parallel needs a MoE model; {model.name} is dense"
    if refused is None and args.num_redundant_experts and ep == 1:
        refused = "--num-redundant-experts needs --enable-expert-parallel (EPLB places them over EP ranks)"
    fits, reason = ((False, refused) if refused is not None else
                    _verdict(model, limits.max_model_len, budget, weights, available, concurrency))
    return MemoryPlan(
        model=model.name, gpu=gpu.name, weight_format=model.weight_format,
        tensor_parallel_size=tp, pipeline_parallel_size=pp,
        data_parallel_size=args.data_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        total_gib=gpu.memory_mib / 1024, cuda_total_gib=cuda_total / GIB, budget_gib=budget / GIB,
        weights_gib=weights / GIB, activation_gib=act / GIB, non_torch_gib=non_torch / GIB,
        cuda_graph_gib=cuda_graph_bytes(model, args, limits.max_num_seqs, limits.max_num_batched_tokens) / GIB,
        kv_cache_gib=available / GIB,
        kv_bytes_per_token=kv_bytes_per_token(model, args.kv_cache_dtype),
        kv_bytes_per_token_per_gpu=per_token_gpu, block_size=args.block_size,
        num_gpu_blocks=blocks, kv_cache_tokens=tokens, max_model_len=limits.max_model_len,
        max_num_seqs=limits.max_num_seqs, max_num_batched_tokens=limits.max_num_batched_tokens,
        max_concurrency=concurrency, kv_cache_groups=groups.count, fits=fits, reason=reason,
        draft_weights_gib=draft_weights / GIB, draft_kv_bytes_per_token_per_gpu=draft_kv,
        expert_parallel_size=ep, experts_per_gpu=experts_per_gpu(model, args) if model.is_moe else None)


def experts_per_gpu(model: ModelGeometry, args: EngineArgs) -> int:
    """Routed experts one GPU holds: all of them (TP-split) without EP, else whole experts
    ceil((experts + redundant) / EP)."""
    ep = args.expert_parallel_size
    if ep == 1:
        return model.num_experts
    return math.ceil((model.num_experts + args.num_redundant_experts) / ep)


def parallelism_error(model: ModelGeometry, tp: int, pp: int) -> str | None:
    """vLLM's refusal of a TP/PP layout for `model`, in its words, or None when it starts.

    vLLM 0.25 checks that the attention heads divide by TP ("Total number of attention
    heads (40) must be divisible by tensor parallel size (3)"); KV heads must divide by TP
    or TP by them (fewer KV heads than ranks are replicated); PP splits the layers, at
    least one per stage."""
    if model.heads % tp:
        return (f"vLLM refuses: total number of attention heads ({model.heads}) must be "
                f"divisible by tensor parallel size ({tp})")
    kv = model.kv_heads
    if not model.is_mla and (kv % tp if kv >= tp else tp % kv):
        return (f"vLLM refuses: {kv} KV heads cannot be split over tensor parallel size {tp} "
                "(one must divide the other)")
    if pp > model.layers:
        return f"vLLM refuses: pipeline parallel size {pp} exceeds the model's {model.layers} layers"
    return None


def _verdict(model: ModelGeometry, max_model_len: int, budget: float, weights: float,
             available: float, concurrency: float) -> tuple[bool, str]:
    if max_model_len > model.max_position_embeddings:
        return False, (f"max_model_len {max_model_len} exceeds the model's "
                       f"max_position_embeddings {model.max_position_embeddings}")
    if weights >= budget:
        return False, (f"weights {weights / GIB:.2f} GiB per GPU exceed the budget "
                       f"{budget / GIB:.2f} GiB (raise TP/PP, quantize, or a bigger GPU)")
    if available <= 0:
        return False, "no memory left for the KV cache after weights and activations"
    if concurrency < 1:
        return False, (f"the KV pool holds {concurrency:.2f} requests of max_model_len "
                       f"{max_model_len}; vLLM refuses to start (lower --max-model-len)")
    return True, "fits"
