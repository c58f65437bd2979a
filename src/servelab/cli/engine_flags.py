"""The simulated engine's flags (vLLM's names) shared by `sim run`, `sim serve`, `sim calibrate`.

`@sim_engine_flags(...)` rewrites the decorated command's signature as `workload_flags` does
(`servelab.cli.flags`): its `engine` parameter is replaced, in place, by the engine flags,
and at call time the flags become one typed record: `SimOptions` (validated), or with
`raw=True` an `EngineFlags` (the values as given; `.options()` validates them), for a
command that echoes them (`sim serve`) or may not need an engine (`sim calibrate
--experiment`). Per-command differences are the decorator's parameters:

    @sim_engine_flags(fleet=True)
    def run(*, engine: SimOptions, ...): ...
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import typer
from pydantic import ValidationError

from servelab.cli.flags import extend_signature
from servelab.disaggregation import DisaggregatedConfig
from servelab.errors import ServelabError
from servelab.hardware.catalog import node_layout
from servelab.plan.args import VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
from servelab.sim.cost import Calibration, default_calibration
from servelab.sim.kernel_profile import KernelProfile
from servelab.sim.setup import SimOptions
from servelab.speculation import SpeculativeConfig, parse_rates


@dataclass(frozen=True, slots=True)
class EngineFlags:
    """The engine flags as given (None: not given, so the planner's or vLLM's default)."""

    model: str | None
    gpu: str | None
    quantization: str | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    max_model_len: int | None
    gpu_memory_utilization: float | None  # fraction of GPU memory, 0..1
    enable_prefix_caching: bool
    tensor_parallel_size: int
    pipeline_parallel_size: int
    block_size: int | None  # tokens per KV block
    kv_cache_dtype: str | None
    replicas: int = 1
    router_policy: str = "round_robin"
    calibration: Path | None = None
    host_cpu_scale: float = 1.0  # the host's CPU time over the measuring host's
    async_scheduling: bool = True
    profile: Path | None = None
    speculative_config: str | None = None  # vLLM's --speculative-config JSON
    spec_acceptance: str | None = None  # per-position acceptance, "0.8,0.7,..."
    gpus_per_node: int | None = None  # None: a replica's GPUs share one node
    node_link: str = "infiniband"
    disaggregated: str | None = None  # prefill/decode pools, JSON
    enable_expert_parallel: bool = False
    num_redundant_experts: int = 0
    expert_skew: float = 0.0  # the busiest GPU's extra share of MoE work under EP

    def options(self) -> SimOptions:
        """Validate into `SimOptions` (ServelabError names a bad flag)."""
        if self.model is None or self.gpu is None:
            raise ServelabError("--model and --gpu are required")
        return engine_options(**{**asdict(self), "model": self.model, "gpu": self.gpu})


def engine_options(*, model: str, gpu: str, quantization: str | None, max_num_seqs: int | None,
                   max_num_batched_tokens: int | None, max_model_len: int | None,
                   gpu_memory_utilization: float | None, enable_prefix_caching: bool,
                   tensor_parallel_size: int, pipeline_parallel_size: int,
                   block_size: int | None, kv_cache_dtype: str | None, replicas: int,
                   router_policy: str, calibration: Path | None,
                   host_cpu_scale: float = 1.0, async_scheduling: bool = True,
                   profile: Path | None = None,
                   speculative_config: str | None = None,
                   spec_acceptance: str | None = None, gpus_per_node: int | None = None,
                   node_link: str = "infiniband", disaggregated: str | None = None,
                   enable_expert_parallel: bool = False, num_redundant_experts: int = 0,
                   expert_skew: float = 0.0) -> SimOptions:
    """Validate the engine flags into `SimOptions` (ServelabError names a bad flag)."""
    from servelab.plan import EngineArgs

    if replicas < 1:
        raise ServelabError(f"--replicas {replicas}: must be >= 1")
    given: dict[str, Any] = {
        "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
        "max_model_len": max_model_len, "gpu_memory_utilization": gpu_memory_utilization,
        "enable_prefix_caching": enable_prefix_caching,
        "tensor_parallel_size": tensor_parallel_size,
        "pipeline_parallel_size": pipeline_parallel_size, "block_size": block_size,
        "kv_cache_dtype": kv_cache_dtype, "quantization": quantization,
        "enable_expert_parallel": enable_expert_parallel, "num_redundant_experts": num_redundant_experts,
    }
    fields = getattr(EngineArgs, "model_fields", None) or getattr(EngineArgs, "__dataclass_fields__", {})
    kwargs = {k: v for k, v in given.items() if v is not None and k in fields}
    try:
        args = EngineArgs(**kwargs)
    except ValidationError as exc:
        # One line naming the flag, not pydantic's dump ("--max-num-seqs 0: input should be >= 1").
        err = exc.errors()[0]
        flag = "--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else "engine flags"
        msg = err["msg"].replace("greater than or equal to", ">=").replace("less than or equal to", "<=")
        raise ServelabError(f"{flag} {err.get('input')}: {msg[0].lower() + msg[1:]}") from None
    except (ValueError, TypeError) as exc:
        raise ServelabError(f"engine flags: {exc}") from None
    from servelab.routing.policies import POLICY_NAMES

    if router_policy not in POLICY_NAMES:
        raise ServelabError(f"--router-policy {router_policy!r}: choose one of {', '.join(POLICY_NAMES)}")
    cal = Calibration.load(calibration) if calibration is not None else None
    if not 0.2 <= host_cpu_scale <= 5.0:
        raise ServelabError(f"--host-cpu-scale {host_cpu_scale:g}: give the host's CPU time over the "
                            "measuring host's, 0.2 to 5 (1.5: a host 1.5x slower)")
    if host_cpu_scale != 1.0:
        cal = (cal if cal is not None else default_calibration(gpu)).on_host(host_cpu_scale)
    prof = KernelProfile.load(profile) if profile is not None else None
    speculative = speculative_options(speculative_config, spec_acceptance)
    if gpus_per_node is not None and gpus_per_node < 1:
        raise ServelabError(f"--gpus-per-node {gpus_per_node}: must be >= 1")
    nodes = node_layout(gpus_per_node, node_link) if gpus_per_node is not None else None
    if not 0 <= expert_skew <= 100:
        raise ServelabError(f"--expert-skew {expert_skew:g}: give the busiest GPU's extra share, 0 (uniform) to 100")
    if expert_skew and not enable_expert_parallel:
        raise ServelabError("--expert-skew needs --enable-expert-parallel")
    pd = disaggregated_options(disaggregated)
    clash = pd.conflict(replicas, tensor_parallel_size, pipeline_parallel_size,
                        speculative is not None) if pd is not None else None
    if clash is not None:
        raise ServelabError(f"--disaggregated: {clash} (--replicas, --tensor-parallel-size, "
                            "--pipeline-parallel-size, --speculative-config)")
    return SimOptions(model=model, gpu=gpu, quantization=quantization, engine_args=args,
                      replicas=replicas, router_policy=router_policy, calibration=cal,
                      async_scheduling=async_scheduling, profile=prof, speculative=speculative,
                      nodes=nodes, disaggregated=pd, expert_skew=expert_skew)


def disaggregated_options(config_json: str | None) -> DisaggregatedConfig | None:
    """--disaggregated JSON into the pools' record (ServelabError names the key)."""
    if config_json is None:
        return None
    try:
        return DisaggregatedConfig.model_validate_json(config_json)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ServelabError(f"--disaggregated: {where + ': ' if where else ''}{err['msg']}") from None


