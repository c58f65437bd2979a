"""Prefill/decode disaggregation: an arm's `disaggregated:` block and the KV transfer between pools.

As vLLM's disaggregated serving runs it (a proxy in front of a prefill pool and a decode
pool, KV moved by a connector such as NIXL): the proxy sends a request to a prefill replica
with max_tokens 1; that replica computes the prompt's KV; the KV moves to a decode replica
over the link; the decode replica admits the request only once the KV is there, with every
prompt token but the last already computed (it recomputes the last one, as on a prefix-cache
hit, and samples the first token), then decodes. The client's first token is the decode
replica's.

Transfer time of a prompt of P tokens, moved by `ranks` = min(TP_prefill, TP_decode) ranks
in parallel, each over its own link and each with its own KV (its heads' share, or whole
where KV heads are replicated, fewer than ranks, and for MLA's latent, which TP does not
split): bytes = ranks x per-rank KV bytes per token (every layer) x P, and

    transfer_s = latency + bytes / (ranks x link one-way bandwidth)

One prefill replica's transfers share its links: each starts when the previous one is done.

With `layerwise: true` (a connector that sends each layer's KV as soon as that layer's
prefill is done), all but the last layer's share overlaps the prefill itself:

    transfer_s = latency + max(bytes / layers, bytes - prefill_s x rate) / rate

Link figures (one direction, per GPU): `nvlink` the GPU's own NVLink (its datasheet, halved
from the bidirectional figure), `pcie` its PCIe link (PCIe 5.0 x16, 64 GB/s, on GPUs whose
GPU-to-GPU link is NVLink), `infiniband` / `roce` / `ethernet` the node fabric of
`servelab.hardware.catalog.NODE_LINKS`. These are line rates: a connector reaches less.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servelab.hardware.catalog import NODE_LINKS, GPUSpec

LinkName = Literal["nvlink", "infiniband", "roce", "pcie", "ethernet"]
PCIE5_X16_GBS = 64.0  # PCI-SIG PCIe 5.0: 32 GT/s x 16 lanes, one direction
PCIE_LATENCY_US = 5.0  # an estimate for one DMA transfer's set-up


class PoolSpec(BaseModel):
    """One pool: `replicas` copies of a TP-`tp` engine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    replicas: int = Field(1, ge=1)
    tp: int = Field(1, ge=1)

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp


class DisaggregatedConfig(BaseModel):
    """An arm's `disaggregated:` block: the prefill and decode pools and the link between."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill: PoolSpec
    decode: PoolSpec
    link: LinkName = "nvlink"
    layerwise: bool = False  # the connector sends each layer's KV when its prefill is done

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus

    @staticmethod
    def conflict(replicas: int, tensor_parallel_size: int, pipeline_parallel_size: int,
                 speculative: bool) -> str | None:
        """What a disaggregated deployment may not also set on itself (None: nothing): its
        pools carry the replicas and TP; PP and speculative decoding are not simulated with
        them."""
        if replicas != 1 or tensor_parallel_size != 1 or pipeline_parallel_size != 1:
            return ("replicas and TP are set per pool (prefill, decode): the deployment's own "
                    "replicas, TP and PP stay 1")
        if speculative:
            return "speculative decoding is not simulated with disaggregation"
        return None

    def describe(self) -> str:
        return (f"{self.prefill.replicas}P (TP{self.prefill.tp}) : {self.decode.replicas}D "
                f"(TP{self.decode.tp}) over {self.link}" + (", layer-wise" if self.layerwise else ""))


@dataclass(frozen=True, slots=True)
class KvLink:
    """One GPU's link for KV transfer: one-way GB/s, per-transfer latency, where it is from."""

    name: str
    bandwidth_gbs: float
    latency_us: float
    source: str


def kv_link(name: LinkName, gpu: GPUSpec) -> KvLink:
    """The link figures of the module docstring for `gpu`."""
    ic = gpu.interconnect
    if name == "nvlink":
        if ic.kind != "nvlink":
            return KvLink("pcie", ic.unidirectional_gbs, PCIE_LATENCY_US,
                          f"{gpu.name} has no NVLink: its {ic.describe()} (datasheet)")
        return KvLink(name, ic.unidirectional_gbs, ic.allreduce_latency_us,
                      f"{gpu.name} {ic.describe()} (datasheet), one direction")
    if name == "pcie":
        if ic.kind == "pcie":
            return KvLink(name, ic.unidirectional_gbs, PCIE_LATENCY_US, f"{gpu.name} {ic.describe()}")
        return KvLink(name, PCIE5_X16_GBS, PCIE_LATENCY_US, "PCIe 5.0 x16 (PCI-SIG), one direction")
    node = NODE_LINKS[name]
    return KvLink(name, node.bandwidth_gbs, node.latency_us, node.source)


@dataclass(frozen=True, slots=True)
class KvTransfer:
    """How long a prompt's KV takes from a prefill to a decode replica (module docstring)."""

    kv_bytes_per_token: int  # moved by all ranks together, every layer
    layers: int
    link: KvLink
    ranks: int = 1
    layerwise: bool = False

    def seconds(self, prompt_tokens: int, prefill_s: float = 0.0) -> float:
        """Seconds from the prefill's end to the KV at the decode replica; `prefill_s` is
        how long the prefill ran (only a layer-wise transfer overlaps it)."""
        rate = self.link.bandwidth_gbs * 1e9 * self.ranks
        total = self.kv_bytes_per_token * prompt_tokens
        if self.layerwise:
            total = max(total / self.layers, total - prefill_s * rate)
        return self.link.latency_us * 1e-6 + total / rate
