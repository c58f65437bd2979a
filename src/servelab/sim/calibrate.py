"""Fit a `Calibration` to measured bench results by re-simulating them (`servelab sim calibrate`).

Each result file is re-run on the simulator with the same workload and load: the number of
prompts, request rate, burstiness and max concurrency come from the result's vLLM keys, the
seed and tokenizer from its `servelab` extras (else the flags), the dataset from the flags.
The error is the sum over results and metrics of the squared relative error of the
result's summary figures (`FIT_METRICS`, those present; mean TTFT counts as much as
throughput and TPOT, the three figures a serving engineer reads first; p99 ITL and median
TTFT less), plus a weak pull towards the GPU class's defaults so that parameters the data
cannot separate stay where they were.

Fitted: the residual the kernels leave (`Calibration`): `gpu_time_scale, step_overhead_ms,
per_seq_us, launch_us, request_overhead_ms` (`per_prefill_token_us`, the GPU's time per
prefill token beyond the kernels, comes with the starting calibration: bench summaries
cannot tell it from the launch costs, so it is measured from the engine's own GPU-bound
prefill steps on a fit model; `v1_launch_us`, the V1 runner's
launch cost for dense models, comes with the starting calibration: a host probe measures
it, since served cells on that runner cannot tell it from the speculative CPU). The API server's figures
(`frontend_*`) are not fitted here: they are measured where the API server binds (probes
of one output token per request and of long streams on a small model) and come with the
starting calibration. The kernel times
themselves come from the GPU's profile and are never fitted; the residual is one set per
GPU, fitted on cells of several models at once (each target carries its own deployment),
and `evaluate` reports the error on cells the fit did not see. `SPECULATIVE` fits the
speculative path's step and per-sequence time instead, on speculative cells' decode
figures (`FitSet`: what a fit moves and reads).
The search is Nelder-Mead (`nelder_mead`, numpy only: scipy is not a dependency). Why: five
parameters, an objective that is a whole simulation (no gradient; piecewise-smooth, since
batch composition changes in steps), and a budget of tens of evaluations: a
derivative-free simplex method fits that.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import get_args

import numpy as np

from servelab.client.workers import direct_shares
from servelab.errors import ServelabError
from servelab.metrics.records import RequestRecord
from servelab.metrics.result_file import StoredResult, read_results
from servelab.metrics.summary import SummaryOptions, summarize
from servelab.sim.cost import Calibration
from servelab.sim.kernel_profile import KernelProfile
from servelab.sim.offline import PreparedWorkload, prepare_workload, simulate_prepared
from servelab.sim.setup import SimOptions
from servelab.speculation import SpecMethod
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DatasetOptions

FIT_METRICS: dict[str, float] = {
    "total_token_throughput": 1.0, "output_throughput": 1.0, "mean_tpot_ms": 1.0,
    "mean_itl_ms": 1.0, "p99_itl_ms": 0.5, "mean_ttft_ms": 1.0, "median_ttft_ms": 0.25,
}
PRIOR_WEIGHT = 0.002
_PARAMS = ("gpu_time_scale", "step_overhead_ms", "per_seq_us", "launch_us",
           "request_overhead_ms")
_SCALE_BOUNDS = (0.6, 1.6)


@dataclass(frozen=True, slots=True)
class FitSet:
    """What one kind of fit moves (`params`, calibration fields) and which of a cell's
    figures it reads (`metrics`, of `FIT_METRICS`)."""

    name: str
    params: tuple[str, ...]
    metrics: tuple[str, ...]
    # the speculative methods whose cells it reads (empty: every cell, speculative or not)
    methods: tuple[str, ...] = ()
    prior_weight: float = PRIOR_WEIGHT  # the pull towards the starting calibration
    hint: str = ""  # how to give it the cells it needs, when none is there


# The residual the kernels leave, on every figure.
RESIDUAL = FitSet("residual", _PARAMS, tuple(FIT_METRICS))
# The speculative path's step and per-sequence time (the host's: one machine's line held on
# its other arms and its crossover, others' differed up to 6x per sequence:
# docs/validation/spec-host-2026-12-05), on the decode figures' means only: TTFT carries
# the API server's share of a closed loop's waits (issue 14), and the p99 ITL the prefills
# that land between tokens, which these two must not absorb. No pull towards the starting
# figures: they are one host's, and two loads (two batch sizes) separate the two terms.
_DECODE_FIGURES = ("total_token_throughput", "output_throughput", "mean_tpot_ms", "mean_itl_ms")
SPECULATIVE = FitSet("speculative", ("spec_step_us", "spec_per_seq_us"), _DECODE_FIGURES,
                     methods=get_args(SpecMethod), prior_weight=0.0,
                     hint="fit it on an arm with speculative decoding, e.g. --arm ngram-k2")
# A draft model's CPU time per layer and forward (vLLM 0.25.1 launches every kernel of a
# draft model from Python: no CUDA graph), the host's like the line above: on the decode
# figures of draft-model cells, after that line (`--calibration` the speculative fit's
# file), since the step it adds to is the verification the line prices. One low load pins
# it (the drafter's K forwards are most of a batch-1 step); the other loads check it.
DRAFTER = FitSet("drafter", ("draft_layer_us",), _DECODE_FIGURES, methods=("draft_model",),
                 prior_weight=0.0,
                 hint="fit it on a draft-model arm's low load, e.g. --arm draft-k4 --cells c1")
FIT_SETS: dict[str, FitSet] = {f.name: f for f in (RESIDUAL, SPECULATIVE, DRAFTER)}


def for_fit(opts: SimOptions, targets: Sequence[MeasuredCell], fit: FitSet) -> list[MeasuredCell]:
    """`targets` reduced to what `fit` reads: each cell's `fit.metrics`; with `fit.methods`,
    only the cells whose deployment (a target's own, else `opts`) speculates by one of them
    (ServelabError when none does)."""
    def reads(t: MeasuredCell) -> bool:
        sc = (t.options or opts).speculative
        return not fit.methods or (sc is not None and sc.method in fit.methods)

    cells = [t for t in targets if reads(t)]
    if not cells:
        raise ServelabError(f"--fit {fit.name}: none of the cells is of an arm speculating by "
                            f"{' or '.join(fit.methods)} ({fit.hint})")
    return [replace(t, measured={k: v for k, v in t.measured.items() if k in fit.metrics})
            for t in cells]


@dataclass(slots=True)
class MeasuredCell:
    """One measured result and the simulation that reproduces its traffic."""

    name: str
    measured: dict[str, float]
    workload: PreparedWorkload
    seed: int
    max_concurrency: int | None
    num_warmups: int
    # The deployment this result was measured on (weight format, engine args), when it is
    # not calibrate's own: one calibration can then be fitted across arms (bf16 and AWQ).
    options: SimOptions | None = None
    # The client split the requests over the replicas itself (``routing: direct``): each
    # replica is simulated alone on its share, as `servelab run` simulates such an arm.
    direct: bool = False


def priced_with(targets: Sequence[MeasuredCell], profile: KernelProfile) -> list[MeasuredCell]:
    """`targets` on their own deployments, their kernels priced from `profile` instead of the
    one each deployment names (or the GPU's shipped one): to see what a re-measured or
    hypothetical profile does to a run's cells."""
    out = []
    for t in targets:
        if t.options is None:
            raise ServelabError(f"{t.name}: no deployment of its own to price with a profile")
        out.append(replace(t, options=replace(t.options, profile=profile)))
    return out


def _trial(opts: SimOptions, target: MeasuredCell, cal: Calibration) -> SimOptions:
    """`target`'s deployment (else `opts`) with calibration `cal`."""
    return replace(target.options or opts, calibration=cal)


# Relative difference of the rebuilt workload's token totals from the recorded ones above
# which calibrate says the result was measured on other traffic than it simulates.
TOKEN_TOTALS_TOLERANCE = 0.01


def token_totals_note(name: str, result: StoredResult, wl: PreparedWorkload) -> str | None:
    """A warning when `wl`'s prompt or output token totals differ from the result's
    `total_input_tokens` / `total_output_tokens` by more than 1 % (other dataset, seed,
    tokenizer or lengths than measured: the fit would explain the wrong traffic)."""
    rebuilt = {"total_input_tokens": sum(len(r.prompt_token_ids) for r in wl.requests),
               "total_output_tokens": sum(r.output_len for r in wl.requests)}
    off = []
    for key, got in rebuilt.items():
        want = getattr(result, key)
        if want > 0 and abs(got - want) > TOKEN_TOTALS_TOLERANCE * want:
            off.append(f"{key} {got:,} rebuilt vs {int(want):,} measured ({100 * (got - want) / want:+.1f} %)")
    if not off:
        return None
    return (f"{name}: the rebuilt workload is not the measured one: {'; '.join(off)}; check "
            "--dataset-name/--dataset-path, the lengths, --seed and --tokenizer")


def load_targets(paths: Sequence[Path], dataset: DatasetOptions, seed: int,
                 arrivals: ArrivalOptions, max_concurrency: int | None,
                 num_warmups: int, notes: list[str] | None = None) -> list[MeasuredCell]:
    """Read result files and rebuild each one's workload (flags fill what a file lacks);
    `notes` gets a warning per result whose rebuilt token totals are off (`token_totals_note`)."""
    targets = []
    for path in paths:
        result = read_results(path)[-1]
        measured = {k: v for k in FIT_METRICS if (v := result.number(k)) is not None}
        if not measured:
            raise ServelabError(f"{path}: none of {', '.join(FIT_METRICS)} is in this result")
        run_seed = result.seed if result.seed is not None else seed
        ds_update: dict[str, object] = {}
        if result.num_prompts is not None:
            ds_update["num_prompts"] = result.num_prompts
        tok = result.servelab.tokenizer if result.servelab else None
        if tok is not None and dataset.tokenizer is None and not tok.startswith("builtin:"):
            ds_update["tokenizer"] = tok
        ds = dataset.model_copy(update=ds_update)
        arr_update: dict[str, float] = {}
        if result.request_rate is not None:
            arr_update["request_rate"] = result.request_rate
        if result.burstiness is not None:
            arr_update["burstiness"] = result.burstiness
        arr = arrivals.model_copy(update=arr_update)
        conc = result.max_concurrency
        wl = prepare_workload(ds, run_seed, arr)
        note = token_totals_note(path.name, result, wl)
        if note is not None and notes is not None:
            notes.append(note)
        targets.append(MeasuredCell(path.name, measured, wl, run_seed,
                              int(conc) if conc is not None else max_concurrency, num_warmups))
    return targets


def simulated_metrics(opts: SimOptions, target: MeasuredCell) -> dict[str, float]:
    """The fit metrics of one simulation of `target` under `opts` (its deployment:
    `target.options` when set, with `opts`' calibration)."""
    if target.options is not None:
        opts = replace(target.options, calibration=opts.calibration)
    if target.direct and opts.replicas > 1:
        records, duration_s = _simulate_direct(opts, target)
    else:
        run, *_ = simulate_prepared(opts, target.workload, target.seed, target.max_concurrency,
                                    target.num_warmups)
        records, duration_s = run.records, run.duration_s
    res = summarize(records, duration_s, SummaryOptions(
        percentile_metrics=("ttft", "tpot", "itl"), metric_percentiles=(99.0,),
        per_request_itls=False))  # only the figures are fitted
    d = res.to_json_dict()
    return {k: float(d[k]) for k in FIT_METRICS if k in d}


def _simulate_direct(opts: SimOptions, target: MeasuredCell) -> tuple[list[RequestRecord], float]:
    """Each replica alone on its share of the requests (`direct_shares`), all from t0:
    (records, the longest replica's duration in s)."""
    wl, one = target.workload, replace(opts, replicas=1)
    records: list[RequestRecord] = []
    duration_s = 0.0
    for sh in direct_shares(len(wl.requests), target.max_concurrency, target.num_warmups,
                            opts.replicas):
        part = replace(wl, requests=[wl.requests[i] for i in sh.requests],
                       intended_s=wl.intended_s[list(sh.requests)])
        run, *_ = simulate_prepared(one, part, target.seed, sh.max_concurrency, len(sh.warmups))
        records += run.records
        duration_s = max(duration_s, run.duration_s)
    return records, duration_s


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float,
                max_evals: int) -> tuple[np.ndarray, float, int]:
    """Minimise `f` from `x0` (standard coefficients 1, 2, 0.5, 0.5); (x, f(x), evals)."""
    n = len(x0)
    simplex = [x0.astype(float)] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    evals = n + 1
    while evals < max_evals:
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        centroid = np.mean(simplex[:-1], axis=0)
        xr = centroid + (centroid - simplex[-1])
        fr = f(xr)
        evals += 1
        if fr < values[0]:
            xe = centroid + 2.0 * (centroid - simplex[-1])
            fe = f(xe)
            evals += 1
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(xc)
            evals += 1
            if fc < values[-1]:
                simplex[-1], values[-1] = xc, fc
            else:
                for i in range(1, n + 1):
                    simplex[i] = simplex[0] + 0.5 * (simplex[i] - simplex[0])
                    values[i] = f(simplex[i])
                evals += n
    best = int(np.argmin(values))
    return simplex[best], values[best], evals


def _encode(cal: Calibration, params: Sequence[str]) -> np.ndarray:
    # log space: every parameter is positive and a relative step means the same for each
    return np.array([math.log(max(getattr(cal, name), 1e-3)) for name in params])


def _decode(x: np.ndarray, base: Calibration, params: Sequence[str]) -> Calibration:
    values = {name: math.exp(z) for name, z in zip(params, x)}
    if "gpu_time_scale" in values:
        lo, hi = _SCALE_BOUNDS
        values["gpu_time_scale"] = min(hi, max(lo, values["gpu_time_scale"]))
    return base.model_copy(update=values)


@dataclass(slots=True)
class CalibrationFit:
    calibration: Calibration
    rows: list[tuple[str, str, float, float]] = field(default_factory=list)  # target, metric, measured, simulated
    evals: int = 0

    def report_lines(self) -> list[str]:
        lines = [f"{'result':<28}{'metric':<24}{'measured':>12}{'simulated':>12}{'error':>9}"]
        for name, metric, meas, sim in self.rows:
            lines.append(f"{name:<28}{metric:<24}{meas:>12.2f}{sim:>12.2f}{_pct(sim, meas):>8.1f}%")
        c = self.calibration
        lines.append(f"fitted after {self.evals} simulations: gpu_time_scale {c.gpu_time_scale:.3f}, "
                     f"step_overhead_ms {c.step_overhead_ms:.3f}, per_seq_us {c.per_seq_us:.1f}, "
                     f"launch_us {c.launch_us:.1f} (V1 runner, held: {c.v1_launch_us:.1f}), "
                     f"request_overhead_ms {c.request_overhead_ms:.2f}, "
                     f"frontend_us per prompt / output token {c.frontend_us_per_prompt_token:.2f} / "
                     f"{c.frontend_us_per_output_token:.1f}, spec_step_us / spec_per_seq_us "
                     f"{c.spec_step_us:.1f} / {c.spec_per_seq_us:.2f}, draft_layer_us "
                     f"{c.draft_layer_us:.1f}")
        return lines


def _pct(sim: float, meas: float) -> float:
    return 100.0 * (sim - meas) / meas if meas else 0.0


def calibrate(opts: SimOptions, targets: Sequence[MeasuredCell], max_evals: int = 60,
              progress: Callable[[str], None] | None = None,
              params: Sequence[str] = _PARAMS, prior_weight: float = PRIOR_WEIGHT) -> CalibrationFit:
    """Fit `params` of `opts`' calibration (default `_PARAMS`; starting from `opts`'
    calibration, else the GPU class defaults, pulled towards it by `prior_weight`), the
    other fields held; a target with `options` is simulated on its own deployment with
    the trial calibration."""
    base = opts.resolved_calibration
    prior = _encode(base, params)

    def objective(x: np.ndarray) -> float:
        cal = _decode(x, base, params)
        err = prior_weight * float(np.sum((x - prior) ** 2))
        for t in targets:
            sim = simulated_metrics(_trial(opts, t, cal), t)
            for k, meas in t.measured.items():
                if meas and k in sim:
                    err += FIT_METRICS[k] * ((sim[k] - meas) / meas) ** 2
        return err

    x, fx, evals = nelder_mead(objective, prior, 0.3, max_evals)
    if progress is not None:
        progress(f"objective {fx:.5f} after {evals} simulations")
    best = _decode(x, base, params)
    fit = CalibrationFit(best, evals=evals)
    errors: dict[str, float] = {}
    for t in targets:
        sim = simulated_metrics(_trial(opts, t, best), t)
        for k, meas in t.measured.items():
            fit.rows.append((t.name, k, meas, sim.get(k, float("nan"))))
            errors[f"{t.name}:{k}"] = round(_pct(sim.get(k, 0.0), meas), 2)
    fit.calibration = best.model_copy(update={
        "fitted_on": tuple(t.name for t in targets), "fit_error_pct": errors})
    return fit


def continued(start: Calibration, fitted: Calibration) -> Calibration:
    """`fitted`, a fit that started from `start` (`--calibration`), with the cells `start`
    was fitted on listed before its own: the file's other fields still come from them."""
    extra = tuple(name for name in fitted.fitted_on if name not in start.fitted_on)
    return fitted.model_copy(update={"fitted_on": start.fitted_on + extra})


def evaluate(opts: SimOptions, targets: Sequence[MeasuredCell],
             cal: Calibration) -> list[tuple[str, str, float, float]]:
    """(target, metric, measured, simulated) for each of `targets` under `cal`: the error
    on cells the fit did not see (held-out models) comes from here."""
    rows = []
    for t in targets:
        sim = simulated_metrics(_trial(opts, t, cal), t)
        for k, meas in t.measured.items():
            rows.append((t.name, k, meas, sim.get(k, float("nan"))))
    return rows


def model_of(opts: SimOptions, target: MeasuredCell) -> str:
    """The model a target was measured on (its own deployment's, else `opts`')."""
    return (target.options or opts).model


def leave_one_model_out(opts: SimOptions, targets: Sequence[MeasuredCell], max_evals: int,
                        progress: Callable[[str], None] | None = None,
                        params: Sequence[str] = _PARAMS,
                        prior_weight: float = PRIOR_WEIGHT) -> dict[str, dict[str, float]]:
    """For each model among `targets`' deployments: fit `params` on the other models'
    cells only and report that fit's error (%) on this model's cells, per cell:metric.
    What a residual fitted per GPU promises for a model it has not seen; needs >= 2 models."""
    models = sorted({model_of(opts, t) for t in targets})
    if len(models) < 2:
        raise ServelabError("leave-one-model-out needs cells of at least two models")
    out: dict[str, dict[str, float]] = {}
    for held in models:
        rest = [t for t in targets if model_of(opts, t) != held]
        fit = calibrate(opts, rest, max_evals=max_evals, params=params, prior_weight=prior_weight)
        errs = {f"{name}:{metric}": round(_pct(sim, meas), 2)
                for name, metric, meas, sim in evaluate(opts, [t for t in targets if model_of(opts, t) == held],
                                                         fit.calibration)}
        out[held] = errs
        if progress is not None:
            mean = sum(abs(e) for e in errs.values()) / max(len(errs), 1)
            progress(f"held out {held}: mean abs error {mean:.1f} % over {len(errs)} figures "
                     f"(fitted on {len(models) - 1} other models)")
    return out


def parse_model_for(items: Sequence[str]) -> dict[str, str]:
    """`--model-for RESULT=MODEL` values as {result file name: model}."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, model = item.partition("=")
        if not sep or not name or not model:
            raise ServelabError(f"--model-for {item!r}: give RESULT=MODEL")
        out[Path(name).name] = model
    return out


def with_models(targets: list[MeasuredCell], opts: SimOptions, models: dict[str, str]) -> list[MeasuredCell]:
    """`targets` whose result file `models` names, simulated on that model (else `opts`')."""
    unknown = set(models) - {t.name for t in targets}
    if unknown:
        raise ServelabError(f"--model-for names no given result file: {', '.join(sorted(unknown))}")
    return [replace(t, options=replace(opts, model=models[t.name])) if t.name in models else t
            for t in targets]