def speculative_options(config_json: str | None, acceptance: str | None) -> SpeculativeConfig | None:
    """--speculative-config (vLLM's JSON) with --spec-acceptance merged in as `acceptance`."""
    if config_json is None:
        if acceptance is not None:
            raise ServelabError("--spec-acceptance needs --speculative-config")
        return None
    try:
        data = json.loads(config_json)
    except json.JSONDecodeError as exc:
        raise ServelabError(f"--speculative-config: not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ServelabError("--speculative-config: give a JSON object, e.g. "
                            '\'{"method": "ngram", "num_speculative_tokens": 4}\'')
    if acceptance is not None:
        try:
            data["acceptance"] = list(parse_rates(acceptance, "--spec-acceptance"))
        except ValueError as exc:
            raise ServelabError(str(exc)) from None
    try:
        return SpeculativeConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        flag = "--spec-acceptance" if err["loc"] and err["loc"][0] == "acceptance" else "--speculative-config"
        raise ServelabError(f"{flag}: {where + ': ' if where else ''}{err['msg']}") from None


@dataclass(frozen=True, slots=True)
class _Flag:
    name: str  # EngineFlags' field
    annotation: Any
    default: Any  # ... = required
    decls: tuple[str, ...]
    help: str

    def parameter(self, help: str, required: bool) -> inspect.Parameter:
        optional = self.default is ... and not required
        default = None if optional else self.default
        annotation = Optional[self.annotation] if optional else self.annotation
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                                 default=typer.Option(default, *self.decls, help=help))


