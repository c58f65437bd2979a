"""From an arm to a running `Target`: the engine adapter, a router in front when asked, or
the offline simulator.

Which target an arm gets:
- ``engine: sim`` (``sim.mode: offline``, the default): `OfflineSimTarget`, in process on a
  virtual clock. A whole experiment then takes seconds, where real-time simulation would
  take as long as the real runs (minutes per cell). With ``sim.mode: online`` the arm is
  launched as `servelab sim serve` processes (the sim adapter) and measured over HTTP like
  a real engine.
- ``engine: vllm | sglang``: the engine adapter launches the arm's replicas.
- ``engine: external``: already-running URLs (nothing launched, nothing stopped).
With several replicas, ``routing: direct`` has the client spread requests itself; a policy
name starts servelab's router in front of the replicas (own process group, log beside the
engine's) and stops it with them.
"""

from __future__ import annotations

import random

import sys
from dataclasses import dataclass
from pathlib import Path

from servelab.engine.adapter import ArmLaunch, EngineLauncher, NodeRank, RunningEngine
from servelab.engine.launcher import CommandLauncher
from servelab.engine.logparse import StartupInfo
from servelab.engine.process import ReplicaCommand, ServerProcess
from servelab.engine.running import LaunchedEngine, launch
from servelab.errors import ServelabError
from servelab.experiment.arms import (arm_launch, arm_ports, arm_urls, engine_path, node_layout_of,
                                      planner_args, sim_calibration, sim_profile)
from servelab.experiment.planning import startup_from_plan
from servelab.experiment.spec import DIRECT, ArmSpec, ExperimentSpec
from servelab.experiment.targets import HttpTarget, OfflineSimTarget, Target
from servelab.sim.setup import SimOptions, build_cluster

ROUTER_START_S = 60.0


@dataclass
class ArmRun:
    """A started arm: the target to measure, the engine's startup figures per replica, its
    version, the launched engine (None: offline simulation) and the router in front."""

    target: Target
    startups: list[StartupInfo | None]
    version: str | None
    engine: RunningEngine | None = None
    router: LaunchedEngine | None = None

    def stop_router(self) -> None:
        """Stop the router (if any), leaving the engine running for another arm."""
        if self.router is not None:
            self.router.stop()
            self.router = None

    def stop(self) -> None:
        """Stop the router first, then the engine; every stop is attempted."""
        errors = []
        for stop in (self.stop_router, self.engine.stop if self.engine is not None else None):
            if stop is None:
                continue
            try:
                stop()
            except ServelabError as exc:
                errors.append(str(exc))
        if errors:
            raise ServelabError("; ".join(errors))


def make_launcher(spec: ExperimentSpec, arm: ArmSpec) -> EngineLauncher:
    """The adapter for the spec's engine, configured from `engine_defaults` (external: the
    arm's URLs, waited on for /health like a launched engine)."""
    d = spec.engine_defaults
    if spec.engine == "external":
        from servelab.engine.external import ExternalLauncher

        return ExternalLauncher(arm_urls(spec, arm))
    if spec.engine == "vllm":
        from servelab.engine.vllm import VllmLauncher, VllmRuntime

        base = VllmRuntime()
        runtime = VllmRuntime(executable=d.executable or base.executable, python=d.python,
                              module=d.module or base.module, env={**base.env, **d.env})
        return VllmLauncher(runtime)
    if spec.engine == "sglang":
        from servelab.engine.sglang import SglangLauncher, SglangRuntime

        base_sg = SglangRuntime()
        return SglangLauncher(SglangRuntime(python=d.python or base_sg.python,
                                            module=d.module or base_sg.module, env=dict(d.env)))
    if spec.engine == "sim":
        from servelab.engine.sim import SimLauncher

        assert spec.hardware.gpu is not None  # checked by load_spec
        return SimLauncher(spec.hardware.gpu, python=d.python or sys.executable, env=dict(d.env))
    raise ServelabError(f"engine {spec.engine}: no adapter")


