"""GPU catalog: datasheet figures of common serving GPUs, matched by name.

Figures are dense (no 2:4 sparsity), per GPU. `memory_mib` is what `nvidia-smi` reports
as total; `cuda_reserved_mib` is what the driver keeps back (nvidia-smi -q "Reserved"), so
CUDA / torch / vLLM see `memory_mib - cuda_reserved_mib` as the device's total memory.
Interconnect bandwidth is the datasheet's bidirectional figure per GPU (NVLink 4: 900 GB/s;
PCIe 4.0 x16: 64 GB/s); one direction is half of it. Values that are not from a datasheet or
a measurement are listed in `estimated` per entry. Sources are named next to each entry.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Literal

from servelab.errors import ServelabError

FP8_MIN_CAPABILITY = (8, 9)


@dataclass(frozen=True, slots=True)
class Interconnect:
    """GPU-to-GPU link: NVLink generation or PCIe generation, bidirectional GB/s per GPU,
    and the fixed cost of one small all-reduce call over it (an estimate)."""

    kind: Literal["nvlink", "pcie", "fabric"]  # fabric: a network between nodes (`NodeLink`)
    generation: int
    bandwidth_gbs: float
    allreduce_latency_us: float

    @property
    def unidirectional_gbs(self) -> float:
        return self.bandwidth_gbs / 2

    def describe(self) -> str:
        if self.kind == "fabric":
            return f"fabric {self.bandwidth_gbs:g} GB/s"
        name = "NVLink" if self.kind == "nvlink" else "PCIe Gen"
        sep = " " if self.kind == "nvlink" else ""
        return f"{name}{sep}{self.generation} {self.bandwidth_gbs:g} GB/s"


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One GPU model's datasheet figures (dense TFLOP/s; memory in MiB as nvidia-smi shows).

    `dense_bf16_tflops` is the 16-bit tensor-core rate with FP32 accumulation (fp16 on T4,
    which has no bf16). `dense_fp8_tflops` is None where FP8 tensor cores are absent.
    """

    name: str
    aliases: tuple[str, ...]
    memory_mib: int
    cuda_reserved_mib: float
    memory_bandwidth_gbs: float
    dense_bf16_tflops: float
    dense_fp8_tflops: float | None
    dense_int8_tops: float
    compute_capability: str
    interconnect: Interconnect
    tdp_w: int
    source: str
    estimated: tuple[str, ...] = ()

    @property
    def fp8_supported(self) -> bool:
        major, _, minor = self.compute_capability.partition(".")
        return (int(major), int(minor or 0)) >= FP8_MIN_CAPABILITY

    @property
    def memory_gib(self) -> float:
        """Total memory as nvidia-smi reports it, in GiB."""
        return self.memory_mib / 1024

    @property
    def cuda_total_bytes(self) -> int:
        """What cudaMemGetInfo / torch report as total (vLLM's base for utilization)."""
        return int((self.memory_mib - self.cuda_reserved_mib) * 2**20)


def _nvl(gen: int, gbs: float) -> Interconnect:
    return Interconnect("nvlink", gen, gbs, 5.0)


def _pcie(gen: int) -> Interconnect:
    # x16 bidirectional: Gen3 32, Gen4 64, Gen5 128 GB/s (PCI-SIG); latency is an estimate.
    return Interconnect("pcie", gen, {3: 32.0, 4: 64.0, 5: 128.0}[gen], 15.0)


_RESERVE_EST = ("cuda_reserved_mib",)

