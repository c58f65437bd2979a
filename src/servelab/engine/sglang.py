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

from servelab.engine.adapter import ArmLaunch, NodeRank
from servelab.engine.flags import cached_help, parse_help_options, run_capture
from servelab.engine.launcher import ArmFlags, CommandLauncher
from servelab.errors import ServelabError
from servelab.speculation import SpeculativeConfig

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
    "--speculative-algorithm": "speculative",
    "--speculative-draft-model-path": "speculative",
    "--speculative-num-steps": "speculative",
    "--speculative-eagle-topk": "speculative",
    "--speculative-num-draft-tokens": "speculative",
    "--nnodes": "node_rank",
    "--node-rank": "node_rank",
    "--dist-init-addr": "node_rank",
}
# servelab's (vLLM's) method names -> SGLang's --speculative-algorithm; a draft model is
# SGLang's STANDALONE, DeepSeek-style MTP runs as its EAGLE (NextN) algorithm.
SGLANG_ALGORITHMS = {"ngram": "NGRAM", "draft_model": "STANDALONE", "eagle": "EAGLE",
                     "eagle3": "EAGLE3", "mtp": "EAGLE"}


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

    def node_rank_args(self, rank: NodeRank) -> list[str]:
        """SGLang's multi-node launch: every node runs the same command with its rank; TP and
        PP sizes are the whole replica's, over all nodes."""
        return ["--nnodes", str(rank.nnodes), "--node-rank", str(rank.node_rank),
                "--dist-init-addr", rank.dist_init_addr]

    def speculative_args(self, spec: SpeculativeConfig) -> list[str]:
        """SGLang's `--speculative-*` flags: a chain of K draft steps (top-k 1, K + 1 tokens
        verified); the n-gram proposer takes the draft-token count only. vLLM-only keys
        (prompt lookup windows, synthetic acceptance, suffix decoding) are refused."""
        algo = SGLANG_ALGORITHMS.get(spec.method)
        if algo is None:
            raise ServelabError(f"speculative method {spec.method} has no SGLang counterpart")
        vllm_only = [k for k in ("prompt_lookup_min", "prompt_lookup_max", "rejection_sample_method",
                                 "synthetic_acceptance_rates", "draft_tensor_parallel_size")
                     if getattr(spec, k) is not None]
        if vllm_only:
            raise ServelabError(f"speculative keys {', '.join(vllm_only)} are vLLM's; SGLang has none")
        k = spec.num_speculative_tokens
        args = ["--speculative-algorithm", algo, "--speculative-num-draft-tokens", str(k + 1)]
        if algo != "NGRAM":
            args += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1"]
        if spec.model is not None:
            args += ["--speculative-draft-model-path", spec.model]
        return args
