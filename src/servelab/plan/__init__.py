"""Planning: memory budget, KV pool, maximum concurrency, step-time roofline, MBU, what-ifs.

Pure functions of a `ModelGeometry`, a `GPUSpec` and vLLM `EngineArgs`; no I/O.
"""

from servelab.plan.args import EngineArgs, ResolvedLimits, resolve_limits
from servelab.plan.memory import (
    MemoryPlan,
    kv_tokens_from_available,
    kv_tokens_range_from_logged,
    plan_memory,
)

__all__ = [
    "EngineArgs",
    "MemoryPlan",
    "ResolvedLimits",
    "kv_tokens_from_available",
    "kv_tokens_range_from_logged",
    "plan_memory",
    "resolve_limits",
]
