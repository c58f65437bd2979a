"""Running a sweep: choose a level, measure it `repetitions` times, write each result as it
is produced, repeat; then read the knee, the capacity and the bend off the levels.

Where levels are measured is a `LevelSource` (this module's interface): one open target,
one level after another (`OneTarget`), or copies of it measuring several levels at once
(`servelab.distributed.raysweep` on a Ray cluster). With a source of width > 1 the search
asks for the levels it may need next together (`levels.lookahead`) and consumes them in its
own order, so its path and outcome are a sequential sweep's; only consumed levels are
written and reported.

Seeds: repetition r at level L draws its requests and arrivals with
`cell_seed(seed, "rep{r}", key(L))`: distinct per repetition and per level (so two levels run
against one live server never share prompts and a prefix cache cannot flatter the second),
and equal across targets and runs (so two sweeps at a level see the same traffic).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from servelab.experiment.cells import cell_seed
from servelab.experiment.spec import NumPromptsRule
from servelab.metrics.result import RunInfo, write_result
from servelab.metrics.server_figures import ServerFigures
from servelab.metrics.summary import SummaryOptions, summarize
from servelab.metrics.traps import result_json
from servelab.sweep.diagnose import Bend, diagnose_level
from servelab.sweep.knee import Knee, KneeInterval, find_knee, knee_interval
from servelab.sweep.levels import LevelAxis, Boundaries, flattened, lookahead, next_level
from servelab.sweep.points import LevelPoint, LevelSummary, saturation_reason
from servelab.sweep.slo import Capacity, Slo, capacity
from servelab.sweep.targets import OpenTarget, PlannerView
from servelab.workload.arrivals import ArrivalOptions, schedule_s
from servelab.workload.datasets import DatasetOptions, Workload, build_workload
from servelab.workload.tokenizer import TokenizerHandle, load_tokenizer

Echo = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class SweepConfig:
    """Everything a sweep needs besides its target."""

    axis: LevelAxis
    dataset: DatasetOptions
    targets: Boundaries = Boundaries()
    repetitions: int = 1
    prompts: NumPromptsRule = NumPromptsRule()
    num_warmups: int = 0
    seed: int = 0
    slo: Slo | None = None
    percentile: float = 99.0
    burstiness: float = 1.0
    max_concurrency: int | None = None  # rate mode's cap
    bootstrap_seed: int = 0

    def summary_options(self) -> SummaryOptions:
        pct = tuple(sorted({50.0, 90.0, 99.0, self.percentile}))
        return SummaryOptions(percentile_metrics=("ttft", "tpot", "itl", "e2el"),
                              metric_percentiles=pct,
                              goodput=self.slo.goodput_slo() if self.slo else None)


class WorkloadCache:
    """Built workloads by (dataset, seed, num_prompts): a tuner re-measures the same levels
    for every configuration, and tokenising is dearer than simulating."""

    def __init__(self) -> None:
        self._tok: dict[str | None, TokenizerHandle] = {}
        self._built: dict[tuple[str, int, int], Workload] = {}

    def tokenizer(self, name: str | None) -> TokenizerHandle:
        if name not in self._tok:
            self._tok[name] = load_tokenizer(name)
        return self._tok[name]

    def workload(self, dataset: DatasetOptions, seed: int, n: int) -> Workload:
        key = (dataset.model_dump_json(exclude={"num_prompts"}), seed, n)
        if key not in self._built:
            ds = dataset.model_copy(update={"num_prompts": n})
            self._built[key] = build_workload(DatasetOptions.model_validate(ds.model_dump()),
                                              self.tokenizer(ds.tokenizer), seed)
        return self._built[key]


@dataclass
class SweepOutcome:
    """The measured levels and what they say."""

    config: SweepConfig
    describe: str
    levels: dict[float, LevelSummary]
    order: list[tuple[float, str]]  # (level, why) in measuring order
    knee: Knee | None
    knee_note: str
    interval: KneeInterval | None
    capacity: Capacity | None
    bends: list[Bend]
    notes: list[str]

    def steady(self) -> list[LevelSummary]:
        return [self.levels[x] for x in sorted(self.levels) if not self.levels[x].saturated]


@dataclass(frozen=True, slots=True)
class MeasuredLevel:
    """One level's repetitions, the result JSON of each (file name -> content) to write
    once the search takes the level, and the workload notes it raised."""

    summary: LevelSummary
    files: dict[str, dict[str, Any]]
    notes: tuple[str, ...] = ()


class LevelSource(Protocol):
    """Where a sweep's levels are measured: `width` of them at once."""

    width: int

    def measure(self, cfg: SweepConfig, levels: list[float]) -> list[MeasuredLevel]:
        """The levels, measured, in the order given."""
        ...


