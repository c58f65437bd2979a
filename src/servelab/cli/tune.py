"""`servelab tune`: search engine arguments for the best goodput under an SLO
(planner-seeded coordinate descent; every trial stored; resumable). See docs/sweeps.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from servelab.cli.output import make_console
from rich.table import Table

from servelab.cli.flags import workload_flags
from servelab.cli.engine_flags import EngineFlags, sim_engine_flags
from servelab.cli.sweep import spec_dataset
from servelab.errors import ServelabError
from servelab.workload.datasets import DatasetOptions


# `sim run`'s engine flags; with --sim the searched ones (--param) start from these values.
_BASE = "vLLM's {} (--sim): the search's base value."
TUNE_ENGINE_HELP = {
    "model": "Catalog model (--sim).",
    "gpu": "Catalog GPU (--sim).",
    "max_num_seqs": _BASE.format("--max-num-seqs"),
    "max_num_batched_tokens": _BASE.format("--max-num-batched-tokens"),
    "gpu_memory_utilization": _BASE.format("--gpu-memory-utilization"),
}


@workload_flags
@sim_engine_flags(raw=True, required=False, help=TUNE_ENGINE_HELP)
def tune_cmd(
    *,
    dataset: DatasetOptions,
    seed: int,
    engine: EngineFlags,
    param: list[str] = typer.Option(..., "--param", help="Axis NAME=V1,V2,... (repeat), e.g. max_num_seqs=16,32,64."),
    slo: list[str] = typer.Option(..., "--slo", help="SLOs in ms: ttft:MS tpot:MS e2el:MS."),
    slo_percentile: float = typer.Option(99.0, "--slo-percentile", help="Percentile the SLO is judged at."),
    out: Path = typer.Option(..., "--out", help="Folder for trials (resume: done trials are reused) and pareto.png."),
    objective: str = typer.Option("goodput", "--objective", help="goodput (req/s meeting the SLO) or throughput (output tok/s), at the SLO capacity."),
    max_trials: Optional[int] = typer.Option(None, "--max-trials", help="Trial budget (default: a quarter of the grid)."),
    grid: bool = typer.Option(False, "--grid", help="Run every grid point instead of searching (to check a search)."),
    sim: bool = typer.Option(False, "--sim", help="Tune the offline simulator (needs --model, --gpu)."),
    spec: Optional[Path] = typer.Option(None, "--spec", help="Tune an arm of this spec (its engine is launched per trial)."),
    arm: Optional[str] = typer.Option(None, "--arm", help="Arm of --spec (default: its baseline)."),
    workload: Optional[str] = typer.Option(None, "--workload", help="Workload of --spec (default: its first)."),
    min_level: int = typer.Option(1, "--min-level", help="Lowest concurrency of each trial's sweep."),
    max_level: int = typer.Option(1024, "--max-level", help="Highest concurrency of each trial's sweep."),
    prompts_per_concurrency: int = typer.Option(5, "--prompts-per-concurrency", help="Requests per level: this x concurrency."),
    min_prompts: int = typer.Option(50, "--min-prompts", help="Fewest requests per level."),
    max_prompts: int = typer.Option(1000, "--max-prompts", help="Most requests per level."),
    repetitions: int = typer.Option(1, "--repetitions", help="Runs per level."),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome JSON on stdout."),
) -> None:
    """Search engine arguments for the best goodput at the SLO capacity, in fewer trials than the grid."""
    from servelab.experiment.spec import NumPromptsRule
    from servelab.plan import EngineArgs
    from servelab.sweep.levels import LevelAxis, Targets
    from servelab.sweep.plots import pareto_plot
    from servelab.sweep.runner import SweepConfig
    from servelab.sweep.slo import parse_slo
    from servelab.sweep.space import parse_space
    from servelab.sweep.targets import open_arm
    from servelab.sweep.trials import TrialStore
    from servelab.sweep.tune import TuneConfig, sim_opener, tune
    from servelab.storage import check_writable_dir

    if sim == (spec is not None):
        raise ServelabError("give exactly one target: --sim (with --model, --gpu) or --spec FILE")
    if objective not in ("goodput", "throughput"):
        raise ServelabError(f"--objective {objective!r}: use goodput or throughput")
    if max_trials is not None and max_trials < 1:
        raise ServelabError(f"--max-trials {max_trials}: must be >= 1")
    check_writable_dir(out, "--out")  # before the first trial runs
    slo_obj = parse_slo(list(slo), slo_percentile)
    settings: dict[str, Any]
    if sim:
        if engine.model is None or engine.gpu is None:
            raise ServelabError("--sim needs --model (catalog name) and --gpu (catalog GPU)")
        base = engine.options()
        space = parse_space(list(param), sorted(EngineArgs.model_fields))
        opener, defaults = sim_opener(base)
        settings = {"target": "sim", "model": base.model, "gpu": base.gpu,
                    "engine_args": base.engine_args.model_dump(mode="json")}
    else:
        assert spec is not None
        dataset, _spec = spec_dataset(spec, workload)
        space = parse_space(list(param), None)
        from servelab.sweep.targets import arm_of

        arm_spec = arm_of(_spec, arm)

        def opener(params: dict[str, Any]):  # noqa: ANN202
            update: dict[str, Any] = {"args": {**arm_spec.args, **{k: v for k, v in params.items()
                                                                   if k != "gpu_memory_utilization"}}}
            if "gpu_memory_utilization" in params:
                update["gpu_memory_utilization"] = params["gpu_memory_utilization"]
            return open_arm(spec, arm, out / "logs", update)

        defaults = {**{k: v for k, v in arm_spec.args.items()}}
        settings = {"target": "spec", "spec": str(spec), "arm": arm_spec.name}
    sweep_cfg = SweepConfig(
        axis=LevelAxis("concurrency", float(min_level), float(max_level)), dataset=dataset,
        targets=Targets(knee=False, slo=True, saturation=False), repetitions=repetitions,
        prompts=NumPromptsRule(per_concurrency=prompts_per_concurrency, min=min_prompts, max=max_prompts),
        seed=seed, slo=slo_obj, percentile=slo_obj.percentile)
    cfg = TuneConfig(space, sweep_cfg, objective, max_trials)
    store = TrialStore(out)
    store.bind({**settings, "dataset": dataset.model_dump(mode="json"), "seed": seed,
                "slo": dict(slo_obj.limits_ms), "percentile": slo_obj.percentile,
                "objective": objective, "levels": [min_level, max_level],
                "prompts": [prompts_per_concurrency, min_prompts, max_prompts], "repetitions": repetitions})
    err = make_console(stderr=True)
    err.print(f"tuning {', '.join(space.names)} over a grid of {space.size} under {slo_obj.describe()} "
              f"(budget {cfg.budget if not grid else space.size} trials, seed {seed})", highlight=False)
    res = tune(cfg, opener, store, defaults, echo=lambda l: err.print(l, highlight=False, markup=False), grid=grid)
    all_points = [(p.per_user_tok_s, p.tok_s_per_gpu, str(t.params), p.meets_slo)
                  for t in res.trials for p in t.points]
    best_pt = None
    if res.best.capacity_level is not None:
        bp = [p for p in res.best.points if p.level == res.best.capacity_level]
        best_pt = (bp[0].per_user_tok_s, bp[0].tok_s_per_gpu) if bp else None
    if all_points:
        pareto_plot(all_points, dict(slo_obj.limits_ms).get("tpot"), best_pt, out / "pareto.png",
                    f"{settings.get('model', settings.get('arm'))}: every measured level of every trial")
    summary = {
        "best": res.best.to_json(), "defaults": res.defaults.to_json(), "margin_over_defaults": res.margin,
        "trials_spent": len(res.trials), "trials_reused": res.reused, "grid_size": res.grid_size,
        "infeasible": sum(1 for t in res.trials if t.status != "ok"), "objective": objective,
    }
    from servelab.storage import write_json_atomic

    write_json_atomic(out / "tune.json", summary)
    console = make_console(stderr=as_json)
    table = Table(title=f"tune: trials by {objective} at the SLO capacity")
    for col in ("configuration", "status", objective, "capacity", "out tok/s"):
        table.add_column(col, justify="right")
    for t in sorted(res.trials, key=lambda t: -t.objective if t.status == "ok" else 1e18):
        table.add_row(", ".join(f"{k}={v}" for k, v in t.params.items()) or "engine defaults", t.status,
                      f"{t.objective:.3f}" if t.status == "ok" else "-",
                      "-" if t.capacity_level is None else f"{t.capacity_level:g}",
                      "-" if t.output_tok_s is None else f"{t.output_tok_s:,.1f}")
    console.print(table)
    b = res.best
    console.print(f"best: {', '.join(f'{k}={v}' for k, v in b.params.items()) or 'engine defaults'}: "
                  f"{objective} {b.objective:.3f} at concurrency {b.capacity_level}", highlight=False)
    margin = "n/a (the defaults met the SLO at no level)" if res.margin is None else f"{100 * res.margin:+.1f} %"
    console.print(f"margin over the engine's defaults ({res.defaults.objective:.3f}): {margin}", highlight=False)
    console.print(f"trials: {len(res.trials)} spent ({res.reused} reused from {out}) of a grid of "
                  f"{res.grid_size} ({100 * len(res.trials) / res.grid_size:.0f} %); "
                  f"{summary['infeasible']} infeasible", highlight=False)
    console.print(f"results in {out}/ (trials/*.json, tune.json, pareto.png)", highlight=False)
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")


def register(app: typer.Typer) -> None:
    app.command("tune")(tune_cmd)
