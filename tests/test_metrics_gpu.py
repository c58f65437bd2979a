"""GPU sampling: the no-GPU path, and the figures computed from samples.

The sampling loop is driven through an NVML stand-in (the binding is the sampler's
injected transport); the real binding is exercised by the no-GPU test on machines
without a GPU and by the GPU validation run recorded in docs/metrics.md.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pynvml
import pytest

from servelab.metrics.gpu import GpuSample, GpuSampler, GpuSeries

MIB = 1024 * 1024


def _real_nvml_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_real_nvml_present(), reason="this machine has a GPU")
def test_no_gpu_means_unavailable_with_a_reason():
    sampler = GpuSampler(interval_s=0.01)
    assert not sampler.available
    assert "NVML" in sampler.reason
    assert sampler.sample_once() == ()
    sampler.start()
    series = sampler.stop()
    assert not series.available and series.samples == () and series.indices == ()
    assert series.to_json_dict()["gpus"] == []


class FakeNvml:
    """Two GPUs; GPU 1 does not report power. Utilization steps 10, 20, 30 ... per read."""

    def __init__(self, fail_init: Exception | None = None):
        self.fail_init = fail_init
        self.reads = 0
        self.shutdowns = 0

    def nvmlInit(self):
        if self.fail_init is not None:
            raise self.fail_init

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, handle):
        return b"FakeGPU" if handle == 0 else "FakeGPU-B"

    def nvmlDeviceGetUtilizationRates(self, handle):
        if handle == 0:
            self.reads += 1
        return SimpleNamespace(gpu=10 * self.reads, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=(1000 + handle) * MIB, total=80000 * MIB, free=0)

    def nvmlDeviceGetPowerUsage(self, handle):
        if handle == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 150_000 + 50_000 * self.reads  # mW


def test_init_failure_is_a_reason_not_an_exception():
    nv = FakeNvml(fail_init=pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    sampler = GpuSampler(nvml=nv)
    assert not sampler.available
    assert "NVML unavailable" in sampler.reason
    assert sampler.stop().samples == ()
    assert nv.shutdowns == 0


def test_missing_index_is_a_reason():
    sampler = GpuSampler(nvml=FakeNvml(), indices=[5])
    assert not sampler.available and "GPU index 5" in sampler.reason


def test_sample_once_reads_every_gpu():
    clock = iter([100.0, 100.5, 101.5])
    sampler = GpuSampler(nvml=FakeNvml(), clock=lambda: next(clock))
    assert sampler.available
    first = sampler.sample_once()
    second = sampler.sample_once()
    series = sampler.stop()
    assert series.names == ("FakeGPU", "FakeGPU-B")
    assert [s.t_s for s in first] == [0.5, 0.5]
    assert first[0].utilization_pct == 10.0 and second[0].utilization_pct == 20.0
    assert first[0].power_w == 200.0 and second[0].power_w == 250.0
    assert first[1].power_w is None
    assert first[1].memory_used_mib == 1001.0
    gpu0, gpu1 = series.per_gpu()
    # power 200 W then 250 W one second apart: (200 + 250) / 2 * 1 s
    assert gpu0.energy_j == pytest.approx(225.0)
    assert gpu1.mean_power_w is None and gpu1.energy_j is None


def test_background_thread_samples_until_stopped():
    nv = FakeNvml()
    sampler = GpuSampler(interval_s=0.001, nvml=nv, indices=[0])
    sampler.start()
    while nv.reads < 3:
        time.sleep(0.001)
    series = sampler.stop()
    assert nv.shutdowns == 1
    assert len(series.samples) == nv.reads  # one sample per read, none lost
    assert [s.utilization_pct for s in series.samples] == [10.0 * (i + 1) for i in range(nv.reads)]
    assert series.indices == (0,)


def test_per_gpu_figures_from_samples():
    samples = (
        GpuSample(0.0, 0, 10.0, 1000.0, 80000.0, 100.0),
        GpuSample(0.0, 1, 0.0, 500.0, 80000.0, None),
        GpuSample(1.0, 0, 50.0, 3000.0, 80000.0, 200.0),
        GpuSample(2.0, 0, 90.0, 2000.0, 80000.0, 300.0),
    )
    series = GpuSeries(True, None, (0, 1), ("A", "B"), samples)
    a, b = series.per_gpu()
    assert a.num_samples == 3
    assert a.mean_utilization_pct == pytest.approx(50.0)
    assert a.max_utilization_pct == 90.0
    assert a.max_memory_used_mib == 3000.0
    assert a.mean_power_w == pytest.approx(200.0)
    assert a.max_power_w == 300.0
    # trapezoids: (100 + 200) / 2 * 1 + (200 + 300) / 2 * 1
    assert a.energy_j == pytest.approx(400.0)
    assert (b.num_samples, b.max_utilization_pct, b.energy_j) == (1, 0.0, None)
    js = series.to_json_dict()
    assert [g["name"] for g in js["gpus"]] == ["A", "B"]
    assert js["series"]["gpu_index"] == [0, 1, 0, 0]
