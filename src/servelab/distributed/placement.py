"""What an arm asks a cluster for, and whether the cluster can give it (no Ray needed here).

An arm's actor launches every replica of the arm on its own node (the engine adapters start
local processes), so an arm is one of three shapes:

- **fits a node** (replicas x TP x PP <= GPUs per node): one bundle of all its GPUs,
  ``STRICT_PACK``, the actor on it;
- **spans nodes, simulated** (one replica wider than a node): one bundle per node of
  ``stages_per_node x TP`` GPUs (TP inside a node, PP across nodes, as vLLM places ranks),
  ``STRICT_SPREAD``, the actor on the first; the simulator prices the hops between them
  over the spec's `cluster.node_link`;
- **spans nodes, SGLang**: SGLang's own multi-node launch (``--nnodes/--node-rank/
  --dist-init-addr``): one bundle per node with the same share of the replica's GPUs,
  ``STRICT_SPREAD``, one process per node (`ArmDemand.per_node_processes`): rank 0 on the
  actor's node serves HTTP, the others join it;
- **spans nodes, vLLM** (or any vLLM arm with ``distributed_executor_backend: ray``): vLLM's Ray executor (``--distributed-executor-backend ray``) makes
  its own placement group for its workers, so the actor holds one CPU only and the arm runs
  `exclusive`: no other arm is placed while it runs (servelab cannot reserve GPUs that vLLM
  then takes).

Replicas wider than one node together (several replicas, each within a node, more than one
node in all) are refused with the reason: split the replicas into arms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from servelab.errors import ServelabError
from servelab.experiment.spec import ArmSpec, ExperimentSpec

Strategy = Literal["STRICT_PACK", "STRICT_SPREAD", "PACK"]
ACTOR_CPUS = 1.0


@dataclass(frozen=True, slots=True)
class NodeResources:
    """One node of the cluster as the placement sees it: its id, address and GPU count."""

    node_id: str
    address: str
    gpus: int
    alive: bool = True


@dataclass(frozen=True, slots=True)
class ArmDemand:
    """What one arm asks for: GPUs per bundle (bundle 0 holds the actor), the placement
    strategy, and `exclusive` (vLLM's Ray executor reserves the GPUs itself: `gpus` of them
    must be free across the cluster and nothing else may run beside it);
    `per_node_processes`: the engine runs one process per bundle (SGLang's --node-rank)."""

    arm: str
    bundles: tuple[int, ...]
    strategy: Strategy
    exclusive: bool = False
    gpus: int = 0
    warnings: tuple[str, ...] = ()
    per_node_processes: bool = False

    def ray_bundles(self) -> list[dict[str, float]]:
        """The bundles in Ray's terms: bundle 0 also holds the actor's CPU."""
        out: list[dict[str, float]] = []
        for i, gpus in enumerate(self.bundles):
            bundle = {"GPU": float(gpus)} if gpus else {}
            if i == 0:
                bundle["CPU"] = ACTOR_CPUS
            out.append(bundle)
        return out

    def describe(self) -> str:
        """e.g. "4 GPUs: 2 bundles of 2 GPUs on separate nodes"."""
        if self.exclusive:
            return f"{self.gpus} GPUs for vLLM's Ray executor across nodes (the arm runs alone)"
        if len(self.bundles) == 1:
            return f"{self.bundles[0]} GPU(s) on one node"
        ranks = ", one engine process per node" if self.per_node_processes else ""
        return (f"{sum(self.bundles)} GPUs: {len(self.bundles)} bundles of "
                f"{'/'.join(str(b) for b in self.bundles)} GPUs on separate nodes{ranks}")


def gpus_per_node(spec: ExperimentSpec, nodes: list[NodeResources]) -> int:
    """The spec's `cluster.gpus_per_node`, else the largest node's GPU count (at least 1)."""
    if spec.cluster.gpus_per_node is not None:
        return spec.cluster.gpus_per_node
    return max([n.gpus for n in nodes if n.alive] + [1])


def demand_of(spec: ExperimentSpec, arm: ArmSpec, per_node: int) -> ArmDemand:
    """The arm's request on nodes of `per_node` GPUs; `ServelabError` for a shape servelab
    cannot place (see the module doc), naming the arm."""
    if spec.engine == "external":
        return ArmDemand(arm.name, (0,), "PACK")
    tp, pp = arm.tensor_parallel_size, arm.pipeline_parallel_size
    replica = tp * pp
    total = replica * arm.replicas
    if spec.engine == "vllm" and arm.args.get("distributed_executor_backend") == "ray":
        # vLLM's Ray executor reserves its workers' GPUs itself, also within one node
        return ArmDemand(arm.name, (0,), "PACK", exclusive=True, gpus=total)
    if total <= per_node:
        return ArmDemand(arm.name, (total,), "STRICT_PACK", gpus=total)
    if arm.replicas > 1:
        raise ServelabError(
            f"arm {arm.name}: {arm.replicas} replicas x TP {tp} x PP {pp} = {total} GPUs exceed one "
            f"node's {per_node}; servelab starts an arm's replicas on one node: split them into arms")
    warnings: tuple[str, ...] = ()
    if tp > per_node:
        warnings = (f"arm {arm.name}: TP {tp} is wider than a node ({per_node} GPUs): its all-reduces "
                    f"cross the {spec.cluster.node_link} fabric on every layer; put TP inside a node "
                    "and PP across nodes",)
    if spec.engine == "vllm":
        return ArmDemand(arm.name, (0,), "PACK", exclusive=True, gpus=replica, warnings=warnings)
    if spec.engine == "sglang":
        # SGLang gives every node the same share of the replica's ranks.
        nnodes = -(-replica // per_node)
        while replica % nnodes:
            nnodes += 1
        return ArmDemand(arm.name, (replica // nnodes,) * nnodes, "STRICT_SPREAD", gpus=replica,
                         warnings=warnings, per_node_processes=True)
    if tp > per_node:  # whole nodes, the TP group cut across them
        bundles = tuple(min(per_node, replica - i) for i in range(0, replica, per_node))
    else:
        stages = per_node // tp
        bundles = tuple(min(stages, pp - g) * tp for g in range(0, pp, stages))
    return ArmDemand(arm.name, bundles, "STRICT_SPREAD", gpus=replica, warnings=warnings)


def unplaceable(demand: ArmDemand, nodes: list[NodeResources]) -> str | None:
    """Why no node set of the cluster can ever hold `demand` (None: it can, once free)."""
    alive = [n for n in nodes if n.alive]
    if demand.exclusive:
        have = sum(n.gpus for n in alive)
        if have < demand.gpus:
            return f"arm {demand.arm} asks for {demand.describe()}; the cluster has {have} GPUs"
        return None
    if demand.strategy == "STRICT_SPREAD":
        # Largest bundles first onto the largest nodes, one bundle per node.
        sizes = sorted((n.gpus for n in alive), reverse=True)
        wanted = sorted(demand.bundles, reverse=True)
        if len(sizes) < len(wanted) or any(s < w for s, w in zip(sizes, wanted)):
            return (f"arm {demand.arm} asks for {demand.describe()}; the cluster's nodes have "
                    f"{', '.join(str(s) for s in sizes) or 'no'} GPUs")
        return None
    need = demand.bundles[0]
    if not any(n.gpus >= need for n in alive):
        best = max((n.gpus for n in alive), default=0)
        return f"arm {demand.arm} asks for {demand.describe()}; the largest node has {best} GPUs"
    return None
