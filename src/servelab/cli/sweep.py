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
from servelab.cli.flags import level_prompt_flags, measured_target_flags, workload_flags
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
@measured_target_flags("Ray cluster (HOST:PORT or auto): copies of the --sim or --spec target, one per free "
                       "GPU set, measure the levels the search may need next at once; the same path and "
                       "outcome (needs servelab[ray]).")
@level_prompt_flags
def sweep_cmd(
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
    base_url: Optional[str] = typer.Option(None, "--base-url", help="Target URL (OpenAI-compatible), e.g. http://127.0.0.1:8000."),
    backend: str = typer.Option("openai", "--backend", help="Client backend for --base-url: openai, openai-chat, vllm, sglang."),
    request_timeout: float = typer.Option(600.0, "--request-timeout", help="Per-request timeout (s) for --base-url."),
    mode: str = typer.Option("concurrency", "--mode", help="concurrency (closed loop) or rate (open loop, req/s)."),
    min_level: float = typer.Option(1.0, "--min-level", help="Lowest level (concurrency or req/s)."),
    max_level: Optional[float] = typer.Option(None, "--max-level", help="Highest level (default 1024 concurrency, 100 req/s)."),
    growth: float = typer.Option(2.0, "--growth", help="Bracketing factor between levels."),
    rate_resolution: float = typer.Option(0.05, "--rate-resolution", help="Rate mode: bisection stops at this relative step."),
    knee_tolerance: float = typer.Option(0.10, "--knee-tolerance", help="Knee: smallest level with throughput >= (1 - this) x the peak."),
    flat_gain: float = typer.Option(0.05, "--flat-gain", help="Bracketing stops when a step gains less than this fraction."),
    max_levels: int = typer.Option(40, "--max-levels", help="Most levels one sweep measures."),
    rate_duration_s: float = typer.Option(30.0, "--rate-duration-s", help="Rate mode: requests per level = rate x this."),
    num_warmups: int = typer.Option(0, "--num-warmups", help="Warm-up requests before each run."),
    burstiness: float = typer.Option(1.0, "--burstiness", help="Rate mode: gamma shape of arrivals."),
    max_concurrency: Optional[int] = typer.Option(None, "--max-concurrency", help="Rate mode: cap on requests in flight."),
    slo: Optional[list[str]] = typer.Option(None, "--slo", help="SLOs in ms: ttft:MS tpot:MS e2el:MS (repeat or comma-separate)."),
    slo_percentile: float = typer.Option(99.0, "--slo-percentile", help="Percentile the SLO is judged at."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder: each level's result JSON as produced, sweep.json, sweep.png."),
    as_json: bool = typer.Option(False, "--json", help="Print the sweep's summary JSON on stdout (tables go to stderr)."),
) -> None:
    """Sweep load levels adaptively (bracket, then bisect): knee, capacity under the SLO, why it bends."""
    from servelab.experiment.spec import NumPromptsRule
    from servelab.sweep.report import outcome_json, summary_lines, sweep_table
    from servelab.sweep.request import SweepRequest, UrlTarget, run_sweep_request
    from servelab.sweep.slo import parse_slo

    if sim and (engine.model is None or engine.gpu is None):
        raise ServelabError("--sim needs --model (catalog name) and --gpu (catalog GPU)")
    url = None
    if base_url is not None:
        url = UrlTarget(base_url, engine.model, backend, request_timeout, engine.gpu, engine.max_num_seqs,
                        engine.tensor_parallel_size * engine.replicas)
    req = SweepRequest(
        dataset=dataset, seed=seed, url=url, sim=engine.options() if sim else None, spec=spec, arm=arm,
        workload=workload, mode=mode, min_level=min_level, max_level=max_level, growth=growth,
        rate_resolution=rate_resolution, repetitions=repetitions, knee_tolerance=knee_tolerance,
        flat_gain=flat_gain, max_levels=max_levels,
        prompts=NumPromptsRule(per_concurrency=prompts_per_concurrency, per_rate_s=rate_duration_s,
                               min=min_prompts, max=max_prompts),
        num_warmups=num_warmups, burstiness=burstiness, max_concurrency=max_concurrency,
        slo=parse_slo(list(slo), slo_percentile) if slo else None, slo_percentile=slo_percentile, out=out)
    err = make_console(stderr=True)

    def echo(line: str) -> None:
        err.print(line, highlight=False, markup=False)

    pool = None
    if ray is not None:
        from servelab.distributed.raysweep import pool_on

        pool = pool_on(ray, echo)
    outcome = run_sweep_request(req, echo, pool)
    console = make_console(stderr=as_json)
    console.print(sweep_table(outcome))
    for line in summary_lines(outcome):
        console.print(line, highlight=False, markup=False)
    if out is not None:
        console.print(f"results in {out}/ (levels/*.json, sweep.json, sweep.png)", highlight=False)
    if as_json:
        sys.stdout.write(json.dumps(outcome_json(outcome)) + "\n")


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep_cmd)
