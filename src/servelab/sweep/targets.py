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
    from servelab.experiment.launch import start_arm

    spec = load_spec(spec_path)
    arm = arm_of(spec, arm_name)
    if arm_update:
        arm = arm.model_validate({**arm.model_dump(), **arm_update})
        spec = spec.model_copy(update={"arms": [arm if a.name == arm.name else a for a in spec.arms]})
    planner = None
    if spec.hardware.gpu is not None:
        try:
            planner = ArmPlanner.for_arm(spec, arm, spec.hardware.gpu)
        except ServelabError:
            planner = None
    seqs = arm.args.get("max_num_seqs")
    if seqs is None and planner is not None:
        seqs = planner.memory().max_num_seqs
    started = start_arm(spec, arm, log_dir)
    gpus = arm.tensor_parallel_size * arm.pipeline_parallel_size * arm.replicas
    return OpenTarget(started.target, PlannerView(int(seqs) if seqs is not None else None, gpus, planner),
                      f"arm {arm.name} of {spec_path} ({spec.engine})", started.stop)


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