# In `sim run`'s --help order; `fleet` (the two router flags) only where replicas exist.
_FLAGS = (
    _Flag("model", str, ..., ("--model",), "Model name from the catalog (e.g. Qwen/Qwen3-14B)."),
    _Flag("gpu", str, ..., ("--gpu",), "GPU name from the catalog (e.g. L40S, H200)."),
    _Flag("quantization", Optional[str], None, ("--quantization",),
          "Weight format: awq, gptq, fp8 (default: the model's)."),
    _Flag("max_num_seqs", Optional[int], None, ("--max-num-seqs",),
          "vLLM's --max-num-seqs (default: vLLM's for this GPU)."),
    _Flag("max_num_batched_tokens", Optional[int], None, ("--max-num-batched-tokens",),
          "vLLM's token budget per step."),
    _Flag("max_model_len", Optional[int], None, ("--max-model-len",),
          "Longest request (prompt + output tokens)."),
    _Flag("gpu_memory_utilization", Optional[float], None, ("--gpu-memory-utilization",),
          f"Fraction of GPU memory vLLM may use (default {VLLM_DEFAULT_GPU_MEMORY_UTILIZATION}, recent vLLM's)."),
    _Flag("enable_prefix_caching", bool, True, ("--enable-prefix-caching/--no-enable-prefix-caching",),
          "Automatic prefix caching."),
    _Flag("tensor_parallel_size", int, 1, ("--tensor-parallel-size", "-tp"), "GPUs{}, tensor parallel."),
    _Flag("pipeline_parallel_size", int, 1, ("--pipeline-parallel-size", "-pp"), "Pipeline stages{}."),
    _Flag("block_size", Optional[int], None, ("--block-size",), "KV block size in tokens (default 16)."),
    _Flag("kv_cache_dtype", Optional[str], None, ("--kv-cache-dtype",), "auto or fp8."),
    _Flag("replicas", int, 1, ("--replicas",), "Independent replicas behind a router."),
    _Flag("router_policy", str, "round_robin", ("--router-policy",), "Routing policy for --replicas > 1."),
    _Flag("calibration", Optional[Path], None, ("--calibration",),
          "Calibration JSON from `servelab sim calibrate` (default: shipped factors)."),
    _Flag("host_cpu_scale", float, 1.0, ("--host-cpu-scale",),
          "Host CPU time relative to the host the GPU's figures were measured on (1.5: a host 1.5x "
          "slower, as two H200 VMs measured apart): scales the API server's, tokenizer's, scheduler's "
          "and launch figures, not the GPU's."),
    _Flag("profile", Optional[Path], None, ("--profile",),
          "Kernel profile JSON from `servelab sim profile` (default: the one servelab ships for the GPU, else its datasheet)."),
    _Flag("async_scheduling", bool, True, ("--async-scheduling/--no-async-scheduling",),
          "vLLM's async scheduling (its default): a request reaching a busy engine joins the step after next."),
    _Flag("speculative_config", Optional[str], None, ("--speculative-config",),
          "vLLM's speculative decoding JSON, e.g. '{{\"method\": \"ngram\", \"num_speculative_tokens\": 4}}'."),
    _Flag("spec_acceptance", Optional[str], None, ("--spec-acceptance",),
          "Per-position acceptance for --speculative-config, e.g. 0.8,0.7,0.6,0.5 (one per draft token)."),
    _Flag("gpus_per_node", Optional[int], None, ("--gpus-per-node",),
          "GPUs per node: a replica wider than a node crosses --node-link (default: one node)."),
    _Flag("node_link", str, "infiniband", ("--node-link",),
          "Fabric between nodes: infiniband, roce or ethernet (with --gpus-per-node)."),
    _Flag("disaggregated", Optional[str], None, ("--disaggregated",),
          "Prefill/decode disaggregation as JSON, e.g. '{{\"prefill\": {{\"replicas\": 1, \"tp\": 1}}, "
          "\"decode\": {{\"replicas\": 3, \"tp\": 1}}, \"link\": \"nvlink\"}}' (link: nvlink, pcie, "
          "infiniband, roce, ethernet; \"layerwise\": true overlaps the KV transfer with the prefill)."),
    _Flag("enable_expert_parallel", bool, False, ("--enable-expert-parallel/--no-enable-expert-parallel",),
          "MoE models: vLLM's expert parallelism, experts over EP = TP x --replicas GPUs (the replicas are its DP ranks)."),
    _Flag("num_redundant_experts", int, 0, ("--num-redundant-experts",),
          "vLLM's EPLB copies of hot experts (memory per GPU), with --enable-expert-parallel."),
    _Flag("expert_skew", float, 0.0, ("--expert-skew",),
          "With --enable-expert-parallel: the busiest GPU's extra share of token-expert pairs (0: uniform routing; 0.5: 1.5x the mean)."),
)
ENGINE_FLAG_NAMES = tuple(f.name for f in _FLAGS)
_FLEET = ("replicas", "router_policy", "disaggregated", "enable_expert_parallel",
          "num_redundant_experts", "expert_skew")


