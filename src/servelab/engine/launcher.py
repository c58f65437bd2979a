"""What every launched engine shares: arm -> per-replica commands -> flag check -> launch.

`CommandLauncher` is the template the vllm, sglang and sim adapters fill in: each says how
its command line looks, which flags it sets itself and how to learn the flags the
installed engine accepts; the order of work (check, pin, start, wait, parse) is here once.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from servelab.engine.adapter import ArmLaunch, NodeRank
from servelab.engine.flags import check_flags, flag_names, resolve_flag
from servelab.engine.process import ReplicaCommand, ServerProcess
from servelab.engine.running import LaunchedEngine, launch
from servelab.errors import ServelabError
from servelab.speculation import SpeculativeConfig

__all__ = ["ArmFlags", "CommandLauncher", "gpu_waves"]


@dataclass(frozen=True, slots=True)
class ArmFlags:
    """The engine's own names for the flags set from an arm's fields (`load_format` None:
    the engine has no weights to load and the field is ignored)."""

    tensor_parallel_size: str = "--tensor-parallel-size"
    pipeline_parallel_size: str = "--pipeline-parallel-size"
    gpu_memory_utilization: str = "--gpu-memory-utilization"
    load_format: str | None = "--load-format"


def gpu_waves(arm: ArmLaunch) -> list[list[int]]:
    """Replica indices grouped into start waves: replicas sharing a GPU start one by one."""
    sets = [set(arm.replica_gpus(r) or ()) for r in range(arm.replicas)]
    shared = any(sets[a] & sets[b] for a in range(len(sets)) for b in range(a))
    if shared:
        return [[r] for r in range(arm.replicas)]
    return [list(range(arm.replicas))]


class CommandLauncher(ABC):
    """An `EngineLauncher` that starts one server process per replica."""

    kind: str
    #: Flags the adapter sets from `ArmLaunch` fields; `extra_args` may not repeat them.
    managed_flags: dict[str, str]
    #: How `engine_args` spells them.
    arm_flags: ArmFlags = ArmFlags()
    #: The server's prefix-cache reset endpoint (POST), None when it has none.
    reset_path: str | None = None

    @abstractmethod
    def version(self) -> str | None:
        """The installed engine's version (None when it cannot say before it runs)."""

    @abstractmethod
    def valid_flags(self, log_dir: Path, version: str | None) -> tuple[frozenset[str], str]:
        """The flags the installed engine accepts, and a label for messages."""

    @abstractmethod
    def command_prefix(self, arm: ArmLaunch) -> list[str]:
        """The program part of the command line (``vllm serve MODEL``); its flags are not checked."""

    def engine_args(self, arm: ArmLaunch, replica: int) -> list[str]:
        """One replica's engine flags: those from the arm's fields, then ``extra_args``."""
        f = self.arm_flags
        args: list[str] = []
        if arm.served_model_name is not None:
            args += ["--served-model-name", arm.served_model_name]
        if arm.quantization is not None:
            args += ["--quantization", arm.quantization]
        args += [f.tensor_parallel_size, str(arm.tensor_parallel_size),
                 f.pipeline_parallel_size, str(arm.pipeline_parallel_size),
                 f.gpu_memory_utilization, repr(arm.gpu_memory_utilization)]
        if arm.load_format is not None and f.load_format is not None:
            args += [f.load_format, arm.load_format]
        args += ["--host", arm.host, "--port", str(arm.port(replica))]
        if arm.speculative is not None:
            args += self.speculative_args(arm.speculative)
        if arm.node_rank is not None:
            args += self.node_rank_args(arm.node_rank)
        return args + list(arm.extra_args)

    def speculative_args(self, spec: SpeculativeConfig) -> list[str]:
        """The engine's flags for speculative decoding (engines without it refuse)."""
        raise ServelabError(f"{self.kind} arms cannot carry `speculative`")

    def node_rank_args(self, rank: NodeRank) -> list[str]:
        """The engine's flags for one node's process of a replica across nodes (engines
        servelab does not launch that way refuse)."""
        raise ServelabError(f"servelab does not launch {self.kind} across nodes one process per node")

    def replica_argv(self, arm: ArmLaunch, replica: int) -> list[str]:
        """The whole command line of one replica."""
        return self.command_prefix(arm) + self.engine_args(arm, replica)

    def replica_env(self, arm: ArmLaunch, replica: int) -> dict[str, str]:
        """Environment overrides of one replica: arm env plus its GPU pinning."""
        env = dict(arm.env)
        gpus = arm.replica_gpus(replica)
        if gpus is not None:
            if "CUDA_VISIBLE_DEVICES" in env:
                raise ServelabError(
                    f"arm {arm.name}: env sets CUDA_VISIBLE_DEVICES and the arm pins GPUs; "
                    "list the GPUs in `gpus` only"
                )
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
        return env

    def replica_commands(self, arm: ArmLaunch, log_dir: Path) -> list[ReplicaCommand]:
        """Every replica's command, environment, log file and URL."""
        return [
            ReplicaCommand(
                name=f"{self.kind} arm {arm.name} replica {r}",
                argv=self.replica_argv(arm, r),
                env=self.replica_env(arm, r),
                log_path=log_dir / (f"{arm.name}-replica{r}.log" if arm.node_rank is None or arm.node_rank.node_rank == 0
                                    else f"{arm.name}-replica{r}-node{arm.node_rank.node_rank}.log"),
                url=f"http://{arm.host}:{arm.port(r)}",
                host=arm.host,
                port=arm.port(r),
            )
            for r in range(arm.replicas)
        ]

    def check_extra_args(self, arm: ArmLaunch, valid: frozenset[str]) -> None:
        """Refuse extra_args that set a flag the arm's fields set (aliases and prefixes too)."""
        for flag in flag_names(arm.extra_args):
            found = resolve_flag(flag, valid)
            field = self.managed_flags.get(found) if isinstance(found, str) else None
            if field is not None:
                raise ServelabError(f"arm {arm.name}: extra_args sets {flag}; set the arm's `{field}` instead")

    def validate(self, arm: ArmLaunch, log_dir: Path, version: str | None) -> list[ReplicaCommand]:
        """Build every replica's command and check all its flags; nothing is started."""
        valid, where = self.valid_flags(log_dir, version)
        check_flags(flag_names(self.engine_args(arm, 0)), valid, where)
        self.check_extra_args(arm, valid)
        return self.replica_commands(arm, log_dir)

    def start(self, arm: ArmLaunch, log_dir: Path, deadline_s: float) -> LaunchedEngine:
        """Check, start every replica in its own process group, wait for /health, parse logs.

        `deadline_s` covers the whole start, the version and help queries included.
        """
        t0 = time.monotonic()
        version = self.version()
        commands = self.validate(arm, log_dir, version)
        waves = [[commands[r] for r in wave] for wave in gpu_waves(arm)]
        return launch(waves, deadline_s - (time.monotonic() - t0), version=version,
                      reset_path=self.reset_path)

    def start_rank(self, arm: ArmLaunch, log_dir: Path) -> ServerProcess:
        """Check and start a node's process of a replica across nodes other than rank 0's:
        it serves no HTTP, so nothing is waited for (rank 0's /health answers once every
        rank has joined it). The process leads its own group; the caller stops it."""
        if arm.node_rank is None or arm.node_rank.node_rank == 0:
            raise ServelabError(f"arm {arm.name}: start_rank is for node ranks above 0 (rank 0 is `start`)")
        [command] = self.validate(arm, log_dir, self.version())
        return ServerProcess(command)
