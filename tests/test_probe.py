"""GPU probe: recorded NVML answers and nvidia-smi outputs in, typed GPU facts out."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from servelab.errors import ServelabError
from servelab.hardware.catalog import get_gpu
from servelab.hardware.host import HostInfo, cpu_model, probe_host
from servelab.hardware.probe import (
    NO_GPU_MESSAGE,
    ProbeResult,
    fp8_supported,
    parse_cuda_version,
    parse_smi_query,
    probe,
)
from servelab.hardware.topology import classify_link, parse_topology

DATA = Path(__file__).parent / "data" / "probe"
QUERY_ARGV_PREFIX = "--query-gpu="


def _text(name: str) -> str:
    return (DATA / name).read_text()


class RecordedNvml:
    """Replays what NVML answered on a real machine (tests/data/probe/*-nvml.json)."""

    class NVMLError(Exception):
        pass

    def __init__(self, record: dict[str, Any] | None, init_error: str | None = None) -> None:
        self._record = record or {"devices": []}
        self._init_error = init_error
        self.shutdowns = 0

    def _value(self, entry: dict[str, Any]) -> Any:
        if "error" in entry:
            raise self.NVMLError(entry["error"])
        return entry["value"]

    def _device(self, handle: int, key: str) -> Any:
        return self._value(self._record["devices"][handle][key])

    def nvmlInit(self) -> None:
        if self._init_error is not None:
            raise self.NVMLError(self._init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._value(self._record["driver_version"])

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self._value(self._record["cuda_driver_version"])

    def nvmlDeviceGetCount(self) -> int:
        return len(self._record["devices"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self._device(handle, "name")

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._device(handle, "uuid")

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        major, minor = self._device(handle, "compute_capability")
        return major, minor

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(**self._device(handle, "memory"))

    def nvmlDeviceGetPerformanceState(self, handle: int) -> int:
        return self._device(handle, "performance_state")

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(**self._device(handle, "utilization"))

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self._device(handle, "power_usage_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return self._device(handle, "enforced_power_limit_mw")

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._device(handle, "pci_bus_id"))


def _nvml_record() -> dict[str, Any]:
    return json.loads(_text("h200x2-nvml.json"))


def _no_nvml() -> RecordedNvml:
    return RecordedNvml(None, init_error="NVML Shared Library Not Found")


class RecordedSmi:
    """Answers nvidia-smi argvs with outputs recorded on the 2 x H200 machine."""

    def __init__(self, topo_file: str = "h200x2-topo-m.txt") -> None:
        self.calls: list[list[str]] = []
        self._topo_file = topo_file

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls.append(list(argv))
        if list(argv) == ["nvidia-smi"]:
            return _text("h200x2-nvidia-smi.txt")
        if list(argv) == ["nvidia-smi", "topo", "-m"]:
            return _text(self._topo_file)
        if argv[1].startswith(QUERY_ARGV_PREFIX):
            return _text("h200x2-query-gpu.csv")
        raise subprocess.CalledProcessError(2, list(argv))


def _missing_smi(argv: Sequence[str]) -> str:
    raise FileNotFoundError(2, "No such file or directory", argv[0])


def test_nvml_path_on_recorded_h200_pair() -> None:
    nvml = RecordedNvml(_nvml_record())
    result = probe(runner=RecordedSmi(), nvml=nvml)
    assert result.source == "nvml"
    assert result.message is None
    assert nvml.shutdowns == 1
    assert [g.index for g in result.gpus] == [0, 1]
    gpu = result.gpus[0]
    assert gpu.name == "NVIDIA H200"
    assert gpu.uuid == "GPU-edeee4b3-62d0-3258-fcc5-5183157085b9"
    assert gpu.pci_bus_id == "00000000:00:06.0"
    assert gpu.compute_capability == "9.0"
    assert gpu.fp8_supported is True
    assert gpu.memory_total_mib == 143_771  # 150,754,820,096 B, as nvidia-smi prints it
    assert gpu.memory_free_mib == 143_155
    assert gpu.memory_used_mib == 615  # NVML v1 "used" includes the driver's reservation
    assert gpu.driver_version == "580.159.04"
    assert gpu.cuda_version == "13.0"  # 13000
    assert gpu.pstate == "P0"
    assert gpu.utilization_pct == 0
    assert gpu.power_w == 79.04
    assert gpu.power_limit_w == 700.0
    assert gpu.catalog_name == get_gpu("H200").name
    assert result.topology is not None and result.topology.summary == "nvlink"


def test_nvml_unsupported_query_leaves_only_that_field_empty() -> None:
    record = _nvml_record()
    record["devices"][1]["power_usage_mw"] = {"error": "Not Supported"}
    result = probe(runner=RecordedSmi(), nvml=RecordedNvml(record))
    assert result.gpus[1].power_w is None
    assert result.gpus[1].power_limit_w == 700.0
    assert result.gpus[0].power_w == 79.04


def test_nvidia_smi_fallback_when_nvml_fails() -> None:
    runner = RecordedSmi()
    result = probe(runner=runner, nvml=_no_nvml())
    assert result.source == "nvidia-smi"
    assert result.notes == ["NVML: NVMLError: NVML Shared Library Not Found"]
    assert len(result.gpus) == 2
    gpu = result.gpus[1]
    assert gpu.name == "NVIDIA H200"
    assert gpu.uuid == "GPU-193ba7d2-d5ab-c9f0-108c-9ffd3c2dd3ea"
    assert gpu.compute_capability == "9.0"
    assert gpu.fp8_supported is True
    assert gpu.memory_total_mib == 143_771
    assert gpu.memory_used_mib == 0
    assert gpu.memory_free_mib == 143_156
    assert gpu.driver_version == "580.159.04"
    assert gpu.cuda_version == "13.0"  # from the plain nvidia-smi header
    assert gpu.pstate == "P0"
    assert gpu.power_w == 108.70
    assert gpu.power_limit_w == 700.00
    assert gpu.catalog_name == get_gpu("H200").name
    assert ["nvidia-smi", "topo", "-m"] in runner.calls


def test_no_gpu_at_all() -> None:
    result = probe(runner=_missing_smi, nvml=_no_nvml())
    assert result.source == "none"
    assert result.gpus == []
    assert result.topology is None
    assert result.message == NO_GPU_MESSAGE == "no NVIDIA GPU found"
    assert result.notes[1] == "nvidia-smi: FileNotFoundError: [Errno 2] No such file or directory: 'nvidia-smi'"
    assert ProbeResult.model_validate_json(result.model_dump_json()) == result


def test_nvml_with_zero_devices_and_no_smi_is_no_gpu() -> None:
    record = _nvml_record()
    record["devices"] = []
    result = probe(runner=_missing_smi, nvml=RecordedNvml(record))
    assert result.source == "none" and result.message == NO_GPU_MESSAGE


def test_malformed_query_output_is_a_note_not_a_crash() -> None:
    def runner(argv: Sequence[str]) -> str:
        return "0, NVIDIA H200, 143771\n"

    result = probe(runner=runner, nvml=_no_nvml())
    assert result.source == "none"
    assert result.notes[1] == "nvidia-smi: ServelabError: nvidia-smi --query-gpu, line 1: 3 fields, expected 13"


def test_h200_table_and_q_fixtures_give_cuda_version() -> None:
    assert parse_cuda_version(_text("nvidia-smi-h200.txt")) == "13.0"
    assert parse_cuda_version(_text("nvidia-smi-q-h200.txt")) == "13.0"
    assert parse_cuda_version("no header here") is None


def test_query_csv_not_available_values() -> None:
    line = "0, NVIDIA L40S, [N/A], 8.9, 46068, 1, 45589, 550.54.15, P8, [Not Supported], [N/A], 350.00, 00000000:01:00.0\n"
    (gpu,) = parse_smi_query(line, cuda_version=None)
    assert gpu.uuid is None and gpu.utilization_pct is None and gpu.power_w is None
    assert gpu.memory_total_mib == 46_068 and gpu.pstate == "P8" and gpu.fp8_supported is True


@pytest.mark.parametrize(
    ("cc", "fp8"), [("9.0", True), ("8.9", True), ("8.6", False), ("7.5", False), ("12.0", True), (None, None)]
)
def test_fp8_needs_compute_capability_8_9(cc: str | None, fp8: bool | None) -> None:
    assert fp8_supported(cc) is fp8


def test_topology_recorded_two_h200_nvlink() -> None:
    topo = parse_topology(_text("h200x2-topo-m.txt"))
    assert topo.gpu_count == 2
    assert topo.matrix == [["X", "NV18"], ["NV18", "X"]]
    assert [(l.gpu_a, l.gpu_b, l.kind, l.link, l.nvlink_count) for l in topo.links] == [(0, 1, "NV18", "nvlink", 18)]
    assert topo.summary == "nvlink"
    assert topo.cpu_affinity == ["0-31", "0-31"]
    assert topo.numa_affinity == ["0", "0"]


def test_topology_pcie_host_node() -> None:
    topo = parse_topology(_text("pcie4-node-topo-m.txt"))
    assert topo.gpu_count == 4
    assert len(topo.links) == 6
    assert {l.kind for l in topo.links} == {"NODE"}
    assert {l.link for l in topo.links} == {"pcie"}
    assert topo.summary == "pcie"


def test_topology_nvswitch_host_nv18_with_nics() -> None:
    topo = parse_topology(_text("nvlink8-nv18-topo-m.txt"))
    assert topo.gpu_count == 8
    assert len(topo.links) == 28
    assert all(l.kind == "NV18" and l.nvlink_count == 18 for l in topo.links)
    assert topo.summary == "nvlink"
    assert topo.cpu_affinity[0] == "0-55,112-167" and topo.cpu_affinity[7] == "56-111,168-223"
    assert topo.numa_affinity == ["0"] * 4 + ["1"] * 4


def test_topology_mixed_and_single() -> None:
    mixed = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\nGPU0\t X \tNV4\tSYS\t0-7\nGPU1\tNV4\t X \tSYS\t0-7\nGPU2\tSYS\tSYS\t X \t8-15\n"
    topo = parse_topology(mixed)
    assert topo.summary == "mixed"
    assert topo.numa_affinity == [None, None, None]
    single = parse_topology("\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-15\t0\t\tN/A\n")
    assert single.summary == "none" and single.links == []


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("NV12", ("nvlink", 12)), ("PIX", ("pcie", None)), ("PXB", ("pcie", None)), ("PHB", ("pcie", None)),
     ("SYS", ("pcie", None)), ("SOC", ("pcie", None)), ("??", ("unknown", None))],
)
def test_classify_link(kind: str, expected: tuple[str, int | None]) -> None:
    assert classify_link(kind) == expected


def test_topology_garbage_names_the_problem() -> None:
    with pytest.raises(ServelabError, match="no header row with GPU0"):
        parse_topology("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def test_probe_cli_json_on_this_machine() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "servelab", "probe", "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = ProbeResult.model_validate_json(done.stdout)
    assert (result.source == "none") == (result.message == NO_GPU_MESSAGE)
    assert (result.source == "none") == (result.gpus == [])
    assert result.host is not None and result.host.python_loop_ns > 0


# The host's CPU (servelab.hardware.host): model from /proc/cpuinfo, the loop timed with an
# injected clock, and the record beside the GPUs.

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
"""


def test_cpu_model_is_the_first_model_name() -> None:
    assert cpu_model(CPUINFO) == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu_model("processor\t: 0\nvendor_id\t: AuthenticAMD\n") is None  # some VMs report none
    assert cpu_model("model name\t:   \n") is None


def test_probe_host_keeps_the_best_round_per_iteration() -> None:
    ticks = iter([0, 1_000, 2_000, 2_600, 10_000, 10_900])  # rounds of 1,000, 600 and 900 ns

    host = probe_host(clock_ns=lambda: next(ticks), cpuinfo=lambda: CPUINFO, iterations=100, rounds=3)
    assert host.python_loop_ns == 6.0  # 600 ns / 100 iterations
    assert (host.loop_iterations, host.loop_rounds) == (100, 3)
    assert host.cpu_model == "Intel(R) Xeon(R) Platinum 8480+"
    with pytest.raises(ValueError, match="must be >= 1"):
        probe_host(iterations=0)


def test_probe_records_the_host_beside_the_gpus() -> None:
    host = HostInfo(cpu_model="AMD EPYC 9654", logical_cpus=16, python_loop_ns=31.5,
                    loop_iterations=200_000, loop_rounds=5)
    none = probe(runner=_missing_smi, nvml=_no_nvml(), host=lambda: host)
    assert none.source == "none" and none.host == host
    found = probe(runner=RecordedSmi(), nvml=_no_nvml(), host=lambda: host)
    assert found.gpus and found.host == host
    assert ProbeResult.model_validate_json(found.model_dump_json()) == found
    # a record written before the host was probed still loads
    old = json.loads(none.model_dump_json())
    del old["host"]
    assert ProbeResult.model_validate(old).host is None
