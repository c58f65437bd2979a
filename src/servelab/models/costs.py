"""Per-token costs of a model: KV-cache bytes, FLOPs, bytes read per decode step.

KV bytes per token (one token, every layer):
- GQA/MHA: 2 (K and V) x kv_heads x head_dim x dtype bytes per layer.
- MLA (DeepSeek-V3): one compressed latent of kv_lora_rank + qk_rope_head_dim values per
  layer (no separate K and V); vLLM keeps the whole latent on every TP rank.
- Sliding-window layers: `kv_bytes_per_token` counts them like full layers, because that is
  what vLLM's "GPU KV cache size: N tokens" line assumes (its pool is shared by per-layer-
  type groups). For the memory one request of context L really holds, use
  `kv_bytes_for_context(L)`: a sliding layer keeps min(L, window) tokens (vLLM rounds to
  whole blocks, at most one block more).

FLOPs: 2 x active parameters per token (a multiply-add = 2 FLOPs) plus attention, per layer
and attended token: 4 x heads x head_dim (QK^T and AV) for GQA; MLA attends in the latent
space when decoding (2 x heads x (kv_lora_rank + rope) + 2 x heads x kv_lora_rank) and in the
expanded heads when prefilling (2 x heads x (qk_nope + qk_rope) + 2 x heads x v_head_dim).
"""

from __future__ import annotations

import math

from servelab.models.geometry import ModelGeometry
from servelab.models.weights import SIXTEEN_BIT, linear_bytes, weight_bytes_per_gpu

_KV_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "bfloat16": 2, "float16": 2,
                   "half": 2}


def kv_dtype_bytes(model: ModelGeometry, kv_cache_dtype: str) -> int:
    """Bytes per cached value: "auto" follows the activation dtype (bf16/fp16: 2)."""
    if kv_cache_dtype == "auto":
        return model.activation_dtype_bytes
    try:
        return _KV_DTYPE_BYTES[kv_cache_dtype]
    except KeyError:
        raise ValueError(f"unknown kv_cache_dtype {kv_cache_dtype!r}; "
                         f"one of auto, {', '.join(_KV_DTYPE_BYTES)}") from None


