"""Tuning engine arguments under an SLO: planner-seeded coordinate descent over a grid.

Each trial is a capacity sweep (`run_sweep` seeking only the SLO boundary) of one
configuration; its objective is the goodput (req/s) or output throughput at the SLO
capacity. The search:

1. starts at the engine's defaults as the planner resolves them (max_num_seqs,
   max_num_batched_tokens for the GPU; gpu_memory_utilization...), snapped to the grid;
2. for each axis in turn, line-searches outward from the incumbent in both directions,
   stopping a direction at the first value that does worse than the one before it or is
   infeasible (the engine or planner refused it: nothing further that way is tried this
   pass); the best point found becomes the incumbent;
3. repeats passes until a pass improves nothing or the trial budget (default a quarter of
   the grid) is spent.

Why this and not Bayesian optimisation: each trial is a whole sweep, the grids are small
(tens of points over 2-4 axes) and discrete, and goodput along one engine argument is close
to unimodal (too few batch slots or too small a token budget caps throughput; too many
overrun the KV pool or the TPOT SLO). A line search exploits that with about the sum of the
axis lengths per pass, where a GP needs a good share of such a grid just to fit its kernel.
Every trial is stored (`TrialStore`), so a rerun reuses them and resumes the same path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from servelab.errors import ServelabError
from servelab.experiment.spec import NumPromptsRule
from servelab.hardware.catalog import get_gpu
from servelab.models import load_model
from servelab.plan import EngineArgs, resolve_limits
from servelab.sim.setup import SimOptions
from servelab.storage import check_writable_dir, write_json_atomic
from servelab.sweep.levels import LevelAxis, Boundaries
from servelab.sweep.plots import pareto_plot
from servelab.sweep.runner import Echo, SweepConfig, WorkloadCache, run_sweep
from servelab.sweep.slo import Slo
from servelab.sweep.space import Space, Value, parse_space
from servelab.sweep.targets import OpenTarget, arm_of, open_arm, open_sim, spec_dataset
from servelab.sweep.trials import ParetoPoint, Trial, TrialStore, trial_key
from servelab.workload.datasets import DatasetOptions

Opener = Callable[[dict[str, Value]], OpenTarget]
IMPROVE = 1e-9


@dataclass(frozen=True, slots=True)
class TuneConfig:
    space: Space
    sweep: SweepConfig  # its targets should seek the SLO only
    objective: str = "goodput"  # or "throughput"
    max_trials: int | None = None  # default: a quarter of the grid

    @property
    def budget(self) -> int:
        return self.max_trials if self.max_trials is not None else max(1, self.space.size // 4)


class TrialRunner(Protocol):
    """Runs a batch of trials at once (`width` of them in parallel), e.g. as Ray tasks on a
    cluster (`servelab.distributed.raytrials`); each trial as `run_trial` runs it."""

    width: int

    def run_batch(self, cfg: TuneConfig, opener: Opener, points: list[dict[str, Value]]) -> list[Trial]:
        """The trials of `points`, in order."""
        ...


def run_trial(cfg: TuneConfig, opener: Opener, params: dict[str, Value],
              cache: WorkloadCache | None = None, echo: Echo = lambda _l: None) -> Trial:
    """One trial: open the target with `params`, sweep it for the SLO capacity, close it."""
    try:
        ot = opener(params)
    except ServelabError as exc:
        return _infeasible(params, str(exc))
    try:
        o = run_sweep(ot, cfg.sweep, None, cache=cache if cache is not None else WorkloadCache())
    except ServelabError as exc:
        return _infeasible(params, f"failed during the sweep: {exc}")
    finally:
        try:
            ot.close()
        except ServelabError as exc:
            echo(f"  (stopping the engine: {exc})")
    cap = o.capacity
    points = []
    for lv in o.levels.values():
        tpot = lv.mean_ms("tpot")
        if tpot > 0 and not lv.saturated:
            points.append(ParetoPoint(1000.0 / tpot, lv.throughput / ot.planner.gpus, lv.level,
                                      bool(lv.meets_slo)))
    if cap is None or cap.level is None:
        return Trial(params, "ok", 0.0, cap.message if cap else "no SLO", None, None, None,
                     len(o.levels), tuple(points))
    value = cap.request_goodput_rps if cfg.objective == "goodput" else cap.output_tok_s
    return Trial(params, "ok", float(value or 0.0), cap.message, cap.level, cap.output_tok_s,
                 cap.request_goodput_rps, len(o.levels), tuple(points))


class Evaluator:
    """Runs (or reads back) trials and counts what was spent.

    With a parallel `runner`, the search `prefetch`es the points it may visit next (an axis's
    line, the grid) as one batch; it then consumes them in its sequential order, so the path,
    the best trial and the budget are those of a sequential run (points prefetched but never
    reached are stored for a later run and not counted)."""

    def __init__(self, cfg: TuneConfig, opener: Opener, store: TrialStore, echo: Echo,
                 runner: TrialRunner | None = None) -> None:
        self.cfg, self.opener, self.store, self.echo = cfg, opener, store, echo
        self.runner = runner
        self.cache = WorkloadCache()
        self.spent: list[Trial] = []  # in order, including ones read back
        self.reused = 0
        self._prefetched: set[str] = set()

    def prefetch(self, points: list[dict[str, Value]]) -> None:
        """Run, as one parallel batch, the first points (up to the budget left) that are
        neither spent nor stored; nothing without a parallel runner."""
        if self.runner is None or self.runner.width <= 1:
            return
        todo: list[dict[str, Value]] = []
        for p in points[: max(0, self.budget_left)]:
            if self.store.get(p) is None and all(t.params != p for t in self.spent) and p not in todo:
                todo.append(p)
        if len(todo) < 2:
            return
        self.echo(f"running {len(todo)} trials at once ({self.runner.width} at a time)")
        for trial in self.runner.run_batch(self.cfg, self.opener, todo):
            self.store.put(trial)
            self._prefetched.add(trial_key(trial.params))

    def __call__(self, params: dict[str, Value]) -> Trial:
        for t in self.spent:
            if t.params == params:
                return t
        trial = self.store.get(params)
        if trial is not None:
            if trial_key(params) not in self._prefetched:
                self.reused += 1
        else:
            trial = run_trial(self.cfg, self.opener, params, self.cache, self.echo)
            self.store.put(trial)
        self.spent.append(trial)
        shown = ", ".join(f"{k}={v}" for k, v in params.items()) or "engine defaults"
        what = (f"{self.cfg.objective} {trial.objective:.3f} at capacity {trial.capacity_level}"
                if trial.status == "ok" else f"INFEASIBLE: {trial.reason}")
        self.echo(f"trial {len(self.spent):>3}: {shown}: {what}")
        return trial

    @property
    def budget_left(self) -> int:
        return self.cfg.budget - len(self.spent)


def _infeasible(params: dict[str, Value], reason: str) -> Trial:
    return Trial(params, "infeasible", float("-inf"), reason.splitlines()[0] if reason else "", None,
                 None, None, 0, ())


def _score(t: Trial) -> float:
    return t.objective if t.status == "ok" else float("-inf")


def coordinate_descent(ev: Evaluator, start: dict[str, Value]) -> Trial:
    """The search described in the module docstring; returns the best trial."""
    space = ev.cfg.space
    best = ev(start)
    improved = True
    while improved and ev.budget_left > 0:
        improved = False
        for name in space.names:
            vals = space.values(name)
            i0 = vals.index(best.params[name])
            axis_best = best
            # the line search below visits these in this order (up, then down), at most
            ev.prefetch([{**best.params, name: vals[j]}
                         for j in [*range(i0 + 1, len(vals)), *range(i0 - 1, -1, -1)]])
            for direction in (+1, -1):
                prev = best
                j = i0 + direction
                while 0 <= j < len(vals) and ev.budget_left > 0:
                    t = ev({**best.params, name: vals[j]})
                    if t.status != "ok" or _score(t) < _score(prev) - IMPROVE:
                        break
                    if _score(t) > _score(axis_best) + IMPROVE:
                        axis_best = t
                    prev = t
                    j += direction
            if _score(axis_best) > _score(best) + IMPROVE:
                best = axis_best
                improved = True
            if ev.budget_left <= 0:
                break
    return best


def exhaustive(ev: Evaluator) -> Trial:
    """Every grid point (for checking a search against the grid's best)."""
    best = None
    grid = list(ev.cfg.space.grid())
    ev.prefetch(grid)
    for p in grid:
        t = ev(p)
        if best is None or _score(t) > _score(best):
            best = t
    assert best is not None
    return best


@dataclass(frozen=True, slots=True)
class TuneOutcome:
    best: Trial
    defaults: Trial
    trials: tuple[Trial, ...]
    reused: int
    grid_size: int

    @property
    def margin(self) -> float | None:
        """Best over the defaults' objective, minus 1 (None when the defaults scored 0)."""
        d = _score(self.defaults)
        return self.best.objective / d - 1 if d > 0 else None


def tune(cfg: TuneConfig, opener: Opener, store: TrialStore, defaults: dict[str, Value | None],
         echo: Echo = lambda _l: None, grid: bool = False,
         runner: TrialRunner | None = None) -> TuneOutcome:
    """Run the search (or, with `grid`, every point); `defaults` are the engine's resolved
    default values of the axes (None where unknown). The defaults' own trial (no params
    set) is the baseline; it is the start point's trial when the defaults lie on the grid.
    `runner` runs batches of trials in parallel (same path and outcome; see `Evaluator`)."""
    if grid:
        cfg = TuneConfig(cfg.space, cfg.sweep, cfg.objective, max_trials=cfg.space.size + 1)
    ev = Evaluator(cfg, opener, store, echo, runner)
    start = cfg.space.nearest(defaults)
    on_grid = all(defaults.get(n) == start[n] for n in cfg.space.names)
    base = ev(start if on_grid else {})  # the baseline, inside the budget
    best = exhaustive(ev) if grid else coordinate_descent(ev, start)
    if _score(base) > _score(best):
        best = base
    return TuneOutcome(best, base, tuple(ev.spent), ev.reused, cfg.space.size)


def sim_opener(base: SimOptions) -> tuple[Opener, dict[str, Value | None]]:
    """(opener, resolved defaults) for the simulator: a trial's params replace fields of the
    base `SimOptions`' EngineArgs; the defaults are what the planner resolves for them."""
    args = base.engine_args

    def opener(params: dict[str, Value]) -> OpenTarget:
        try:
            new_args = EngineArgs(**{**args.model_dump(), **params})
        except ValidationError as exc:
            raise ServelabError(f"engine arguments refused: {exc.errors()[0]['msg']}") from None
        return open_sim(SimOptions(base.model, base.gpu, base.quantization, new_args, base.replicas,
                                   base.router_policy, base.calibration))

    limits = resolve_limits(load_model(base.model, base.quantization), get_gpu(base.gpu), args)
    defaults: dict[str, Value | None] = {k: v for k, v in args.model_dump().items()
                                         if isinstance(v, (int, float, str, bool))}
    defaults.update(max_num_seqs=limits.max_num_seqs, max_num_batched_tokens=limits.max_num_batched_tokens,
                    max_model_len=limits.max_model_len)
    return opener, defaults


OBJECTIVES = ("goodput", "throughput")


@dataclass(frozen=True, slots=True)
class TuneRequest:
    """One tune run: the target (`sim`: the offline simulator from these options; else an
    arm of the experiment `spec`), the axes (`params`, ``NAME=V1,V2,...``), the SLO and
    objective, and each trial's capacity sweep (concurrency `levels`, `prompts` per level)."""

    params: tuple[str, ...]
    slo: Slo
    out: Path
    dataset: DatasetOptions
    seed: int
    objective: str = "goodput"
    max_trials: int | None = None
    grid: bool = False
    levels: tuple[int, int] = (1, 1024)
    prompts: NumPromptsRule = NumPromptsRule(per_concurrency=5, min=50, max=1000)
    repetitions: int = 1
    sim: SimOptions | None = None
    spec: Path | None = None
    arm: str | None = None
    workload: str | None = None

    def check(self) -> None:
        """Refuse a request that cannot run, naming the flag, before any trial runs."""
        if (self.sim is None) == (self.spec is None):
            raise ServelabError("give exactly one target: --sim (with --model, --gpu) or --spec FILE")
        if self.objective not in OBJECTIVES:
            raise ServelabError(f"--objective {self.objective!r}: use goodput or throughput")
        if self.max_trials is not None and self.max_trials < 1:
            raise ServelabError(f"--max-trials {self.max_trials}: must be >= 1")
        check_writable_dir(self.out, "--out")

    def gpus_per_trial(self) -> int:
        """GPUs one trial's engine needs: the arm's TP x PP (0 for the offline simulator)."""
        if self.sim is not None:
            return 0
        assert self.spec is not None
        arm = arm_of(spec_dataset(self.spec, self.workload)[1], self.arm)
        if arm.replicas > 1:
            raise ServelabError(f"--ray: arm {arm.name} has {arm.replicas} replicas; tune a one-replica "
                                "arm on a cluster (replicas scale its capacity, not its arguments)")
        return arm.tensor_parallel_size * arm.pipeline_parallel_size


@dataclass(frozen=True, slots=True)
class TuneRun:
    """A finished tune run: the outcome, the search space, the trial budget and the summary
    written to tune.json."""

    outcome: TuneOutcome
    space: Space
    budget: int
    summary: dict[str, Any]


def _target(req: TuneRequest) -> tuple[Opener, dict[str, Value | None], Space, DatasetOptions, dict[str, Any]]:
    """(opener, the axes' defaults, space, dataset, settings the trial store binds)."""
    if req.sim is not None:
        opener, defaults = sim_opener(req.sim)
        return (opener, defaults, parse_space(list(req.params), sorted(EngineArgs.model_fields)), req.dataset,
                {"target": "sim", "model": req.sim.model, "gpu": req.sim.gpu,
                 "engine_args": req.sim.engine_args.model_dump(mode="json")})
    assert req.spec is not None
    spec_path = req.spec
    dataset, spec = spec_dataset(spec_path, req.workload)
    arm_spec = arm_of(spec, req.arm)

    def spec_opener(params: dict[str, Value]) -> OpenTarget:
        update: dict[str, Any] = {"args": {**arm_spec.args, **{k: v for k, v in params.items()
                                                               if k != "gpu_memory_utilization"}}}
        if "gpu_memory_utilization" in params:
            update["gpu_memory_utilization"] = params["gpu_memory_utilization"]
        return open_arm(spec_path, req.arm, req.out / "logs", update)

    return (spec_opener, dict(arm_spec.args), parse_space(list(req.params), None), dataset,
            {"target": "spec", "spec": str(spec_path), "arm": arm_spec.name})


def run_tune(req: TuneRequest, echo: Echo = lambda _l: None,
             runner: TrialRunner | None = None) -> TuneRun:
    """Run (or resume from `req.out`'s trials) the search of `req`; writes the trials,
    tune.json and pareto.png (every measured level of every trial, the front and the best
    point) into `req.out`. `runner` runs trial batches in parallel (a Ray cluster)."""
    req.check()
    opener, defaults, space, dataset, settings = _target(req)
    slo = req.slo
    sweep_cfg = SweepConfig(
        axis=LevelAxis("concurrency", float(req.levels[0]), float(req.levels[1])), dataset=dataset,
        targets=Boundaries(knee=False, slo=True, saturation=False), repetitions=req.repetitions,
        prompts=req.prompts, seed=req.seed, slo=slo, percentile=slo.percentile)
    cfg = TuneConfig(space, sweep_cfg, req.objective, req.max_trials)
    store = TrialStore(req.out)
    store.bind({**settings, "dataset": dataset.model_dump(mode="json"), "seed": req.seed,
                "slo": dict(slo.limits_ms), "percentile": slo.percentile, "objective": req.objective,
                "levels": list(req.levels),
                "prompts": [req.prompts.per_concurrency, req.prompts.min, req.prompts.max],
                "repetitions": req.repetitions})
    budget = space.size if req.grid else cfg.budget
    echo(f"tuning {', '.join(space.names)} over a grid of {space.size} under {slo.describe()} "
         f"(budget {budget} trials, seed {req.seed})")
    res = tune(cfg, opener, store, defaults, echo=echo, grid=req.grid, runner=runner)
    points = [(p.per_user_tok_s, p.tok_s_per_gpu, str(t.params), p.meets_slo)
              for t in res.trials for p in t.points]
    best_pt = None
    if res.best.capacity_level is not None:
        bp = [p for p in res.best.points if p.level == res.best.capacity_level]
        best_pt = (bp[0].per_user_tok_s, bp[0].tok_s_per_gpu) if bp else None
    if points:
        pareto_plot(points, dict(slo.limits_ms).get("tpot"), best_pt, req.out / "pareto.png",
                    f"{settings.get('model', settings.get('arm'))}: every measured level of every trial")
    summary = {
        "best": res.best.to_json(), "defaults": res.defaults.to_json(), "margin_over_defaults": res.margin,
        "trials_spent": len(res.trials), "trials_reused": res.reused, "grid_size": res.grid_size,
        "infeasible": sum(1 for t in res.trials if t.status != "ok"), "objective": req.objective,
    }
    write_json_atomic(req.out / "tune.json", summary)
    return TuneRun(res, space, budget, summary)
