"""A GPU's kernel profile: measured times of the operators an engine step is made of.

`servelab sim profile` writes it on a machine with the GPU (`servelab.sim.profiler`); the
operator cost model (`servelab.sim.operators`) reads it. One file per GPU, versioned by
`schema`; every point is one operator at one shape, timed as vLLM runs it (inside a CUDA
graph, weights rotated so that L2 holds none of them, as in a real step that streams
gigabytes of weights). Times are microseconds per call.

Families (`GemmPoint.family`): ``bf16`` (cuBLAS through torch, what vLLM's unquantized
linear calls), ``fp8`` (W8A8 per-tensor, vLLM's CUTLASS kernel, torch's `_scaled_mm` when
vLLM is absent), ``awq_marlin`` and ``awq_machete`` (4-bit weights, group 128, zero
point: vLLM's Marlin and Machete kernels). Attention points name the kernel they timed
(`backend`): vLLM's FlashAttention (paged KV, block 16) or torch's SDPA where vLLM is absent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servelab.errors import ServelabError, first_problem
from servelab.storage import read_json

SCHEMA = "servelab.kernel-profile/2"
# /1 (before 2026-12-06) has no `queries` on decode attention points: every point is a decode.
READABLE = (SCHEMA, "servelab.kernel-profile/1")

GemmFamily = Literal["bf16", "fp8", "awq_marlin", "awq_machete"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeviceInfo(_Record):
    """What the profile was measured on (the software decides which kernels ran)."""

    gpu_name: str
    compute_capability: str
    sm_count: int = Field(ge=1)
    memory_total_mib: int = Field(ge=1)
    driver: str | None = None
    cuda: str | None = None
    torch: str
    vllm: str | None = None


class GemmPoint(_Record):
    """One matmul: activations M x K times weights K x N (per TP shard), `time_us` per call."""

    family: GemmFamily
    m: int = Field(ge=1)
    n: int = Field(ge=1)
    k: int = Field(ge=1)
    time_us: float = Field(gt=0)


class ElementwisePoint(_Record):
    """A bandwidth-bound kernel (vLLM's fused add + RMSNorm) moving `bytes` per call."""

    bytes: int = Field(ge=1)
    time_us: float = Field(gt=0)


class _AttentionPoint(_Record):
    """The kernel that ran, the head layout and the time, common to both attention kinds."""

    backend: str
    q_heads: int = Field(ge=1)
    kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    time_us: float = Field(gt=0)


class AttentionDecodePoint(_AttentionPoint):
    """Paged decode attention: `batch` sequences of `context` tokens each, `queries` query
    tokens per sequence (1: a decode; K + 1: a speculative verification of K drafts, causal
    over the sequence's last tokens)."""

    batch: int = Field(ge=1)
    context: int = Field(ge=1)
    queries: int = Field(1, ge=1)


class AttentionPrefillPoint(_AttentionPoint):
    """Causal prefill of one chunk of `tokens` queries after `cached` tokens of context."""

    tokens: int = Field(ge=1)
    cached: int = Field(ge=0)


class MoePoint(_Record):
    """vLLM's fused MoE (top-k routing, align, two grouped GEMMs, activation, weighted sum)
    over `tokens` tokens, `experts` experts of `hidden` x `intermediate`, top `topk`."""

    tokens: int = Field(ge=1)
    experts: int = Field(ge=1)
    topk: int = Field(ge=1)
    hidden: int = Field(ge=1)
    intermediate: int = Field(ge=1)
    time_us: float = Field(gt=0)


class AllReducePoint(_Record):
    """One all-reduce of `bytes` over `ranks` GPUs of the host."""

    ranks: int = Field(ge=2)
    bytes: int = Field(ge=1)
    time_us: float = Field(gt=0)


class KernelProfile(_Record):
    """Everything `servelab sim profile` measured on one GPU (see the module doc)."""

    schema_: str = Field(SCHEMA, alias="schema")
    device: DeviceInfo
    measured_at: str
    took_s: float = Field(ge=0)
    copy_bandwidth_gbs: float = Field(gt=0, description="device-to-device copy, read + write")
    kernel_floor_us: float = Field(gt=0, description="shortest kernel in a CUDA graph")
    gemm: list[GemmPoint] = []
    elementwise: list[ElementwisePoint] = []
    attention_decode: list[AttentionDecodePoint] = []
    attention_prefill: list[AttentionPrefillPoint] = []
    moe: list[MoePoint] = []
    allreduce: list[AllReducePoint] = []
    skipped: dict[str, str] = Field(default_factory=dict,
                                    description="operator family -> why it was not timed")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def families(self) -> set[str]:
        return {p.family for p in self.gemm}

    @classmethod
    def load(cls, path: Path, flag: str = "--profile") -> KernelProfile:
        """Read and check a profile file; errors name the flag and the file."""
        data = read_json(path, flag)
        if isinstance(data, dict) and data.get("schema") not in READABLE:
            raise ServelabError(f"{flag}: {path} is not a servelab kernel profile "
                                f"(schema {data.get('schema')!r}, expected one of {', '.join(READABLE)})")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ServelabError(f"{flag}: {path}: {first_problem(exc)}") from exc

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=1) + "\n"