_CATALOG: tuple[GPUSpec, ...] = (
    # NVIDIA T4 datasheet: 16 GB GDDR6 320 GB/s, 65 TFLOPS fp16 mixed, 130 TOPS int8, 70 W.
    GPUSpec("T4", ("Tesla T4", "NVIDIA T4"), 15360, 256, 320, 65, None, 130, "7.5", _pcie(3), 70,
            "NVIDIA T4 Tensor Core GPU datasheet", _RESERVE_EST),
    # NVIDIA L4 datasheet: 24 GB 300 GB/s, bf16 242 / fp8 485 / int8 485 with sparsity -> halved.
    GPUSpec("L4", ("NVIDIA L4",), 23034, 455, 300, 121, 242.5, 242.5, "8.9", _pcie(4), 72,
            "NVIDIA L4 Tensor Core GPU datasheet", ("memory_mib", *_RESERVE_EST)),
    # AWS A10G: no NVIDIA datasheet; figures of the A10 datasheet (24 GB 600 GB/s, bf16 125,
    # int8 250 dense, 150 W). The A10G runs lower clocks: treat compute and TDP as estimates.
    GPUSpec("A10G", ("NVIDIA A10G", "A10"), 23028, 305, 600, 125, None, 250, "8.6", _pcie(4), 150,
            "NVIDIA A10 Tensor Core GPU datasheet (A10G: AWS variant)",
            ("dense_bf16_tflops", "dense_int8_tops", "tdp_w", *_RESERVE_EST)),
    # NVIDIA L40S datasheet: 48 GB 864 GB/s, bf16 362.05, fp8 733, int8 733 dense, 350 W.
    GPUSpec("L40S", ("NVIDIA L40S",), 46068, 613, 864, 362.05, 733, 733, "8.9", _pcie(4), 350,
            "NVIDIA L40S datasheet; memory_mib measured (DOMAIN.md 4)", _RESERVE_EST),
    # NVIDIA A100 datasheet: bf16 312, int8 624 dense; NVLink 3 600 GB/s; SXM 400 W.
    GPUSpec("A100-SXM-40GB", ("NVIDIA A100-SXM4-40GB", "A100 40GB", "A100-40GB", "A100 SXM 40GB"),
            40960, 420, 1555, 312, None, 624, "8.0", _nvl(3, 600), 400,
            "NVIDIA A100 Tensor Core GPU datasheet", _RESERVE_EST),
    GPUSpec("A100-SXM-80GB", ("NVIDIA A100-SXM4-80GB", "A100 80GB", "A100-80GB", "A100",
                              "A100 SXM 80GB"),
            81920, 870, 2039, 312, None, 624, "8.0", _nvl(3, 600), 400,
            "NVIDIA A100 Tensor Core GPU datasheet", _RESERVE_EST),
    GPUSpec("A100-PCIE-40GB", ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"), 40960, 420, 1555, 312,
            None, 624, "8.0", _pcie(4), 250, "NVIDIA A100 Tensor Core GPU datasheet", _RESERVE_EST),
    GPUSpec("A100-PCIE-80GB", ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"), 81920, 870, 1935, 312,
            None, 624, "8.0", _pcie(4), 300, "NVIDIA A100 Tensor Core GPU datasheet", _RESERVE_EST),
    # NVIDIA H100 datasheet: SXM 3.35 TB/s, bf16 989.5 / fp8 1979 / int8 1979 dense, 700 W,
    # NVLink 4 900 GB/s; PCIe 2 TB/s, 756 / 1513 / 1513, 350 W, PCIe Gen5.
    GPUSpec("H100-SXM", ("NVIDIA H100 80GB HBM3", "H100", "H100 SXM", "H100-SXM5-80GB"),
            81559, 551, 3350, 989.5, 1979, 1979, "9.0", _nvl(4, 900), 700,
            "NVIDIA H100 Tensor Core GPU datasheet", _RESERVE_EST),
    GPUSpec("H100-PCIE", ("NVIDIA H100 PCIe", "H100 PCIe"), 81559, 551, 2000, 756, 1513, 1513,
            "9.0", _pcie(5), 350, "NVIDIA H100 Tensor Core GPU datasheet",
            ("memory_mib", *_RESERVE_EST)),
    # NVIDIA H200 datasheet: 141 GB 4.8 TB/s, same tensor rates as H100 SXM, 700 W, NVLink 4.
    # memory_mib and cuda_reserved_mib measured on the lent H200: nvidia-smi 143,771 MiB,
    # torch.cuda.mem_get_info total 150,109,880,320 B (nvidia-smi -q: Reserved 616 MiB).
    GPUSpec("H200", ("NVIDIA H200", "H200 SXM", "H200-SXM"), 143771, 615.0625, 4800, 989.5, 1979, 1979,
            "9.0", _nvl(4, 900), 700, "NVIDIA H200 Tensor Core GPU datasheet; memory measured"),
    # NVIDIA HGX B200 datasheet (8 GPUs): fp8 72 PF sparse -> 4.5 PF dense per GPU, bf16 2.25,
    # 8 TB/s, NVLink 5 1.8 TB/s, 1000 W. 180 GB usable; nvidia-smi MiB is an estimate.
    GPUSpec("B200", ("NVIDIA B200",), 183359, 616, 8000, 2250, 4500, 4500, "10.0", _nvl(5, 1800),
            1000, "NVIDIA HGX B200 datasheet", ("memory_mib", *_RESERVE_EST)),
    # Ada whitepaper (GeForce): bf16 with FP32 accumulate is half the fp16-accumulate rate.
    GPUSpec("RTX 4090", ("NVIDIA GeForce RTX 4090", "4090"), 24564, 346, 1008, 165.2, 330.3, 660.6,
            "8.9", _pcie(4), 450, "NVIDIA Ada Lovelace architecture whitepaper", _RESERVE_EST),
    GPUSpec("RTX 4070", ("NVIDIA GeForce RTX 4070", "4070"), 12282, 281, 504, 58.3, 116.6, 233.2,
            "8.9", _pcie(4), 200, "NVIDIA Ada whitepaper rates scaled by SM count and boost clock",
            ("dense_bf16_tflops", "dense_fp8_tflops", "dense_int8_tops", "memory_mib",
             *_RESERVE_EST)),
    # RTX PRO 6000 Blackwell Workstation: 96 GB GDDR7 1792 GB/s, 600 W, PCIe Gen5; NVIDIA
    # quotes 4000 AI TOPS (fp4 sparse); dense bf16/fp8/int8 derived from it by halving.
    GPUSpec("RTX PRO 6000", ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                             "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                             "RTX PRO 6000 Blackwell", "RTX 6000 Pro"),
            97887, 616, 1792, 503.8, 1007.6, 1007.6, "12.0", _pcie(5), 600,
            "NVIDIA RTX PRO 6000 Blackwell datasheet",
            ("dense_bf16_tflops", "dense_fp8_tflops", "dense_int8_tops", "memory_mib",
             *_RESERVE_EST)),
)


