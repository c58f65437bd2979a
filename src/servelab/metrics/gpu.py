"""Sampling local GPUs through NVML (utilization, memory, power) during a run.

`GpuSampler` reads every GPU (or the chosen indices) on an interval in a background
thread; NVML calls block, so they stay off the event loop. Without NVML or a GPU the
sampler reports `available=False` and why, and never raises.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU's reading. `t_s`: seconds since the sampler's origin; `power_w` is None
    where the board does not report power."""

    t_s: float
    gpu_index: int
    utilization_pct: float
    memory_used_mib: float
    memory_total_mib: float
    power_w: float | None


@dataclass(frozen=True, slots=True)
class GpuStats:
    """One GPU over the run. `energy_j` integrates power over time (trapezoids)."""

    gpu_index: int
    name: str
    num_samples: int
    mean_utilization_pct: float
    max_utilization_pct: float
    max_memory_used_mib: float
    memory_total_mib: float
    mean_power_w: float | None
    max_power_w: float | None
    energy_j: float | None


def _stats_for(index: int, name: str, samples: list[GpuSample]) -> GpuStats:
    utils = [s.utilization_pct for s in samples]
    powered = [s for s in samples if s.power_w is not None]
    powers = [s.power_w for s in powered if s.power_w is not None]
    energy = None
    if len(powered) >= 2:
        energy = sum(
            (b.t_s - a.t_s) * ((a.power_w or 0.0) + (b.power_w or 0.0)) / 2.0
            for a, b in zip(powered, powered[1:])
        )
    return GpuStats(
        gpu_index=index,
        name=name,
        num_samples=len(samples),
        mean_utilization_pct=sum(utils) / len(utils),
        max_utilization_pct=max(utils),
        max_memory_used_mib=max(s.memory_used_mib for s in samples),
        memory_total_mib=samples[-1].memory_total_mib,
        mean_power_w=sum(powers) / len(powers) if powers else None,
        max_power_w=max(powers) if powers else None,
        energy_j=energy,
    )


@dataclass(frozen=True, slots=True)
class GpuSeries:
    """All samples of a run; `names[i]` names GPU `indices[i]`."""

    available: bool
    reason: str | None
    indices: tuple[int, ...]
    names: tuple[str, ...]
    samples: tuple[GpuSample, ...]

    def per_gpu(self) -> tuple[GpuStats, ...]:
        """Per-GPU figures, for GPUs with at least one sample, in `indices` order."""
        out = []
        for index, name in zip(self.indices, self.names):
            mine = sorted((s for s in self.samples if s.gpu_index == index), key=lambda s: s.t_s)
            if mine:
                out.append(_stats_for(index, name, mine))
        return tuple(out)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reason": self.reason,
            "gpus": [
                {
                    "index": g.gpu_index,
                    "name": g.name,
                    "num_samples": g.num_samples,
                    "mean_utilization_pct": g.mean_utilization_pct,
                    "max_utilization_pct": g.max_utilization_pct,
                    "max_memory_used_mib": g.max_memory_used_mib,
                    "memory_total_mib": g.memory_total_mib,
                    "mean_power_w": g.mean_power_w,
                    "max_power_w": g.max_power_w,
                    "energy_j": g.energy_j,
                }
                for g in self.per_gpu()
            ],
            "series": {
                "t_s": [s.t_s for s in self.samples],
                "gpu_index": [s.gpu_index for s in self.samples],
                "utilization_pct": [s.utilization_pct for s in self.samples],
                "memory_used_mib": [s.memory_used_mib for s in self.samples],
                "power_w": [s.power_w for s in self.samples],
            },
        }


def _load_pynvml() -> ModuleType:
    import pynvml  # nvidia-ml-py; imported late so a broken install is a reason, not a crash

    return pynvml


class GpuSampler:
    """Samples NVML every `interval_s` seconds in a daemon thread between `start()` and
    `stop()`. `nvml` is the NVML binding (default: `pynvml`); tests may pass another
    object with the same functions. Times are seconds since `origin_s` on `clock`.
    """

    def __init__(
        self,
        interval_s: float = 1.0,
        *,
        indices: Sequence[int] | None = None,
        nvml: Any = None,
        clock: Callable[[], float] = time.perf_counter,
        origin_s: float | None = None,
    ) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._origin_s = clock() if origin_s is None else origin_s
        self._samples: list[GpuSample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handles: list[tuple[int, Any]] = []
        self._names: list[str] = []
        self._reason: str | None = None
        self._nvml = nvml
        self._closed = False
        self._open(indices)

    def _open(self, indices: Sequence[int] | None) -> None:
        try:
            if self._nvml is None:
                self._nvml = _load_pynvml()
            nv = self._nvml
            nv.nvmlInit()
            count = nv.nvmlDeviceGetCount()
            wanted = list(range(count)) if indices is None else list(indices)
            for i in wanted:
                if not 0 <= i < count:
                    raise ValueError(f"GPU index {i} not present ({count} GPUs)")
                handle = nv.nvmlDeviceGetHandleByIndex(i)
                name = nv.nvmlDeviceGetName(handle)
                self._handles.append((i, handle))
                self._names.append(name.decode() if isinstance(name, bytes) else str(name))
            if not self._handles:
                self._reason = "NVML found no GPU"
        except Exception as exc:  # noqa: BLE001 - any NVML failure means "no GPU data"
            self._handles.clear()
            self._names.clear()
            self._reason = f"NVML unavailable: {type(exc).__name__}: {exc}"

    @property
    def available(self) -> bool:
        return bool(self._handles)

    @property
    def reason(self) -> str | None:
        return self._reason

    def sample_once(self) -> tuple[GpuSample, ...]:
        """Read every GPU once and keep the readings; () when unavailable."""
        if not self._handles:
            return ()
        nv = self._nvml
        taken = []
        t_s = self._clock() - self._origin_s
        for index, handle in self._handles:
            util = nv.nvmlDeviceGetUtilizationRates(handle)
            mem = nv.nvmlDeviceGetMemoryInfo(handle)
            try:
                power_w: float | None = nv.nvmlDeviceGetPowerUsage(handle) / 1000.0  # mW
            except Exception:  # noqa: BLE001 - boards without power readout
                power_w = None
            taken.append(
                GpuSample(
                    t_s=t_s,
                    gpu_index=index,
                    utilization_pct=float(util.gpu),
                    memory_used_mib=mem.used / _MIB,
                    memory_total_mib=mem.total / _MIB,
                    power_w=power_w,
                )
            )
        with self._lock:
            self._samples.extend(taken)
        return tuple(taken)

    def start(self) -> None:
        """Begin sampling in the background (a no-op when unavailable)."""
        if not self._handles or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="servelab-gpu", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        next_due = self._clock()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as exc:  # noqa: BLE001 - a GPU that vanishes ends sampling
                self._reason = f"NVML sampling stopped: {type(exc).__name__}: {exc}"
                return
            next_due += self._interval_s
            self._stop.wait(max(0.0, next_due - self._clock()))

    def stop(self) -> GpuSeries:
        """Stop sampling, release NVML, and return the series."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._handles and not self._closed:
            self._closed = True
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down is best effort
                pass
        return self.series()

    def series(self) -> GpuSeries:
        with self._lock:
            samples = tuple(self._samples)
        return GpuSeries(
            available=bool(self._handles),
            reason=self._reason,
            indices=tuple(i for i, _ in self._handles),
            names=tuple(self._names),
            samples=samples,
        )
