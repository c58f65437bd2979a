"""Known-answer tests of the step-time roofline (servelab.plan.roofline)."""

from __future__ import annotations

import pytest

from servelab.hardware.catalog import get_gpu
from servelab.models import load_model
from servelab.models.costs import expected_experts_touched
from servelab.models.weights import checkpoint_bytes
from servelab.plan import EngineArgs
from servelab.plan.compare import Arm, read_arm, verdict
from servelab.plan.roofline import (
    Efficiency,
    StepShape,
    decode_ceiling_tok_s,
    decode_step,
    mbu,
    prefill_time_s,
    step_time,
)


def test_llama_70b_tp4_h100_single_request_ceiling():
    # DOMAIN.md 5: 4 x 3.35 TB/s / 141 GB ~ 95 tok/s (bandwidth term alone).
    model, gpu = load_model("llama-3.3-70b"), get_gpu("H100")
    args = EngineArgs(tensor_parallel_size=4)
    step = decode_step(model, gpu, args, 1, 0)
    assert 1 / step.memory_s == pytest.approx(4 * 3.35e12 / 141.1e9, rel=0.03)
    # 160 all-reduces over NVLink add their latency: the ceiling stays near 95
    assert step.allreduce_s == pytest.approx(160 * (8192 * 2 * 1.5 / 450e9 + 5e-6))
    assert decode_ceiling_tok_s(model, gpu, args) == pytest.approx(95, rel=0.1)


def test_single_gpu_decode_is_weights_over_bandwidth():
    model, gpu, args = load_model("Qwen/Qwen3-14B"), get_gpu("H200"), EngineArgs()
    step = decode_step(model, gpu, args, 1, 0)
    # weights minus the embedding table (a lookup) plus one row, plus the KV written
    expected = checkpoint_bytes(model) - 2 * 151936 * 5120 + 2 * 5120 + 163_840
    assert step.bytes_read == expected
    assert step.memory_s == pytest.approx(expected / 4.8e12)
    assert step.allreduce_s == 0 and step.total_s == step.memory_s and step.bound == "memory"


def test_kv_read_grows_with_batch_context_and_efficiency_scales():
    model, gpu, args = load_model("Qwen/Qwen3-14B"), get_gpu("H200"), EngineArgs()
    a = decode_step(model, gpu, args, 8, 1000)
    b = decode_step(model, gpu, args, 8, 2000)
    assert b.bytes_read - a.bytes_read == 8 * 1000 * 163_840
    half = decode_step(model, gpu, args, 8, 1000, Efficiency(bandwidth_frac=0.5))
    assert half.memory_s == pytest.approx(2 * a.memory_s)


