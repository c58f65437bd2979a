"""The experiment spec: one YAML file describing hardware, model, arms, workloads, loads, SLO.

Every section is a pydantic model with ``extra="forbid"``; `load_spec` validates a file and
turns any problem into a `ServelabError` naming the field and its line
(``quickstart.yaml:23: arms[2].args.max_num_seq: unknown engine argument ...``). The
schema is documented field by field in docs/experiments.md.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servelab.client.backends import SamplingParams
from servelab.disaggregation import DisaggregatedConfig
from servelab.speculation import SpeculativeConfig
from servelab.workload.datasets import DatasetOptions

EngineKind = Literal["sim", "vllm", "sglang", "external"]
ArgValue = str | int | float | bool | list[str | int | float]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
DIRECT = "direct"


def _file_safe(value: str, what: str) -> str:
    if not _NAME.match(value):
        raise ValueError(f"{what} {value!r}: use letters, digits, '_', '.', '-' only")
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HardwareSpec(_Section):
    """`gpu`: a catalog GPU (required for the simulator; for real engines, the GPU the
    planner assumes: default the probed one). `probe`: record the local GPUs (NVML /
    nvidia-smi) in the manifest."""

    gpu: str | None = None
    probe: bool = False


class ModelSpec(_Section):
    """`name`: the served model name and the catalog entry the planner and the simulator
    read; `path`: what the engine loads (a model directory; default `name`); `tokenizer`:
    what counts workload tokens (default: servelab's built-in tokenizer)."""

    name: str
    path: str | None = None
    tokenizer: str | None = None


class SimSettings(_Section):
    """How `engine: sim` runs: `offline` (in process, virtual clock: the default) or
    `online` (`servelab sim serve` processes over HTTP, in real time x `time_scale`).
    `host_cpu_scale`: the host's CPU time over the measuring host's (`--host-cpu-scale`)."""

    mode: Literal["offline", "online"] = "offline"
    calibration: Path | None = None
    host_cpu_scale: float = Field(1.0, ge=0.2, le=5.0)
    profile: Path | None = None
    time_scale: float = Field(1.0, gt=0)


class EngineDefaults(_Section):
    """Launch settings shared by every arm (an arm may override `env` and
    `gpu_memory_utilization`)."""

    load_format: str | None = None
    executable: str | None = None
    python: str | None = None
    module: str | None = None
    env: dict[str, str] = {}
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    startup_timeout_s: float = Field(900.0, gt=0)
    port_base: int = Field(8100, ge=1024, le=65000)
    backend: Literal["openai", "openai-chat", "vllm", "sglang"] = "openai"
    request_timeout_s: float = Field(600.0, gt=0)
    ignore_eos: bool = True
    sampling: SamplingParams = SamplingParams()
    urls: list[str] = []
    share_engine: bool = True


class ArmSpec(_Section):
    """One engine configuration. `args` are the engine's own flags as a mapping: keys are
    flag names without dashes, snake_case or kebab-case (``max_num_seqs: 8``); ``true``
    gives a bare flag, ``false`` its ``--no-`` form, a list repeats the values.
    `speculative` is speculative decoding (vLLM's `--speculative-config` keys; SGLang's
    `--speculative-*` flags). `disaggregated` splits the arm into a prefill and a decode
    pool with the KV moved between them (`servelab.disaggregation`; engine sim)."""

    name: str
    model: str | None = None
    quantization: str | None = None
    args: dict[str, ArgValue] = {}
    tensor_parallel_size: int = Field(1, ge=1)
    pipeline_parallel_size: int = Field(1, ge=1)
    replicas: int = Field(1, ge=1)
    routing: str = DIRECT
    baseline: bool = False
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    gpus: list[int] | None = None
    env: dict[str, str] = {}
    urls: list[str] | None = None
    speculative: SpeculativeConfig | None = None
    disaggregated: DisaggregatedConfig | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _file_safe(value, "arm name")

    @property
    def client_splits(self) -> bool:
        """True when the client spreads requests over the replicas itself (`routing:
        direct`); never for P/D pools or the DP ranks of one expert-parallel engine, which
        their own proxy or load balancer feeds."""
        return (self.routing == DIRECT and self.disaggregated is None
                and not self.args.get("enable_expert_parallel"))

    @field_validator("args")
    @classmethod
    def _normalise(cls, value: dict[str, ArgValue]) -> dict[str, ArgValue]:
        out: dict[str, ArgValue] = {}
        for key, arg in value.items():
            norm = arg_key(key)
            if norm in out:
                raise ValueError(f"{key!r} repeats {norm!r}")
            out[norm] = arg
        return out


def arg_key(key: str) -> str:
    """An `args` key in its one spelling: ``--max-num-seqs`` -> ``max_num_seqs``."""
    return key.lstrip("-").replace("-", "_")


class WorkloadSpec(DatasetOptions):
    """A named workload: bench's dataset options (vLLM's flag names in snake_case);
    `num_prompts` comes from `loads.num_prompts`."""

    name: str

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _file_safe(value, "workload name")

    @model_validator(mode="before")
    @classmethod
    def _no_num_prompts(cls, data: Any) -> Any:
        if isinstance(data, dict) and "num_prompts" in data:
            raise ValueError("num_prompts is set per load by loads.num_prompts, not per workload")
        return data

    def dataset(self, num_prompts: int, tokenizer: str | None) -> DatasetOptions:
        """The bench dataset options of this workload for one load (validated anew)."""
        fields = self.model_dump(exclude={"name", "num_prompts"})
        if fields.get("tokenizer") is None:
            fields["tokenizer"] = tokenizer
        return DatasetOptions(**fields, num_prompts=num_prompts)


class NumPromptsRule(_Section):
    """Requests per cell: `per_concurrency` x concurrency (closed loop) or `per_rate_s` s of
    traffic at the rate, clamped to [`min`, `max`]. DOMAIN: num_prompts >= 5 x concurrency."""

    per_concurrency: int = Field(5, ge=1)
    per_rate_s: float = Field(30.0, gt=0)
    min: int = Field(50, ge=1)
    max: int = Field(1000, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> NumPromptsRule:
        if self.min > self.max:
            raise ValueError(f"min {self.min} exceeds max {self.max}")
        return self

    def for_concurrency(self, concurrency: int) -> int:
        return max(self.min, min(self.max, self.per_concurrency * concurrency))

    def for_rate(self, rate_rps: float) -> int:
        if math.isinf(rate_rps):
            return self.max
        return max(self.min, min(self.max, math.ceil(rate_rps * self.per_rate_s)))


class LoadsSpec(_Section):
    """Loads every (arm, workload) pair is driven at: closed-loop `concurrency` levels
    (all requests due at once, at most C in flight) and/or open-loop `request_rate`s
    (requests/s, gamma arrivals with `burstiness`, optionally capped by `max_concurrency`)."""

    concurrency: list[int] = []
    request_rate: list[float] = []
    max_concurrency: int | None = Field(None, ge=1)
    burstiness: float = Field(1.0, gt=0)
    num_prompts: int | NumPromptsRule = NumPromptsRule()
    num_warmups: int = Field(0, ge=0)

    @field_validator("concurrency")
    @classmethod
    def _positive_c(cls, value: list[int]) -> list[int]:
        if any(c < 1 for c in value):
            raise ValueError("concurrency levels must be >= 1")
        if len(set(value)) != len(value):
            raise ValueError("concurrency levels repeat")
        return value

    @field_validator("request_rate")
    @classmethod
    def _positive_r(cls, value: list[float]) -> list[float]:
        if any(math.isnan(r) or r <= 0 for r in value):
            raise ValueError("request rates must be > 0 (or .inf)")
        if len(set(value)) != len(value):
            raise ValueError("request rates repeat")
        return value

    @model_validator(mode="after")
    def _some(self) -> LoadsSpec:
        if not self.concurrency and not self.request_rate:
            raise ValueError("give at least one load: concurrency: [...] and/or request_rate: [...]")
        return self


class SloSpec(_Section):
    """Service-level objectives (ms) at `percentile`; also the goodput SLO of each cell."""

    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    e2el_ms: float | None = Field(None, gt=0)
    percentile: float = Field(99.0, gt=0, le=100)


NodeLinkKind = Literal["infiniband", "roce", "ethernet"]


class ClusterSpec(_Section):
    """Where the arms run. `ray`: a Ray cluster's address (``auto``: the one this machine
    belongs to; None: everything here, one arm after another, as without this section).
    `gpus_per_node`: GPUs of one node (default: what the cluster reports; without Ray, 8),
    which decides when an arm spans nodes; `node_link`: the fabric between nodes, which the
    simulator prices for pipeline hops (and tensor-parallel all-reduces) that cross it."""

    ray: str | None = None
    gpus_per_node: int | None = Field(None, ge=1)
    node_link: NodeLinkKind = "infiniband"


class ExperimentSpec(_Section):
    """A whole experiment: arms x workloads x loads on one model and one kind of engine."""

    name: str
    engine: EngineKind
    hardware: HardwareSpec = HardwareSpec()
    model: ModelSpec
    engine_defaults: EngineDefaults = EngineDefaults()
    sim: SimSettings = SimSettings()
    cluster: ClusterSpec = ClusterSpec()
    arms: list[ArmSpec] = Field(min_length=1)
    workloads: list[WorkloadSpec] = Field(min_length=1)
    loads: LoadsSpec
    slo: SloSpec | None = None
    seed: int = Field(0, ge=0)
    metric_percentiles: list[float] = [50.0, 90.0, 99.0]
    output_dir: Path | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _file_safe(value, "experiment name")

    @field_validator("model", mode="before")
    @classmethod
    def _model_shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> ExperimentSpec:
        """The spec a manifest stored (its dump, whose workloads carry the dataset options'
        `num_prompts`, which a spec file may not set)."""
        workloads = [{k: v for k, v in w.items() if k != "num_prompts"} for w in data.get("workloads", [])]
        return cls.model_validate({**data, "workloads": workloads})

    @property
    def baseline(self) -> ArmSpec:
        """The arm marked `baseline: true`, else the first arm."""
        return next((a for a in self.arms if a.baseline), self.arms[0])

    def arm(self, name: str) -> ArmSpec:
        return next(a for a in self.arms if a.name == name)

    def workload(self, name: str) -> WorkloadSpec:
        return next(w for w in self.workloads if w.name == name)

    def percentiles(self) -> tuple[float, ...]:
        """Percentiles every cell reports: the spec's, 99 (the tables') and the SLO's."""
        wanted = {*self.metric_percentiles, 99.0}
        if self.slo is not None:
            wanted.add(self.slo.percentile)
        return tuple(sorted(wanted))