@dataclass(frozen=True, slots=True)
class NodeLink:
    """The fabric between nodes, per GPU: one network port per GPU (as DGX/HGX systems are
    cabled), `bandwidth_gbs` one direction, and the fixed cost of one transfer over it
    (NCCL send/receive or all-reduce step; an estimate, as named in `source`)."""

    kind: str
    bandwidth_gbs: float
    latency_us: float
    source: str

    def as_interconnect(self) -> Interconnect:
        """The link in the intra-node record's terms (bidirectional GB/s, per-call latency)."""
        return Interconnect("fabric", 0, 2 * self.bandwidth_gbs, self.latency_us)

    def describe(self) -> str:
        return f"{self.kind} {self.bandwidth_gbs:g} GB/s per GPU"


NODE_LINKS: dict[str, NodeLink] = {
    # NVIDIA ConnectX-7 / Quantum-2: NDR 400 Gb/s per port = 50 GB/s one direction; one port
    # per GPU on DGX H100/H200. Latency: an estimate for a NCCL call across the fabric.
    "infiniband": NodeLink("infiniband", 50.0, 8.0, "NVIDIA ConnectX-7 datasheet (NDR 400 Gb/s); latency estimated"),
    # 400GbE RoCEv2 on the same adapter: the same line rate, more latency (estimate).
    "roce": NodeLink("roce", 50.0, 15.0, "NVIDIA ConnectX-7 datasheet (400GbE RoCE); latency estimated"),
    # 100 GbE TCP sockets (NCCL's socket transport): 12.5 GB/s line rate (estimate of latency).
    "ethernet": NodeLink("ethernet", 12.5, 50.0, "IEEE 802.3 100GbE line rate; latency estimated"),
}