def test_prefill_is_compute_bound_and_counts_attention():
    model, gpu, args = load_model("Qwen/Qwen3-14B"), get_gpu("H200"), EngineArgs()
    step = step_time(model, gpu, args, StepShape(prefill_tokens=4096,
                                                 prefill_context_tokens=4096 * 4097 // 2))
    assert step.bound == "compute"
    linear = 2 * model.active_params * 4096
    assert step.flops == pytest.approx(linear + 4 * 40 * 128 * 40 * 4096 * 4097 / 2)
    # two chunks of 4096 cost the same FLOPs as one 8192 prefill, weights read twice
    one = prefill_time_s(model, gpu, args, 8192, chunk_tokens=8192)
    two = prefill_time_s(model, gpu, args, 8192, chunk_tokens=4096)
    assert two == pytest.approx(one, rel=0.02)


def test_mbu_inverts_the_step():
    model, gpu, args = load_model("Qwen/Qwen3-14B"), get_gpu("H200"), EngineArgs()
    step = decode_step(model, gpu, args, 4, 1100)
    assert mbu(model, gpu, args, step.memory_s * 1e3, 4, 1100) == pytest.approx(1.0)
    assert mbu(model, gpu, args, 2 * step.memory_s * 1e3, 4, 1100) == pytest.approx(0.5)


def test_moe_bytes_follow_experts_touched():
    model, gpu, args = load_model("Qwen/Qwen3-30B-A3B"), get_gpu("H200"), EngineArgs()
    assert expected_experts_touched(model, 1) == pytest.approx(8)
    one, many = decode_step(model, gpu, args, 1, 0), decode_step(model, gpu, args, 256, 0)
    experts = 48 * 128 * 3 * 2048 * 768 * 2  # routed expert bytes, bf16
    assert many.bytes_read - one.bytes_read == pytest.approx(
        experts * (expected_experts_touched(model, 256) - 8) / 128 + 255 * (2 * 2048 + 98_304), rel=1e-6)


def test_pipeline_stages_split_layers():
    model, gpu = load_model("Qwen/Qwen3-14B"), get_gpu("H200")
    one = decode_step(model, gpu, EngineArgs(), 1, 0)
    pp2 = decode_step(model, gpu, EngineArgs(pipeline_parallel_size=2), 1, 0)
    assert pp2.pipeline_stages == 2 and pp2.memory_s < 0.6 * one.memory_s
    assert pp2.token_latency_s == pytest.approx(one.total_s, rel=0.1)


def test_what_if_tp_vs_replicas_reading():
    model, gpu = load_model("Qwen/Qwen3-14B"), get_gpu("L40S")
    base = EngineArgs(gpu_memory_utilization=0.9)
    arms = [Arm("tp2", model, gpu, base.model_copy(update={"tensor_parallel_size": 2})),
            Arm("2rep", model, gpu, base.model_copy(update={"data_parallel_size": 2})),
            Arm("1gpu", model, gpu, base)]
    small = [read_arm(a, 8, 2048) for a in arms]
    assert all(r.holds_target for r in small)
    assert "replicas win" in verdict(small, 8)[0]
    big = [read_arm(a, 64, 8192) for a in arms]
    assert not big[1].holds_target and big[1].binding == "capacity"
    assert "TP's pooled KV wins" in verdict(big, 64)[0]
    # bandwidth-bound decode: TP2 reads half the weights per GPU per step
    assert small[0].tok_per_gpu_s > 0 and small[1].binding == "memory"


def test_arm_planner_compares_itl_with_the_token_interval_under_pipeline_parallelism(tmp_path) -> None:
    """With PP the batch runs as PP micro-batches and a token passes every stage: the time
    between a sequence's tokens is PP x the micro-batch stage step, i.e. batch / the
    replica's decode throughput (found on the H200 pair: the diagnosis had compared PP2's
    ITL with one stage's step and read 27 % of the roofline)."""
    from servelab.experiment.planning import ArmPlanner
    from servelab.plan.roofline import decode_throughput_tok_s

    spec = _two_arms(tmp_path, "pp2\n    pipeline_parallel_size: 2")
    pp2 = ArmPlanner.for_arm(spec, spec.arm("pp2"), "H200")
    step = pp2.decode_step(33, 310)
    assert step["batch"] == 33
    assert step["token_interval_ms"] == pytest.approx(2 * step["step_ms"])
    rate = decode_throughput_tok_s(pp2.model, pp2.gpu, pp2.args, 33, 310)
    assert step["token_interval_ms"] == pytest.approx(33 / rate * 1e3)
    # Without PP the interval is the step.
    tp1 = ArmPlanner.for_arm(spec, spec.arm("tp1"), "H200").decode_step(33, 310)
    assert tp1["token_interval_ms"] == tp1["step_ms"]


def test_the_stored_decode_step_splits_the_all_reduce_into_latency_and_traffic(tmp_path) -> None:
    """A verification step's rows grow the all-reduce's traffic, not its calls: the step a
    cell stores keeps the traffic part. Known answer on TP = 2 over the H200's NVLink: the
    rest is 2 all-reduces per layer x 40 layers x the link's latency per call."""
    from servelab.experiment.planning import ArmPlanner

    spec = _two_arms(tmp_path, "tp2\n    tensor_parallel_size: 2")
    tp2 = ArmPlanner.for_arm(spec, spec.arm("tp2"), "H200")
    step = tp2.decode_step(64, 300)
    latency_ms = 2 * tp2.model.layers * tp2.gpu.interconnect.allreduce_latency_us * 1e-3
    assert tp2.model.layers == 40
    assert step["allreduce_ms"] - step["allreduce_traffic_ms"] == pytest.approx(latency_ms)
    wire_ms = 64 * tp2.model.hidden * 2 * 2 * (2 - 1) / 2 / (tp2.gpu.interconnect.unidirectional_gbs * 1e9) * 1e3
    assert step["allreduce_traffic_ms"] == pytest.approx(2 * 40 * wire_ms)
    tp1 = ArmPlanner.for_arm(spec, spec.arm("tp1"), "H200").decode_step(64, 300)
    assert tp1["allreduce_ms"] == tp1["allreduce_traffic_ms"] == 0.0


def _two_arms(tmp_path, arm: str):  # type: ignore[no-untyped-def]
    """A simulated Qwen3-14B spec on an H200 with arm `arm` (its YAML after `name: `) and a
    plain `tp1`."""
    from servelab.experiment import load_spec

    spec_path = tmp_path / "s.yaml"
    spec_path.write_text(
        "name: s\nengine: sim\nhardware: {gpu: H200}\nmodel: Qwen/Qwen3-14B\n"
        f"arms:\n  - name: {arm}\n  - name: tp1\n"
        "workloads:\n  - {name: r, dataset_name: random, random_input_len: 32, random_output_len: 8}\n"
        "loads: {concurrency: [1], num_prompts: 1}\n")
    return load_spec(spec_path)
