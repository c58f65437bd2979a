"""The orchestrator: arms x workloads x loads, each cell measured and stored as it finishes.

For each arm: skip it when every cell is already stored (resume) unless `force`; start its
target (an engine failing to start marks the arm failed, with the reason, and the run goes
on); for each cell build the workload with the cell's seed, draw the arrival times, measure,
summarise with the one metrics calculator and write the cell atomically; stop the engine.
The manifest is written before the first arm and again after each arm (engine versions).

Consecutive arms with the same launch (`arms.engine_owner`: e.g. one set of replicas
measured direct, then behind two router policies) share one engine: it is kept running
between them and its prefix cache is emptied before the next arm (every arm sees the same
prompts, which the previous arm left in the cache). An engine that cannot be reset is
restarted instead. Restarts cost minutes on a GPU; a reset costs milliseconds.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from servelab import __version__
from servelab.errors import ServelabError
from servelab.experiment.cellrecord import CellKey, CellRecord
from servelab.experiment.cells import Cell, CellSelection, cells_of_arm, load_points
from servelab.engine.adapter import RunningEngine
from servelab.experiment.arms import engine_owner, launch_identity
from servelab.experiment.launch import ArmRun, start_arm
from servelab.experiment.planning import ArmPlanner
from servelab.experiment.spec import ArmSpec, ClusterSpec, ExperimentSpec
from servelab.experiment.store import ArmStatus, ExperimentStore
from servelab.metrics.result import GoodputSLO, RunInfo
from servelab.metrics.result_file import StoredResult
from servelab.metrics.scrape import ServerSeries
from servelab.metrics.server_figures import ServerFigures
from servelab.metrics.summary import SummaryOptions, summarize
from servelab.metrics.traps import result_json
from servelab.workload.arrivals import ArrivalOptions, schedule_s
from servelab.workload.datasets import build_workload
from servelab.workload.tokenizer import TokenizerHandle, load_tokenizer

Echo = Callable[[str], None]


def summary_options(spec: ExperimentSpec) -> SummaryOptions:
    """Percentiles of every latency metric, and the SLO as each cell's goodput SLO."""
    slo = None
    if spec.slo is not None and (spec.slo.ttft_ms or spec.slo.tpot_ms or spec.slo.e2el_ms):
        slo = GoodputSLO(ttft_ms=spec.slo.ttft_ms, tpot_ms=spec.slo.tpot_ms, e2el_ms=spec.slo.e2el_ms)
    # per_request_itls: the store keeps each cell's detailed result
    return SummaryOptions(percentile_metrics=("ttft", "tpot", "itl", "e2el"),
                          metric_percentiles=spec.percentiles(), goodput=slo,
                          per_request_itls=True)


