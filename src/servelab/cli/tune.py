"""`servelab tune`: search engine arguments for the best goodput under an SLO
(planner-seeded coordinate descent; every trial stored; resumable). See docs/sweeps.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.table import Table

from servelab.cli.engine_flags import EngineFlags, sim_engine_flags
from servelab.cli.flags import level_prompt_flags, measured_target_flags, workload_flags
from servelab.cli.output import make_console
from servelab.errors import ServelabError
from servelab.workload.datasets import DatasetOptions

if TYPE_CHECKING:
    from servelab.sweep.tune import TuneRun


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
@measured_target_flags("Run trials as tasks on this Ray cluster (HOST:PORT or auto), as many at once as it has "
                       "GPUs for (CPUs for --sim); the same search path and outcome as without (needs "
                       "servelab[ray]).")
@level_prompt_flags
def tune_cmd(
    *,
    dataset: DatasetOptions,
    seed: int,
    engine: EngineFlags,
    sim: bool,
    spec: Optional[Path],
    arm: Optional[str],
    workload: Optional[str],
    ray: Optional[str],
    prompts_per_concurrency: int,
    min_prompts: int,
    max_prompts: int,
    repetitions: int,
    param: list[str] = typer.Option(..., "--param", help="Axis NAME=V1,V2,... (repeat), e.g. max_num_seqs=16,32,64."),
    slo: list[str] = typer.Option(..., "--slo", help="SLOs in ms: ttft:MS tpot:MS e2el:MS."),
    slo_percentile: float = typer.Option(99.0, "--slo-percentile", help="Percentile the SLO is judged at."),
    out: Path = typer.Option(..., "--out", help="Folder for trials (resume: done trials are reused) and pareto.png."),
    objective: str = typer.Option("goodput", "--objective", help="goodput (req/s meeting the SLO) or throughput (output tok/s), at the SLO capacity."),
    max_trials: Optional[int] = typer.Option(None, "--max-trials", help="Trial budget (default: a quarter of the grid)."),
    grid: bool = typer.Option(False, "--grid", help="Run every grid point instead of searching (to check a search)."),
    min_level: int = typer.Option(1, "--min-level", help="Lowest concurrency of each trial's sweep."),
    max_level: int = typer.Option(1024, "--max-level", help="Highest concurrency of each trial's sweep."),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome JSON on stdout."),
) -> None:
    """Search engine arguments for the best goodput at the SLO capacity, in fewer trials than the grid."""
    # imported when the command runs: the sweep package pulls in the simulator and
    # matplotlib (~0.9 s), which every other command's start-up should not pay
    from servelab.experiment.spec import NumPromptsRule
    from servelab.sweep.slo import parse_slo
    from servelab.sweep.tune import TuneRequest, run_tune

    if sim and (engine.model is None or engine.gpu is None):
        raise ServelabError("--sim needs --model (catalog name) and --gpu (catalog GPU)")
    req = TuneRequest(
        params=tuple(param), slo=parse_slo(list(slo), slo_percentile), out=out, dataset=dataset, seed=seed,
        objective=objective, max_trials=max_trials, grid=grid, levels=(min_level, max_level),
        prompts=NumPromptsRule(per_concurrency=prompts_per_concurrency, min=min_prompts, max=max_prompts),
        repetitions=repetitions, sim=engine.options() if sim else None, spec=spec, arm=arm,
        workload=workload)
    err = make_console(stderr=True)
    runner = None
    if ray is not None:
        from servelab.distributed.raytrials import RayTrialRunner

        req.check()
        runner = RayTrialRunner(ray, req.gpus_per_trial())
    run = run_tune(req, echo=lambda line: err.print(line, highlight=False, markup=False), runner=runner)
    _render(run, objective, out, make_console(stderr=as_json))
    if as_json:
        sys.stdout.write(json.dumps(run.summary) + "\n")


def _render(run: TuneRun, objective: str, out: Path, console: Console) -> None:
    res = run.outcome
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
                  f"{run.summary['infeasible']} infeasible", highlight=False)
    console.print(f"results in {out}/ (trials/*.json, tune.json, pareto.png)", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("tune")(tune_cmd)
