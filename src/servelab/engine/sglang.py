"""The SGLang adapter: `python -m sglang.launch_server` per replica.

As for vLLM: flags checked against the installed SGLang's `--help` (cached per version
in the log directory), GPUs pinned per replica, its own process group, /health, memory
lines read from the log. ``gpu_memory_utilization`` becomes `--mem-fraction-static`, SGLang's
fraction of GPU memory for weights plus KV pool (not the same budget as vLLM's, which also
covers activations: compare KV pools from the logs, not the fractions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from servelab.engine.adapter import ArmLaunch
from servelab.engine.flags import cached_help, parse_help_options, run_capture
from servelab.engine.launcher import ArmFlags, CommandLauncher
from servelab.errors import ServelabError

__all__ = ["SglangLauncher", "SglangRuntime"]

_MANAGED = {
    "--model-path": "model",
    "--model": "model",
    "--served-model-name": "served_model_name",
    "--quantization": "quantization",
    "--tensor-parallel-size": "tensor_parallel_size",
    "--tp-size": "tensor_parallel_size",
    "--pipeline-parallel-size": "pipeline_parallel_size",
    "--pp-size": "pipeline_parallel_size",
    "--mem-fraction-static": "gpu_memory_utilization",
    "--load-format": "load_format",
    "--host": "host",
    "--port": "port_base",
}


@dataclass(frozen=True)
class SglangRuntime:
    """How to run the installed SGLang: ``python -m module`` with ``env`` added."""

    python: str = "python3"
    module: str = "sglang.launch_server"
    env: dict[str, str] = field(default_factory=dict)
    query_timeout_s: float = 300.0

    def help_argv(self) -> list[str]:
        return [self.python, "-m", self.module, "--help"]

    def version_argv(self) -> list[str]:
        return [self.python, "-c", "import importlib.metadata as m; print(m.version('sglang'))"]


class SglangLauncher(CommandLauncher):
    """Starts SGLang arms (`EngineLauncher` for kind ``sglang``)."""

    kind = "sglang"
    managed_flags = _MANAGED
    reset_path = "/flush_cache"  # refused (not performed) while requests run or wait
    arm_flags = ArmFlags("--tp-size", "--pp-size", "--mem-fraction-static")

    def __init__(self, runtime: SglangRuntime | None = None) -> None:
        self.runtime = runtime or SglangRuntime()

    def version(self) -> str:
        out = run_capture(self.runtime.version_argv(), self.runtime.env, self.runtime.query_timeout_s,
                          "asking SGLang its version")
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        if not lines:
            raise ServelabError(f"`{' '.join(self.runtime.version_argv())}` printed no version")
        return lines[-1]

    def valid_flags(self, log_dir: Path, version: str | None) -> tuple[frozenset[str], str]:
        label = version or "unknown"
        text = cached_help(log_dir / f"sglang-{label}-launch-server-help.txt", self.runtime.help_argv(),
                           self.runtime.env, self.runtime.query_timeout_s)
        return parse_help_options(text), f"sglang {label} launch_server (--help)"

    def command_prefix(self, arm: ArmLaunch) -> list[str]:
        return [self.runtime.python, "-m", self.runtime.module, "--model-path", arm.model]

    def replica_env(self, arm: ArmLaunch, replica: int) -> dict[str, str]:
        return {**self.runtime.env, **super().replica_env(arm, replica)}
