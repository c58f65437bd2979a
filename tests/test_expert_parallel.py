"""Expert parallelism (EP = TP x DP): the planner's experts and memory per GPU, the cost
model's all-to-all and expert work, the flags, and what is refused."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from servelab.engine.vllm import VllmLauncher
from servelab.errors import ServelabError
from servelab.experiment.arms import arm_launch
from servelab.experiment.specfile import load_spec
from servelab.hardware.catalog import get_gpu
from servelab.models import load_model
from servelab.models.weights import linear_bytes, weight_bytes_per_gpu
from servelab.plan import EngineArgs, plan_memory
from servelab.sim.cost import kernel_times
from servelab.sim.operators import OperatorModel

H200 = get_gpu("H200")
QWEN_MOE = load_model("Qwen/Qwen3-30B-A3B")  # 128 experts, top 8, hidden 2048, 48 layers
OLMOE = load_model("allenai/OLMoE-1B-7B-0924")  # 64 experts, top 8, hidden 2048


def _expert_bytes(model) -> float:
    return sum(linear_bytes(model, s, model.weight_format) for s in model.linear_shapes()
               if s.role == "expert")


def test_ep_holds_whole_experts_per_gpu_and_redundant_ones_cost_memory() -> None:
    dense_part = weight_bytes_per_gpu(QWEN_MOE, 1) - _expert_bytes(QWEN_MOE)
    ep4 = weight_bytes_per_gpu(QWEN_MOE, 1, 1, expert_parallel=4)
    assert ep4 == pytest.approx(dense_part + _expert_bytes(QWEN_MOE) * 32 / 128, abs=2)
    # 32 redundant experts over 4 ranks: 8 more whole experts per GPU
    ep4r = weight_bytes_per_gpu(QWEN_MOE, 1, 1, expert_parallel=4, redundant_experts=32)
    assert ep4r - ep4 == pytest.approx(_expert_bytes(QWEN_MOE) * 8 / 128, abs=2)
    plan = plan_memory(QWEN_MOE, H200, EngineArgs(data_parallel_size=4, enable_expert_parallel=True,
                                                  num_redundant_experts=32))
    assert plan.fits and plan.expert_parallel_size == 4 and plan.experts_per_gpu == 40
    assert plan_memory(QWEN_MOE, H200, EngineArgs()).experts_per_gpu == 128
    assert plan_memory(load_model("Qwen/Qwen3-14B"), H200, EngineArgs()).experts_per_gpu is None


def test_ep_is_refused_where_vllm_has_nothing_to_split() -> None:
    dense = plan_memory(load_model("Qwen/Qwen3-14B"), H200, EngineArgs(enable_expert_parallel=True))
    assert not dense.fits and "needs a MoE model" in dense.reason
    lone = plan_memory(QWEN_MOE, H200, EngineArgs(num_redundant_experts=8))
    assert not lone.fits and "--num-redundant-experts needs --enable-expert-parallel" in lone.reason


def test_one_expert_per_gpu_with_uniform_routing_has_the_formulas_all_to_all() -> None:
    # OLMoE's 64 experts over EP = 1 x 64 DP ranks: one expert per GPU
    args = EngineArgs(data_parallel_size=64, enable_expert_parallel=True)
    kt = kernel_times(H200, None)
    ops = OperatorModel(OLMOE, H200, args, kt)
    assert ops.ep == 64 and ops.local_experts == 1
    m = 128
    # dispatch + combine of 128 tokens x top 8 x hidden 2048 x 2 B, the 63/64 not local
    assert ops.all_to_all_bytes(m) == pytest.approx(2 * 128 * 8 * 2048 * 2 * 63 / 64)
    no_ep = OperatorModel(OLMOE, H200, EngineArgs(), kt)
    assert no_ep.all_to_all_bytes(m) == 0.0
    # the MoE part of a layer: the router, the busiest GPU's pairs (all 64 ranks' tokens x 8
    # / 64 = 1,024) on its one expert, and the two transfers over NVLink
    link = H200.interconnect
    moe_layer = (kt.gemm_s("bf16", m, 64, 2048) + kt.moe_s(1024, 1, 1, 2048, OLMOE.moe_intermediate)
                 + 2 * (ops.all_to_all_bytes(m) / 2 / (link.unidirectional_gbs * 1e9)
                        + link.allreduce_latency_us * 1e-6))
    base = OperatorModel(OLMOE, H200, args, kt)
    base.moe_layers = 0  # the rest of the step, without MoE layers
    assert ops.tokens_s(m) - base.tokens_s(m) == pytest.approx(moe_layer * OLMOE.moe_layers)


def test_skew_adds_the_busiest_gpus_extra_pairs() -> None:
    args = EngineArgs(data_parallel_size=4, enable_expert_parallel=True)
    kt = kernel_times(H200, None)
    even = OperatorModel(QWEN_MOE, H200, args, kt)
    hot = OperatorModel(QWEN_MOE, H200, args, kt, expert_skew=1.0)
    m, pairs = 256, 256 * 4 * 8 // 4
    extra = (kt.moe_s(2 * pairs, 32, 1, 2048, QWEN_MOE.moe_intermediate)
             - kt.moe_s(pairs, 32, 1, 2048, QWEN_MOE.moe_intermediate))
    assert hot.tokens_s(m) - even.tokens_s(m) == pytest.approx(extra * QWEN_MOE.moe_layers)


SPEC = """\
name: ep
engine: {engine}
hardware: {{gpu: H200}}
model: Qwen/Qwen3-30B-A3B
arms:
  - name: ep
    tensor_parallel_size: 2
    replicas: {replicas}
    args: {{enable_expert_parallel: true}}
