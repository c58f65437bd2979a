"""HF ``config.json`` -> ModelGeometry: the one parser for catalog entries and user files.

Field names are Hugging Face's (they differ per family: `num_experts` / `n_routed_experts` /
`num_local_experts`, ...). Multimodal configs keep the language model under `text_config`;
its fields win. `quantization_config` sets the weight format (awq, gptq, fp8, mxfp4,
compressed-tensors int8/fp8/4-bit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from servelab.errors import ServelabError
from servelab.models.geometry import ModelGeometry, WeightFormat

_QK_NORM_TYPES = frozenset({"qwen3", "qwen3_moe", "gemma3", "gemma3_text", "olmoe"})
_BIAS_TYPES = frozenset({"qwen2", "qwen2_moe"})

QUANTIZATION_ALIASES: dict[str, WeightFormat] = {
    "awq": "awq", "awq_marlin": "awq", "gptq": "gptq", "gptq_marlin": "gptq",
    "fp8": "fp8", "int8": "int8", "w8a8": "int8", "mxfp4": "mxfp4",
    "bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16",
}


def normalize_quantization(quantization: str) -> WeightFormat:
    """The weight format for a vLLM-style `--quantization` value (case-insensitive)."""
    try:
        return QUANTIZATION_ALIASES[quantization.strip().lower()]
    except KeyError:
        known = ", ".join(sorted(QUANTIZATION_ALIASES))
        raise ServelabError(f"unknown quantization {quantization!r}; known: {known}") from None


def _int(cfg: Mapping[str, Any], *keys: str, default: int | None = None) -> int:
    for key in keys:
        value = cfg.get(key)
        if value is not None:
            return int(value)
    if default is None:
        raise KeyError(keys[0])
    return default


def _sliding_layers(cfg: Mapping[str, Any], layers: int) -> tuple[tuple[int, ...], int | None]:
    window = cfg.get("sliding_window")
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and window:
        return tuple(i for i, t in enumerate(layer_types) if t == "sliding_attention"), int(window)
    pattern = cfg.get("sliding_window_pattern")
    if pattern and window:
        # Gemma 3: every `pattern`-th layer is global, the others slide.
        return tuple(i for i in range(layers) if (i + 1) % int(pattern) != 0), int(window)
    if window and cfg.get("use_sliding_window", True) and cfg.get("model_type") == "mistral":
        return tuple(range(layers)), int(window)
    return (), None


def _weight_format(cfg: Mapping[str, Any]) -> dict[str, Any]:
    q = cfg.get("quantization_config")
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    base: WeightFormat = "fp16" if dtype in ("float16", "half") else "bf16"
    if not isinstance(q, Mapping):
        return {"weight_format": base}
    method = str(q.get("quant_method", "")).lower()
    group = int(q.get("group_size") or 128)
    if method in ("awq", "awq_marlin"):
        return {"weight_format": "awq", "quant_group_size": group,
                "quant_zero_point": bool(q.get("zero_point", True))}
    if method in ("gptq", "gptq_marlin"):
        return {"weight_format": "gptq", "quant_group_size": group, "quant_zero_point": True}
    if method == "fp8":
        block = q.get("weight_block_size")
        return {"weight_format": "fp8", "fp8_block_size": int(block[0]) if block else None}
    if method == "mxfp4":
        return {"weight_format": "mxfp4"}
    if method == "compressed-tensors":
        weights = next(iter((q.get("config_groups") or {}).values()), {}).get("weights", {})
        bits, kind = int(weights.get("num_bits", 8)), str(weights.get("type", "int"))
        if bits == 4:
            return {"weight_format": "gptq", "quant_group_size": int(weights.get("group_size") or 128)}
        return {"weight_format": "fp8" if kind == "float" else "int8"}
    raise ServelabError(f"unsupported quant_method {method!r} in quantization_config")


def geometry_from_config(config: Mapping[str, Any], name: str) -> ModelGeometry:
    """Build the geometry of the model described by an HF config mapping."""
    cfg: dict[str, Any] = dict(config)
    if isinstance(cfg.get("text_config"), Mapping):
        cfg = {**cfg, **cfg["text_config"]}
        cfg.setdefault("quantization_config", config.get("quantization_config"))
    try:
        layers = _int(cfg, "num_hidden_layers", "n_layer")
        hidden = _int(cfg, "hidden_size", "n_embd")
        heads = _int(cfg, "num_attention_heads", "n_head")
        vocab = _int(cfg, "vocab_size")
    except KeyError as exc:
        raise ServelabError(f"config for {name!r} lacks {exc.args[0]!r}") from None
    model_type = str(cfg.get("model_type", ""))
    archs = cfg.get("architectures") or [model_type or "unknown"]
    experts = _int(cfg, "num_experts", "n_routed_experts", "num_local_experts", default=0)
    moe: dict[str, Any] = {}
    intermediate = _int(cfg, "intermediate_size", default=4 * hidden)
    if experts:
        moe_width = _int(cfg, "moe_intermediate_size", default=intermediate)
        moe = {"num_experts": experts,
               "experts_per_token": _int(cfg, "num_experts_per_tok", "experts_per_token"),
               "shared_experts": _int(cfg, "n_shared_experts", default=0),
               "moe_intermediate": moe_width,
               "dense_layers": _int(cfg, "first_k_dense_replace", default=0)}
        shared_width = _int(cfg, "shared_expert_intermediate_size", default=0)
        if shared_width:
            moe.update(shared_experts=1, shared_expert_intermediate=shared_width)
    mla: dict[str, Any] = {}
    if cfg.get("kv_lora_rank"):
        mla = {"kv_lora_rank": int(cfg["kv_lora_rank"]),
               "q_lora_rank": int(cfg.get("q_lora_rank") or 0),
               "qk_nope_head_dim": _int(cfg, "qk_nope_head_dim"),
               "qk_rope_head_dim": _int(cfg, "qk_rope_head_dim"),
               "v_head_dim": _int(cfg, "v_head_dim")}
    sliding_layers, window = _sliding_layers(cfg, layers)
    head_dim = _int(cfg, "head_dim", default=hidden // heads)
    return ModelGeometry(
        name=name, architecture=str(archs[0]), layers=layers, hidden=hidden, heads=heads,
        kv_heads=_int(cfg, "num_key_value_heads", default=heads), head_dim=head_dim,
        intermediate=intermediate, vocab=vocab,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        max_position_embeddings=_int(cfg, "max_position_embeddings", default=4096),
        sliding_window=window, sliding_layers=sliding_layers,
        qk_norm=model_type in _QK_NORM_TYPES,
        attention_bias=bool(cfg.get("attention_bias", model_type in _BIAS_TYPES)),
        expert_bias=model_type == "gpt_oss",
        **moe, **mla, **_weight_format(cfg))


def with_quantization(model: ModelGeometry, quantization: str | None) -> ModelGeometry:
    """`model` stored in the format vLLM's `--quantization` names (None: as checkpointed).

    A checkpoint already quantized another way is an error, as in vLLM.
    """
    if quantization is None:
        return model
    fmt = normalize_quantization(quantization)
    if fmt == model.weight_format:
        return model
    if model.weight_format not in ("bf16", "fp16"):
        raise ServelabError(
            f"{model.name} is stored as {model.weight_format}; cannot plan it as {fmt}")
    if fmt == "mxfp4" and not model.is_moe:
        # MXFP4 in vLLM quantizes routed experts only (gpt-oss): a dense model would be
        # labelled mxfp4 and still read every weight in 16 bit.
        raise ServelabError(f"--quantization mxfp4 applies to routed experts (MoE models such as "
                            f"gpt-oss); {model.name} is dense")
    changes: dict[str, Any] = {"weight_format": fmt}
    if fmt == "awq":
        changes.update(quant_zero_point=True, quant_group_size=128)
    if fmt == "awq" or fmt == "fp16":
        # AWQ checkpoints run with fp16 activations (vLLM logs dtype=torch.float16).
        changes["activation_dtype_bytes"] = 2
    return dataclasses.replace(model, **changes)
