"""What a sweep measures: a `Target` (the experiment package's protocol) plus what the
planner knows about it, opened from simulator options, a URL, or an arm of a spec.

- simulator: `OfflineSimTarget` (fresh engines per run, virtual clock). The engine is built
  once up front so a configuration that cannot start (weights exceed memory, a KV pool
  smaller than one request) fails here as vLLM would refuse to start.
- URL: `HttpTarget` (servelab's client; `/metrics` sampled during each level).
- spec arm: `servelab.experiment.launch.start_arm` (the simulator, vLLM, SGLang or external
  URLs as the spec says), stopped by `close()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from servelab.errors import ServelabError
from servelab.experiment import load_spec
from servelab.experiment.planning import ArmPlanner
from servelab.experiment.targets import HttpTarget, OfflineSimTarget, Target
from servelab.sim.setup import SimOptions


@dataclass(frozen=True, slots=True)
class PlannerView:
    """The planner's figures for the target, where it can model it: the scheduler's
    `max_num_seqs`, GPUs per deployment, and the roofline decode step."""

    max_num_seqs: int | None
    gpus: int
    planner: ArmPlanner | None = None

    def decode_step(self, batch: float, context_tokens: float) -> dict[str, Any] | None:
        """Roofline decode step at `batch` x `context_tokens` (ms, bound), or None."""
        return self.planner.decode_step(batch, context_tokens) if self.planner else None


@dataclass
class OpenTarget:
    """A target ready to measure; `close()` stops whatever was started for it."""

    target: Target
    planner: PlannerView
    describe: str
    _close: Callable[[], None] = field(default=lambda: None)

    def close(self) -> None:
        self._close()


def open_sim(opts: SimOptions) -> OpenTarget:
    """The offline simulator; raises `ServelabError` when the engine would not start."""
    from servelab.hardware.catalog import get_gpu
    from servelab.models import load_model
    from servelab.sim.engine import build_engine

    engine = build_engine(opts.model, opts.gpu, opts.quantization, opts.engine_args,
                          opts.resolved_calibration, opts.async_scheduling, opts.profile)
    planner = ArmPlanner(load_model(opts.model, opts.quantization), get_gpu(opts.gpu), opts.engine_args)
    a = opts.engine_args
    gpus = a.tensor_parallel_size * a.pipeline_parallel_size * opts.replicas
    return OpenTarget(OfflineSimTarget(opts), PlannerView(engine.config.max_num_seqs, gpus, planner),
                      f"simulated {opts.model} on {opts.replicas}x {opts.gpu}")


def open_url(url: str, model: str, backend: str, gpu: str | None, request_timeout_s: float,
             max_num_seqs: int | None, gpus: int) -> OpenTarget:
    """An OpenAI-compatible URL; with `gpu` (catalog) and a catalog `model` the planner's
    roofline is available to the diagnosis."""
    if not url.startswith(("http://", "https://")):
        raise ServelabError(f"--base-url {url!r}: expected http://HOST:PORT")
    url = url.rstrip("/").removesuffix("/v1")
    planner = None
    if gpu is not None:
        from servelab.hardware.catalog import get_gpu
        from servelab.models import load_model
        from servelab.plan import EngineArgs

        try:
            planner = ArmPlanner(load_model(model, None), get_gpu(gpu),
                                 EngineArgs(max_num_seqs=max_num_seqs))
        except ServelabError:
            planner = None
    target = HttpTarget([url], [url], model, backend, True, request_timeout_s)
    return OpenTarget(target, PlannerView(max_num_seqs, gpus, planner), f"{url} ({model})")


def open_arm(spec_path: Path, arm_name: str | None, log_dir: Path,
             arm_update: dict[str, Any] | None = None) -> OpenTarget:
    """Start arm `arm_name` (default: the baseline) of the spec; `arm_update` overrides
    arm fields (the tuner's trial parameters)."""
    return open_spec_arm(load_spec(spec_path), arm_name, log_dir, arm_update, label=str(spec_path))


def open_spec_arm(spec: Any, arm_name: str | None, log_dir: Path, arm_update: dict[str, Any] | None = None,
                  *, label: str = "the spec", port_base: int | None = None) -> OpenTarget:
    """`open_arm` for a loaded spec; `port_base` moves the spec's ports (a second copy of
    the arm on the same node)."""
    from servelab.experiment.launch import start_arm

    arm = arm_of(spec, arm_name)
    if arm_update:
        arm = arm.model_validate({**arm.model_dump(), **arm_update})
        spec = spec.model_copy(update={"arms": [arm if a.name == arm.name else a for a in spec.arms]})
    if port_base is not None:
        spec = spec.model_copy(update={"engine_defaults": spec.engine_defaults.model_copy(
            update={"port_base": port_base})})
    view = arm_view(spec, arm)
    started = start_arm(spec, arm, log_dir)
    return OpenTarget(started.target, view, f"arm {arm.name} of {label} ({spec.engine})", started.stop)


def arm_view(spec: Any, arm: Any) -> PlannerView:
    """What the planner knows of a spec's arm, without launching it."""
    planner = None
    if spec.hardware.gpu is not None:
        try:
            planner = ArmPlanner.for_arm(spec, arm, spec.hardware.gpu)
        except ServelabError:
            planner = None
    seqs = arm.args.get("max_num_seqs")
    if seqs is None and planner is not None:
        seqs = planner.memory().max_num_seqs
    gpus = arm.tensor_parallel_size * arm.pipeline_parallel_size * arm.replicas
    return PlannerView(int(seqs) if seqs is not None else None, gpus, planner)


@dataclass(frozen=True)
class SimCopies:
    """Opens copies of the offline simulator (each in its own process: one CPU, no GPU)."""

    opts: SimOptions
    gpus: int = 0

    def __call__(self, copy: int) -> OpenTarget:
        return open_sim(self.opts)

    def view(self) -> tuple[PlannerView, str]:
        ot = open_sim(self.opts)
        return ot.planner, ot.describe


@dataclass(frozen=True)
class ArmCopies:
    """Opens copies of a spec's arm: copy i on ports after copy i - 1's (copies may share a
    node) and with its logs under `log_root/copy<i>`."""

    spec: Any
    arm_name: str | None
    log_root: Path
    label: str

    @property
    def gpus(self) -> int:
        arm = arm_of(self.spec, self.arm_name)
        return 0 if self.spec.engine == "sim" and self.spec.sim.mode == "offline" else (
            arm.tensor_parallel_size * arm.pipeline_parallel_size * arm.replicas)

    def __call__(self, copy: int) -> OpenTarget:
        stride = sum(a.replicas + 1 for a in self.spec.arms)
        return open_spec_arm(self.spec, self.arm_name, self.log_root / f"copy{copy}", label=self.label,
                             port_base=self.spec.engine_defaults.port_base + copy * stride)

    def view(self) -> tuple[PlannerView, str]:
        arm = arm_of(self.spec, self.arm_name)
        return arm_view(self.spec, arm), f"arm {arm.name} of {self.label} ({self.spec.engine})"


def arm_of(spec: Any, name: str | None) -> Any:
    if name is None:
        return spec.baseline
    names = [a.name for a in spec.arms]
    if name not in names:
        raise ServelabError(f"--arm {name!r}: the spec's arms are {', '.join(names)}")
    return spec.arm(name)


def spec_dataset(spec_path: Path, workload: str | None) -> tuple[Any, Any]:
    """(dataset options of the spec's workload, the spec) for `--spec` (`--workload`: its
    first by default)."""
    spec = load_spec(spec_path)
    names = [w.name for w in spec.workloads]
    name = workload or names[0]
    if name not in names:
        raise ServelabError(f"--workload {name!r}: the spec's workloads are {', '.join(names)}")
    return spec.workload(name).dataset(1, spec.model.tokenizer), spec