class Orchestrator:
    """Runs one spec into one store."""

    def __init__(self, spec: ExperimentSpec, store: ExperimentStore, *, force: bool = False,
                 echo: Echo = lambda _line: None, spec_path: Path | None = None,
                 select: CellSelection = CellSelection()) -> None:
        select.check(spec)
        self.select = select
        self.spec = spec
        self.store = store
        self.force = force
        self.echo = echo
        self.spec_path = spec_path
        self._tokenizers: dict[str | None, TokenizerHandle] = {}
        self._versions: dict[str, str | None] = {}
        self._gpu_name, self._probe = self._hardware()
        self._planners: dict[str, ArmPlanner | str] = {}
        # The engine kept running for the next arm: (launch identity, owner arm, engine).
        self._held: tuple[str, str, RunningEngine] | None = None
        for arm in spec.arms:
            try:
                self._planners[arm.name] = ArmPlanner.for_arm(spec, arm, self._gpu_name)
            except ServelabError as exc:
                self._planners[arm.name] = str(exc)

    def _hardware(self) -> tuple[str | None, dict[str, Any] | None]:
        hw = self.spec.hardware
        if not hw.probe:
            return hw.gpu, None
        from servelab.hardware.probe import probe

        result = probe()
        gpu = hw.gpu or next((g.catalog_name for g in result.gpus if g.catalog_name), None)
        return gpu, result.model_dump(mode="json")

    def check_resumable(self) -> None:
        """Refuse to add cells to results recorded with a different spec (unless `force`)."""
        if self.force or not self.store.manifest_path.exists():
            return
        old = self.store.read_manifest().get("spec")
        if not isinstance(old, dict) or resume_identity(old) != resume_identity(self.spec.model_dump(mode="json")):
            raise ServelabError(
                f"{self.store.root} holds results of a different spec; re-run with --force to "
                "redo every cell, or choose another --out")

    def manifest(self) -> dict[str, Any]:
        plans = {name: (p.summary() if isinstance(p, ArmPlanner) else {"error": p})
                 for name, p in self._planners.items()}
        return {
            "servelab_version": __version__,
            "spec_file": str(self.spec_path) if self.spec_path else None,
            "spec": self.spec.model_dump(mode="json"),
            "baseline": self.spec.baseline.name,
            "gpu": self._gpu_name,
            "probe": self._probe,
            "planner": plans,
            "engine_versions": dict(self._versions),
            "updated": dt.datetime.now().isoformat(timespec="seconds"),
        }

    def check_inputs(self) -> None:
        """Resolve every file the spec names before any arm starts (dataset files,
        tokenizers, the simulator's calibration and profile), so a missing one stops the
        run with one error instead of failing each arm after its engine started."""
        spec = self.spec
        for wl, load in ((w, p) for w in spec.workloads for p in load_points(spec.loads)):
            dataset = wl.dataset(load.num_prompts, spec.model.tokenizer)
            path = dataset.dataset_path
            if path is not None and not path.exists():
                raise ServelabError(f"workload {wl.name}: dataset_path {path}: no such file")
            self._tokenizer(dataset.tokenizer)
        for key, path in (("sim.calibration", spec.sim.calibration), ("sim.profile", spec.sim.profile)):
            if path is not None and not path.is_file():
                raise ServelabError(f"{key} {path}: no such file")

    def run(self) -> None:
        """Measure every cell not yet stored (all of them with `force`)."""
        self.check_resumable()
        self.check_inputs()
        self.store.write_manifest(self.manifest())
        try:
            for arm in self.spec.arms:
                self._run_arm(arm)
                self.store.write_manifest(self.manifest())
        finally:
            self._release()

    def _release(self) -> None:
        if self._held is not None:
            engine, self._held = self._held[2], None
            engine.stop()

    def cells_to_run(self, arm: ArmSpec) -> tuple[list[Cell], list[Cell]]:
        """(the arm's selected cells, those not yet stored: all with `force`); says so when
        every one is stored."""
        if not self.select.admits_arm(arm.name):
            return [], []
        cells = [c for c in cells_of_arm(self.spec, arm.name) if self.select.admits(c)]
        todo = [c for c in cells if self.force or not self.store.has_cell(*c.key)]
        if cells and not todo:
            self.echo(f"arm {arm.name}: all {len(cells)} cells already stored, skipped")
        return cells, todo

    def _shared_engine(self, arm: ArmSpec) -> tuple[str | None, RunningEngine | None]:
        """(owner arm, engine) when the held engine serves this arm and its prefix cache
        was emptied; otherwise the held engine is stopped and (None, None) returned."""
        key = launch_identity(self.spec, arm)
        if self._held is None or key is None or self._held[0] != key:
            self._release()
            return None, None
        _key, owner, engine = self._held
        why = engine.reset_prefix_cache()
        if why is not None:
            self.echo(f"arm {arm.name}: restarting arm {owner}'s engine, its prefix cache "
                      f"could not be emptied: {why}")
            self._release()
            return None, None
        self.echo(f"arm {arm.name}: on arm {owner}'s engine (prefix cache emptied)")
        self._held = None
        return owner, engine

    def _run_arm(self, arm: ArmSpec) -> None:
        cells, todo = self.cells_to_run(arm)
        if not todo:
            return
        self.echo(f"arm {arm.name}: starting ({len(todo)} of {len(cells)} cells to run)")
        self.store.write_arm_status(arm.name, ArmStatus("started"))
        owner, engine = self._shared_engine(arm)
        try:
            started = start_arm(self.spec, arm, self.store.log_dir(arm.name), engine)
        except ServelabError as exc:
            if engine is not None:
                engine.stop()
            self.store.write_arm_status(arm.name, ArmStatus("failed", reason=str(exc)))
            self.echo(f"arm {arm.name}: FAILED to start: {str(exc).splitlines()[0]}")
            return
        self._versions[arm.name] = started.version
        startups = tuple(s.model_dump(mode="json") if s else None for s in started.startups)
        status = ArmStatus("started", version=started.version, startups=startups, engine_of=owner)
        self.store.write_arm_status(arm.name, status)
        keep = False
        try:
            for cell in todo:
                self._run_cell(arm, cell, started, startups)
            keep = started.engine is not None and self._next_shares(arm)
        except ServelabError as exc:
            self.store.write_arm_status(arm.name, status.but("failed", f"cell failed: {exc}"))
            self.echo(f"arm {arm.name}: FAILED during a cell: {str(exc).splitlines()[0]}")
            return
        finally:
            if keep and started.engine is not None:
                started.stop_router()
                self._held = (launch_identity(self.spec, arm) or "", owner or arm.name, started.engine)
            else:
                started.stop()
        self.store.write_arm_status(arm.name, status.but("done"))

    def _next_shares(self, arm: ArmSpec) -> bool:
        names = [a.name for a in self.spec.arms]
        i = names.index(arm.name)
        return i + 1 < len(names) and engine_owner(self.spec, self.spec.arms[i + 1]) == engine_owner(self.spec, arm)

    def _tokenizer(self, name: str | None) -> TokenizerHandle:
        if name not in self._tokenizers:
            self._tokenizers[name] = load_tokenizer(name)
        return self._tokenizers[name]

    def _run_cell(self, arm: ArmSpec, cell: Cell, started: ArmRun,
                  startups: tuple[dict[str, Any] | None, ...]) -> None:
        record = self.measure_cell(arm, cell, started, startups)
        self.store.write_cell(record)
        self.echo(cell_line(cell, record))

    def measure_cell(self, arm: ArmSpec, cell: Cell, started: ArmRun,
                     startups: tuple[dict[str, Any] | None, ...]) -> CellRecord:
        """Measure one cell on the started arm; the cell's record (not written)."""
        spec, load = self.spec, cell.load
        wl_spec = spec.workload(cell.workload)
        dataset = wl_spec.dataset(load.num_prompts, spec.model.tokenizer)
        tok = self._tokenizer(dataset.tokenizer)
        work = build_workload(dataset, tok, cell.seed)
        arrivals = ArrivalOptions(request_rate=load.request_rate, burstiness=load.burstiness)
        intended = np.asarray(schedule_s(work, arrivals, np.random.default_rng(cell.seed)))
        m = started.target.measure(work.requests, tok, intended.tolist(), load.max_concurrency,
                                   spec.loads.num_warmups, cell.seed)
        result = summarize(m.records, m.duration_s, summary_options(spec)).with_run(RunInfo.now(
            backend=started.target.backend, label=cell.label, model_id=spec.model.name,
            tokenizer_id=work.tokenizer.name, num_prompts=len(work.requests), arrivals=arrivals,
            max_concurrency=load.max_concurrency,
            metadata={"arm": arm.name, "workload": cell.workload, "load": load.key},
            seed=cell.seed, tokenizer=work.tokenizer.source,
            sampling=spec.engine_defaults.sampling.fields()))
        if m.spec_decode is not None:
            result = result.model_copy(update={"engine_spec_decode": m.spec_decode})
        return CellRecord(
            cell=CellKey(arm=arm.name, workload=cell.workload, load=load.key, seed=cell.seed,
                         num_prompts=load.num_prompts, concurrency=load.concurrency,
                         request_rate=load.request_rate, max_concurrency=load.max_concurrency,
                         burstiness=load.burstiness, num_warmups=spec.loads.num_warmups),
            result=StoredResult.parse(result_json(result, detailed=True), cell.label),
            servers=[s.to_json_dict() for s in m.servers],
            engine_memory=list(startups),
            roofline=self._roofline(arm, m.servers, work.requests),
            extras=m.extras,
            notes=list(work.notes),
        )

    def _roofline(self, arm: ArmSpec, servers: list[ServerSeries], requests: list) -> dict[str, Any] | None:
        """The roofline decode step at the batch the engine ran (mean running requests per
        replica while busy, as the diagnosis reads it) and the mean context (prompt + half
        the output)."""
        planner = self._planners.get(arm.name)
        if not isinstance(planner, ArmPlanner) or not requests:
            return None
        batch = ServerFigures.of_run(servers).mean_running or 1.0
        context = float(np.mean([r.prompt_len + r.output_len / 2 for r in requests]))
        return planner.decode_step(batch, context)


