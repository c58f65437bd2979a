"""What an arm asks a cluster for (`servelab.distributed.placement`), with known answers, and
the simulator's price of pipeline hops that cross nodes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from servelab.distributed.placement import NodeResources, demand_of, gpus_per_node, unplaceable
from servelab.errors import ServelabError
from servelab.experiment.spec import ExperimentSpec
from servelab.hardware.catalog import NODE_LINKS, get_gpu, node_layout
from servelab.models import load_model
from servelab.plan import EngineArgs
from servelab.sim.cost import OperatorCostModel, default_calibration, kernel_times


@dataclass(frozen=True)
class _Shape:
    decode_seqs: int
    decode_context_tokens: int
    prefill_tokens: int = 0
    prefill_context_tokens: int = 0
    prefill_seqs: int = 0
    draft_tokens: int = 0
    drafting_seqs: int = 0


def _spec(engine: str = "sim", per_node: int | None = 2, **arm: object) -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "name": "p", "engine": engine, "hardware": {"gpu": "H200"}, "model": "Qwen/Qwen3-0.6B",
        "cluster": {"gpus_per_node": per_node} if per_node else {},
        "arms": [{"name": "a", **arm}], "workloads": [{"name": "w"}], "loads": {"concurrency": [1]}})


NODES = [NodeResources("head", "h", 0), NodeResources("n1", "a", 2), NodeResources("n2", "b", 2),
         NodeResources("n3", "c", 2)]


def test_an_arm_that_fits_a_node_is_one_strict_pack_bundle() -> None:
    spec = _spec(replicas=2)
    d = demand_of(spec, spec.arms[0], 2)
    assert (d.bundles, d.strategy, d.gpus, d.exclusive) == ((2,), "STRICT_PACK", 2, False)
    assert d.ray_bundles() == [{"GPU": 2.0, "CPU": 1.0}]
    assert unplaceable(d, NODES) is None


def test_pipeline_stages_spread_over_nodes_tp_kept_inside() -> None:
    spec = _spec(pipeline_parallel_size=4)
    d = demand_of(spec, spec.arms[0], 2)
    assert (d.bundles, d.strategy) == ((2, 2), "STRICT_SPREAD")
    spec = _spec(tensor_parallel_size=2, pipeline_parallel_size=3)
    d = demand_of(spec, spec.arms[0], 4)  # two stages of TP2 per 4-GPU node, then one
    assert d.bundles == (4, 2) and d.warnings == ()
    spec = _spec(tensor_parallel_size=4)
    d = demand_of(spec, spec.arms[0], 2)  # TP wider than a node: whole nodes, and a warning
    assert d.bundles == (2, 2) and "wider than a node" in d.warnings[0]


def test_unplaceable_arms_say_what_they_asked_for() -> None:
    spec = _spec(pipeline_parallel_size=8)
    why = unplaceable(demand_of(spec, spec.arms[0], 2), NODES)
    assert why == ("arm a asks for 8 GPUs: 4 bundles of 2/2/2/2 GPUs on separate nodes; "
                   "the cluster's nodes have 2, 2, 2, 0 GPUs")
    spec = _spec(per_node=4, tensor_parallel_size=4)
    why = unplaceable(demand_of(spec, spec.arms[0], 4), NODES)
    assert why == "arm a asks for 4 GPU(s) on one node; the largest node has 2 GPUs"
    with pytest.raises(ServelabError, match=r"arm a: 2 replicas x TP 2 x PP 1 = 4 GPUs exceed one node's 2"):
        demand_of(_spec(replicas=2, tensor_parallel_size=2), _spec(replicas=2, tensor_parallel_size=2).arms[0], 2)


def test_sglang_across_nodes_is_one_process_per_node_with_equal_shares() -> None:
    sg = _spec("sglang", pipeline_parallel_size=4)
    d = demand_of(sg, sg.arms[0], 2)
    assert (d.bundles, d.strategy, d.per_node_processes, d.exclusive) == ((2, 2), "STRICT_SPREAD", True, False)
    assert d.describe() == "4 GPUs: 2 bundles of 2/2 GPUs on separate nodes, one engine process per node"
    sg = _spec("sglang", per_node=8, tensor_parallel_size=4, pipeline_parallel_size=3)
    assert demand_of(sg, sg.arms[0], 8).bundles == (6, 6)  # 12 GPUs: SGLang wants equal nodes, not 8 + 4
    sg = _spec("sglang", per_node=4, tensor_parallel_size=2, pipeline_parallel_size=5)
    assert demand_of(sg, sg.arms[0], 4).bundles == (2, 2, 2, 2, 2)  # 10 GPUs: 3 nodes cannot share them


def test_a_vllm_arm_across_nodes_runs_alone_on_its_ray_executor() -> None:
    spec = _spec("vllm", pipeline_parallel_size=4)
    d = demand_of(spec, spec.arms[0], 2)
    assert (d.exclusive, d.gpus, d.bundles) == (True, 4, (0,))
    assert d.ray_bundles() == [{"CPU": 1.0}]
    assert unplaceable(d, NODES) is None
    assert "the cluster has 6 GPUs" in (unplaceable(demand_of(_spec("vllm", pipeline_parallel_size=8),
                                                              _spec("vllm", pipeline_parallel_size=8).arms[0], 2), NODES) or "")


def test_a_vllm_arm_on_its_ray_executor_inside_one_node_also_runs_alone() -> None:
    spec = _spec("vllm", args={"distributed_executor_backend": "ray"})
    d = demand_of(spec, spec.arms[0], 2)
    assert (d.exclusive, d.gpus, d.ray_bundles()) == (True, 1, [{"CPU": 1.0}])


def test_gpus_per_node_defaults_to_the_largest_live_node() -> None:
    assert gpus_per_node(_spec(per_node=None), NODES + [NodeResources("gone", "x", 8, alive=False)]) == 2
    assert gpus_per_node(_spec(per_node=8), NODES) == 8


def test_node_layout_counts_the_hops_that_cross_nodes() -> None:
    lay = node_layout(8, "infiniband")
    assert (lay.node_hops(tp=1, pp=4), lay.node_hops(tp=4, pp=4), lay.node_hops(tp=8, pp=4)) == (0, 1, 3)
    assert lay.tp_crosses(16) and not lay.tp_crosses(8)
    with pytest.raises(ServelabError, match="node link 'myrinet'"):
        node_layout(8, "myrinet")


def test_a_pipeline_hop_across_nodes_costs_the_fabric_s_latency_and_bytes() -> None:
    """PP2 with one stage per node: the step differs from the one-node step by exactly one
    hop over the fabric minus one over NVLink (latency + M x hidden x 2 bytes / bandwidth)."""
    model, gpu = load_model("Qwen/Qwen3-14B"), get_gpu("H200")
    args = EngineArgs(pipeline_parallel_size=2)
    cal = default_calibration("H200")
    kernels = kernel_times(gpu, None)
    one = OperatorCostModel(model, gpu, args, cal, kernels)
    two = OperatorCostModel(model, gpu, args, cal, kernels, layout=node_layout(1, "ethernet"))
    shape = _Shape(decode_seqs=64, decode_context_tokens=64 * 1000)
    per_micro = 64 / 2  # two micro-batches of the 64 sequences
    fabric, nvlink = NODE_LINKS["ethernet"], gpu.interconnect
    want = ((fabric.latency_us - nvlink.allreduce_latency_us) * 1e-6
            + per_micro * model.hidden * 2 * (1 / (fabric.bandwidth_gbs * 1e9) - 1 / (nvlink.unidirectional_gbs * 1e9)))
    assert two.step_duration_s(shape) - one.step_duration_s(shape) == pytest.approx(want, rel=1e-9)


def test_sim_flags_place_a_replica_across_nodes_and_refuse_a_bad_count() -> None:
    from servelab.cli.engine_flags import engine_options

    base = dict(model="Qwen/Qwen3-14B", gpu="H200", quantization=None, max_num_seqs=None,
                max_num_batched_tokens=None, max_model_len=None, gpu_memory_utilization=None,
                enable_prefix_caching=True, tensor_parallel_size=1, pipeline_parallel_size=2,
                block_size=None, kv_cache_dtype=None, replicas=1, router_policy="round_robin",
                calibration=None)
    opts = engine_options(**base, gpus_per_node=1, node_link="roce")
    assert opts.nodes == node_layout(1, "roce")
    assert engine_options(**base).nodes is None
    with pytest.raises(ServelabError, match=r"--gpus-per-node 0: must be >= 1"):
        engine_options(**base, gpus_per_node=0)
    with pytest.raises(ServelabError, match="node link 'fddi'"):
        engine_options(**base, gpus_per_node=1, node_link="fddi")


def test_an_online_sim_arm_carries_the_spec_s_time_scale_and_layout() -> None:
    from servelab.experiment.arms import arm_launch

    spec = ExperimentSpec.model_validate({
        "name": "p", "engine": "sim", "sim": {"mode": "online", "time_scale": 4},
        "hardware": {"gpu": "H200"}, "model": "Qwen/Qwen3-0.6B",
        "cluster": {"gpus_per_node": 2, "node_link": "ethernet"},
        "arms": [{"name": "a"}], "workloads": [{"name": "w"}], "loads": {"concurrency": [1]}})
    assert arm_launch(spec, spec.arms[0]).extra_args == [
        "--time-scale", "4.0", "--gpus-per-node", "2", "--node-link", "ethernet"]