workloads: [{{name: r, dataset_name: random}}]
loads: {{concurrency: [1]}}
"""


def test_vllm_gets_the_expert_parallel_flag(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SPEC.format(engine="vllm", replicas=1))
    spec = load_spec(path)
    args = VllmLauncher().engine_args(arm_launch(spec, spec.arm("ep")), 0)
    assert "--enable-expert-parallel" in args
    assert args[args.index("--tensor-parallel-size") + 1] == "2"


def test_dp_ranks_of_ep_on_a_real_engine_are_refused_by_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SPEC.format(engine="vllm", replicas=2))
    with pytest.raises(ServelabError, match=r"s.yaml:\d+: arms\[0\].replicas: expert parallelism over DP ranks"):
        load_spec(path)
    path.write_text(SPEC.format(engine="sim", replicas=2))
    arm = load_spec(path).arm("ep")
    # the DP ranks of one EP engine share its experts: the client never splits them
    assert arm.replicas == 2 and arm.routing == "direct" and not arm.client_splits


def test_sim_replicas_are_the_dp_ranks_of_one_ep_engine() -> None:
    from servelab.sim.setup import SimOptions, build_cluster
    import random

    opts = SimOptions("Qwen/Qwen3-30B-A3B", "H200", None, EngineArgs(enable_expert_parallel=True),
                      replicas=4, router_policy="round_robin")
    cluster = build_cluster(opts, random.Random(0))
    ops = cluster.engines[0].cost.ops
    assert len(cluster.engines) == 4 and ops.ep == 4 and ops.local_experts == 32
    assert math.isclose(cluster.engines[0].memory.weights_gib,
                        plan_memory(QWEN_MOE, H200, EngineArgs(data_parallel_size=4,
                                                               enable_expert_parallel=True)).weights_gib)


def test_the_planners_roofline_counts_the_all_to_all_and_the_local_experts() -> None:
    from servelab.models.costs import weights_read_bytes
    from servelab.plan.roofline import allreduce_time_s

    args = EngineArgs(data_parallel_size=4, enable_expert_parallel=True)
    link = H200.interconnect
    sent = 64 * 8 * 2048 * 2 * 3 / 4
    want = 2 * 48 * (sent / (link.unidirectional_gbs * 1e9) + link.allreduce_latency_us * 1e-6)
    assert allreduce_time_s(QWEN_MOE, H200, args, 64) == pytest.approx(want)
    assert allreduce_time_s(QWEN_MOE, H200, EngineArgs(), 64) == 0.0
    # a GPU holding a quarter of the experts reads at most a quarter of the experts' bytes
    full = weights_read_bytes(QWEN_MOE, 4096)
    quarter = weights_read_bytes(QWEN_MOE, 1024, 1, 1, 4, 4)
    assert full - quarter == pytest.approx(_expert_bytes(QWEN_MOE) * 3 / 4, rel=1e-3)


def test_an_ep_shape_starts_its_search_at_the_fewest_dp_ranks_that_fit() -> None:
    from servelab.fleet.deployment import Shape
    from servelab.fleet.space import Traffic, read_ceilings

    big = load_model("Qwen/Qwen3-235B-A22B")  # ~438 GiB of bf16 weights
    traffic = Traffic(1.0, 100, 100, 200)
    c = read_ceilings("Qwen/Qwen3-235B-A22B", H200, Shape(None, 1, expert_parallel=True), traffic, {}, 8)
    fits = [r for r in range(1, 9)
            if plan_memory(big, H200, EngineArgs(data_parallel_size=r, enable_expert_parallel=True)).fits]
    assert c.reason is None and c.min_replicas == fits[0] > 1
    # without EP the same model does not fit one H200 at all
    assert not read_ceilings("Qwen/Qwen3-235B-A22B", H200, Shape(None), traffic, {}, 8).runs


def test_a_deployment_that_does_not_start_fails_its_evaluation_with_the_reason() -> None:
    from servelab.fleet.deployment import Deployment, Shape
    from servelab.fleet.evaluate import SimTarget, evaluate_one
    from servelab.sim.offline import prepare_workload
    from servelab.sweep.slo import parse_slo
    from servelab.workload.arrivals import ArrivalOptions
    from servelab.workload.datasets import DatasetOptions

    wl = prepare_workload(DatasetOptions(dataset_name="random", random_input_len=16,
                                         random_output_len=4, num_prompts=4), 0, ArrivalOptions())
    target = SimTarget("Qwen/Qwen3-235B-A22B", "H200", wl, parse_slo(["tpot:50"], 99.0), 0, 18)
    e = evaluate_one(target, Deployment(Shape(None, 1, expert_parallel=True), 1))
    assert not e.meets_slo and e.failed_why.startswith("does not start:")
