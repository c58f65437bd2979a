"""An arm spec in the forms its consumers take: engine flags, the planner's `EngineArgs`, an
adapter's `ArmLaunch`.

One rule for `gpu_memory_utilization`: the arm's value, else `engine_defaults`', else
`DEFAULT_GPU_MEMORY_UTILIZATION` (0.9); it is passed explicitly to every launched engine
(so replicas started one after another get equal KV pools) and is the figure the planner
and the simulator use, so a simulated arm and the real one plan the same budget.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from servelab.engine.adapter import ArmLaunch
from servelab.errors import ServelabError
from servelab.hardware.catalog import NodeLayout, node_layout
from servelab.experiment.spec import ArgValue, ArmSpec, ExperimentSpec
from servelab.plan import EngineArgs
from servelab.sim.cost import Calibration, default_calibration
from servelab.sim.kernel_profile import KernelProfile

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9

# `args` keys that an arm's own field sets; naming them in `args` is refused.
RESERVED_ARGS: dict[str, str] = {
    "model": "model",
    "served_model_name": "model.name",
    "quantization": "quantization",
    "q": "quantization",
    "tensor_parallel_size": "tensor_parallel_size",
    "tp": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "pp": "pipeline_parallel_size",
    "data_parallel_size": "replicas",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "load_format": "engine_defaults.load_format",
    "host": "(set by servelab)",
    "port": "engine_defaults.port_base",
    "speculative_config": "speculative",
    "sc": "speculative",
}
PLANNER_ARGS = frozenset(EngineArgs.model_fields) - set(RESERVED_ARGS)


def gpu_memory_utilization(spec: ExperimentSpec, arm: ArmSpec) -> float:
    """The fraction of GPU memory the arm's engine may use (see module docstring)."""
    for value in (arm.gpu_memory_utilization, spec.engine_defaults.gpu_memory_utilization):
        if value is not None:
            return value
    return DEFAULT_GPU_MEMORY_UTILIZATION


def engine_path(spec: ExperimentSpec, arm: ArmSpec) -> str:
    """What the engine loads (and the planner reads): the arm's model, the spec's model
    path, else the spec's model name."""
    return arm.model or spec.model.path or spec.model.name


def flag_tokens(args: dict[str, ArgValue]) -> list[str]:
    """Engine command-line tokens of an `args` mapping (``{"max_num_seqs": 8}`` ->
    ``["--max-num-seqs", "8"]``; true -> bare flag, false -> ``--no-`` flag)."""
    tokens: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            tokens.append(flag)
        elif value is False:
            tokens.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, list):
            tokens.append(flag)
            tokens.extend(str(v) for v in value)
        else:
            tokens.append(flag)
            tokens.append(str(value))
    return tokens


