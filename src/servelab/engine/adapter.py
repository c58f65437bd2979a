"""The engine package's public contract: what an arm asks for and what a launch gives back.

The experiment runner holds an `EngineLauncher` per engine kind (vllm, sglang, sim,
external) and calls `start(arm, log_dir, deadline_s)` once per arm; it gets a
`RunningEngine` whose URLs it benchmarks, whose startup figures it records, and which it
stops when the arm is done. Everything else in `servelab.engine` is implementation.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servelab.engine.logparse import StartupInfo
from servelab.speculation import SpeculativeConfig

__all__ = ["ArmLaunch", "EngineLauncher", "NodeRank", "RunningEngine", "StartupInfo"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class NodeRank(BaseModel):
    """This process's place in one replica launched across nodes (SGLang's ``--nnodes``):
    `nnodes` processes, one per node, meet at `dist_init_addr` ("HOST:PORT" on rank 0's
    node); only rank 0 serves HTTP."""

    model_config = ConfigDict(extra="forbid")

    nnodes: int = Field(ge=2)
    node_rank: int = Field(ge=0)
    dist_init_addr: str = Field(pattern=r"^[^:\s]+:\d{1,5}$")

    @model_validator(mode="after")
    def _rank_in_range(self) -> NodeRank:
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank {self.node_rank} must be below nnodes {self.nnodes}")
        return self


class ArmLaunch(BaseModel):
    """One engine configuration to launch (an "arm").

    ``extra_args`` are engine flags as on the engine's command line (``["--max-num-seqs",
    "8"]``); every flag is checked against the installed engine before anything starts.
    ``gpus`` lists the GPU indices the arm may use, ``replicas * tensor_parallel_size *
    pipeline_parallel_size`` of them: replica r gets the r-th consecutive slice. Replica r
    listens on ``port_base + r``. ``gpu_memory_utilization`` (a fraction of each GPU) is
    always passed explicitly, so replicas started one after another get equal KV pools.
    ``cache_reset`` asks for a server whose prefix cache can be emptied between runs
    (`RunningEngine.reset_prefix_cache`; vLLM then runs with ``VLLM_SERVER_DEV_MODE=1``).
    ``speculative`` is rendered by each adapter in its engine's flags. ``node_rank`` makes
    this launch one node's process of a replica that spans nodes (one replica only).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Arm name; names the log files <name>-replica<r>.log.")
    model: str = Field(description="Model name or local directory.")
    served_model_name: str | None = None
    quantization: str | None = None
    tensor_parallel_size: int = Field(1, ge=1)
    pipeline_parallel_size: int = Field(1, ge=1)
    replicas: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0.0, le=1.0)
    load_format: str | None = None
    extra_args: list[str] = []
    env: dict[str, str] = {}
    gpus: list[int] | None = None
    cache_reset: bool = False
    port_base: int = Field(8000, ge=1, le=65535)
    host: str = "127.0.0.1"
    speculative: SpeculativeConfig | None = None
    node_rank: NodeRank | None = None

    @field_validator("name")
    @classmethod
    def _file_safe(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"arm name {value!r}: use letters, digits, '_', '.', '-' only")
        return value

    @field_validator("gpus")
    @classmethod
    def _non_negative(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and any(g < 0 for g in value):
            raise ValueError(f"gpus {value}: indices must be >= 0")
        return value

    @model_validator(mode="after")
    def _fits(self) -> ArmLaunch:
        if self.node_rank is not None and self.replicas != 1:
            raise ValueError(f"a launch across nodes is one replica, not {self.replicas}")
        if self.port_base + self.replicas - 1 > 65535:
            raise ValueError(f"port_base {self.port_base} + {self.replicas} replicas exceeds 65535")
        need = self.gpus_per_replica * self.replicas
        if self.gpus is not None and len(self.gpus) != need:
            raise ValueError(
                f"gpus lists {len(self.gpus)} GPU(s) but {self.replicas} replica(s) x "
                f"TP {self.tensor_parallel_size} x PP {self.pipeline_parallel_size} need {need}"
            )
        return self

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one replica spans: tensor x pipeline parallel size."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def port(self, replica: int) -> int:
        """The TCP port replica `replica` (0-based) listens on."""
        return self.port_base + replica

    def replica_gpus(self, replica: int) -> list[int] | None:
        """The GPU indices replica `replica` is pinned to (``CUDA_VISIBLE_DEVICES``).

        Replica r gets ``gpus[r*n:(r+1)*n]`` with n = TP x PP. Without ``gpus`` a single
        replica is not pinned (None: it inherits the environment) and several replicas
        get GPUs 0.. in order, so two never share one by accident.
        """
        n = self.gpus_per_replica
        if self.gpus is None:
            return None if self.replicas == 1 else list(range(replica * n, (replica + 1) * n))
        return self.gpus[replica * n : (replica + 1) * n]


@runtime_checkable
class RunningEngine(Protocol):
    """A started arm: its URLs, what its startup log said, and how to stop it.

    ``base_url`` is replica 0's root URL (``http://127.0.0.1:8000``, no ``/v1``);
    ``replica_urls`` lists every replica's. ``startup`` is replica 0's parsed startup log
    (None when nothing was launched); ``replica_startups`` holds every replica's, so
    unequal KV pools show. ``stop`` is idempotent and ends only what this launch started.
    """

    base_url: str
    replica_urls: list[str]
    startup: StartupInfo | None
    replica_startups: list[StartupInfo | None]
    version: str | None
    log_paths: list[Path]

    def reset_prefix_cache(self, deadline_s: float = 30.0) -> str | None:
        """Empty every replica's prefix cache (no request may be in flight): None when done,
        else the reason it could not be (no such endpoint, refused past `deadline_s`)."""
        ...

    def stop(self, grace_s: float = 30.0) -> None:
        """Stop every replica: SIGTERM to its process group, SIGKILL after `grace_s` seconds."""
        ...


class EngineLauncher(Protocol):
    """Starts arms of one engine kind."""

    kind: str

    def start(self, arm: ArmLaunch, log_dir: Path, deadline_s: float) -> RunningEngine:
        """Validate the arm, start its replicas and wait until all answer ``/health``.

        `deadline_s` is the wall-clock budget in seconds for the whole start. Raises
        `ServelabError` (bad flag, busy port, early exit with the log's last lines, deadline
        passed); on error nothing this call started is left running.
        """
        ...
