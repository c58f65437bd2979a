"""What GPUs this machine has, right now: through NVML, else `nvidia-smi`, else none.

Step 1 of the playbook: name and compute capability (FP8 needs 8.9 or newer), memory
total/used/free, driver and CUDA versions, performance state (P0 busy ... P8 idle),
utilization, power, the GPU-to-GPU links, and the catalog entry the GPU matches (for its
datasheet bandwidth and FLOP/s), and the host's CPU (`servelab.hardware.host`: its model
and single-thread Python speed). A machine without a GPU is an answer, not an error:
``source="none"`` and ``message="no NVIDIA GPU found"``.

Both back ends are injected so tests replay recorded outputs: ``runner`` returns the
stdout of an argv (raising `OSError` or `subprocess.SubprocessError` when the command is
missing or fails), ``nvml`` is the `pynvml` module or anything with the same functions.
"""

from __future__ import annotations

import csv
import re
import subprocess
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from servelab.errors import ServelabError
from servelab.hardware.catalog import match_gpu
from servelab.hardware.host import HostInfo, probe_host
from servelab.hardware.topology import Topology, parse_topology

NO_GPU_MESSAGE = "no NVIDIA GPU found"
FP8_MIN_CAPABILITY = (8, 9)
_MIB = 1 << 20
_SMI_FIELDS = (
    "index,name,uuid,compute_cap,memory.total,memory.used,memory.free,driver_version,"
    "pstate,utilization.gpu,power.draw,power.limit,pci.bus_id"
)
_CUDA_VERSION = re.compile(r"CUDA Version\s*:\s*(\d+\.\d+)")


class CommandRunner(Protocol):
    """Runs a command and returns its stdout; raises OSError/SubprocessError on failure."""

    def __call__(self, argv: Sequence[str]) -> str: ...


class NvmlApi(Protocol):
    """The part of `pynvml` (nvidia-ml-py) the probe calls."""

    NVMLError: type[Exception]

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetPerformanceState(self, handle: Any) -> int: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...


class GpuInfo(BaseModel):
    """One GPU as the driver reports it (memory in MiB, power in W)."""

    model_config = ConfigDict(extra="forbid")

    index: int
    name: str
    uuid: str | None
    pci_bus_id: str | None
    compute_capability: str | None
    fp8_supported: bool | None
    memory_total_mib: int | None
    memory_used_mib: int | None
    memory_free_mib: int | None
    driver_version: str | None
    cuda_version: str | None
    pstate: str | None
    utilization_pct: int | None
    power_w: float | None
    power_limit_w: float | None
    catalog_name: str | None


class ProbeResult(BaseModel):
    """Everything the probe found; ``notes`` says what was tried and failed on the way."""

    model_config = ConfigDict(extra="forbid")

    source: Literal["nvml", "nvidia-smi", "none"]
    gpus: list[GpuInfo]
    topology: Topology | None
    message: str | None
    notes: list[str]
    host: HostInfo | None = None  # the host's CPU (None in records written before it was probed)