def kv_bytes_per_layer_token(model: ModelGeometry, kv_cache_dtype: str = "auto",
                             tensor_parallel: int = 1) -> int:
    """KV bytes one token takes in one layer on one GPU under `tensor_parallel` ranks.

    KV heads split across ranks; with fewer KV heads than ranks each rank keeps one head
    (vLLM replicates them). The MLA latent is not split.
    """
    nbytes = kv_dtype_bytes(model, kv_cache_dtype)
    if model.is_mla:
        return (model.kv_lora_rank + model.qk_rope_head_dim) * nbytes
    heads = max(1, model.kv_heads // tensor_parallel) if tensor_parallel > 1 else model.kv_heads
    return 2 * heads * model.head_dim * nbytes


def kv_bytes_per_token(model: ModelGeometry, kv_cache_dtype: str = "auto") -> int:
    """KV bytes of one token over all layers (sliding layers counted as full)."""
    return model.layers * kv_bytes_per_layer_token(model, kv_cache_dtype)


def kv_bytes_per_token_per_gpu(model: ModelGeometry, kv_cache_dtype: str = "auto",
                               tensor_parallel: int = 1, pipeline_parallel: int = 1) -> int:
    """KV bytes of one token on one GPU: its TP share of the heads, its PP stage's layers
    (the largest stage, ceil(layers / PP), which is the one that runs out first)."""
    stage_layers = math.ceil(model.layers / pipeline_parallel)
    return stage_layers * kv_bytes_per_layer_token(model, kv_cache_dtype, tensor_parallel)


def kv_bytes_for_context(model: ModelGeometry, context_tokens: int,
                         kv_cache_dtype: str = "auto") -> int:
    """KV bytes one sequence of `context_tokens` holds (sliding layers: min(L, window))."""
    per_layer = kv_bytes_per_layer_token(model, kv_cache_dtype)
    windowed = min(context_tokens, model.sliding_window or context_tokens)
    return per_layer * (model.full_attention_layers * context_tokens
                        + len(model.sliding_layers) * windowed)


def attention_flops_per_context_token(model: ModelGeometry, decode: bool) -> float:
    """Attention FLOPs one query spends per attended token in one layer."""
    h = model.heads
    if model.is_mla:
        if decode:
            return 2.0 * h * (model.kv_lora_rank + model.qk_rope_head_dim) + 2.0 * h * model.kv_lora_rank
        return 2.0 * h * (model.qk_nope_head_dim + model.qk_rope_head_dim) + 2.0 * h * model.v_head_dim
    return 4.0 * h * model.head_dim


def attention_flops(model: ModelGeometry, context_tokens_sum: int, queries: int,
                    decode: bool) -> float:
    """Attention FLOPs of `queries` query tokens that attend `context_tokens_sum` tokens in
    total; a sliding layer attends at most `sliding_window` tokens per query."""
    coef = attention_flops_per_context_token(model, decode)
    full = model.full_attention_layers * context_tokens_sum
    sliding = 0
    if model.sliding_layers:
        window = model.sliding_window or context_tokens_sum
        sliding = len(model.sliding_layers) * min(context_tokens_sum, queries * window)
    return coef * (full + sliding)


def flops_per_token(model: ModelGeometry, context_tokens: int, decode: bool) -> float:
    """2 x active parameters + attention over `context_tokens` for one token."""
    return 2.0 * model.active_params + attention_flops(model, context_tokens, 1, decode)


def expected_experts_touched(model: ModelGeometry, tokens: int) -> float:
    """E x (1 - (1 - k/E)^B): expected distinct routed experts per MoE layer for B tokens
    routed independently and uniformly (k of E experts each)."""
    if not model.is_moe or tokens <= 0:
        return 0.0
    e, k = model.num_experts, model.experts_per_token
    return e * (1.0 - (1.0 - k / e) ** tokens)


def weights_read_bytes(model: ModelGeometry, tokens: int, tensor_parallel: int = 1,
                       pipeline_parallel: int = 1, expert_parallel: int = 1,
                       data_parallel: int = 1) -> float:
    """Weight bytes one GPU reads in a step that processes `tokens` tokens.

    Everything it holds, except the routed experts no token picked (expected value) and the
    input-embedding table (only `tokens` rows are read; when tied it is the LM head, read whole).
    Under expert parallelism (`expert_parallel` > 1) a GPU holds its whole local experts and
    the tokens of every one of `data_parallel` equally loaded ranks pick among them.
    """
    held = float(weight_bytes_per_gpu(model, tensor_parallel, pipeline_parallel, expert_parallel))
    stage_frac = math.ceil(model.layers / pipeline_parallel) / model.layers
    if model.is_moe:
        experts = sum(linear_bytes(model, s, model.weight_format)
                      for s in model.linear_shapes() if s.role == "expert")
        if expert_parallel > 1:
            share = math.ceil(model.num_experts / expert_parallel) / model.num_experts
            touched = expected_experts_touched(model, tokens * data_parallel)
        else:
            share, touched = 1.0 / tensor_parallel, expected_experts_touched(model, tokens)
        held -= experts * share * stage_frac * (1.0 - touched / model.num_experts)
    if not model.tie_embeddings and pipeline_parallel == 1:
        held -= SIXTEEN_BIT * model.embedding_params / tensor_parallel
        held += SIXTEEN_BIT * tokens * model.hidden
    return held


def decode_bytes_read(model: ModelGeometry, batch: int, context_tokens: int,
                      kv_cache_dtype: str = "auto") -> int:
    """Bytes one decode step reads (one GPU, no parallelism): weights touched by `batch`
    tokens plus `batch` sequences' KV at `context_tokens` each."""
    kv = batch * kv_bytes_for_context(model, context_tokens, kv_cache_dtype)
    return int(weights_read_bytes(model, batch) + kv)