class ArgError(ServelabError):
    """An `args` entry the planner or simulator cannot take; `key` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def planner_args(spec: ExperimentSpec, arm: ArmSpec, strict: bool) -> EngineArgs:
    """The planner's view of the arm. With `strict` (the simulator) every `args` key must be
    one the planner models; otherwise keys it does not model are left out (they still
    reach the real engine). Raises `ServelabError` naming the bad key."""
    given: dict[str, Any] = {}
    for key, value in arm.args.items():
        if key in PLANNER_ARGS:
            given[key] = value
        elif strict:
            raise ArgError(key, f"not an engine argument the simulator models; it takes: "
                                f"{', '.join(sorted(PLANNER_ARGS))}")
    try:
        return EngineArgs(
            **given,
            tensor_parallel_size=arm.tensor_parallel_size,
            pipeline_parallel_size=arm.pipeline_parallel_size,
            data_parallel_size=arm.replicas,
            gpu_memory_utilization=gpu_memory_utilization(spec, arm),
            quantization=arm.quantization,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else ""
        raise ArgError(key, f"{err['msg']} (got {err.get('input')!r})") from None


def arm_ports(spec: ExperimentSpec, arm: ArmSpec) -> tuple[int, int]:
    """(first replica port, router port) of the arm: each arm gets its own block after
    `engine_defaults.port_base` (replicas + 1 ports), so a slow-dying server of one arm
    never blocks the next."""
    port = spec.engine_defaults.port_base
    for other in spec.arms:
        if other.name == arm.name:
            return port, port + other.replicas
        port += other.replicas + 1
    raise ValueError(f"arm {arm.name} is not in the spec")


def arm_launch(spec: ExperimentSpec, arm: ArmSpec) -> ArmLaunch:
    """The adapter's launch request for the arm (asking for a resettable prefix cache when
    the arm shares its engine with a neighbour, see `engine_owner`)."""
    launch = _launch(spec, arm)
    if engine_owner(spec, arm) != arm.name or _shared_by_next(spec, arm):
        launch = launch.model_copy(update={"cache_reset": True})
    return launch


def launch_identity(spec: ExperimentSpec, arm: ArmSpec) -> str | None:
    """What makes two arms' engines interchangeable: the launch request less the arm's name
    and ports (the router policy is not part of it). None when the arm launches nothing
    that could be shared (offline simulation, external servers) or sharing is off."""
    if (spec.engine == "external" or (spec.engine == "sim" and spec.sim.mode == "offline")
            or not spec.engine_defaults.share_engine):
        return None
    return _launch(spec, arm).model_copy(update={"name": "-", "port_base": 1}).model_dump_json()


def engine_owner(spec: ExperimentSpec, arm: ArmSpec) -> str:
    """The arm whose launch `arm` runs on: the first of the consecutive arms (in spec order)
    with the same `launch_identity`, e.g. ``direct``, ``round_robin`` and ``cache_aware``
    arms over the same replicas share one launch; itself when it shares with none before."""
    names = [a.name for a in spec.arms]
    i = names.index(arm.name)
    key = launch_identity(spec, arm)
    while key is not None and i > 0 and launch_identity(spec, spec.arms[i - 1]) == key:
        i -= 1
    return names[i]


def _shared_by_next(spec: ExperimentSpec, arm: ArmSpec) -> bool:
    names = [a.name for a in spec.arms]
    i = names.index(arm.name)
    key = launch_identity(spec, arm)
    return key is not None and i + 1 < len(names) and launch_identity(spec, spec.arms[i + 1]) == key


def sim_calibration(spec: ExperimentSpec) -> Calibration | None:
    """The spec's `sim.calibration` (None: the GPU's shipped one) with `sim.host_cpu_scale`
    applied to its host figures."""
    sim = spec.sim
    cal = Calibration.load(sim.calibration) if sim.calibration else None
    if sim.host_cpu_scale == 1.0:
        return cal
    if cal is None:
        if spec.hardware.gpu is None:
            raise ServelabError("sim.host_cpu_scale needs hardware.gpu (whose figures it scales)")
        cal = default_calibration(spec.hardware.gpu)
    return cal.on_host(sim.host_cpu_scale)


def sim_profile(spec: ExperimentSpec) -> KernelProfile | None:
    """The spec's `sim.profile` (a kernel profile measured by `servelab sim profile`; None:
    the GPU's shipped one, else its datasheet)."""
    return KernelProfile.load(spec.sim.profile, "sim.profile") if spec.sim.profile else None


def node_layout_of(spec: ExperimentSpec) -> NodeLayout | None:
    """The spec's `cluster.gpus_per_node` and `node_link` as the simulator's layout (None:
    not given, every replica inside one node)."""
    c = spec.cluster
    return node_layout(c.gpus_per_node, c.node_link) if c.gpus_per_node is not None else None


def _launch(spec: ExperimentSpec, arm: ArmSpec) -> ArmLaunch:
    d = spec.engine_defaults
    extra = flag_tokens(arm.args)
    if spec.engine == "sim":
        if spec.sim.time_scale != 1.0:
            extra += ["--time-scale", repr(spec.sim.time_scale)]
        if spec.sim.host_cpu_scale != 1.0:
            extra += ["--host-cpu-scale", repr(spec.sim.host_cpu_scale)]
        if spec.cluster.gpus_per_node is not None:
            extra += ["--gpus-per-node", str(spec.cluster.gpus_per_node), "--node-link", spec.cluster.node_link]
    return ArmLaunch(
        name=arm.name,
        model=engine_path(spec, arm),
        served_model_name=spec.model.name,
        quantization=arm.quantization,
        tensor_parallel_size=arm.tensor_parallel_size,
        pipeline_parallel_size=arm.pipeline_parallel_size,
        replicas=arm.replicas,
        gpu_memory_utilization=gpu_memory_utilization(spec, arm),
        load_format=d.load_format,
        extra_args=extra,
        env={**d.env, **arm.env},
        gpus=arm.gpus,
        port_base=arm_ports(spec, arm)[0],
        speculative=arm.speculative,
    )


def arm_urls(spec: ExperimentSpec, arm: ArmSpec) -> list[str]:
    """An external arm's replica URLs (the arm's, else engine_defaults')."""
    urls = arm.urls if arm.urls is not None else spec.engine_defaults.urls
    return [u.rstrip("/").removesuffix("/v1") for u in urls]