def cell_line(cell: Cell, record: CellRecord) -> str:
    """The progress line of a finished cell."""
    r = record.result
    ttft = "-" if r.mean_ttft_ms is None else f"{r.mean_ttft_ms:.1f}"
    return (f"  {cell.label}: {r.completed} ok, {r.failed} failed, "
            f"{r.output_throughput:.1f} out tok/s, mean TTFT {ttft} ms")


def resume_identity(spec_dump: dict[str, Any]) -> dict[str, Any]:
    """What must match for a run to add cells to stored ones: the spec less where it runs
    (`cluster.ray`: the same experiment may resume here after a start on a cluster); a
    manifest from before the `cluster` section reads as its default."""
    cluster = {**ClusterSpec().model_dump(mode="json"), **(spec_dump.get("cluster") or {}), "ray": None}
    return {**spec_dump, "cluster": cluster}


def run_experiment(spec: ExperimentSpec, out_dir: Path, *, force: bool = False,
                   echo: Echo = lambda _line: None, spec_path: Path | None = None,
                   select: CellSelection = CellSelection()) -> ExperimentStore:
    """Run (or resume) the `select`ed cells of `spec` (default: all) into `out_dir`;
    returns the store."""
    select.check(spec)
    store = ExperimentStore.open(out_dir)
    Orchestrator(spec, store, force=force, echo=echo, spec_path=spec_path, select=select).run()
    return store
