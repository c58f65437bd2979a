"""The planner's memory budget against real vLLM startup logs (tests/data/plan/).

KV tokens from the logged available memory must reproduce the log (exactly, or within the
log's 0.01 GiB rounding); the planner's own estimate of available memory must be within
3 % (H200, vLLM 0.25.1) and 5 % (L40S, older vLLM) of the logged figure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from servelab.hardware.catalog import get_gpu
from servelab.models import load_model
from servelab.plan.memory import KVCacheGroups, blocks_per_request, kv_cache_groups
from servelab.plan import (
    EngineArgs,
    kv_tokens_from_available,
    kv_tokens_range_from_logged,
    plan_memory,
)

DATA = Path(__file__).parent / "data" / "plan"


@dataclass(frozen=True)
class Logged:
    weights_gib: float
    available_gib: float
    tokens: int
    concurrency: float
    context: int


def read_runs(name: str) -> list[Logged]:
    runs, current = [], {}
    for line in (DATA / name).read_text().splitlines():
        if m := re.search(r"Model loading took ([\d.]+) GiB", line):
            current = {"weights": float(m[1])}
        elif m := re.search(r"Available KV cache memory: ([\d.]+) GiB", line):
            current["available"] = float(m[1])
        elif m := re.search(r"GPU KV cache size: ([\d,]+) tokens", line):
            current["tokens"] = int(m[1].replace(",", ""))
        elif m := re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", line):
            runs.append(Logged(current["weights"], current["available"], current["tokens"],
                               float(m[2]), int(m[1].replace(",", ""))))
    return runs


H200_ARMS = {  # log file -> (quantization, EngineArgs of the run)
    "vllm-0.25.1-h200-A.log": (None, EngineArgs()),
    "vllm-0.25.1-h200-arm2.log": (None, EngineArgs(max_num_seqs=8, max_model_len=1024)),
    "vllm-0.25.1-h200-awq.log": ("awq", EngineArgs()),
}


def test_l40s_tokens_from_logged_available_memory():
    model, args = load_model("Qwen/Qwen3-14B"), EngineArgs(gpu_memory_utilization=0.9)
    first, second = read_runs("vllm-l40s-qwen3-14b.log")
    # 11.57 GiB / 160 KiB = 75,825.1 -> 4,739 blocks of 16 -> 75,824 tokens
    assert kv_tokens_from_available(model, args, first.available_gib) == first.tokens == 75_824
    assert round(first.tokens / 40_960, 2) == first.concurrency == 1.85
    low, high = kv_tokens_range_from_logged(model, args, second.available_gib)
    assert low <= second.tokens <= high and (low, high) == (72_048, 72_112)
    assert round(second.tokens / 40_960, 2) == second.concurrency


def test_l40s_estimate_within_5_percent_of_both_runs():
    plan = plan_memory(load_model("Qwen/Qwen3-14B"), get_gpu("L40S"),
                       EngineArgs(gpu_memory_utilization=0.9))
    assert plan.fits and plan.max_num_batched_tokens == 2048 and plan.max_num_seqs == 256
    for run in read_runs("vllm-l40s-qwen3-14b.log"):
        assert plan.kv_cache_gib == pytest.approx(run.available_gib, rel=0.05)
        assert plan.weights_gib == pytest.approx(run.weights_gib, abs=0.005)


@pytest.mark.parametrize("log_name", sorted(H200_ARMS))
def test_h200_arms_tokens_from_logged_memory_exact(log_name):
    quantization, args = H200_ARMS[log_name]
    (run,) = read_runs(log_name)
    model = load_model("Qwen/Qwen3-14B", quantization)
    assert kv_tokens_from_available(model, args, run.available_gib) == run.tokens
    plan = plan_memory(model, get_gpu("H200"), args)
    assert plan.max_model_len == run.context
    assert round(run.tokens / plan.max_model_len, 2) == run.concurrency


@pytest.mark.parametrize("log_name", sorted(H200_ARMS))
def test_h200_arms_estimate_within_3_percent(log_name):
    quantization, args = H200_ARMS[log_name]
    (run,) = read_runs(log_name)
    plan = plan_memory(load_model("Qwen/Qwen3-14B", quantization), get_gpu("H200"), args)
    assert plan.kv_cache_gib == pytest.approx(run.available_gib, rel=0.03)
    assert plan.kv_cache_tokens == pytest.approx(run.tokens, rel=0.03)
    assert plan.max_concurrency == pytest.approx(run.concurrency, rel=0.03)
    assert plan.weights_gib == pytest.approx(run.weights_gib, rel=0.02)


def test_h200_defaults_resolved_like_vllm_025():
    plan = plan_memory(load_model("Qwen/Qwen3-14B"), get_gpu("H200"), EngineArgs())
    # the log: "Chunked prefill is enabled with max_num_batched_tokens=8192", graph sizes to 512
    assert (plan.max_num_batched_tokens, plan.max_num_seqs, plan.max_model_len) == (8192, 1024, 40960)
    assert plan.gpu_memory_utilization == 0.92
    assert plan.cuda_total_gib == pytest.approx(150_109_880_320 / 2**30)
    assert plan.cuda_graph_gib == pytest.approx(0.90, abs=0.02)
    eager = plan_memory(load_model("Qwen/Qwen3-14B"), get_gpu("H200"), EngineArgs(enforce_eager=True))
    assert eager.cuda_graph_gib == 0 and eager.kv_cache_tokens == plan.kv_cache_tokens


def test_tp_splits_kv_heads_and_pp_splits_layers():
    model, gpu = load_model("Qwen/Qwen3-14B"), get_gpu("H200")
    one = plan_memory(model, gpu, EngineArgs())
    tp2 = plan_memory(model, gpu, EngineArgs(tensor_parallel_size=2))
    pp2 = plan_memory(model, gpu, EngineArgs(pipeline_parallel_size=2))
    assert tp2.kv_bytes_per_token_per_gpu == 163_840 // 2
    assert pp2.kv_bytes_per_token_per_gpu == 20 * 2 * 8 * 128 * 2
    assert tp2.weights_gib == pytest.approx(one.weights_gib / 2, rel=0.01)
    # kv heads 8 < TP 16: each rank keeps one head
    tp16 = plan_memory(model, gpu, EngineArgs(tensor_parallel_size=16))
    assert tp16.kv_bytes_per_token_per_gpu == 40 * 2 * 1 * 128 * 2
    assert tp2.kv_cache_tokens == tp2.num_gpu_blocks * 16


def test_llama_70b_on_4_h100_tp4_capacity_example():
    # DOMAIN.md 5: ~294 GB budget - 141 GB weights - activations -> ~140 GB KV / 320 KiB
    # -> ~440k tokens -> ~50 requests of 8k. The planner counts per GPU (CUDA total 79.1 GiB).
    plan = plan_memory(load_model("llama-3.3-70b"), get_gpu("H100"),
                       EngineArgs(tensor_parallel_size=4, gpu_memory_utilization=0.9))
    assert plan.weights_gib * 4 * 2**30 / 1e9 == pytest.approx(141.1, rel=0.01)
    assert 440_000 <= plan.kv_cache_tokens <= 440_000 * 1.15
    assert 50 <= plan.kv_cache_tokens // 8192 <= 60


def test_does_not_fit_reasons():
    model = load_model("llama-3.3-70b")
    plan = plan_memory(model, get_gpu("L40S"), EngineArgs())
    assert not plan.fits and "exceed the budget" in plan.reason
    small = plan_memory(load_model("Qwen/Qwen3-14B"), get_gpu("L40S"),
                        EngineArgs(gpu_memory_utilization=0.72))
    assert not small.fits and "lower --max-model-len" in small.reason
    too_long = plan_memory(load_model("Qwen/Qwen3-14B"), get_gpu("H200"),
                           EngineArgs(max_model_len=131072))
    assert not too_long.fits and "max_position_embeddings" in too_long.reason


def test_sliding_window_pool_follows_vllms_kv_cache_groups():
    # vLLM 0.25.1 on an H200 serving gemma-3-12b (docs/validation/sim-transfer-2026-12-01/
    # results/gemma-3-12b/server.log): "Available KV cache memory: 103.78 GiB", "GPU KV cache
    # size: 1,257,484 tokens", "Maximum concurrency for 131,072 tokens per request: 9.59x".
    model = load_model("gemma-3-12b")  # 48 layers: 8 full, 40 with a 1,024-token window
    groups = kv_cache_groups(model)
    assert groups == KVCacheGroups(group_size=8, full=1, sliding=5)
    # a full group holds 131072 / 16 blocks, a sliding one (1023 + 8192) / 16 rounded up, + 1
    per_request = blocks_per_request(model, groups, 131072, 8192, 16)
    assert per_request == 8192 + 5 * (576 + 1)
    page = 2 * 8 * 256 * 2 * 16  # K and V, 8 KV heads x 256, bf16, 16 tokens: 128 KiB
    low, high = (int(g * 2**30 // page // 8) for g in (103.775, 103.785))  # the log's rounding
    assert low <= 106_271 <= high
    assert int(106_271 / per_request * 131072) == 1_257_484
    assert f"{106_271 / per_request:.2f}" == "9.59"
    plan = plan_memory(model, get_gpu("H100"), EngineArgs(max_model_len=32768))
    assert plan.kv_cache_groups == 6
    assert plan.all_layer_blocks == plan.num_gpu_blocks // 6
    assert plan.max_concurrency == pytest.approx(plan.num_gpu_blocks / (2048 + 5 * 577))
    assert plan.kv_cache_tokens == int(plan.max_concurrency * 32768)
    # the GiB-to-tokens helper counts what every layer holds, as the simulator's pool does
    args = EngineArgs(max_model_len=32768)
    assert kv_tokens_from_available(model, args, plan.kv_cache_gib) == plan.all_layer_blocks * 16


def test_kv_cache_groups_pad_like_vllm():
    # vLLM groups by the smaller layer count: gemma-3-27b's 10 full + 52 sliding layers make
    # 1 + 6 groups of 10 (vLLM warns "Add 8 padding layers, may waste at most 15.38% KV cache
    # memory"); near-equal counts share the larger size (gpt-oss-20b: 12 + 12)
    assert kv_cache_groups(load_model("gemma-3-27b")) == KVCacheGroups(group_size=10, full=1, sliding=6)
    assert kv_cache_groups(load_model("gpt-oss-20b")) == KVCacheGroups(group_size=12, full=1, sliding=1)
    dense = kv_cache_groups(load_model("Qwen/Qwen3-14B"))
    assert dense == KVCacheGroups(group_size=40, full=1, sliding=0) and dense.count == 1