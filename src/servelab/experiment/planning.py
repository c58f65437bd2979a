"""The planner's figures for an arm: the memory budget before the run, the roofline after.

`ArmPlanner.for_arm` loads the arm's model geometry and catalog GPU once; `memory()` is the
prediction the report sets beside the engine's logged figures, `decode_step()` the
bandwidth-roofline time of a decode step at the batch and context a cell actually ran
(the figure the diagnosis compares the measured ITL with). When the planner cannot model
an arm (an unknown model directory, no catalog GPU) the reason is kept instead.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any

from servelab.errors import ServelabError
from servelab.engine.logparse import StartupInfo
from servelab.experiment.arms import engine_path, planner_args
from servelab.experiment.spec import ArmSpec, ExperimentSpec
from servelab.hardware.catalog import GPUSpec, get_gpu
from servelab.models import ModelGeometry, load_model
from servelab.plan import EngineArgs, MemoryPlan, plan_memory
from servelab.plan.roofline import allreduce_time_s, decode_ceiling_tok_s, decode_step
from servelab.sim.cost import kernel_times
from servelab.sim.kernels import FAMILY_NAMES, kernel_family
from servelab.speculation import draft_geometry


@dataclass(frozen=True, slots=True)
class ArmPlanner:
    """The planner's inputs for one arm."""

    model: ModelGeometry
    gpu: GPUSpec
    args: EngineArgs
    draft: ModelGeometry | None = None  # a speculative drafter's shape (weights and KV)

    @classmethod
    def for_arm(cls, spec: ExperimentSpec, arm: ArmSpec, gpu_name: str | None) -> ArmPlanner:
        """Raises `ServelabError` saying why the planner cannot model this arm."""
        if gpu_name is None:
            raise ServelabError("no catalog GPU: set hardware.gpu (or probe a known GPU)")
        name = engine_path(spec, arm) if spec.engine != "sim" else (arm.model or spec.model.name)
        try:
            model = load_model(name, arm.quantization)
        except ServelabError:
            # The spec's model directory may exist only on the GPU machine; its catalog
            # name then stands in. An arm's own checkpoint has no such stand-in.
            if arm.model is not None or name == spec.model.name:
                raise
            model = load_model(spec.model.name, arm.quantization)
        draft = None
        if arm.speculative is not None:
            try:
                draft = draft_geometry(arm.speculative, model)
            except ServelabError as exc:
                raise ServelabError(f"speculative.model {arm.speculative.model}: {exc}") from None
        return cls(model, get_gpu(gpu_name), planner_args(spec, arm, strict=spec.engine == "sim"), draft)

    def memory(self) -> MemoryPlan:
        return plan_memory(self.model, self.gpu, self.args, draft=self.draft)

    def summary(self) -> dict[str, Any]:
        """What the manifest records: the memory plan and the single-request ceiling."""
        mem = self.memory()
        family = kernel_family(self.model.weight_format, self.gpu.compute_capability)
        return {
            "memory": mem.model_dump(mode="json"),
            # what prices this arm's GEMMs in the simulator, and from which figures
            "kernels": f"{FAMILY_NAMES[family]} ({kernel_times(self.gpu, None).source})",
            "decode_ceiling_tok_s": decode_ceiling_tok_s(self.model, self.gpu, self.args),
            "decode_step_batch1_ms": decode_step(self.model, self.gpu, self.args, 1, 0).total_s * 1e3,
        }

    def decode_step(self, batch: float, context_tokens: float) -> dict[str, Any]:
        """Roofline decode step at `batch` sequences of `context_tokens` each (ms).

        `step_ms` is one stage's step; `token_interval_ms` the time between two tokens of
        one sequence, what ITL measures: with pipeline parallelism the batch runs as PP
        micro-batches and a token passes every stage, so it is PP x the micro-batch step.
        """
        b = max(1, round(batch))
        pp = self.args.pipeline_parallel_size
        micro = max(1, math.ceil(b / pp))
        st = decode_step(self.model, self.gpu, self.args, micro, max(0, round(context_tokens)))
        # the all-reduce's traffic grows with the rows, its per-call latency does not: the
        # traffic of `micro` more tokens (what a verification step's rows scale)
        wire = allreduce_time_s(self.model, self.gpu, self.args, 2 * micro) - st.allreduce_s
        return {"batch": b, "context_tokens": round(context_tokens),
                "step_ms": st.total_s * 1e3, "token_interval_ms": st.total_s * pp * 1e3,
                "memory_ms": st.memory_s * 1e3, "compute_ms": st.compute_s * 1e3,
                "allreduce_ms": st.allreduce_s * 1e3, "allreduce_traffic_ms": wire * 1e3,
                "bound": st.bound, "bytes_read": st.bytes_read}


def startup_from_plan(mem: MemoryPlan) -> StartupInfo:
    """The simulator's startup figures (it builds its KV pool from the plan) in the schema
    of a parsed engine log, so the report reads simulated and real arms alike."""
    return StartupInfo(
        max_model_len=mem.max_model_len, model_loading_gib=mem.weights_gib,
        total_gpu_memory_gib=mem.cuda_total_gib,
        gpu_memory_utilization=mem.gpu_memory_utilization,
        available_kv_gib=mem.kv_cache_gib, kv_cache_tokens=mem.kv_cache_tokens,
        num_gpu_blocks=mem.num_gpu_blocks, block_size=mem.block_size,
        max_concurrency=mem.max_concurrency, max_concurrency_context_tokens=mem.max_model_len,
    )
