"""Bytes of a model's weights in each storage format, as real checkpoints store them.

Rules (one place, used by `ModelGeometry.weight_bytes` and the planner):
- bf16 / fp16: 2 B per parameter.
- fp8 / int8 (w8a8): linear weights 1 B; scales fp32, one per 128x128 block when the
  checkpoint is block-quantized (`fp8_block_size`, DeepSeek-V3, Qwen3-*-FP8), else one per
  output channel. Embeddings, LM head, router and norms stay 16 bit.
- awq: 4-bit weights (0.5 B), per group of `quant_group_size` input features: an fp16 scale
  and, with zero points, a 4-bit packed zero (0.5 B).
- gptq: 4-bit weights, per group an fp16 scale and a 4-bit packed zero (GPTQ checkpoints
  store `qzeros` even when symmetric), plus `g_idx` (int32 per input feature per matrix).
- mxfp4 (gpt-oss): routed experts 4-bit e2m1 + one e8m0 scale byte per 32 values; every
  other tensor bf16.
Quantized formats leave embeddings, LM head, routers and norms unquantized, as the
published checkpoints do.
"""

from __future__ import annotations

import math

from servelab.models.geometry import LinearShape, ModelGeometry, WeightFormat

SIXTEEN_BIT = 2
MXFP4_BLOCK = 32


def linear_bytes(model: ModelGeometry, shape: LinearShape, weight_format: WeightFormat) -> int:
    """Bytes of `shape.count` matrices of `shape` in `weight_format` (scales included)."""
    k, n, c = shape.in_features, shape.out_features, shape.count
    params = k * n * c
    if weight_format in ("bf16", "fp16"):
        return params * SIXTEEN_BIT
    if weight_format == "mxfp4":
        if shape.role != "expert":
            return params * SIXTEEN_BIT
        return params // 2 + math.ceil(k / MXFP4_BLOCK) * n * c
    if weight_format in ("fp8", "int8"):
        block = model.fp8_block_size
        if block:
            scales = math.ceil(k / block) * math.ceil(n / block) * c
        else:
            scales = n * c
        return params + 4 * scales
    groups = math.ceil(k / model.quant_group_size) * n * c
    if weight_format == "awq":
        zeros = groups // 2 if model.quant_zero_point else 0
        return params // 2 + 2 * groups + zeros
    if weight_format == "gptq":
        return params // 2 + 2 * groups + groups // 2 + 4 * k * c
    raise ValueError(f"unknown weight format {weight_format!r}")


def unquantized_bytes(model: ModelGeometry) -> int:
    """Embedding, LM head, routers and norms: 16 bit in every format."""
    return SIXTEEN_BIT * (model.embedding_params + model.lm_head_params
                          + model.router_params + model.small_params)


def checkpoint_bytes(model: ModelGeometry, weight_format: WeightFormat | None = None) -> int:
    """Total bytes of the checkpoint's tensors in `weight_format` (default: the model's)."""
    fmt = weight_format or model.weight_format
    linear = sum(linear_bytes(model, s, fmt) for s in model.linear_shapes())
    return linear + unquantized_bytes(model)


def weight_bytes_per_gpu(model: ModelGeometry, tensor_parallel: int = 1,
                         pipeline_parallel: int = 1, expert_parallel: int = 1,
                         redundant_experts: int = 0) -> int:
    """Bytes of weights one GPU holds under TP x PP (the largest pipeline stage).

    TP splits every linear layer and the vocabulary (embedding, LM head) by `tensor_parallel`;
    norms, routers and the MLA down-projections are replicated; K/V projections replicate
    when there are fewer KV heads than ranks. PP puts ceil(layers / PP) layers on a stage; the
    embedding sits on the first stage and the LM head on the last, so a stage holds one of them
    (both when PP = 1). With expert parallelism (`expert_parallel` > 1, vLLM's EP = TP x DP)
    the routed experts are not TP-split: each GPU holds ceil((experts + redundant) / EP)
    whole experts (vLLM's EPLB adds `redundant_experts` copies of hot ones).
    """
    tp, pp = tensor_parallel, pipeline_parallel
    fmt = model.weight_format
    layer_bytes = 0.0
    for s in model.linear_shapes():
        size = linear_bytes(model, s, fmt)
        if s.role == "expert" and expert_parallel > 1 and model.num_experts:
            local = math.ceil((model.num_experts + redundant_experts) / expert_parallel)
            layer_bytes += size * local / model.num_experts
        elif not s.tp_split:
            layer_bytes += size
        elif s.name in ("k_proj", "v_proj") and model.kv_heads < tp:
            layer_bytes += size / model.kv_heads
        else:
            layer_bytes += size / tp
    layer_bytes += SIXTEEN_BIT * (model.router_params + model.small_params)
    stage_layers = math.ceil(model.layers / pp)
    per_gpu = layer_bytes * stage_layers / model.layers
    vocab_bytes = SIXTEEN_BIT * model.vocab * model.hidden / tp
    if pp == 1:
        per_gpu += SIXTEEN_BIT * (model.embedding_params + model.lm_head_params) / tp
    else:
        per_gpu += vocab_bytes
    return int(math.ceil(per_gpu))