class OneTarget:
    """One open target, one level after another; each repetition's result is written to
    `out_dir/levels/` as soon as it exists (every level it measures is one the search took)."""

    width = 1

    def __init__(self, ot: OpenTarget, cache: WorkloadCache | None = None, out_dir: Path | None = None) -> None:
        self.ot = ot
        self.cache = cache or WorkloadCache()
        self.out_dir = out_dir

    def measure(self, cfg: SweepConfig, levels: list[float]) -> list[MeasuredLevel]:
        return [measure_level(self.ot, cfg, x, self.cache, self.out_dir) for x in levels]


def measure_level(ot: OpenTarget, cfg: SweepConfig, level: float, cache: WorkloadCache,
                  out_dir: Path | None = None) -> MeasuredLevel:
    """Measure `level` `cfg.repetitions` times. Each point's result JSON
    (`levels/<key>-rep<r>.json`) is written under `out_dir` as soon as it exists, or, without
    `out_dir`, returned in `files` for the caller to write once the search takes the level."""
    axis = cfg.axis
    concurrency = axis.mode == "concurrency"
    n = cfg.prompts.for_concurrency(int(level)) if concurrency else cfg.prompts.for_rate(level)
    points = []
    files: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for rep in range(cfg.repetitions):
        seed = cell_seed(cfg.seed, f"rep{rep}", axis.key(level))
        wl = cache.workload(cfg.dataset, seed, n)
        reqs, wl_notes = wl.requests, wl.notes
        notes.extend(x for x in wl_notes if x not in notes)
        arrivals = ArrivalOptions(request_rate=math.inf if concurrency else level,
                                  burstiness=cfg.burstiness)
        intended = np.asarray(schedule_s(wl, arrivals, np.random.default_rng(seed)))
        cap = int(level) if concurrency else cfg.max_concurrency
        m = ot.target.measure(reqs, cache.tokenizer(cfg.dataset.tokenizer), intended.tolist(), cap,
                              cfg.num_warmups, seed)
        result = summarize(m.records, m.duration_s, cfg.summary_options())
        if len(m.servers) == 1:
            result = result.with_server(m.servers[0])
        result = result.with_run(RunInfo.now(
            backend=ot.target.backend, label=f"sweep {axis.key(level)} rep{rep}", model_id=ot.describe,
            tokenizer_id=cache.tokenizer(cfg.dataset.tokenizer).info.name, num_prompts=len(reqs),
            arrivals=arrivals, max_concurrency=cap, seed=seed,
            metadata={"sweep_level": axis.key(level), "repetition": str(rep)}))
        point = LevelPoint(level, rep, seed, result,
                           ServerFigures.of_run(m.servers, m.extras.get("preemptions")),
                           saturation_reason(m.records, result, open_loop=not concurrency))
        points.append(point)
        data = result_json(result)
        data["servelab"]["sweep"] = {
            "mode": axis.mode, "level": level, "repetition": rep, "seed": seed,
            "saturated": point.saturated_reason,
            "servers": [s.to_json_dict() for s in m.servers] if len(m.servers) > 1 else None,
            "extras": m.extras}
        name = f"{axis.key(level)}-rep{rep}.json"
        if out_dir is not None:
            write_result(out_dir / "levels" / name, data, append=False)
        else:
            files[name] = data
    return MeasuredLevel(LevelSummary(level, tuple(points), cfg.slo, cfg.percentile), files, tuple(notes))


def run_sweep(ot: OpenTarget, cfg: SweepConfig, out_dir: Path | None = None,
              echo: Echo = lambda _l: None, cache: WorkloadCache | None = None) -> SweepOutcome:
    """Measure adaptively chosen levels of one open target until every wanted boundary is
    found, then analyse."""
    return sweep_levels(OneTarget(ot, cache, out_dir), cfg, ot.planner, ot.describe, out_dir, echo)