def start_arm(spec: ExperimentSpec, arm: ArmSpec, log_dir: Path,
              engine: RunningEngine | None = None, node_rank: NodeRank | None = None) -> ArmRun:
    """Start the arm and return its target; `ServelabError` says why it could not start
    (nothing started here is left running). With `engine` (another arm's, with the same
    launch: `arms.engine_owner`) nothing is launched: only the arm's router, if any. With
    `node_rank` (rank 0) this is the serving node of a replica that spans nodes: it answers
    /health once the other ranks (`start_rank`) have joined it."""
    if spec.engine == "sim" and spec.sim.mode == "offline":
        return _offline(spec, arm)
    if engine is not None:
        return _http(spec, arm, engine, log_dir)
    launcher = make_launcher(spec, arm)
    launched = launcher.start(_on_node(arm_launch(spec, arm), node_rank), log_dir,
                              spec.engine_defaults.startup_timeout_s)
    try:
        return _http(spec, arm, launched, log_dir)
    except BaseException:
        launched.stop()
        raise


def start_rank(spec: ExperimentSpec, arm: ArmSpec, log_dir: Path, node_rank: NodeRank) -> ServerProcess:
    """Start one node's process (rank above 0) of the arm's replica that spans nodes; it
    serves no HTTP, so nothing is waited for. The caller stops it."""
    launcher = make_launcher(spec, arm)
    if not isinstance(launcher, CommandLauncher):
        raise ServelabError(f"arm {arm.name}: engine {spec.engine} is not launched one process per node")
    return launcher.start_rank(_on_node(arm_launch(spec, arm), node_rank), log_dir)


def _on_node(launch_: ArmLaunch, node_rank: NodeRank | None) -> ArmLaunch:
    if node_rank is None:
        return launch_
    return ArmLaunch.model_validate({**launch_.model_dump(), "node_rank": node_rank.model_dump()})


def _offline(spec: ExperimentSpec, arm: ArmSpec) -> ArmRun:
    assert spec.hardware.gpu is not None
    args = planner_args(spec, arm, strict=True)
    calibration = sim_calibration(spec)
    profile = sim_profile(spec)
    opts = SimOptions(model=arm.model or spec.model.name, gpu=spec.hardware.gpu,
                      quantization=arm.quantization, engine_args=args, replicas=arm.replicas,
                      router_policy="round_robin" if arm.routing == DIRECT else arm.routing,
                      calibration=calibration, profile=profile, speculative=arm.speculative,
                      async_scheduling=args.async_scheduling, nodes=node_layout_of(spec),
                      disaggregated=arm.disaggregated)
    # The engines the cells will build, built once here so a config that cannot start
    # (KV pool smaller than one request) fails the arm the way vLLM would; one startup per
    # replica (P/D: per pool replica, each pool with its own TP).
    cluster = build_cluster(opts, random.Random(0))
    startups = [startup_from_plan(e.memory) for e in cluster.engines]
    return ArmRun(OfflineSimTarget(opts, direct=arm.client_splits), startups, None)


def _http(spec: ExperimentSpec, arm: ArmSpec, engine: RunningEngine, log_dir: Path) -> ArmRun:
    d = spec.engine_defaults
    urls = list(engine.replica_urls)
    send, router = urls, None
    if arm.routing != DIRECT and len(urls) > 1:
        router = _start_router(spec, arm, urls, log_dir)
        send = router.replica_urls
    target = HttpTarget(send, urls, spec.model.name, d.backend, d.ignore_eos, d.request_timeout_s,
                        d.sampling)
    startups = list(engine.replica_startups) or [None] * len(urls)
    return ArmRun(target, startups, engine.version, engine, router)


def _start_router(spec: ExperimentSpec, arm: ArmSpec, urls: list[str], log_dir: Path) -> LaunchedEngine:
    """servelab's router with the arm's policy in front of `urls`, in its own process group."""
    port = arm_ports(spec, arm)[1]
    argv = [sys.executable, "-m", "servelab.cli.route", "--policy", arm.routing,
            "--host", "127.0.0.1", "--port", str(port), "--seed", str(spec.seed)]
    for u in urls:
        argv += ["--backend", u]
    cmd = ReplicaCommand(name=f"router for arm {arm.name}", argv=argv, env={},
                         log_path=log_dir / f"{arm.name}-router.log",
                         url=f"http://127.0.0.1:{port}", host="127.0.0.1", port=port)
    return launch([[cmd]], ROUTER_START_S)


__all__ = ["ArmRun", "engine_path", "make_launcher", "start_arm", "start_rank"]
