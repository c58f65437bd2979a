"""`sim calibrate` targets measured on their own deployment (one calibration across arms)."""

from __future__ import annotations

from dataclasses import replace

from servelab.plan import EngineArgs
from servelab.sim.calibrate import MeasuredCell, simulated_metrics
from servelab.sim.cost import Calibration
from servelab.sim.offline import prepare_workload
from servelab.sim.setup import SimOptions
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DatasetOptions

CAL = Calibration(gpu_class="H200", gpu_time_scale=1.2, step_overhead_ms=0.3, per_seq_us=20.0,
                  per_prefill_token_us=0.5, request_overhead_ms=10.0)


def _target(options: SimOptions | None) -> MeasuredCell:
    ds = DatasetOptions(dataset_name="random", num_prompts=6, random_input_len=64,
                        random_output_len=16)
    wl = prepare_workload(ds, 7, ArrivalOptions())
    return MeasuredCell("t", {"mean_itl_ms": 1.0}, wl, 7, 2, 0, options)


def test_a_target_with_options_is_simulated_on_its_own_deployment() -> None:
    bf16 = SimOptions("Qwen/Qwen3-14B", "H200", None, EngineArgs(), calibration=CAL)
    awq = replace(bf16, quantization="awq")
    own = simulated_metrics(bf16, _target(replace(awq, calibration=None)))
    direct = simulated_metrics(awq, _target(None))
    as_bf16 = simulated_metrics(bf16, _target(None))
    # The target's AWQ deployment runs with the calibration under trial (CAL), not its own.
    assert own == direct
    assert own["mean_itl_ms"] != as_bf16["mean_itl_ms"]
