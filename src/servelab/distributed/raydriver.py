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

An SGLang replica wider than a node (`ArmDemand.per_node_processes`) runs one process per
bundle: the arm's actor picks the rendezvous address on its node (`--dist-init-addr`), a
`RankWorker` on every other bundle starts that node's rank, then the actor starts rank 0,
which serves HTTP once the others have joined. A rank lost with its node loses the arm's
engine: the arm is placed again, as when its actor is lost.

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
from servelab.engine.adapter import NodeRank
from servelab.engine.process import DIE_WITH_PARENT_ENV, ServerProcess, log_tail
from servelab.errors import ServelabError, failure_of
from servelab.experiment.cellrecord import CellRecord, Placement
from servelab.experiment.cells import Cell, CellSelection
from servelab.experiment.launch import ArmRun, start_arm, start_rank
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

    def rendezvous(self) -> str:
        """"HOST:PORT" on this node for the other ranks to join rank 0 at: the node's
        address as Ray knows it, a port free now."""
        import socket

        host = self._ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return f"{host}:{sock.getsockname()[1]}"

    def start(self, exclusive: bool, node_rank: NodeRank | None = None) -> Started:
        node = self._ray.get_runtime_context().get_node_id()
        arm = self.arm
        ids = [int(g) for g in self._ray.get_gpu_ids()]
        if arm.gpus is None and ids and len(ids) == arm.tensor_parallel_size * arm.pipeline_parallel_size * arm.replicas:
            arm = arm.model_copy(update={"gpus": ids})  # the GPUs Ray gave this actor
        elif arm.gpus is None and ids and node_rank is not None:
            arm = _on_these_gpus(arm, ids)  # rank 0's share of a replica across nodes
        if exclusive:
            arm = arm.model_copy(update={
                "args": {**arm.args, "distributed_executor_backend": "ray"},
                "env": {**arm.env, "RAY_ADDRESS": self.ray_address}})
        spec = self.spec.model_copy(update={"arms": [arm if a.name == arm.name else a for a in self.spec.arms]})
        try:
            self.run = start_arm(spec, arm, self.log_dir, node_rank=node_rank)
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
        return failure_of(run.stop if run is not None else None)


def _on_these_gpus(arm: ArmSpec, ids: list[int]) -> ArmSpec:
    """The arm with this node's share of its replica pinned: `gpus` must list the whole
    replica's, so the node's GPUs go in the environment."""
    return arm.model_copy(update={"env": {**arm.env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, ids))}})


