"""`servelab sim run|serve|calibrate`: the simulated engine, offline, over HTTP, and fitted.

`sim` is a command group: `sim run` simulates a bench run offline on a virtual clock (the
same workload and load flags as `servelab bench`, the same result JSON), `sim calibrate`
fits a calibration to measured results, `sim serve` (registered by
`servelab.cli.sim_serve.register_serve`) serves the simulated engine over HTTP.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gc
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from servelab.cli.output import make_console

from servelab.cli.engine_flags import EngineFlags, sim_engine_flags
from servelab.cli.engine_flags import engine_options as engine_options  # `sweep` imports it from here
from servelab.cli.flags import load_flags, workload_flags
from servelab.errors import ServelabError
from servelab.sim.kernel_profile import KernelProfile
from servelab.sim.setup import SimOptions
from servelab.storage import check_writable, check_writable_dir
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DatasetOptions

sim_app = typer.Typer(name="sim", no_args_is_help=True, help=(
    "The simulated engine: `run` a bench offline on a virtual clock, `serve` it over HTTP, "
    "`calibrate` its cost model to measured results."))

@sim_app.command("run")
@workload_flags
@load_flags
@sim_engine_flags(fleet=True)
def run_cmd(
    *,
    dataset: DatasetOptions,
    seed: int,
    arrivals: ArrivalOptions,
    max_concurrency: Optional[int],
    num_warmups: int,
    engine: SimOptions,
    percentile_metrics: str = typer.Option("ttft,tpot,itl", "--percentile-metrics", help="Metrics with percentiles."),
    metric_percentiles: str = typer.Option("99", "--metric-percentiles", help="Percentiles, comma-separated."),
    goodput: Optional[list[str]] = typer.Option(None, "--goodput", help="SLOs in ms: ttft:MS tpot:MS e2el:MS."),
    save_result: bool = typer.Option(False, "--save-result", help="Write the result JSON file."),
    result_dir: Optional[Path] = typer.Option(None, "--result-dir", help="Folder for the result file."),
    result_filename: Optional[str] = typer.Option(None, "--result-filename", help="Result file name."),
    append_result: bool = typer.Option(False, "--append-result", help="Append to the result file."),
    metadata: Optional[list[str]] = typer.Option(None, "--metadata", help="KEY=VALUE pairs recorded in the result."),
    save_detailed: bool = typer.Option(False, "--save-detailed", help="Per-request lengths, TTFTs, ITLs, errors."),
    label: Optional[str] = typer.Option(None, "--label"),
    as_json: bool = typer.Option(False, "--json", help="Print the result JSON on stdout (tables go to stderr)."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="Write one JSON line per engine step to this file."),
) -> None:
    """Simulate a bench run offline on a virtual clock: same flags and result JSON as `servelab bench`."""
    from servelab.client.console import summary_lines
    from servelab.metrics.result import parse_metadata, write_result
    from servelab.metrics.traps import result_json
    from servelab.metrics.summary import (
        SummaryOptions,
        parse_goodput,
        parse_metric_percentiles,
        parse_percentile_metrics,
    )
    from servelab.sim import BUILD
    from servelab.sim.offline import disaggregation_lines, memory_lines, run_offline, sim_lines

    summary_opts = SummaryOptions(
        percentile_metrics=parse_percentile_metrics(percentile_metrics),
        metric_percentiles=parse_metric_percentiles(metric_percentiles),
        goodput=parse_goodput(list(goodput)) if goodput else None,
        per_request_itls=save_detailed)  # only a detailed result holds them
    meta = parse_metadata(list(metadata or []))
    if trace is not None:
        check_writable(trace, "--trace")
    if result_filename is not None:
        check_writable((result_dir or Path(".")) / result_filename, "--result-dir/--result-filename")
    elif save_result or append_result or result_dir is not None:
        check_writable_dir(result_dir or Path("."), "--result-dir")
    date = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    # One run, then the process ends: the cyclic collector stays off to the end. Resumed
    # after the run, its first collection walks every record still alive (all acyclic) to
    # find nothing, about 7 s at a million requests; exit frees them by reference count.
    gc.disable()
    out = run_offline(engine, dataset, seed, arrivals, max_concurrency, num_warmups,
                      summary_opts, trace_path=trace, date=date, label=label, metadata=meta)
    data = result_json(out.result, detailed=save_detailed)
    err = make_console(stderr=True)
    for note in out.notes:
        err.print(f"[yellow]note:[/] {note}", highlight=False)
    if save_result or append_result or result_filename or result_dir:
        name = result_filename or (f"servelab-sim-{engine.gpu}-{engine.replicas}x-"
                                   f"{engine.model.split('/')[-1]}-{date}.json")
        path = (result_dir or Path(".")) / name
        write_result(path, data, append_result)
        err.print(f"result written to {path}", highlight=False)
    console = make_console(stderr=as_json)
    for line in memory_lines(out.memory, out.max_model_len, engine.replicas):
        console.print(line, highlight=False)
    for line in summary_lines(out.result, " Serving Benchmark Result (simulated) "):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    for line in sim_lines(out.num_steps, out.preemptions, out.run.duration_s, out.cost_source,
                          BUILD.describe()):
        console.print(line, highlight=False)
    r = out.result
    for line in disaggregation_lines(engine, r.total_input_tokens / max(1, r.completed)):
        console.print(line, highlight=False)
    if as_json:
        sys.stdout.write(json.dumps(data) + "\n")


_AS_MEASURED = {
    **dict.fromkeys(("max_num_seqs", "max_num_batched_tokens", "max_model_len",
                     "gpu_memory_utilization", "enable_prefix_caching", "tensor_parallel_size",
                     "pipeline_parallel_size", "block_size", "kv_cache_dtype"),
                    "As the measured server."),
    "model": "Model name from the catalog (e.g. Qwen/Qwen3-14B); required without --experiment.",
    "gpu": "GPU name from the catalog (e.g. L40S, H200); required without --experiment.",
    "quantization": "Weight format of the measured runs.",
    "async_scheduling": "As the measured server (vLLM's default: on).",
}


@sim_app.command("calibrate")
@workload_flags
@load_flags
@sim_engine_flags(raw=True, required=False, calibration=False, help=_AS_MEASURED)
def calibrate_cmd(
    results: Optional[list[Path]] = typer.Argument(None, help="bench result JSON files measured on --gpu (or --experiment)."),
    *,
    dataset: DatasetOptions,
    seed: int,
    arrivals: ArrivalOptions,
    max_concurrency: Optional[int],
    num_warmups: int,
    experiment: Optional[Path] = typer.Option(None, "--experiment", help="An experiment directory (`servelab run ... --out DIR`): fit on its cells, each re-simulated with its own workload, seed, load and arm."),
    arm: Optional[list[str]] = typer.Option(None, "--arm", help="With --experiment: only this arm's cells (repeatable; default: every arm)."),
    cells: Optional[str] = typer.Option(None, "--cells", help="With --experiment: only these loads, comma-separated (e.g. c1,c32)."),
    workload: Optional[list[str]] = typer.Option(None, "--workload", help="With --experiment: only this workload's cells (repeatable; default: every workload)."),
    arm_model: Optional[list[str]] = typer.Option(None, "--arm-model", help="With --experiment: ARM=MODEL[,QUANTIZATION] for an arm whose model directory is not on this machine."),
    engine: EngineFlags,
    out: Path = typer.Option(..., "--out", help="Where to write the calibration JSON."),
    max_evals: int = typer.Option(60, "--max-evals", help="Simulations the search may run."),
    model_for: Optional[list[str]] = typer.Option(None, "--model-for", help="RESULT=MODEL: the model (catalog name or config.json) a result file was measured on, where it is not --model (repeatable); one residual is fitted across them."),
    leave_one_model_out: bool = typer.Option(False, "--leave-one-model-out", help="With cells of several models: also fit on all but one model and report the error on the one left out, for each."),
    fit_kind: str = typer.Option("residual", "--fit", help="What to fit: residual (the kernels' residual: GPU time scale, step, sequence, launch and request overheads, on every figure), speculative (spec_step_us and spec_per_seq_us, the speculative path's time on this host, on the decode figures of the speculative cells) or drafter (draft_layer_us, a draft model's CPU time per layer and forward on this host, on the decode figures of draft-model cells; after speculative, from its file); the rest held."),
    start: Optional[Path] = typer.Option(None, "--calibration", help="Start from this calibration (a `sim calibrate` output, e.g. the speculative fit's before --fit drafter) instead of the GPU's shipped figures; the fields this fit does not move keep its values."),
) -> None:
    """Fit efficiency factors and overheads to measured results; print what error is left.

    Result files: the workload and load of each are rebuilt from its `servelab` extras
    (seed, tokenizer) and from these flags (dataset, num-prompts, rate, concurrency).
    `--experiment DIR`: every cell of the experiment (or those of --arm / --cells), each
    with the workload, seed, load, warm-ups and tokenizer it recorded, on its own arm
    (model, weight format, engine args); GPU from the spec, kernels from `--profile` when
    given. Prints the error per cell.
    """
    from servelab.sim.calibrate import FIT_SETS, calibrate, continued, for_fit, load_targets, parse_model_for, priced_with, with_models
    from servelab.sim.calibrate import leave_one_model_out as loo
    from servelab.sim.cost import Calibration

    if max_evals < 1:
        raise ServelabError(f"--max-evals {max_evals}: must be >= 1")
    if fit_kind not in FIT_SETS:
        raise ServelabError(f"--fit {fit_kind}: use one of {', '.join(FIT_SETS)}")
    what = FIT_SETS[fit_kind]
    check_writable(out, "--out")  # before any fit: a bad path must not cost the search
    start_cal = Calibration.load(start) if start is not None else None
    console = make_console()
    if experiment is not None:
        from servelab.experiment.simulation import measured_cells, parse_arm_models

        if results:
            raise ServelabError("give result files or --experiment, not both")
        loads = [c.strip() for c in cells.split(",") if c.strip()] if cells else []
        notes: list[str] = []
        targets = measured_cells(experiment, list(arm or []), loads,
                                 parse_arm_models(list(arm_model or [])), engine.async_scheduling,
                                 notes, list(workload or []))
        for note in notes:
            console.print(f"note: {note}", highlight=False)
        if engine.profile is not None:  # overrides every arm's own (its spec's `sim.profile`)
            targets = priced_with(targets, KernelProfile.load(engine.profile))
        assert targets[0].options is not None
        opts = targets[0].options
    else:
        if arm or cells or arm_model or workload:
            raise ServelabError("--arm, --cells, --workload and --arm-model need --experiment")
        if not results:
            raise ServelabError("give bench result files or --experiment DIR")
        if engine.model is None or engine.gpu is None:
            raise ServelabError("--model and --gpu are required without --experiment")
        opts = engine.options()
        rebuilt: list[str] = []
        targets = with_models(load_targets(results, dataset, seed, arrivals, max_concurrency,
                                           num_warmups, rebuilt), opts, parse_model_for(list(model_for or [])))
        for note in rebuilt:
            console.print(f"warning: {note}", highlight=False)
    if start_cal is not None:
        opts = dataclasses.replace(opts, calibration=start_cal)
    targets = for_fit(opts, targets, what)
    fit = calibrate(opts, targets, max_evals=max_evals,
                    progress=lambda msg: console.print(msg, highlight=False), params=what.params,
                    prior_weight=what.prior_weight)
    if leave_one_model_out:
        held = loo(opts, targets, max_evals, progress=lambda msg: console.print(msg, highlight=False),
                   params=what.params, prior_weight=what.prior_weight)
        fit.calibration = fit.calibration.model_copy(update={
            "held_out_error_pct": {f"{m}/{k}": v for m, errs in held.items() for k, v in errs.items()}})
    if start_cal is not None:
        fit.calibration = continued(start_cal, fit.calibration)
    fit.calibration.save(out)
    console.print(f"wrote {out}", highlight=False)
    for line in fit.report_lines():
        console.print(line, highlight=False)


@sim_app.command("profile")
def profile_cmd(
    out: Path = typer.Option(..., "--out", help="Where to write the kernel profile JSON."),
    quick: bool = typer.Option(False, "--quick", help="A small grid (seconds): checks that every kernel family runs."),
) -> None:
    """Time the operators of an engine step on this machine's GPU 0 and write a kernel profile.

    Needs PyTorch with CUDA; uses vLLM's kernels when vLLM imports (Marlin / Machete 4-bit,
    CUTLASS fp8, fused MoE, FlashAttention with paged KV). The simulator prices steps from
    the profile with `--profile FILE` (docs/simulator.md, "Cost model").
    """
    from servelab.sim.profiler import ProfileGrid, measure
    from servelab.storage import write_atomic

    check_writable(out, "--out")
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError as exc:
        raise ServelabError("sim profile needs PyTorch (and a CUDA GPU): pip install torch") from exc
    console = make_console(stderr=True)
    grid = ProfileGrid.quick() if quick else ProfileGrid()
    profile = measure(grid, log=lambda msg: console.print(msg, highlight=False))
    write_atomic(out, profile.to_json().encode())
    console.print(f"wrote {out} ({len(profile.gemm)} GEMM, {len(profile.attention_decode)} + "
                  f"{len(profile.attention_prefill)} attention, {len(profile.moe)} MoE points; "
                  f"{profile.took_s:.0f} s)", highlight=False)
    for family, why in sorted(profile.skipped.items()):
        console.print(f"skipped {family}: {why}", highlight=False)


def register(app: typer.Typer) -> None:
    from servelab.cli.sim_serve import register_serve

    register_serve(sim_app)
    app.add_typer(sim_app, name="sim")

