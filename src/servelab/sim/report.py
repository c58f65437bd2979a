"""Text lines for `servelab sim run` beside bench's own result table: the memory budget in
vLLM's startup wording, and the simulator's step counts."""

from __future__ import annotations

from typing import Any


def memory_lines(memory: Any, max_model_len: int, replicas: int) -> list[str]:
    """The planner's KV budget in the words vLLM's startup log uses (per replica)."""
    tokens = int(memory.kv_cache_tokens)
    return [
        f"memory budget per replica ({replicas} replica{'s' if replicas > 1 else ''}):",
        f"Model loading took {memory.weights_gib:.4f} GiB (simulated, per GPU)",
        f"Available KV cache memory: {memory.kv_cache_gib:.2f} GiB",
        f"GPU KV cache size: {tokens:,} tokens",
        f"Maximum concurrency for {max_model_len:,} tokens per request: "
        f"{memory.max_concurrency:.2f}x",
    ]


def sim_lines(num_steps: int, preemptions: int, duration_s: float, cost_source: str) -> list[str]:
    """What only a simulator knows: engine steps and preemptions over the run, and what
    priced the steps (kernel family; profiled GPU or datasheet)."""
    return [f"simulated {duration_s:.1f} s in {num_steps:,} engine steps; preemptions: {preemptions:,}",
            f"step costs: {cost_source}"]