def run_command(argv: Sequence[str]) -> str:
    """Run argv (10 s limit) and return stdout; raises on a missing command or failure."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=10, check=True)
    return done.stdout


def fp8_supported(compute_capability: str | None) -> bool | None:
    """FP8 tensor cores need compute capability 8.9 (Ada) or newer; None if unknown."""
    if compute_capability is None:
        return None
    major, _, minor = compute_capability.partition(".")
    return (int(major), int(minor or 0)) >= FP8_MIN_CAPABILITY


def _catalog_name(name: str, memory_mib: int | None) -> str | None:
    spec = match_gpu(name, memory_mib)
    return None if spec is None else spec.name


def _text(value: str | bytes) -> str:
    # nvidia-ml-py returned bytes before 11.5; accept both.
    return value.decode() if isinstance(value, bytes) else value


def _read_nvml(nvml: NvmlApi) -> list[GpuInfo]:
    nvml.nvmlInit()
    try:
        def get(fn: Callable[..., Any], *args: Any) -> Any:
            try:
                return fn(*args)
            except nvml.NVMLError:  # one unsupported query must not hide the rest
                return None

        driver = get(nvml.nvmlSystemGetDriverVersion)
        cuda_int = get(nvml.nvmlSystemGetCudaDriverVersion)
        cuda = None if cuda_int is None else f"{cuda_int // 1000}.{cuda_int % 1000 // 10}"
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(nvml.nvmlDeviceGetName(handle))
            cc = get(nvml.nvmlDeviceGetCudaComputeCapability, handle)
            cc_text = None if cc is None else f"{cc[0]}.{cc[1]}"
            mem = get(nvml.nvmlDeviceGetMemoryInfo, handle)
            pstate = get(nvml.nvmlDeviceGetPerformanceState, handle)
            util = get(nvml.nvmlDeviceGetUtilizationRates, handle)
            power_mw = get(nvml.nvmlDeviceGetPowerUsage, handle)
            limit_mw = get(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
            pci = get(nvml.nvmlDeviceGetPciInfo, handle)
            uuid = get(nvml.nvmlDeviceGetUUID, handle)
            total = None if mem is None else mem.total // _MIB
            gpus.append(
                GpuInfo(
                    index=index,
                    name=name,
                    uuid=None if uuid is None else _text(uuid),
                    pci_bus_id=None if pci is None else _text(pci.busId),
                    compute_capability=cc_text,
                    fp8_supported=fp8_supported(cc_text),
                    memory_total_mib=total,
                    memory_used_mib=None if mem is None else mem.used // _MIB,
                    memory_free_mib=None if mem is None else mem.free // _MIB,
                    driver_version=None if driver is None else _text(driver),
                    cuda_version=cuda,
                    # NVML says 32 for "unknown"; real states are 0..15.
                    pstate=f"P{pstate}" if pstate is not None and 0 <= pstate <= 15 else None,
                    utilization_pct=None if util is None else int(util.gpu),
                    power_w=None if power_mw is None else round(power_mw / 1000, 2),
                    power_limit_w=None if limit_mw is None else round(limit_mw / 1000, 2),
                    catalog_name=_catalog_name(name, total),
                )
            )
        return gpus
    finally:
        nvml.nvmlShutdown()


def _na(value: str) -> str | None:
    # nvidia-smi writes "[N/A]", "[Not Supported]", "N/A" for values it cannot read.
    return None if not value or value.startswith("[") or value == "N/A" else value


def _opt(value: str, conv: Callable[[str], Any]) -> Any:
    text = _na(value)
    return None if text is None else conv(text)


def parse_smi_query(text: str, cuda_version: str | None) -> list[GpuInfo]:
    """Parse `nvidia-smi --query-gpu=<_SMI_FIELDS> --format=csv,noheader,nounits`."""
    gpus = []
    names = _SMI_FIELDS.split(",")
    for number, row in enumerate(csv.reader(text.splitlines(), skipinitialspace=True), 1):
        if not row:
            continue
        if len(row) != len(names):
            raise ServelabError(
                f"nvidia-smi --query-gpu, line {number}: {len(row)} fields, expected {len(names)}"
            )
        v = dict(zip(names, (cell.strip() for cell in row), strict=True))
        total = _opt(v["memory.total"], int)
        gpus.append(
            GpuInfo(
                index=int(v["index"]),
                name=v["name"],
                uuid=_na(v["uuid"]),
                pci_bus_id=_na(v["pci.bus_id"]),
                compute_capability=_na(v["compute_cap"]),
                fp8_supported=fp8_supported(_na(v["compute_cap"])),
                memory_total_mib=total,
                memory_used_mib=_opt(v["memory.used"], int),
                memory_free_mib=_opt(v["memory.free"], int),
                driver_version=_na(v["driver_version"]),
                cuda_version=cuda_version,
                pstate=_na(v["pstate"]),
                utilization_pct=_opt(v["utilization.gpu"], int),
                power_w=_opt(v["power.draw"], float),
                power_limit_w=_opt(v["power.limit"], float),
                catalog_name=_catalog_name(v["name"], total),
            )
        )
    return gpus


def parse_cuda_version(smi_text: str) -> str | None:
    """The "CUDA Version: 13.0" of plain `nvidia-smi` (or `nvidia-smi -q`); None if absent."""
    match = _CUDA_VERSION.search(smi_text)
    return None if match is None else match.group(1)


def _read_smi(runner: CommandRunner) -> list[GpuInfo]:
    query = runner(["nvidia-smi", f"--query-gpu={_SMI_FIELDS}", "--format=csv,noheader,nounits"])
    return parse_smi_query(query, parse_cuda_version(runner(["nvidia-smi"])))


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip().rstrip(":")


def probe(runner: CommandRunner | None = None, nvml: NvmlApi | None = None,
          host: Callable[[], HostInfo] = probe_host) -> ProbeResult:
    """Probe the GPUs: NVML first, `nvidia-smi` if NVML fails; never raises for "no GPU".
    The host's CPU (`host`, default `probe_host`) is recorded beside them either way.

    ``runner`` defaults to `run_command`; ``nvml`` to the installed `pynvml` module.
    """
    run: CommandRunner = run_command if runner is None else runner
    notes: list[str] = []
    gpus: list[GpuInfo] = []
    source: Literal["nvml", "nvidia-smi", "none"] = "none"
    try:
        api = _load_nvml() if nvml is None else nvml
    except ImportError as exc:
        notes.append(f"NVML: {_why(exc)}")
    else:
        try:
            gpus = _read_nvml(api)
            source = "nvml"
        except api.NVMLError as exc:  # library or driver missing, no permission
            notes.append(f"NVML: {_why(exc)}")
    if not gpus:
        try:
            gpus = _read_smi(run)
            source = "nvidia-smi" if gpus else "none"
        except (OSError, subprocess.SubprocessError, ServelabError) as exc:
            notes.append(f"nvidia-smi: {_why(exc)}")
    if not gpus:
        return ProbeResult(source="none", gpus=[], topology=None, message=NO_GPU_MESSAGE, notes=notes,
                           host=host())
    topology = None
    try:
        topology = parse_topology(run(["nvidia-smi", "topo", "-m"]))
    except (OSError, subprocess.SubprocessError, ServelabError) as exc:
        notes.append(f"nvidia-smi topo -m: {_why(exc)}")
    return ProbeResult(source=source, gpus=gpus, topology=topology, message=None, notes=notes,
                       host=host())


def _load_nvml() -> NvmlApi:
    import pynvml

    return pynvml  # type: ignore[return-value]
