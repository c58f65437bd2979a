"""EngineArgs: the vLLM arguments the planner reads, with vLLM's names and defaults.

Defaults follow vLLM 0.25 (the version of the recorded H200 startup logs):
- `gpu_memory_utilization` 0.92: vLLM 0.25's `CacheConfig` default (it was 0.9 before). The
  logs need it: on the H200 (CUDA total 139.80 GiB) weights 27.52 + KV 99.27 GiB = 126.79 GiB
  is more than 0.9 x 139.80 = 125.82 GiB, and matches 0.92 x 139.80 = 128.62 minus ~1.8 GiB
  of activations and non-torch memory. Pass 0.9 to plan for older vLLM.
- `max_num_seqs` / `max_num_batched_tokens` None = vLLM's per-device defaults for
  `vllm serve`: 1024 / 8192 on GPUs with >= 70 GiB that are not A100, else 256 / 2048
  (`EngineArgs.get_batch_defaults`); the logs show 8192 and capture sizes up to 512 on H200.
  The token budget is then capped at max_num_seqs x max_model_len.
- `max_model_len` None = the model's `max_position_embeddings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servelab.hardware.catalog import GPUSpec
from servelab.models.geometry import ModelGeometry
from servelab.speculation import ASYNC_METHODS

LARGE_GPU_GIB = 70
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.92


class EngineArgs(BaseModel):
    """vLLM engine arguments relevant to memory and speed (vLLM's names; extra keys rejected).

    `data_parallel_size` is the number of replicas (vLLM's `--data-parallel-size`); with
    `enable_expert_parallel` they are the DP ranks of one expert-parallel engine.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tensor_parallel_size: int = Field(1, ge=1)
    pipeline_parallel_size: int = Field(1, ge=1)
    data_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(VLLM_DEFAULT_GPU_MEMORY_UTILIZATION, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=1)
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    block_size: int = Field(16, ge=1)
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16"] = "auto"
    enable_prefix_caching: bool = True
    enforce_eager: bool = False
    quantization: str | None = None
    async_scheduling: bool = True  # vLLM's default; the simulator's engine follows it
    # Expert parallelism (MoE models): experts split over EP = TP x DP ranks, whole experts
    # per GPU, attention replicated per DP rank (`expert_parallel_size`).
    enable_expert_parallel: bool = False
    num_redundant_experts: int = Field(0, ge=0)  # vLLM's EPLB copies of hot experts

    @property
    def expert_parallel_size(self) -> int:
        """vLLM's EP size: TP x DP with --enable-expert-parallel, else 1 (experts TP-split)."""
        if not self.enable_expert_parallel:
            return 1
        return self.tensor_parallel_size * self.data_parallel_size


@dataclass(frozen=True, slots=True)
class ResolvedLimits:
    """The scheduler limits vLLM settles on for one model on one GPU."""

    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int


def resolve_limits(model: ModelGeometry, gpu: GPUSpec, args: EngineArgs) -> ResolvedLimits:
    """Fill vLLM's device-dependent defaults (see the module docstring)."""
    max_model_len = args.max_model_len or model.max_position_embeddings
    large = (gpu.cuda_total_bytes >= LARGE_GPU_GIB * 2**30 and "a100" not in gpu.name.lower())
    default_tokens, default_seqs = (8192, 1024) if large else (2048, 256)
    seqs = args.max_num_seqs or default_seqs
    if args.max_num_batched_tokens is not None:
        tokens = args.max_num_batched_tokens
    else:
        tokens = min(seqs * max_model_len, default_tokens)
    return ResolvedLimits(max_model_len, seqs, tokens)


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int | None = None,
                            num_speculative_tokens: int = 0) -> tuple[int, ...]:
    """vLLM 0.25.1's default batch sizes (tokens) captured as CUDA graphs (config/vllm.py,
    `_set_cudagraph_sizes`): 1, 2, 4, then steps of 8 to 256 and of 16 to the cap
    min(2 x max_num_seqs x (1 + K), 512, max_num_batched_tokens), plus
    max_num_batched_tokens itself when it is within the cap. With speculation the full
    decode graphs are these rounded (`decode_graph_sizes`)."""
    cap = min(2 * max_num_seqs * (1 + num_speculative_tokens), 512)
    if max_num_batched_tokens is not None:
        cap = min(cap, max_num_batched_tokens)
    sizes = {s for s in (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)) if s <= cap}
    if max_num_batched_tokens is not None and max_num_batched_tokens <= cap:
        sizes.add(max_num_batched_tokens)
    return tuple(sorted(sizes))


def decode_graph_sizes(sizes: tuple[int, ...], num_speculative_tokens: int) -> tuple[int, ...]:
    """The full CUDA graphs vLLM 0.25.1 captures for uniform decode batches of K + 1 tokens
    per sequence: every size of `sizes` rounded up to a multiple of K + 1, those past the
    largest of `sizes` dropped (the V1 runner: config/compilation.py,
    `adjust_cudagraph_sizes_for_spec_decode`, which then uses them for every graph; the V2
    runner: v1/worker/gpu/cudagraph_utils.py, its piecewise graphs keeping `sizes`). K = 4
    keeps 500 of 512, K = 2 498. Empty when no multiple fits (the V1 runner refuses to start)."""
    query = 1 + num_speculative_tokens
    if query <= 1 or not sizes:
        return sizes
    top = sizes[-1]
    return tuple(sorted({r for r in (-(-s // query) * query for s in sizes) if r <= top}))


# vLLM 0.25.1 (config/vllm.py, `use_v2_model_runner`): MoE architectures that stay on the V2
# model runner, and the speculative methods it runs; anything else MoE or speculative runs on
# the V1 runner.
V2_RUNNER_MOE_ARCHITECTURES = frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM",
                                         "GraniteMoeForCausalLM"})
V2_RUNNER_SPEC_METHODS = ASYNC_METHODS  # the same EAGLE-type methods


def uses_v1_model_runner(model: ModelGeometry, speculative_method: str | None) -> bool:
    """Whether vLLM 0.25.1 runs `model` (with that speculative method) on its V1 model
    runner rather than the V2 one it defaults to."""
    if speculative_method is not None and speculative_method not in V2_RUNNER_SPEC_METHODS:
        return True
    return model.is_moe and model.architecture not in V2_RUNNER_MOE_ARCHITECTURES