def sweep_levels(source: LevelSource, cfg: SweepConfig, planner: PlannerView, describe: str,
                 out_dir: Path | None = None, echo: Echo = lambda _l: None) -> SweepOutcome:
    """The sweep over `source` (see the module doc): the results a source returns rather than
    writes are written to `out_dir/levels/` as soon as the search takes their level."""
    levels: dict[float, LevelSummary] = {}
    order: list[tuple[float, str]] = []
    notes: list[str] = []
    ahead: dict[float, MeasuredLevel] = {}
    while (step := next_level(cfg.axis, levels, cfg.targets)) is not None:
        x, why = step
        if x not in ahead:
            batch = lookahead(cfg.axis, levels, step, source.width) if source.width > 1 else [x]
            batch = [b for b in batch if b not in ahead]
            if len(batch) > 1:
                echo(f"  measuring {len(batch)} levels at once: {', '.join(cfg.axis.key(b) for b in batch)}")
            ahead.update(zip(batch, source.measure(cfg, batch)))
        got = ahead.pop(x)
        if out_dir is not None:
            for name, data in got.files.items():
                write_result(out_dir / "levels" / name, data, append=False)
        notes.extend(n for n in got.notes if n not in notes)
        lv = got.summary
        levels[x] = lv
        order.append((x, why))
        slo = "" if lv.meets_slo is None else ("  SLO met" if lv.meets_slo else "  SLO broken")
        sat = f"  OVER-SATURATED ({lv.saturated_reason})" if lv.saturated else ""
        echo(f"{cfg.axis.key(x):>8} [{why}]  {lv.throughput:9.1f} out tok/s  "
             f"ttft p{cfg.percentile:g} {lv.latency_ms('ttft'):8.1f} ms  "
             f"tpot p{cfg.percentile:g} {lv.latency_ms('tpot'):7.1f} ms{slo}{sat}")
    return analyse(cfg, planner, describe, levels, order, notes)


def analyse(cfg: SweepConfig, planner: PlannerView, describe: str, levels: dict[float, LevelSummary],
            order: list[tuple[float, str]], notes: list[str]) -> SweepOutcome:
    """The knee (with its interval), the capacity under the SLO and the bend's reasons."""
    steady = [levels[x] for x in sorted(levels) if not levels[x].saturated]
    xs = [lv.level for lv in steady]
    ts = [lv.throughput for lv in steady]
    knee = interval = None
    unit = cfg.axis.mode if cfg.axis.mode == "concurrency" else "rate"
    chain = [(x, levels[x].throughput) for x in cfg.axis.chain() if x in levels and not levels[x].saturated]
    saturated_any = any(lv.saturated for lv in levels.values())
    if not cfg.targets.knee:
        knee_note = "knee not sought"
    elif len(steady) < 2:
        knee_note = "knee not found: fewer than two steady levels"
    elif not (flattened(chain, cfg.targets.flat_gain) or saturated_any):
        knee_note = (f"knee not reached: throughput still growing at {unit} {xs[-1]:g}; "
                     "raise --max-level")
    else:
        knee = find_knee(xs, ts, cfg.targets.knee_tolerance)
        assert knee is not None
        reps = [[p.result.output_throughput for p in lv.points] for lv in steady]
        interval = knee_interval(xs, reps, cfg.targets.knee_tolerance,
                                 np.random.default_rng(cfg.bootstrap_seed))
        knee_note = (f"knee at {unit} {knee.level:g}: {knee.throughput_tok_s:.1f} out tok/s, "
                     f">= {100 * (1 - cfg.targets.knee_tolerance):.0f} % of the peak "
                     f"{knee.peak_tok_s:.1f} (at {knee.peak_level:g})")
    cap = capacity(cfg.slo, [lv.slo_level() for lv in levels.values()], unit) if cfg.slo else None
    bends = []
    closed = cfg.axis.mode == "concurrency"
    if knee is not None:
        above = [lv for lv in steady if lv.level > knee.level]
        for lv in [levels[knee.level], *above[-1:]]:
            bends.append(diagnose_level(lv, planner, closed))
    elif steady:
        bends.append(diagnose_level(steady[-1], planner, closed))
    return SweepOutcome(cfg, describe, levels, order, knee, knee_note, interval, cap, bends, notes)