class RankWorker:
    """The actor of one node's rank (above 0) of an arm whose replica spans nodes (made
    remote by the driver): starts that node's engine process, says whether it still runs,
    stops it."""

    def __init__(self, spec: ExperimentSpec, store_root: str, arm: ArmSpec) -> None:
        import os

        import ray

        os.environ[DIE_WITH_PARENT_ENV] = "1"  # as ArmWorker: its process dies with it
        self._ray = ray
        self.spec, self.arm = spec, arm
        self.log_dir = ExperimentStore(Path(store_root)).log_dir(arm.name)
        self.process: ServerProcess | None = None

    def start(self, node_rank: NodeRank) -> str | None:
        """Start this node's rank on the GPUs Ray gave this actor; None, else why not."""
        arm = self.arm
        ids = [int(g) for g in self._ray.get_gpu_ids()]
        if arm.gpus is None and ids:
            arm = _on_these_gpus(arm, ids)
        try:
            self.process = start_rank(self.spec, arm, self.log_dir, node_rank)
        except ServelabError as exc:
            return str(exc)
        return None

    def exited(self) -> str | None:
        """None while this node's process runs, else its exit code and last log lines."""
        if self.process is None:
            return "not started"
        code = self.process.exit_code()
        if code is None:
            return None
        return f"node rank process exited with code {code}; log {self.process.log_path}:\n{log_tail(self.process.log_path)}"

    def stop(self) -> str | None:
        """Stop this node's process (its whole group); None, else what failed."""
        process, self.process = self.process, None
        return failure_of(process.stop if process is not None else None)


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
    phase: str = "start"  # rendezvous | start | measure | stop
    asked_at: float = 0.0  # clock() when the placement was asked for
    ranks: list[Any] = field(default_factory=list)  # RankWorker actors on bundles 1..
    rank_starts: list[Any] = field(default_factory=list)  # their start() ObjectRefs


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
        if p.demand.per_node_processes:
            p.phase = "rendezvous"
            p.pending = p.actor.rendezvous.remote()
        else:
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
        if p.phase == "stop":
            if outcome is not None:
                self.echo(f"arm {p.arm.name}: stopping its engine: {outcome}")
            self._release(ray, p, graceful=False)
            running.remove(p)
            if p.status.state != "failed":
                self.store.write_arm_status(p.arm.name, p.status.but("done"))
            return
        try:
            if p.phase == "rendezvous":
                self._start_ranks(ray, p, outcome)
            elif p.phase == "start":
                self._started(ray, p, outcome, running)
            else:
                self._measured(ray, p, outcome, running)
        except RayActorError as exc:  # a rank actor lost with its node
            self._lost(ray, p, running, waiting, exc)

    def _start_ranks(self, ray: ModuleType, p: _Placed, address: str) -> None:
        """A rank actor on every bundle but the first, each starting its node's process, then
        rank 0 on the arm's actor (it answers /health once they have joined)."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        nnodes = len(p.demand.bundles)
        for index in range(1, nnodes):
            rank = ray.remote(RankWorker).options(
                num_cpus=0, num_gpus=p.demand.bundles[index], max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(p.group, placement_group_bundle_index=index))
            actor = rank.remote(self.spec, str(self.store.root), p.arm)
            p.ranks.append(actor)
            p.rank_starts.append(actor.start.remote(NodeRank(nnodes=nnodes, node_rank=index, dist_init_addr=address)))
        p.phase = "start"
        p.pending = p.actor.start.remote(False, NodeRank(nnodes=nnodes, node_rank=0, dist_init_addr=address))
        self.echo(f"arm {p.arm.name}: {nnodes} engine processes, one per node, meeting at {address}")

    def _rank_failure(self, ray: ModuleType, p: _Placed) -> str | None:
        """Why a rank's start failed or its process ended (None: all started and run); a
        lost rank actor raises Ray's actor-died error, as a lost arm actor does."""
        for index, ref in enumerate(p.rank_starts, start=1):
            error = ray.get(ref)
            if error is not None:
                return f"node rank {index}: {error}"
        p.rank_starts = []
        for index, actor in enumerate(p.ranks, start=1):
            why = ray.get(actor.exited.remote())
            if why is not None:
                return f"node rank {index}: {why}"
        return None

    def _started(self, ray: ModuleType, p: _Placed, s: Started, running: list[_Placed]) -> None:
        if s.error is None and p.ranks:
            rank_error = self._rank_failure(ray, p)
            if rank_error is not None:
                s = Started(s.node_id, error=rank_error)
        elif s.error is not None and p.ranks:
            rank_error = self._rank_failure(ray, p)
            if rank_error is not None:  # rank 0 waits for the others: say why they did not come
                s = Started(s.node_id, error=f"{rank_error}\n(rank 0: {s.error})")
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
        if m.error is not None and p.ranks:
            rank_error = self._rank_failure(ray, p)  # a lost rank's node raises RayActorError
            if rank_error is not None:
                m = Measured(error=f"{m.error}\n({rank_error})")
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
        for rank in p.ranks:  # after rank 0: the others end their processes with it gone
            try:
                ray.get(rank.stop.remote(), timeout=120)
            except (RayActorError, RayTaskError, GetTimeoutError):
                pass
            ray.kill(rank, no_restart=True)
        p.ranks, p.rank_starts = [], []
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
