"""The vLLM adapter: `vllm serve` (or the OpenAI api_server module) per replica.

Before anything starts, every flag is checked against the installed vLLM's
`serve --help=all`, cached per vLLM version in the log directory. Each replica is pinned to
its GPUs (`CUDA_VISIBLE_DEVICES`) and given `--gpu-memory-utilization` explicitly, so
replicas started one after another get equal KV pools.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from servelab.engine.adapter import ArmLaunch
from servelab.engine.flags import cached_help, parse_help_options, run_capture
from servelab.engine.launcher import CommandLauncher
from servelab.errors import ServelabError
from servelab.speculation import SpeculativeConfig

__all__ = ["VllmLauncher", "VllmRuntime"]

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
_VERSION = re.compile(r"^\d+\.\d+[\w.+\-]*$")
_MANAGED = {
    "--model": "model",
    "--served-model-name": "served_model_name",
    "--quantization": "quantization",
    "-q": "quantization",
    "--tensor-parallel-size": "tensor_parallel_size",
    "-tp": "tensor_parallel_size",
    "--pipeline-parallel-size": "pipeline_parallel_size",
    "-pp": "pipeline_parallel_size",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--load-format": "load_format",
    "--host": "host",
    "--port": "port_base",
    "--speculative-config": "speculative",
    "-sc": "speculative",
}


@dataclass(frozen=True)
class VllmRuntime:
    """How to run the installed vLLM.

    With ``python`` unset, the ``executable`` (``vllm`` on PATH, or a path such as
    ``.venv-vllm/bin/vllm``) runs ``serve MODEL``; with ``python`` set, ``python -m module
    --model MODEL`` runs (the H200 kit's form). ``env`` is added to every vLLM process,
    e.g. ``VLLM_CPU_KVCACHE_SPACE``, ``HF_HUB_OFFLINE=1``, ``VLLM_HOST_IP=127.0.0.1``.
    """

    executable: str = "vllm"
    python: str | None = None
    module: str = API_SERVER_MODULE
    env: dict[str, str] = field(default_factory=lambda: {"VLLM_NO_USAGE_STATS": "1"})
    query_timeout_s: float = 300.0

    def serve_prefix(self, model: str) -> list[str]:
        """The command up to the engine flags."""
        if self.python is None:
            return [self.executable, "serve", model]
        return [self.python, "-m", self.module, "--model", model]

    def help_argv(self) -> list[str]:
        """The command that lists every serve flag."""
        if self.python is None:
            return [self.executable, "serve", "--help=all"]
        return [self.python, "-m", self.module, "--help=all"]

    def version_argv(self) -> list[str]:
        """The command that prints the installed vLLM's version on its last line."""
        python = self.python or _script_python(self.executable)
        if python is None:
            return [self.executable, "--version"]
        # Package metadata answers in 0.1 s; `vllm --version` imports torch (10-20 s).
        return [python, "-c", "import importlib.metadata as m; print(m.version('vllm'))"]


def _script_python(executable: str) -> str | None:
    """The interpreter of a pip console script (its #! line), or None."""
    path = shutil.which(executable)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            first = f.readline(512).decode("utf-8", errors="replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    interpreter = first[2:].strip()
    name = Path(interpreter).name
    return interpreter if name.startswith("python") and Path(interpreter).is_file() else None


class VllmLauncher(CommandLauncher):
    """Starts vLLM arms (`EngineLauncher` for kind ``vllm``)."""

    kind = "vllm"
    managed_flags = _MANAGED
    # Served only in dev mode, which `replica_env` turns on for arms with `cache_reset`.
    reset_path = "/reset_prefix_cache"

    def __init__(self, runtime: VllmRuntime | None = None) -> None:
        self.runtime = runtime or VllmRuntime()
        _check_env(self.runtime.env)

    def version(self) -> str:
        out = run_capture(self.runtime.version_argv(), self.runtime.env, self.runtime.query_timeout_s,
                          "asking vLLM its version")
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        if not lines or not _VERSION.match(lines[-1]):
            raise ServelabError(f"`{' '.join(self.runtime.version_argv())}` printed no version: {out[-200:]!r}")
        return lines[-1]

    def valid_flags(self, log_dir: Path, version: str | None) -> tuple[frozenset[str], str]:
        label = version or "unknown"
        text = cached_help(log_dir / f"vllm-{label}-serve-help-all.txt", self.runtime.help_argv(),
                           self.runtime.env, self.runtime.query_timeout_s)
        valid = parse_help_options(text)
        if "--optimization-level" in valid:  # vLLM's parser rewrites -O3 to it
            valid |= {"-O"}
        return valid, f"vllm {label} serve (--help=all)"

    def command_prefix(self, arm: ArmLaunch) -> list[str]:
        return self.runtime.serve_prefix(arm.model)

    def speculative_args(self, spec: SpeculativeConfig) -> list[str]:
        """``--speculative-config`` with the arm's keys as compact JSON."""
        return ["--speculative-config", spec.engine_json()]

    def replica_env(self, arm: ArmLaunch, replica: int) -> dict[str, str]:
        env = {**self.runtime.env, **super().replica_env(arm, replica)}
        if arm.cache_reset:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        return _check_env(env)


def _check_env(env: dict[str, str]) -> dict[str, str]:
    kv_space = env.get("VLLM_CPU_KVCACHE_SPACE")
    # Empty, the CPU build asks for ~14 GB; it takes whole GiB only.
    if kv_space is not None and not re.fullmatch(r"[1-9]\d*", kv_space):
        raise ServelabError(f"VLLM_CPU_KVCACHE_SPACE={kv_space!r}: give a whole number of GiB (>= 1)")
    return env
