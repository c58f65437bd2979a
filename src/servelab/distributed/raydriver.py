"""An experiment on a Ray cluster: each arm an actor in its own placement group, the cells
streamed back to this process, which alone writes the store.

The driver (this process) checks the spec and its inputs, writes the manifest, then places
every arm that has cells to run (`placement.demand_of`): a placement group per arm, an
`ArmWorker` actor on its bundle 0. Ray starts the groups as GPUs free up, so independent
arms run at the same time on different nodes; an exclusive arm (vLLM's Ray executor across
nodes) is placed only when nothing else runs, and nothing is placed beside it. Each actor
starts its arm's engine on its node (the client runs there too, next to the engine) and
measures one cell per call; the driver writes each cell atomically as it arrives, so
`--resume`, the report and the store's layout are those of a local run, and every cell
records where it ran (`placement`: node ids of the arm's bundles, the attempt).

Faults: an actor lost with its node (or killed) loses only the cell in flight; the driver
places the arm again (another node when the old one is gone) and measures the cells not yet
stored, up to `max_attempts` placements. A cell is stored once: only the driver writes, and
only a returned cell. An arm no node set can hold fails at once with what it asked for.
Processes an actor started are stopped by process group when its arm ends or the run is
interrupted; should the actor itself die, they receive SIGTERM from the kernel
(``SERVELAB_DIE_WITH_PARENT``, `servelab.engine.process`).

Consecutive arms do not share an engine here (each arm is placed on its own).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from servelab.distributed.placement import ArmDemand, demand_of, gpus_per_node, unplaceable
from servelab.distributed.raycluster import cluster_nodes, connect
from servelab.engine.process import DIE_WITH_PARENT_ENV
from servelab.errors import ServelabError
from servelab.experiment.cellrecord import CellRecord, Placement
from servelab.experiment.cells import Cell, CellSelection
from servelab.experiment.launch import ArmRun, start_arm
from servelab.experiment.orchestrator import Orchestrator, cell_line
from servelab.experiment.spec import ArmSpec, ExperimentSpec
from servelab.experiment.store import ArmStatus, ExperimentStore

Echo = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Started:
    """What an actor's start returns: the engine's version and startup figures, or why it
    failed to start; the node it runs on."""

    node_id: str
    version: str | None = None
    startups: tuple[dict[str, Any] | None, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Measured:
    """One cell from an actor: its record, or the error that failed it."""

    record: CellRecord | None = None
    error: str | None = None


class ArmWorker:
    """The actor of one arm (made remote by the driver): starts the arm's engine on its
    node, measures cells one per call, stops what it started."""

    def __init__(self, spec: ExperimentSpec, store_root: str, arm: ArmSpec, ray_address: str) -> None:
        import os

        import ray

        # This process is the actor's own: servers it starts die with it (see the module doc).
        # Set here rather than as a Ray runtime_env, which would cost a fresh worker per arm.
        os.environ[DIE_WITH_PARENT_ENV] = "1"
        self._ray = ray
        self.spec = spec
        self.arm = arm
        self.ray_address = ray_address
        store = ExperimentStore(Path(store_root))
        self.orchestrator = Orchestrator(spec, store, select=CellSelection(arms=frozenset({arm.name})))
        self.log_dir = store.log_dir(arm.name)
        self.run: ArmRun | None = None
        self.startups: tuple[dict[str, Any] | None, ...] = ()

    def start(self, exclusive: bool) -> Started:
        node = self._ray.get_runtime_context().get_node_id()
        arm = self.arm
        ids = [int(g) for g in self._ray.get_gpu_ids()]
        if arm.gpus is None and ids and len(ids) == arm.tensor_parallel_size * arm.pipeline_parallel_size * arm.replicas:
            arm = arm.model_copy(update={"gpus": ids})  # the GPUs Ray gave this actor
        if exclusive:
            arm = arm.model_copy(update={
                "args": {**arm.args, "distributed_executor_backend": "ray"},
                "env": {**arm.env, "RAY_ADDRESS": self.ray_address}})
        spec = self.spec.model_copy(update={"arms": [arm if a.name == arm.name else a for a in self.spec.arms]})
        try:
            self.run = start_arm(spec, arm, self.log_dir)
        except ServelabError as exc:
            return Started(node, error=str(exc))
        self.startups = tuple(s.model_dump(mode="json") if s else None for s in self.run.startups)
        return Started(node, self.run.version, self.startups)

    def measure(self, cell: Cell) -> Measured:
        assert self.run is not None
        try:
            return Measured(self.orchestrator.measure_cell(self.arm, cell, self.run, self.startups))
        except ServelabError as exc:
            return Measured(error=str(exc))

    def stop(self) -> str | None:
        """Stop the arm's router and engine; None, else what failed."""
        run, self.run = self.run, None
        if run is None:
            return None
        try:
            run.stop()
        except ServelabError as exc:
            return str(exc)
        return None


