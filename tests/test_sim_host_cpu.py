"""The host's CPU in the simulator (`Calibration.on_host`, `--host-cpu-scale`,
`sim.host_cpu_scale`): every host figure scaled by the factor, the GPU's left alone."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from servelab.cli.engine_flags import engine_options
from servelab.errors import ServelabError
from servelab.experiment import load_spec
from servelab.experiment.arms import sim_calibration
from servelab.sim.cost import HOST_CPU_FIELDS, Calibration, default_calibration
from servelab.sim.scheduler import ScheduledStep
from servelab.sim.setup import build_cluster


def _options(scale: float = 1.0, calibration: Path | None = None):
    return engine_options(model="Qwen/Qwen3-14B", gpu="H200", quantization=None, max_num_seqs=None,
                          max_num_batched_tokens=None, max_model_len=8192, gpu_memory_utilization=None,
                          enable_prefix_caching=True, tensor_parallel_size=1, pipeline_parallel_size=1,
                          block_size=None, kv_cache_dtype=None, replicas=1, router_policy="round_robin",
                          calibration=calibration, host_cpu_scale=scale)


def test_every_float_figure_is_either_the_hosts_or_the_gpus() -> None:
    # a new figure must be classified: host CPU (scaled) or not
    floats = {name for name, f in Calibration.model_fields.items() if f.annotation in (float, "float")}
    assert floats - set(HOST_CPU_FIELDS) == {"gpu_time_scale", "per_prefill_token_us", "host_cpu_scale"}


def test_on_host_scales_the_host_figures_only() -> None:
    base = default_calibration("H200")
    slow = base.on_host(1.5)
    for name in HOST_CPU_FIELDS:
        assert getattr(slow, name) == getattr(base, name) * 1.5, name
    assert slow.gpu_time_scale == base.gpu_time_scale
    # the GPU's time per prefill token (measured in served prefill steps) is not the host's
    assert slow.per_prefill_token_us == base.per_prefill_token_us > 0
    assert (base.host_cpu_scale, slow.host_cpu_scale, slow.on_host(2.0).host_cpu_scale) == (1.0, 1.5, 3.0)
    assert slow.fitted_on == base.fitted_on
    with pytest.raises(ValueError, match="must be > 0"):
        base.on_host(0.0)


def test_the_flag_reaches_the_engines_and_the_api_server() -> None:
    base, slow = _options(), _options(2.0)
    assert base.calibration is None and slow.calibration is not None
    assert slow.calibration.host_cpu_scale == 2.0
    fast_cluster, slow_cluster = (build_cluster(o, random.Random(0)) for o in (base, slow))
    cal = default_calibration("H200")
    assert slow_cluster.network.frontend_us_per_request == 2 * cal.frontend_us_per_request
    assert slow_cluster.network.frontend_handoff_us == 2 * cal.frontend_handoff_us
    assert slow_cluster.network.request_overhead_ms == 2 * cal.request_overhead_ms
    fast, slow_cost = fast_cluster.engines[0].cost, slow_cluster.engines[0].cost
    assert slow_cost.source == fast.source + "; host CPU figures x2"
    # the GPU's part of a step does not move; a step priced on the host does
    step = ScheduledStep(reqs=[], num_new=[], decode_seqs=0, decode_context_tokens=0,
                         prefill_tokens=1024, prefill_context_tokens=0, preempted=0, prefill_seqs=1)
    assert slow_cost.parts(step).total_s == fast.parts(step).total_s
    assert slow_cost.step_duration_s(step) > fast.step_duration_s(step)


def test_the_flag_scales_a_calibration_file(tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    default_calibration("H200").model_copy(update={"request_overhead_ms": 4.0}).save(path)
    opts = _options(1.25, path)
    assert opts.calibration is not None and opts.calibration.request_overhead_ms == 5.0


@pytest.mark.parametrize("bad", [0.0, 0.1, 6.0])
def test_a_bad_scale_names_the_flag(bad: float) -> None:
    with pytest.raises(ServelabError, match=r"^--host-cpu-scale .*0\.2 to 5"):
        _options(bad)


def test_the_spec_key_scales_the_simulated_arms(tmp_path: Path) -> None:
    spec_path = tmp_path / "s.yaml"
    spec_path.write_text("name: h\nengine: sim\nhardware: {gpu: H200}\nmodel: Qwen/Qwen3-14B\n"
                         "sim: {host_cpu_scale: 1.5}\narms: [{name: a}]\n"
                         "workloads: [{name: r, dataset_name: random, random_input_len: 64, random_output_len: 8}]\n"
                         "loads: {concurrency: [1], num_prompts: 4}\n")
    cal = sim_calibration(load_spec(spec_path))
    assert cal is not None and cal.host_cpu_scale == 1.5
    assert cal.frontend_tokenize_us == 1.5 * default_calibration("H200").frontend_tokenize_us
    spec_path.write_text(spec_path.read_text().replace("1.5", "9"))
    with pytest.raises(ServelabError, match="host_cpu_scale"):
        load_spec(spec_path)
