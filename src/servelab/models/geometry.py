"""ModelGeometry: the shapes of a decoder-only transformer that serving cost depends on.

The record is built from an HF ``config.json`` (`servelab.models.config`) and answers the
planner's questions: parameter counts (total / active), weight bytes for a storage
format, KV-cache bytes per token, FLOPs and bytes per token. The arithmetic lives in
`servelab.models.weights` (bytes of the weights) and `servelab.models.costs` (KV, FLOPs,
bytes read); the methods here only delegate, so the record stays the one noun.

Conventions (units in names): parameters are counts, bytes are bytes, FLOPs count a
multiply-add as 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

WeightFormat = Literal["bf16", "fp16", "fp8", "int8", "awq", "gptq", "mxfp4"]
KVCacheDType = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16"]
LinearRole = Literal["attention", "mlp", "expert", "shared_expert"]


@dataclass(frozen=True, slots=True)
class LinearShape:
    """`count` weight matrices of in_features x out_features that a quantizer may touch.

    `tp_split` is False for layers vLLM replicates on every tensor-parallel rank (the MLA
    down-projections); `per_layer_moe` marks routed experts (count = experts x MoE layers).
    """

    name: str
    in_features: int
    out_features: int
    count: int
    role: LinearRole
    tp_split: bool = True

    @property
    def params(self) -> int:
        return self.in_features * self.out_features * self.count


@dataclass(frozen=True, slots=True)
class ModelGeometry:
    """Architecture figures of one model in one weight format (frozen, typed).

    MoE fields are zero for dense models; MLA fields are zero unless `kv_lora_rank` > 0;
    `sliding_layers` lists the indices of sliding-window attention layers (window
    `sliding_window` tokens). `dense_layers` is the number of leading layers with a dense
    MLP in a MoE model (DeepSeek-V3: 3).
    """

    name: str
    architecture: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tie_embeddings: bool
    max_position_embeddings: int
    num_experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    moe_intermediate: int = 0
    shared_expert_intermediate: int = 0
    dense_layers: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int | None = None
    sliding_layers: tuple[int, ...] = ()
    weight_format: WeightFormat = "bf16"
    quant_group_size: int = 128
    quant_zero_point: bool = False
    fp8_block_size: int | None = None
    activation_dtype_bytes: int = 2
    qk_norm: bool = False
    attention_bias: bool = False
    expert_bias: bool = False

    # -- structure -------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        """Layers with routed experts."""
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def full_attention_layers(self) -> int:
        return self.layers - len(self.sliding_layers)

    def linear_shapes(self) -> tuple[LinearShape, ...]:
        """Every weight matrix of the decoder layers (not embeddings, norms or routers)."""
        h, n = self.hidden, self.layers
        shapes: list[LinearShape] = []
        if self.is_mla:
            qk_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                shapes.append(LinearShape("q_a_proj", h, self.q_lora_rank, n, "attention", False))
                shapes.append(LinearShape("q_b_proj", self.q_lora_rank, self.heads * qk_dim, n,
                                          "attention"))
            else:
                shapes.append(LinearShape("q_proj", h, self.heads * qk_dim, n, "attention"))
            shapes.append(LinearShape("kv_a_proj_with_mqa", h,
                                      self.kv_lora_rank + self.qk_rope_head_dim, n,
                                      "attention", False))
            shapes.append(LinearShape(
                "kv_b_proj", self.kv_lora_rank,
                self.heads * (self.qk_nope_head_dim + self.v_head_dim), n, "attention"))
            shapes.append(LinearShape("o_proj", self.heads * self.v_head_dim, h, n, "attention"))
        else:
            q_dim, kv_dim = self.heads * self.head_dim, self.kv_heads * self.head_dim
            shapes.append(LinearShape("q_proj", h, q_dim, n, "attention"))
            shapes.append(LinearShape("k_proj", h, kv_dim, n, "attention"))
            shapes.append(LinearShape("v_proj", h, kv_dim, n, "attention"))
            shapes.append(LinearShape("o_proj", q_dim, h, n, "attention"))
        dense = self.dense_layers if self.is_moe else n
        if dense:
            shapes.extend(_mlp("mlp", h, self.intermediate, dense, "mlp"))
        if self.is_moe:
            routed = self.num_experts * self.moe_layers
            shapes.extend(_mlp("experts", h, self.moe_intermediate, routed, "expert"))
            if self.shared_experts:
                width = self.shared_expert_intermediate or self.moe_intermediate
                shapes.extend(_mlp("shared_experts", h, width * self.shared_experts,
                                   self.moe_layers, "shared_expert"))
        return tuple(shapes)

    # -- parameters ------------------------------------------------------------------
    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def lm_head_params(self) -> int:
        """Output projection parameters; 0 when tied to the embedding (stored once)."""
        return 0 if self.tie_embeddings else self.vocab * self.hidden

    @property
    def router_params(self) -> int:
        return self.moe_layers * self.hidden * self.num_experts

    @property
    def small_params(self) -> int:
        """Norms, biases and other vectors (kept in 16 bit by every format)."""
        per_layer = 2 * self.hidden
        if self.qk_norm:
            per_layer += 2 * self.head_dim
        if self.is_mla:
            per_layer += self.kv_lora_rank + (self.q_lora_rank or 0)
        if self.attention_bias:
            per_layer += (self.heads + 2 * self.kv_heads) * self.head_dim + self.hidden
        total = per_layer * self.layers + self.hidden
        if self.expert_bias and self.is_moe:
            total += self.moe_layers * self.num_experts * (3 * self.moe_intermediate)
        return total

    @property
    def total_params(self) -> int:
        """All parameters the checkpoint stores (tied embeddings counted once; no MTP head)."""
        return (self.embedding_params + self.lm_head_params + self.router_params
                + self.small_params + sum(s.params for s in self.linear_shapes()))

    @property
    def active_params(self) -> int:
        """Parameters one token multiplies by: everything except unused routed experts
        and the input embedding (a table lookup). The LM head counts even when tied."""
        linear = 0
        for s in self.linear_shapes():
            if s.role == "expert":
                linear += s.params * self.experts_per_token // self.num_experts
            else:
                linear += s.params
        return linear + self.vocab * self.hidden + self.router_params + self.small_params


def _mlp(prefix: str, hidden: int, width: int, count: int,
         role: LinearRole) -> tuple[LinearShape, ...]:
    # gate and up read the hidden state; down writes it back (SwiGLU / GeGLU).
    return (LinearShape(f"{prefix}.gate_proj", hidden, width, count, role),
            LinearShape(f"{prefix}.up_proj", hidden, width, count, role),
            LinearShape(f"{prefix}.down_proj", width, hidden, count, role))
