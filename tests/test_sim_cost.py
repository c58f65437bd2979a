"""The cost model against the planner's roofline, and calibration files."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from servelab.errors import ServelabError
from servelab.hardware.catalog import get_gpu
from servelab.models import load_model
from servelab.plan import EngineArgs
from servelab.plan.roofline import Efficiency, StepShape, step_time
from servelab.sim.calibrate import nelder_mead
from servelab.sim.cost import Calibration, RooflineCostModel, default_calibration
from servelab.sim.engine import SimRequest, build_engine

CAL = Calibration(gpu_class="L40S", bandwidth_frac=0.8, compute_frac=0.5, overlap_penalty=0.0,
                  step_overhead_ms=2.0, per_seq_us=10.0, per_prefill_token_us=1.0,
                  request_overhead_ms=3.0)


def _roofline(model: str, gpu: str, args: EngineArgs, shape: StepShape, cal: Calibration) -> float:
    return step_time(load_model(model, None), get_gpu(gpu), args, shape,
                     Efficiency(cal.bandwidth_frac, cal.compute_frac)).total_s


@pytest.mark.parametrize("gpu", ["L40S", "H200"])
def test_linear_form_equals_the_planner_on_random_shapes(gpu: str) -> None:
    args = EngineArgs(tensor_parallel_size=2)
    cost = RooflineCostModel(load_model("Qwen/Qwen3-14B", None), get_gpu(gpu), args, CAL)
    assert cost.linear is not None
    rng = random.Random(0)
    for _ in range(50):
        d = rng.randrange(0, 64)
        p = rng.randrange(0, 4096)
        shape = StepShape(d, d * rng.randrange(1, 4000), p, p * rng.randrange(0, 8000))
        seqs = d + (1 if p else 0)
        want = (_roofline("Qwen/Qwen3-14B", gpu, args, shape, CAL) + 2e-3 + 10e-6 * seqs
                + 1e-6 * p)
        assert cost.step_duration_s(shape) == pytest.approx(want, rel=1e-9)


def test_decode_only_steps_of_the_engine_follow_the_roofline() -> None:
    args = EngineArgs()
    eng = build_engine("Qwen/Qwen3-14B", "L40S", None, args, CAL)
    for i in range(4):
        eng.add_request(SimRequest(f"r{i}", tuple(range(i * 100, i * 100 + 100)), 3, 0.0))
    eng.step(0.0)  # the four prefills
    for k in (1, 2):
        # Each of the 4 decodes attends to its 100 prompt tokens + k outputs.
        shape = StepShape(decode_seqs=4, decode_context_tokens=4 * (100 + k))
        want = _roofline("Qwen/Qwen3-14B", "L40S", args, shape, CAL) + 2e-3 + 4 * 10e-6
        assert eng.step(0.0).duration_s == pytest.approx(want, rel=1e-9)


def test_overlap_penalty_adds_that_share_of_the_smaller_term() -> None:
    args = EngineArgs()
    model, gpu = load_model("Qwen/Qwen3-14B", None), get_gpu("L40S")
    half = CAL.model_copy(update={"overlap_penalty": 0.5})
    shape = StepShape(decode_seqs=8, decode_context_tokens=8000, prefill_tokens=256,
                      prefill_context_tokens=256 * 257 // 2)
    st = step_time(model, gpu, args, shape, Efficiency(0.8, 0.5))
    base = RooflineCostModel(model, gpu, args, CAL).step_duration_s(shape)
    more = RooflineCostModel(model, gpu, args, half).step_duration_s(shape)
    assert more - base == pytest.approx(0.5 * min(st.memory_s, st.compute_s), rel=1e-9)


def test_pipeline_stages_run_one_after_another() -> None:
    model, gpu = load_model("Qwen/Qwen3-14B", None), get_gpu("H200")
    args = EngineArgs(pipeline_parallel_size=2)
    shape = StepShape(decode_seqs=1, decode_context_tokens=500)
    stage = step_time(model, gpu, args, shape, Efficiency(0.8, 0.5)).total_s
    got = RooflineCostModel(model, gpu, args, CAL).step_duration_s(shape)
    assert got == pytest.approx(2 * stage + 2e-3 + 10e-6, rel=1e-9)


def test_awq_weights_reach_less_bandwidth_than_bf16() -> None:
    args = EngineArgs()
    gpu = get_gpu("H200")
    shape = StepShape(decode_seqs=1, decode_context_tokens=1000)
    bf16 = RooflineCostModel(load_model("Qwen/Qwen3-14B", None), gpu, args, CAL)
    awq = RooflineCostModel(load_model("Qwen/Qwen3-14B", "awq"), gpu, args, CAL, "awq")
    awq_ideal = RooflineCostModel(load_model("Qwen/Qwen3-14B", "awq"), gpu, args, CAL)
    # AWQ reads ~4x fewer weight bytes, but at 0.45 of the bandwidth.
    assert awq_ideal.step_duration_s(shape) < awq.step_duration_s(shape) < bf16.step_duration_s(shape)


def test_calibration_round_trips_and_rejects_unknown_keys(tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    CAL.save(path)
    assert Calibration.load(path) == CAL
    data = json.loads(path.read_text())
    data["bogus"] = 1
    path.write_text(json.dumps(data))
    with pytest.raises(ServelabError, match="bogus"):
        Calibration.load(path)
    path.write_text("{not json")
    with pytest.raises(ServelabError, match="line 1"):
        Calibration.load(path)


def test_default_calibration_matches_gpu_class_names() -> None:
    assert default_calibration("NVIDIA L40S").gpu_class == "L40S"
    assert default_calibration("h200").gpu_class == "H200"


def test_nelder_mead_finds_a_quadratic_minimum() -> None:
    x, fx, _ = nelder_mead(lambda v: float(((v - [1.0, -2.0, 0.5]) ** 2).sum()),
                           __import__("numpy").zeros(3), 0.5, 400)
    assert x == pytest.approx([1.0, -2.0, 0.5], abs=1e-3)
    assert fx < 1e-6


def test_weight_format_factor_slows_weight_reads_only() -> None:
    # Known answer: memory = (weight bytes / 0.45 + KV bytes) / (peak x bandwidth_frac).
    from servelab.models.costs import weights_read_bytes

    args = EngineArgs()
    model, gpu = load_model("Qwen/Qwen3-14B", "awq"), get_gpu("H200")
    shape = StepShape(decode_seqs=32, decode_context_tokens=32 * 1000)
    st = step_time(model, gpu, args, shape, Efficiency(0.8, 0.5))
    weights_s = weights_read_bytes(model, 32) / (gpu.memory_bandwidth_gbs * 1e9 * 0.8)
    memory_s = st.memory_s + weights_s * (1 / 0.45 - 1)
    assert memory_s > st.compute_s  # a decode step: memory-bound
    got = RooflineCostModel(model, gpu, args, CAL, "awq").step_duration_s(shape)
    assert got == pytest.approx(memory_s + 2e-3 + 32 * 10e-6, rel=1e-9)


def test_kv_reads_cost_the_same_for_awq_and_bf16() -> None:
    # 16 more sequences' worth of context: the extra KV bytes stream at the base bandwidth
    # whatever the weight format, so the step grows by the same time.
    args, gpu = EngineArgs(), get_gpu("H200")
    short = StepShape(decode_seqs=16, decode_context_tokens=16 * 500)
    long = StepShape(decode_seqs=16, decode_context_tokens=16 * 4000)
    bf16 = RooflineCostModel(load_model("Qwen/Qwen3-14B", None), gpu, args, CAL)
    awq = RooflineCostModel(load_model("Qwen/Qwen3-14B", "awq"), gpu, args, CAL, "awq")
    grow_bf16 = bf16.step_duration_s(long) - bf16.step_duration_s(short)
    grow_awq = awq.step_duration_s(long) - awq.step_duration_s(short)
    kv_bytes = 160 * 1024 * 16 * 3500  # Qwen3-14B: 160 KiB per token
    assert grow_bf16 == pytest.approx(kv_bytes / (gpu.memory_bandwidth_gbs * 1e9 * 0.8), rel=1e-6)
    assert grow_awq == pytest.approx(grow_bf16, rel=1e-9)