@dataclass(frozen=True, slots=True)
class NodeLayout:
    """How a replica's GPUs sit in nodes: `gpus_per_node` per node and the `link` between
    nodes. vLLM places TP ranks first, then PP stages, so a replica of TP x PP GPUs keeps
    `stages_per_node` stages in each node and crosses the fabric between those groups."""

    gpus_per_node: int
    link: NodeLink

    def stages_per_node(self, tp: int) -> int:
        return max(1, self.gpus_per_node // tp)

    def node_hops(self, tp: int, pp: int) -> int:
        """Pipeline hops (of the pp - 1) that cross from one node to the next."""
        return -(-pp // self.stages_per_node(tp)) - 1

    def tp_crosses(self, tp: int) -> bool:
        """True when one tensor-parallel group spans nodes (all-reduce over the fabric)."""
        return tp > self.gpus_per_node


def node_layout(gpus_per_node: int, link: str) -> NodeLayout:
    """The layout for `gpus_per_node` GPUs per node joined by `link` (a `NODE_LINKS` key)."""
    try:
        return NodeLayout(gpus_per_node, NODE_LINKS[link])
    except KeyError:
        raise ServelabError(f"node link {link!r}: choose one of {', '.join(NODE_LINKS)}") from None


def list_gpus() -> tuple[GPUSpec, ...]:
    """Every GPU in the catalog."""
    return _CATALOG


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def get_gpu(name: str) -> GPUSpec:
    """The catalog entry named `name` (case, spaces and dashes ignored; aliases accepted).

    Raises ServelabError naming the close catalog names when there is none.
    """
    wanted = _key(name)
    for spec in _CATALOG:
        if wanted in {_key(n) for n in (spec.name, *spec.aliases)}:
            return spec
    every = [n for spec in _CATALOG for n in (spec.name, *spec.aliases)]
    close = difflib.get_close_matches(name, every, n=4, cutoff=0.4)
    hint = f"; close: {', '.join(close)}" if close else ""
    raise ServelabError(f"unknown GPU {name!r}{hint}. "
                        f"Catalog: {', '.join(s.name for s in _CATALOG)}")


def match_gpu(nvidia_smi_name: str, memory_mib: int | None = None) -> GPUSpec | None:
    """The catalog entry for a GPU as nvidia-smi / NVML names it, or None.

    The name picks the family (exact alias first, then the longest catalog token found in
    it); `memory_mib` (total) picks between sizes (A100 40 vs 80 GB) and is checked to be
    within 10 % of the entry's, so a MIG slice or an unknown variant gives None.
    """
    try:
        spec: GPUSpec | None = get_gpu(nvidia_smi_name)
    except ServelabError:
        spec = None
    key = _key(nvidia_smi_name)
    if spec is None:
        candidates = [s for s in _CATALOG if _family(s) in key
                      and ("pcie" in key) == ("pcie" in _key(s.name))]
        if not candidates:
            candidates = [s for s in _CATALOG if _family(s) in key]
        if memory_mib is not None and candidates:
            candidates.sort(key=lambda s: abs(s.memory_mib - memory_mib))
        spec = candidates[0] if candidates else None
    if spec is not None and memory_mib is not None:
        if abs(spec.memory_mib - memory_mib) > 0.10 * spec.memory_mib:
            return None
    return spec


def _family(spec: GPUSpec) -> str:
    # "A100-SXM-80GB" -> "a100"; "RTX PRO 6000" -> "rtxpro6000"; "H100-PCIE" -> "h100".
    return _key(spec.name.split("-")[0])