def sim_engine_flags(*, raw: bool = False, required: bool = True, fleet: bool = False,
                     calibration: bool = True, async_scheduling: bool = True,
                     help: Mapping[str, str] | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Replace the command's `engine` parameter by the engine flags.

    raw: inject `EngineFlags` rather than validated `SimOptions`. required: --model and
    --gpu are required (else they default to None; needs `raw`). fleet: add --replicas and
    --router-policy. calibration / async_scheduling: add --calibration and
    --host-cpu-scale / --async-scheduling (left out, the record holds their defaults).
    help: flag name -> help text, replacing the shared one.
    """
    if not (required or raw):
        raise TypeError("sim_engine_flags(required=False) needs raw=True: no model, no SimOptions")
    left_out = (() if fleet else _FLEET) + (() if calibration else ("calibration", "host_cpu_scale")) \
        + (() if async_scheduling else ("async_scheduling",))
    flags = [f for f in _FLAGS if f.name not in left_out]
    texts = dict(help or {})
    unknown = set(texts) - {f.name for f in flags}
    if unknown:
        raise TypeError(f"sim_engine_flags(help=...) names no flag: {sorted(unknown)}")
    per_replica = " per replica" if fleet else ""
    params = [f.parameter(texts.get(f.name, f.help.format(per_replica)), required) for f in flags]

    def convert(values: dict[str, Any]) -> dict[str, Any]:
        record = EngineFlags(**values)
        return {"engine": record if raw else record.options()}

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        return extend_signature(func, ("engine",), params, convert, in_place=True)

    return decorate
