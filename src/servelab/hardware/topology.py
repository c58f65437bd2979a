"""GPU-to-GPU links, read from `nvidia-smi topo -m`.

The matrix says, for each pair of GPUs, how their traffic travels: ``NV#`` is a bonded set
of # NVLinks; ``PIX``/``PXB``/``PHB``/``NODE``/``SYS`` (``SOC`` on old drivers) are PCIe
paths of growing length. Tensor parallelism across a PCIe path pays for every all-reduce,
so the planner needs to know which one it has.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

from servelab.errors import ServelabError

LinkClass = Literal["nvlink", "pcie", "unknown"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_GPU_LABEL = re.compile(r"^GPU(\d+)$")
_NVLINK = re.compile(r"^NV(\d+)$")
_PCIE_PATHS = frozenset({"PIX", "PXB", "PHB", "NODE", "SYS", "SOC"})


class GpuLink(BaseModel):
    """The path between two GPUs (by index): the matrix entry and what it means."""

    model_config = ConfigDict(extra="forbid")

    gpu_a: int
    gpu_b: int
    kind: str
    link: LinkClass
    nvlink_count: int | None


class Topology(BaseModel):
    """The GPU part of `nvidia-smi topo -m`.

    ``summary``: "nvlink" when every pair of GPUs has NVLink, "pcie" when none has,
    "mixed" when some do (e.g. PCIe cards with NVLink bridges in pairs), "none" with
    fewer than two GPUs.
    """

    model_config = ConfigDict(extra="forbid")

    gpu_count: int
    matrix: list[list[str]]
    links: list[GpuLink]
    summary: Literal["nvlink", "pcie", "mixed", "none"]
    cpu_affinity: list[str | None]
    numa_affinity: list[str | None]


def classify_link(kind: str) -> tuple[LinkClass, int | None]:
    """Map a matrix entry ("NV18", "NODE", ...) to its class and NVLink count."""
    nv = _NVLINK.match(kind)
    if nv is not None:
        return "nvlink", int(nv.group(1))
    if kind in _PCIE_PATHS:
        return "pcie", None
    return "unknown", None


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.split("\t")]


def parse_topology(text: str) -> Topology:
    """Parse the output of `nvidia-smi topo -m`.

    Raises `ServelabError` naming the line when the text has no GPU matrix.
    """
    lines = [_ANSI.sub("", line).rstrip("\n") for line in text.splitlines()]
    header_at = next((i for i, ln in enumerate(lines) if "GPU0" in _cells(ln)), None)
    if header_at is None:
        raise ServelabError("nvidia-smi topo -m: no header row with GPU0 found")
    header = _cells(lines[header_at])
    gpu_cols = [i for i, cell in enumerate(header) if _GPU_LABEL.match(cell)]
    extra_labels = [cell for cell in header[max(gpu_cols) + 1 :] if cell]
    rows: dict[int, list[str]] = {}
    for number, line in enumerate(lines[header_at + 1 :], start=header_at + 2):
        cells = _cells(line)
        label = _GPU_LABEL.match(cells[0])
        if label is None:
            continue
        if len(cells) <= max(gpu_cols):
            raise ServelabError(f"nvidia-smi topo -m, line {number}: row {cells[0]} is too short")
        rows[int(label.group(1))] = cells
    count = len(gpu_cols)
    if sorted(rows) != list(range(count)):
        raise ServelabError(f"nvidia-smi topo -m: GPU rows {sorted(rows)} do not match {count} columns")

    matrix = [[rows[i][col] for col in gpu_cols] for i in range(count)]
    links = []
    for a in range(count):
        for b in range(a + 1, count):
            link, nvlinks = classify_link(matrix[a][b])
            links.append(GpuLink(gpu_a=a, gpu_b=b, kind=matrix[a][b], link=link, nvlink_count=nvlinks))
    # Cells after the GPU columns, empties dropped (nvidia-smi pads with double tabs).
    trailing = [[c for c in rows[i][max(gpu_cols) + 1 :] if c] for i in range(count)]
    return Topology(
        gpu_count=count,
        matrix=matrix,
        links=links,
        summary=_summary(links),
        cpu_affinity=[_column(t, extra_labels, "CPU Affinity") for t in trailing],
        numa_affinity=[_column(t, extra_labels, "NUMA Affinity") for t in trailing],
    )


def _column(values: list[str], labels: list[str], name: str) -> str | None:
    if name not in labels:
        return None
    at = labels.index(name)
    value = values[at] if at < len(values) else None
    return None if value in (None, "N/A") else value


def _summary(links: list[GpuLink]) -> Literal["nvlink", "pcie", "mixed", "none"]:
    if not links:
        return "none"
    nvlinked = sum(link.link == "nvlink" for link in links)
    if nvlinked == len(links):
        return "nvlink"
    return "pcie" if nvlinked == 0 else "mixed"
