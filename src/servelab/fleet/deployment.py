"""A deployment the capacity search can choose: one engine shape, how many copies, which router.

The shape is what a replica is (weight format, TP, PP, vLLM's batch limits, expert
parallelism) or, disaggregated, one unit of a prefill and a decode pool in a fixed P:D ratio
of such replicas; replicas (units) and the router policy are how many serve together.
`arm_spec` writes a deployment as a servelab spec arm, so the search's winner runs with
`servelab run`; `sim_options` is the same deployment for the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from servelab.disaggregation import DisaggregatedConfig, LinkName, PoolSpec
from servelab.experiment.spec import DIRECT, ArmSpec
from servelab.hardware.catalog import NodeLayout
from servelab.plan.args import EngineArgs
from servelab.sim.setup import SimOptions

DEFAULT_POLICY = "round_robin"


@dataclass(frozen=True, slots=True)
class Shape:
    """One replica: weight format (None: as stored, bf16 for the catalog's names), TP, PP,
    vLLM's scheduler limits (None: vLLM's per-GPU default) and expert parallelism (the
    replicas are then the DP ranks of one EP engine). With `pd_ratio` (P, D) one unit is P
    prefill and D decode replicas of that shape, the KV moved over `pd_link`."""

    quantization: str | None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    expert_parallel: bool = False
    pd_ratio: tuple[int, int] | None = None
    pd_link: LinkName = "nvlink"

    @property
    def gpus(self) -> int:
        """GPUs one replica (one P/D unit) takes."""
        per = self.tensor_parallel_size * self.pipeline_parallel_size
        return per * (sum(self.pd_ratio) if self.pd_ratio else 1)

    def engine_args(self, replicas: int = 1) -> EngineArgs:
        """vLLM's arguments of one replica (`replicas` DP ranks under expert parallelism)."""
        return EngineArgs(tensor_parallel_size=self.tensor_parallel_size,
                          pipeline_parallel_size=self.pipeline_parallel_size,
                          max_num_seqs=self.max_num_seqs,
                          max_num_batched_tokens=self.max_num_batched_tokens,
                          quantization=self.quantization,
                          enable_expert_parallel=self.expert_parallel,
                          data_parallel_size=replicas if self.expert_parallel else 1)

    def pools(self, units: int) -> DisaggregatedConfig | None:
        if self.pd_ratio is None:
            return None
        p, d = self.pd_ratio
        tp = self.tensor_parallel_size
        return DisaggregatedConfig(prefill=PoolSpec(replicas=p * units, tp=tp),
                                   decode=PoolSpec(replicas=d * units, tp=tp), link=self.pd_link)

    @property
    def sort_key(self) -> tuple[str, int, int, int, int, bool, tuple[int, int]]:
        """A total order (None sorts first)."""
        return (self.quantization or "", self.tensor_parallel_size, self.pipeline_parallel_size,
                self.max_num_seqs or 0, self.max_num_batched_tokens or 0, self.expert_parallel,
                self.pd_ratio or (0, 0))

    def with_knobs(self, max_num_seqs: int | None, max_num_batched_tokens: int | None) -> Shape:
        return replace(self, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens)

    @property
    def label(self) -> str:
        parts = [self.quantization or "bf16"]
        if self.tensor_parallel_size > 1:
            parts.append(f"tp{self.tensor_parallel_size}")
        if self.pipeline_parallel_size > 1:
            parts.append(f"pp{self.pipeline_parallel_size}")
        if self.expert_parallel:
            parts.append("ep")
        if self.pd_ratio is not None:
            parts.append(f"pd{self.pd_ratio[0]}to{self.pd_ratio[1]}")
        if self.max_num_seqs is not None:
            parts.append(f"seqs{self.max_num_seqs}")
        if self.max_num_batched_tokens is not None:
            parts.append(f"tokens{self.max_num_batched_tokens}")
        return "-".join(parts)


@dataclass(frozen=True, slots=True)
class Deployment:
    """`replicas` copies (P/D units) of `shape` behind `router_policy` (unused with one
    replica)."""

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

    def sim_options(self, model: str, gpu: str, nodes: NodeLayout | None = None) -> SimOptions:
        """The deployment as the simulator builds it (`nodes`: how GPUs sit in nodes, so
        TP, PP and EP groups wider than a node cross the fabric)."""
        s = self.shape
        pools = s.pools(self.replicas)
        return SimOptions(model, gpu, s.quantization, s.engine_args(self.replicas),
                          replicas=1 if pools else self.replicas, router_policy=self.router_policy,
                          disaggregated=pools, nodes=nodes)

    def arm_spec(self, name: str | None = None) -> ArmSpec:
        """This deployment as a spec arm (`servelab run` measures it, or simulates it where
        it needs `engine: sim`: P/D pools, EP over DP ranks)."""
        s = self.shape
        args: dict[str, int | bool] = {}
        if s.max_num_seqs is not None:
            args["max_num_seqs"] = s.max_num_seqs
        if s.max_num_batched_tokens is not None:
            args["max_num_batched_tokens"] = s.max_num_batched_tokens
        if s.expert_parallel:
            args["enable_expert_parallel"] = True
        pools = s.pools(self.replicas)
        routed = self.replicas > 1 or (pools is not None and (pools.prefill.replicas > 1
                                                              or pools.decode.replicas > 1))
        return ArmSpec(name=name or self.label, quantization=s.quantization, args=args,
                       tensor_parallel_size=1 if pools else s.tensor_parallel_size,
                       pipeline_parallel_size=s.pipeline_parallel_size,
                       replicas=1 if pools else self.replicas,
                       routing=self.router_policy if routed else DIRECT, disaggregated=pools)
