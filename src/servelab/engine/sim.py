"""The simulator adapter: one `servelab sim serve` process per replica.

The same lifecycle as a real engine (own process group, log file, /health, startup lines
parsed from the log, stop by group), so an experiment runs unchanged without a GPU. The
simulated GPU comes from the launcher (`gpu`, a catalog name); `load_format` is ignored
(the simulator has no weights) and no GPU is pinned.
"""

from __future__ import annotations

import sys
from pathlib import Path

from servelab import __version__
from servelab.engine.adapter import ArmLaunch
from servelab.engine.flags import cached_help, parse_help_options
from servelab.engine.launcher import ArmFlags, CommandLauncher
from servelab.speculation import SpeculativeConfig

__all__ = ["SimLauncher"]

SERVER_MODULE = "servelab.cli.sim_serve"
HELP_TIMEOUT_S = 120.0
_MANAGED = {
    "--model": "model",
    "--gpu": "the launcher's gpu",
    "--served-model-name": "served_model_name",
    "--quantization": "quantization",
    "--tensor-parallel-size": "tensor_parallel_size",
    "-tp": "tensor_parallel_size",
    "--pipeline-parallel-size": "pipeline_parallel_size",
    "-pp": "pipeline_parallel_size",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--host": "host",
    "--port": "port_base",
    "--speculative-config": "speculative",
    "--spec-acceptance": "speculative",
}


def sim_serve_flags(python: str, env: dict[str, str], log_dir: Path) -> frozenset[str]:
    """Every option `servelab sim serve` takes, read off its --help as the other adapters
    read their engine's (cached in `log_dir` per servelab version)."""
    argv = [python, "-m", SERVER_MODULE, "--help"]
    text = cached_help(log_dir / f"servelab-{__version__}-sim-serve-help.txt", argv,
                       {**env, "COLUMNS": "200"}, HELP_TIMEOUT_S)
    return parse_help_options(text)


class SimLauncher(CommandLauncher):
    """Starts simulated arms (`EngineLauncher` for kind ``sim``) on catalog GPU `gpu`."""

    kind = "sim"
    managed_flags = _MANAGED
    reset_path = "/reset_prefix_cache"
    arm_flags = ArmFlags(load_format=None)

    def __init__(self, gpu: str, python: str = sys.executable, env: dict[str, str] | None = None) -> None:
        self.gpu = gpu
        self.python = python
        self.env = dict(env or {})

    def version(self) -> str | None:
        return None  # the server's GET /version says it

    def valid_flags(self, log_dir: Path, version: str | None) -> tuple[frozenset[str], str]:
        return sim_serve_flags(self.python, self.env, log_dir), "servelab sim serve"

    def command_prefix(self, arm: ArmLaunch) -> list[str]:
        return [self.python, "-m", SERVER_MODULE, "--model", arm.model, "--gpu", self.gpu]

    def replica_env(self, arm: ArmLaunch, replica: int) -> dict[str, str]:
        # A simulated GPU needs no CUDA_VISIBLE_DEVICES.
        return {**self.env, **arm.env}

    def speculative_args(self, spec: SpeculativeConfig) -> list[str]:
        """vLLM's JSON (synthetic rates included) with servelab's proposal keys, which the
        simulator reads and vLLM would refuse, and `acceptance`, if given, as its flag."""
        args = ["--speculative-config",
                spec.model_dump_json(exclude_none=True, exclude={"acceptance"})]
        if spec.acceptance is not None:
            args += ["--spec-acceptance", ",".join(repr(r) for r in spec.acceptance)]
        return args