@dataclass
class _Placed:
    """One arm on the cluster: its demand, placement group, actor, the cells left, the call
    in flight and how many placements it has had."""

    arm: ArmSpec
    demand: ArmDemand
    todo: list[Cell]
    attempt: int = 0
    group: Any = None
    actor: Any = None
    status: ArmStatus = field(default_factory=lambda: ArmStatus("started"))
    node_ids: tuple[str, ...] = ()
    pending: Any = None  # the ObjectRef in flight
    phase: str = "start"  # start | measure | stop
    asked_at: float = 0.0  # clock() when the placement was asked for


class RayExperiment:
    """Runs one spec into one store on the Ray cluster at `address`."""

    def __init__(self, spec: ExperimentSpec, store: ExperimentStore, address: str, *,
                 force: bool = False, echo: Echo = lambda _line: None,
                 spec_path: Path | None = None, select: CellSelection = CellSelection(),
                 max_attempts: int = 3, clock: Callable[[], float] = time.monotonic) -> None:
        self.spec, self.store, self.address = spec, store, address
        self.force, self.echo, self.select = force, echo, select
        self.max_attempts = max_attempts
        self.clock = clock
        self.local = Orchestrator(spec, store, force=force, echo=echo, spec_path=spec_path, select=select)
        self.versions: dict[str, str | None] = {}
        self.place_s: list[float] = []  # seconds from asking for a placement to a started engine

    def run(self) -> None:
        """Measure every selected cell not yet stored, arms in parallel where GPUs allow."""
        self.local.check_resumable()
        self.local.check_inputs()
        ray = connect(self.address)  # a cluster that does not answer stops the run before any write
        self.store.write_manifest(self.local.manifest())
        nodes = cluster_nodes(ray)
        per_node = gpus_per_node(self.spec, nodes)
        waiting: list[_Placed] = []
        for arm in self.spec.arms:
            placed = self._plan(arm, per_node, nodes)
            if placed is not None:
                waiting.append(placed)
        running: list[_Placed] = []
        try:
            self._loop(ray, waiting, running)
        finally:
            for p in running:
                self._release(ray, p, graceful=True)
            self._write_manifest()

    # -- planning ------------------------------------------------------------------------
    def _plan(self, arm: ArmSpec, per_node: int, nodes: list) -> _Placed | None:
        todo = self.local.cells_to_run(arm)[1]
        if not todo:
            return None
        try:
            demand = demand_of(self.spec, arm, per_node)
        except ServelabError as exc:
            return self._refuse(arm, str(exc))
        why = unplaceable(demand, nodes)
        if why is not None:
            return self._refuse(arm, f"cannot be placed: {why}")
        for warning in demand.warnings:
            self.echo(f"warning: {warning}")
        return _Placed(arm, demand, todo)

    def _refuse(self, arm: ArmSpec, reason: str) -> None:
        self.store.write_arm_status(arm.name, ArmStatus("failed", reason=reason))
        self.echo(f"arm {arm.name}: FAILED: {reason}")
        return None

    # -- the event loop ------------------------------------------------------------------
    def _loop(self, ray: ModuleType, waiting: list[_Placed], running: list[_Placed]) -> None:
        while waiting or running:
            self._admit(ray, waiting, running)
            refs = [p.pending for p in running if p.pending is not None]
            if not refs:
                raise ServelabError("the Ray run has arms waiting and none running")
            done, _ = ray.wait(refs, num_returns=1)
            placed = next(p for p in running if p.pending == done[0])
            self._advance(ray, placed, running, waiting)

    def _admit(self, ray: ModuleType, waiting: list[_Placed], running: list[_Placed]) -> None:
        """Place waiting arms: every shared arm at once (Ray holds their groups until GPUs
        free); an exclusive arm only when nothing runs, and nothing beside it."""
        if any(p.demand.exclusive for p in running):
            return
        for p in list(waiting):
            if p.demand.exclusive:
                if running:
                    continue
                waiting.remove(p)
                self._place(ray, p)
                running.append(p)
                return
            waiting.remove(p)
            self._place(ray, p)
            running.append(p)

    def _place(self, ray: ModuleType, p: _Placed) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        p.attempt += 1
        p.phase = "start"
        p.asked_at = self.clock()
        bundles = p.demand.ray_bundles()
        p.group = placement_group(bundles, strategy=p.demand.strategy,
                                  name=f"servelab-{self.spec.name}-{p.arm.name}-{p.attempt}")
        worker = ray.remote(ArmWorker).options(
            num_cpus=bundles[0].get("CPU", 0),
            num_gpus=p.demand.bundles[0],
            max_restarts=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(p.group, placement_group_bundle_index=0))
        p.actor = worker.remote(self.spec, str(self.store.root), p.arm, ray.get_runtime_context().gcs_address)
        p.pending = p.actor.start.remote(p.demand.exclusive)
        self.echo(f"arm {p.arm.name}: placing ({p.demand.describe()}; attempt {p.attempt}, "
                  f"{len(p.todo)} cells to run)")

    def _advance(self, ray: ModuleType, p: _Placed, running: list[_Placed], waiting: list[_Placed]) -> None:
        from ray.exceptions import RayActorError, RayTaskError

        ref, p.pending = p.pending, None
        try:
            outcome = ray.get(ref)
        except RayActorError as exc:
            self._lost(ray, p, running, waiting, exc)
            return
        except RayTaskError as exc:  # servelab raised something unexpected on the node
            reason = f"{p.phase} raised on its node: {str(exc).splitlines()[-1]}"
            self.store.write_arm_status(p.arm.name, ArmStatus("failed", reason=reason))
            self.echo(f"arm {p.arm.name}: FAILED: {reason}")
            self._release(ray, p, graceful=True)
            running.remove(p)
            return
        if p.phase == "start":
            self._started(ray, p, outcome, running)
        elif p.phase == "measure":
            self._measured(ray, p, outcome, running)
        else:
            if outcome is not None:
                self.echo(f"arm {p.arm.name}: stopping its engine: {outcome}")
            self._release(ray, p, graceful=False)
            running.remove(p)
            if p.status.state != "failed":
                self.store.write_arm_status(p.arm.name, p.status.but("done"))

    def _started(self, ray: ModuleType, p: _Placed, s: Started, running: list[_Placed]) -> None:
        if s.error is not None:
            self.store.write_arm_status(p.arm.name, ArmStatus("failed", reason=s.error))
            self.echo(f"arm {p.arm.name}: FAILED to start: {s.error.splitlines()[0]}")
            self._release(ray, p, graceful=True)
            running.remove(p)
            p.status = ArmStatus("failed", reason=s.error)
            return
        self.place_s.append(self.clock() - p.asked_at)
        p.node_ids = self._bundle_nodes(ray, p)
        self.versions[p.arm.name] = s.version
        p.status = ArmStatus("started", version=s.version, startups=s.startups)
        self.store.write_arm_status(p.arm.name, p.status)
        self.echo(f"arm {p.arm.name}: started on node(s) {', '.join(n[:12] for n in p.node_ids)}")
        self._next(p)

    def _measured(self, ray: ModuleType, p: _Placed, m: Measured, running: list[_Placed]) -> None:
        cell = p.todo[0]
        if m.error is not None:
            p.status = p.status.but("failed", f"cell failed: {m.error}")
            self.store.write_arm_status(p.arm.name, p.status)
            self.echo(f"arm {p.arm.name}: FAILED during a cell: {m.error.splitlines()[0]}")
            p.todo = []
            self._next(p)
            return
        assert m.record is not None
        record = m.record.placed(Placement(node_ids=list(p.node_ids), attempt=p.attempt,
                                           strategy=p.demand.strategy))
        self.store.write_cell(record)
        self.echo(cell_line(cell, record))
        p.todo.pop(0)
        self._next(p)

    def _next(self, p: _Placed) -> None:
        if p.todo:
            p.phase = "measure"
            p.pending = p.actor.measure.remote(p.todo[0])
        else:
            p.phase = "stop"
            p.pending = p.actor.stop.remote()

    def _lost(self, ray: ModuleType, p: _Placed, running: list[_Placed], waiting: list[_Placed],
              exc: BaseException) -> None:
        """The actor died (its node lost, or killed): place the arm again for its cells
        not yet stored, or fail it after `max_attempts` placements."""
        self._release(ray, p, graceful=False)
        running.remove(p)
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if p.phase == "stop":
            self.store.write_arm_status(p.arm.name, p.status.but("done"))
            return
        if p.attempt >= self.max_attempts:
            reason = f"lost {p.attempt} times ({why}); {len(p.todo)} cells not measured"
            self.store.write_arm_status(p.arm.name, ArmStatus("failed", reason=reason))
            self.echo(f"arm {p.arm.name}: FAILED: {reason}")
            return
        gone = unplaceable(p.demand, cluster_nodes(ray))
        if gone is not None:  # the nodes left cannot hold it: Ray would wait forever
            reason = f"lost ({why}) and cannot be placed again: {gone}"
            self.store.write_arm_status(p.arm.name, ArmStatus("failed", reason=reason))
            self.echo(f"arm {p.arm.name}: FAILED: {reason}")
            return
        self.echo(f"arm {p.arm.name}: its actor was lost ({why}); placing it again for its "
                  f"{len(p.todo)} cells not stored")
        waiting.insert(0, p)

    def _bundle_nodes(self, ray: ModuleType, p: _Placed) -> tuple[str, ...]:
        table = ray.util.placement_group_table(p.group)
        by_bundle = table.get("bundles_to_node_id", {})
        return tuple(str(by_bundle[i]) for i in sorted(by_bundle))

    def _release(self, ray: ModuleType, p: _Placed, graceful: bool) -> None:
        """Stop the actor's processes (when it still answers), then the actor and its group."""
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        if p.actor is not None:
            if graceful:
                try:
                    ray.get(p.actor.stop.remote(), timeout=120)
                except (RayActorError, RayTaskError, GetTimeoutError):
                    pass
            ray.kill(p.actor, no_restart=True)
            p.actor = None
        if p.group is not None:
            ray.util.remove_placement_group(p.group)
            p.group = None
        p.pending = None

    def _write_manifest(self) -> None:
        manifest = self.local.manifest()
        manifest["engine_versions"] = {**manifest.get("engine_versions", {}), **self.versions}
        manifest["ray"] = {"placement_s": [round(s, 3) for s in self.place_s]}
        self.store.write_manifest(manifest)


def run_on_ray(spec: ExperimentSpec, out_dir: Path, address: str, *, force: bool = False,
               echo: Echo = lambda _line: None, spec_path: Path | None = None,
               select: CellSelection = CellSelection()) -> ExperimentStore:
    """Run (or resume) the `select`ed cells of `spec` into `out_dir` on the Ray cluster at
    `address`; returns the store."""
    select.check(spec)
    store = ExperimentStore.open(out_dir)
    RayExperiment(spec, store, address, force=force, echo=echo, spec_path=spec_path, select=select).run()
    return store
