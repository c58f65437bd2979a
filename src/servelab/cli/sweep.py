"""`servelab sweep`: adaptive load levels against a URL, the simulator or a spec's arm; the
knee, the capacity under an SLO, and why the curve bends (docs/sweeps.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from servelab.cli.output import make_console

from servelab.cli.engine_flags import EngineFlags, sim_engine_flags
from servelab.cli.flags import workload_flags
from servelab.errors import ServelabError
from servelab.workload.datasets import DatasetOptions

# The simulated engine's flags are `servelab sim run`'s; with --base-url some say what the
# server runs, for the diagnosis's roofline.
SWEEP_ENGINE_HELP = {
    "model": "Catalog model (--sim) or the served model name (--base-url).",
    "gpu": "Catalog GPU (--sim; with --base-url: for the roofline in the diagnosis).",
    "max_num_seqs": "vLLM's --max-num-seqs (--sim); with --base-url: the server's value, for the diagnosis.",
}


@workload_flags
@sim_engine_flags(raw=True, required=False, fleet=True, help=SWEEP_ENGINE_HELP)
def sweep_cmd(
    *,
    dataset: DatasetOptions,
    seed: int,
    engine: EngineFlags,
    base_url: Optional[str] = typer.Option(None, "--base-url", help="Target URL (OpenAI-compatible), e.g. http://127.0.0.1:8000."),
    sim: bool = typer.Option(False, "--sim", help="Sweep the offline simulator (needs --model and --gpu)."),
    spec: Optional[Path] = typer.Option(None, "--spec", help="Experiment spec: sweep one of its arms (launched as the spec says)."),
    arm: Optional[str] = typer.Option(None, "--arm", help="Arm of --spec (default: its baseline)."),
    workload: Optional[str] = typer.Option(None, "--workload", help="Workload of --spec (default: its first); replaces the dataset flags."),
    backend: str = typer.Option("openai", "--backend", help="Client backend for --base-url: openai, openai-chat, vllm, sglang."),
    request_timeout: float = typer.Option(600.0, "--request-timeout", help="Per-request timeout (s) for --base-url."),
    mode: str = typer.Option("concurrency", "--mode", help="concurrency (closed loop) or rate (open loop, req/s)."),
    min_level: float = typer.Option(1.0, "--min-level", help="Lowest level (concurrency or req/s)."),
    max_level: Optional[float] = typer.Option(None, "--max-level", help="Highest level (default 1024 concurrency, 100 req/s)."),
    growth: float = typer.Option(2.0, "--growth", help="Bracketing factor between levels."),
    rate_resolution: float = typer.Option(0.05, "--rate-resolution", help="Rate mode: bisection stops at this relative step."),
    repetitions: int = typer.Option(1, "--repetitions", help="Runs per level, each with its own seed (>= 3 for an interval)."),
    knee_tolerance: float = typer.Option(0.10, "--knee-tolerance", help="Knee: smallest level with throughput >= (1 - this) x the peak."),
    flat_gain: float = typer.Option(0.05, "--flat-gain", help="Bracketing stops when a step gains less than this fraction."),
    max_levels: int = typer.Option(40, "--max-levels", help="Most levels one sweep measures."),
    prompts_per_concurrency: int = typer.Option(5, "--prompts-per-concurrency", help="Requests per level: this x concurrency (replaces --num-prompts)."),
    rate_duration_s: float = typer.Option(30.0, "--rate-duration-s", help="Rate mode: requests per level = rate x this."),
    min_prompts: int = typer.Option(50, "--min-prompts", help="Fewest requests per level."),
    max_prompts: int = typer.Option(1000, "--max-prompts", help="Most requests per level."),
    num_warmups: int = typer.Option(0, "--num-warmups", help="Warm-up requests before each run."),
    burstiness: float = typer.Option(1.0, "--burstiness", help="Rate mode: gamma shape of arrivals."),
    max_concurrency: Optional[int] = typer.Option(None, "--max-concurrency", help="Rate mode: cap on requests in flight."),
    slo: Optional[list[str]] = typer.Option(None, "--slo", help="SLOs in ms: ttft:MS tpot:MS e2el:MS (repeat or comma-separate)."),
    slo_percentile: float = typer.Option(99.0, "--slo-percentile", help="Percentile the SLO is judged at."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder: each level's result JSON as produced, sweep.json, sweep.png."),
    as_json: bool = typer.Option(False, "--json", help="Print the sweep's summary JSON on stdout (tables go to stderr)."),
    ray: Optional[str] = typer.Option(None, "--ray", help="Ray cluster (HOST:PORT or auto): copies of the --sim or --spec target, one per free GPU set, measure the levels the search may need next at once; the same path and outcome (needs servelab[ray])."),
) -> None:
    """Sweep load levels adaptively (bracket, then bisect): knee, capacity under the SLO, why it bends."""
    from servelab.experiment.spec import NumPromptsRule
    from servelab.sweep.levels import LevelAxis, Targets
    from servelab.sweep.plots import sweep_plot
    from servelab.storage import check_writable_dir, write_json_atomic
    from servelab.sweep.report import outcome_json, summary_lines, sweep_table
    from servelab.sweep.runner import LevelSource, OneTarget, SweepConfig, sweep_levels
    from servelab.sweep.slo import parse_slo
    from servelab.sweep.targets import ArmCopies, SimCopies, open_arm, open_sim, open_url, spec_dataset

    chosen = [n for n, on in (("--base-url", base_url is not None), ("--sim", sim), ("--spec", spec is not None)) if on]
    if len(chosen) != 1:
        raise ServelabError("give exactly one target: --base-url URL, --sim (with --model, --gpu) or --spec FILE")
    if ray is not None and base_url is not None:
        raise ServelabError("--ray with --base-url: levels measured at once would load the one server together; "
                            "give --sim or --spec (each copy is its own engine)")
    if mode not in ("concurrency", "rate"):
        raise ServelabError(f"--mode {mode!r}: use concurrency or rate")
    for flag, value, low in (("--repetitions", repetitions, 1), ("--max-levels", max_levels, 2),
                             ("--prompts-per-concurrency", prompts_per_concurrency, 1),
                             ("--min-prompts", min_prompts, 1), ("--num-warmups", num_warmups, 0)):
        if value < low:
            raise ServelabError(f"{flag} {value}: must be >= {low}")
    if max_prompts < min_prompts:
        raise ServelabError(f"--max-prompts {max_prompts} is below --min-prompts {min_prompts}")
    if not 0 < knee_tolerance < 1 or not 0 < flat_gain < 1:
        raise ServelabError("--knee-tolerance and --flat-gain must be in (0, 1)")
    if rate_duration_s <= 0 or burstiness <= 0:
        raise ServelabError("--rate-duration-s and --burstiness must be > 0")
    if out is not None:
        check_writable_dir(out, "--out")  # before the first level runs
    hi = max_level if max_level is not None else (1024.0 if mode == "concurrency" else 100.0)
    axis = LevelAxis(mode, min_level, hi, growth, rate_resolution)  # type: ignore[arg-type]
    slo_obj = parse_slo(list(slo), slo_percentile) if slo else None
    err = make_console(stderr=True)
    if spec is not None:
        dataset, spec_obj = spec_dataset(spec, workload)
        if slo_obj is None and spec_obj.slo is not None:  # type: ignore[attr-defined]
            s = spec_obj.slo  # type: ignore[attr-defined]
            items = [f"{m}:{v}" for m, v in (("ttft", s.ttft_ms), ("tpot", s.tpot_ms), ("e2el", s.e2el_ms)) if v]
            slo_obj = parse_slo(items, s.percentile) if items else None
    elif sim:
        if engine.model is None or engine.gpu is None:
            raise ServelabError("--sim needs --model (catalog name) and --gpu (catalog GPU)")
    elif not engine.model:
        raise ServelabError("--base-url needs --model (the served model name)")
    cfg = SweepConfig(
        axis=axis, dataset=dataset,
        targets=Targets(knee=True, slo=slo_obj is not None, saturation=mode == "rate",
                        knee_tolerance=knee_tolerance, flat_gain=flat_gain, max_levels=max_levels),
        repetitions=repetitions,
        prompts=NumPromptsRule(per_concurrency=prompts_per_concurrency, per_rate_s=rate_duration_s,
                               min=min_prompts, max=max_prompts),
        num_warmups=num_warmups, seed=seed, slo=slo_obj,
        percentile=slo_obj.percentile if slo_obj else slo_percentile,
        burstiness=burstiness, max_concurrency=max_concurrency, bootstrap_seed=seed)
    def echo(line: str) -> None:
        err.print(line, highlight=False, markup=False)

    source: LevelSource
    if ray is not None:
        from servelab.distributed.raysweep import RayLevelPool

        copies = (ArmCopies(spec_obj, arm, (out or Path(".")) / "logs", str(spec)) if spec is not None
                  else SimCopies(engine.options()))
        planner, describe = copies.view()
        err.print(f"sweeping {describe} on Ray ({ray}), seed {seed}", highlight=False)
        pool = RayLevelPool(ray, copies, copies.gpus, echo)
        source, close = pool, pool.close
    else:
        ot = (open_arm(spec, arm, (out or Path(".")) / "logs") if spec is not None
              else open_sim(engine.options()) if sim
              else open_url(base_url or "", engine.model or "", backend, engine.gpu, request_timeout,
                            engine.max_num_seqs, engine.tensor_parallel_size * engine.replicas))
        planner, describe = ot.planner, ot.describe
        err.print(f"sweeping {describe}, seed {seed}", highlight=False)
        source, close = OneTarget(ot, None, out), ot.close
    try:
        outcome = sweep_levels(source, cfg, planner, describe, out, echo)
    finally:
        close()
    summary = outcome_json(outcome)
    if out is not None:
        write_json_atomic(out / "sweep.json", summary)
        sweep_plot(outcome, out / "sweep.png")
    console = make_console(stderr=as_json)
    console.print(sweep_table(outcome))
    for line in summary_lines(outcome):
        console.print(line, highlight=False, markup=False)
    if out is not None:
        console.print(f"results in {out}/ (levels/*.json, sweep.json, sweep.png)", highlight=False)
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep_cmd)
