"""A deployment the capacity search can choose: one engine shape, how many copies, which router.

The shape is what a replica is (weight format, TP, PP, vLLM's batch limits); replicas and
the router policy are how many of them serve together. `arm_spec` writes a deployment as a
servelab spec arm, so the search's winner runs for real with `servelab run`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from servelab.experiment.spec import DIRECT, ArmSpec
from servelab.plan.args import EngineArgs

DEFAULT_POLICY = "round_robin"


@dataclass(frozen=True, slots=True)
class Shape:
    """One replica: weight format (None: as stored, bf16 for the catalog's names), TP, PP and
    vLLM's scheduler limits (None: vLLM's per-GPU default)."""

    quantization: str | None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None

    @property
    def gpus(self) -> int:
        """GPUs one replica takes."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def engine_args(self) -> EngineArgs:
        return EngineArgs(tensor_parallel_size=self.tensor_parallel_size,
                          pipeline_parallel_size=self.pipeline_parallel_size,
                          max_num_seqs=self.max_num_seqs,
                          max_num_batched_tokens=self.max_num_batched_tokens,
                          quantization=self.quantization)

    @property
    def sort_key(self) -> tuple[str, int, int, int, int]:
        """A total order (None sorts first)."""
        return (self.quantization or "", self.tensor_parallel_size, self.pipeline_parallel_size,
                self.max_num_seqs or 0, self.max_num_batched_tokens or 0)

    @property
    def knobs_default(self) -> bool:
        """True when the scheduler limits are vLLM's defaults."""
        return self.max_num_seqs is None and self.max_num_batched_tokens is None

    def with_knobs(self, max_num_seqs: int | None, max_num_batched_tokens: int | None) -> Shape:
        return replace(self, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens)

    @property
    def label(self) -> str:
        parts = [self.quantization or "bf16"]
        if self.tensor_parallel_size > 1:
            parts.append(f"tp{self.tensor_parallel_size}")
        if self.pipeline_parallel_size > 1:
            parts.append(f"pp{self.pipeline_parallel_size}")
        if self.max_num_seqs is not None:
            parts.append(f"seqs{self.max_num_seqs}")
        if self.max_num_batched_tokens is not None:
            parts.append(f"tokens{self.max_num_batched_tokens}")
        return "-".join(parts)


@dataclass(frozen=True, slots=True)
class Deployment:
    """`replicas` copies of `shape` behind `router_policy` (unused with one replica)."""

    shape: Shape
    replicas: int = 1
    router_policy: str = DEFAULT_POLICY

    @property
    def gpus(self) -> int:
        return self.shape.gpus * self.replicas

    @property
    def label(self) -> str:
        text = self.shape.label
        if self.replicas > 1:
            text += f"-x{self.replicas}-{self.router_policy}"
        return text

    def arm_spec(self, name: str | None = None) -> ArmSpec:
        """This deployment as a spec arm (`servelab run` measures it on real engines)."""
        s = self.shape
        args: dict[str, int] = {}
        if s.max_num_seqs is not None:
            args["max_num_seqs"] = s.max_num_seqs
        if s.max_num_batched_tokens is not None:
            args["max_num_batched_tokens"] = s.max_num_batched_tokens
        return ArmSpec(name=name or self.label, quantization=s.quantization, args=args,
                       tensor_parallel_size=s.tensor_parallel_size,
                       pipeline_parallel_size=s.pipeline_parallel_size, replicas=self.replicas,
                       routing=self.router_policy if self.replicas > 1 else DIRECT)
