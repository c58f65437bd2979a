"""The report on speculative arms: what speculation bought at each load, and where it stops.

For every arm with a `speculative` block and every workload:
- a table per load: the arm's output tok/s and mean TPOT against its baseline (the
  experiment's baseline arm when that one does not speculate, else the first arm that does
  not), acceptance (%), tokens per verification step, per-position acceptance and the share
  of decode steps that carried a draft, all from vLLM's counters;
- the simulator's view of the same arm (`servelab.sim.spec_payoff`): at each measured
  load, the steady-state speed-up predicted from the cost model with the acceptance the
  cells measured, the draft length K that maximises tokens per second there (positions
  whose acceptance does not pay for the step time they add are cut), and the concurrency
  above which speculation stops paying, checked against the measured speed-ups.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.errors import ServelabError
from servelab.experiment.arms import engine_path, planner_args, sim_calibration, sim_profile
from servelab.experiment.spec import ExperimentSpec
from servelab.metrics.server_figures import pooled_hit_rate
from servelab.report.data import CellFigures, ExperimentData
from servelab.report.tables import Table, fmt, ratio
from servelab.sim.engine import build_engine
from servelab.sim.spec_payoff import PayoffModel, Refill


@dataclass(frozen=True, slots=True)
class PooledAcceptance:
    """An arm's acceptance over its cells (weighted by drafts), the share of its decode
    steps that drafted and its mean tokens per proposal."""

    rates: tuple[float, ...]
    proposal_rate: float
    proposal_tokens: float


def spec_arms(data: ExperimentData) -> list[str]:
    """Arms with a `speculative` block that have cells."""
    names = {c.arm for c in data.cells}
    return [a.name for a in data.arms if a.spec.get("speculative") and a.name in names]


def baseline_for(data: ExperimentData) -> str | None:
    """The arm speculative arms are compared with: the baseline if it does not speculate,
    else the first arm that does not."""
    plain = [a.name for a in data.arms if not a.spec.get("speculative")]
    if not plain:
        return None
    return data.baseline if data.baseline in plain else plain[0]


def pooled_acceptance(cells: list[CellFigures]) -> PooledAcceptance | None:
    """Per-position acceptance over `cells`, each weighted by its drafts."""
    counted = [c.spec for c in cells if c.spec is not None and c.spec.num_drafts > 0 and c.spec.per_position]
    if not counted:
        return None
    k = max(len(sd.per_position) for sd in counted)
    drafts = sum(sd.num_drafts for sd in counted)
    rates = tuple(sum(sd.per_position[i] * sd.num_drafts for sd in counted if i < len(sd.per_position))
                  / drafts for i in range(k))
    steps = sum(sd.num_drafts / sd.proposal_rate for sd in counted if sd.proposal_rate)
    return PooledAcceptance(rates, min(1.0, drafts / steps) if steps > 0 else 1.0,
                            sum(sd.draft_tokens for sd in counted) / drafts)


def _positions(rates: tuple[float, ...]) -> str:
    return "/".join(f"{r * 100:.0f}" for r in rates) if rates else "-"


def spec_table(data: ExperimentData, arm: str, workload: str, base: str) -> Table | None:
    rows = []
    for load in data.loads:
        c, b = data.cell(arm, workload, load), data.cell(base, workload, load)
        if c is None:
            continue
        sd = c.spec
        speed = ratio(c.output_tok_s, b.output_tok_s) if b is not None else None
        tpot = ratio(c.mean_tpot_ms, b.mean_tpot_ms) if b is not None else None
        rows.append((load, fmt(c.output_tok_s), "x" + fmt(speed, 2) if speed else "-",
                     fmt(c.mean_tpot_ms, 2), "x" + fmt(tpot, 2) if tpot else "-",
                     fmt(sd.acceptance_rate_pct) if sd else "-",
                     fmt(sd.acceptance_length, 2) if sd else "-",
                     _positions(sd.per_position) if sd else "-",
                     fmt(sd.proposal_rate * 100, 0) if sd and sd.proposal_rate is not None else "-"))
    if not rows:
        return None
    return Table(f"{workload}: speculative arm {arm} vs {base}",
                 ("load", "output tok/s", "speed-up", "mean TPOT ms", "TPOT ratio", "accept %",
                  "tokens/step", "per position %", "drafted %"),
                 tuple(rows), note=("speed-up: output tok/s over the baseline's at the same load; "
                                    "tokens/step: accepted drafts + 1 per verification; drafted: "
                                    "decode steps that carried a draft (n-gram drafts only on a match)."))


def payoff_model(spec: ExperimentSpec, arm_name: str, base_arm: str, gpu: str,
                 acceptance: PooledAcceptance) -> PayoffModel:
    """The simulator's payoff model of `arm_name` with the measured acceptance, priced with
    the spec's `sim.calibration` and `sim.profile` (either None: the GPU's shipped one)."""
    arm = spec.arm(arm_name)
    assert arm.speculative is not None
    sc = arm.speculative.with_measured(acceptance.rates, acceptance.proposal_rate,
                                       acceptance.proposal_tokens)
    args = planner_args(spec, arm, strict=False)
    baseline = spec.arm(base_arm)
    base_args = planner_args(spec, baseline, strict=False)
    cal = sim_calibration(spec)
    profile = sim_profile(spec)
    # each engine as its own arm runs (an arm may override the model or its quantization)
    base = build_engine(engine_path(spec, baseline), gpu, baseline.quantization, base_args, cal,
                        base_args.async_scheduling, profile)
    spec_engine = build_engine(engine_path(spec, arm), gpu, arm.quantization, args, cal,
                               args.async_scheduling, profile, sc)
    proposals = sc.proposals()
    assert proposals is not None  # with_measured sets the rates
    return PayoffModel(base.cost, spec_engine.cost, proposals, sc.proposal_rate)


def refill_of(cells: list[CellFigures]) -> Refill | None:
    """The closed loop's replacement requests, from the cells' means (tokens per request):
    prompt tokens split by the prefix-cache hit rate vLLM counted over the cells (hits over
    lookups, pooled; none counted: all computed), output tokens; in waves where every cell
    carries its requests' output lengths and all of them, across the cells, are one length
    (a fixed output length; one request alone shows nothing)."""
    done = [c for c in cells if c.mean_output_len > 0]
    if not done:
        return None
    prompt = sum(c.mean_input_len for c in done) / len(done)
    hit = pooled_hit_rate([c.server for c in done]) or 0.0
    lengths = {n for c in done for n in c.output_lens}
    requests = sum(len(c.output_lens) for c in done)
    if all(c.output_lens for c in done) and len(lengths) == 1 and requests >= 2:
        return Refill(prompt * (1.0 - hit), prompt * hit, float(lengths.pop()), waves=True)
    return Refill(prompt * (1.0 - hit), prompt * hit, sum(c.mean_output_len for c in done) / len(done))


def payoff_table(data: ExperimentData, spec: ExperimentSpec, arm: str, workload: str,
                 base: str, gpu: str) -> tuple[Table | None, str]:
    """The simulated payoff at each measured load beside the measured speed-up, and one
    line of advice (advised K, crossover, agreement with the measured cells)."""
    cells = [c for c in data.cells if c.arm == arm and c.workload == workload]
    pooled = pooled_acceptance(cells)
    if pooled is None:
        return None, f"{arm} on {workload}: no drafts counted, no payoff to compute."
    try:
        model = payoff_model(spec, arm, base, gpu, pooled)
    except (ServelabError, ValueError) as exc:
        return None, f"{arm} on {workload}: the simulator cannot price this arm ({exc})."
    context = sum(c.mean_input_len + c.mean_output_len / 2 for c in cells) / len(cells)
    refill = refill_of(cells)
    rows, measured, best = [], [], []
    for load in data.loads:
        c, b = data.cell(arm, workload, load), data.cell(base, workload, load)
        if c is None or c.concurrency is None:
            continue
        batch = _batch(c)
        p = model.at(batch, context, refill)
        speed = ratio(c.output_tok_s, b.output_tok_s) if b is not None else None
        if speed is not None:
            measured.append((batch, speed))
        best.append((load, p.best_k))
        rows.append((load, str(batch), "x" + fmt(p.speedup, 2), "x" + fmt(speed, 2) if speed else "-",
                     fmt(p.base_ms_per_token, 2), fmt(p.spec_ms_per_token, 2), str(p.best_k)))
    limit = max(model.spec.ops.capture[-1] if model.spec.ops.capture else 1024, 1024)
    cross = model.crossover(context, limit, refill)
    line = (f"{arm} on {workload}: measured acceptance per position {_positions(pooled.rates)} % "
            f"(drafted on {pooled.proposal_rate * 100:.0f} % of decode steps); ")
    line += _advice(cross, limit, measured, best, model.k)
    table = Table(f"{workload}: where {arm} pays (simulated with the measured acceptance)",
                  ("load", "decode batch", "sim speed-up", "measured speed-up", "sim base ms/token",
                   "sim spec ms/token", "best K"), tuple(rows),
                  note=(f"Steady state at the cell's concurrency as its decode batch, "
                        f"{context:,.0f}-token contexts" + (
                            f", each finished request replaced by one of {refill.prompt_tokens + refill.cached_tokens:,.0f} "
                            f"prompt tokens ({refill.cached_tokens:,.0f} from the prefix cache) and "
                            f"{refill.output_tokens:,.0f} output tokens, " + (
                                "every request of the same length: the batch finishes and is "
                                "prefilled again in waves" if refill.waves else
                                "prefilled inside the decode steps")
                            if refill is not None else "") +
                        ", from the simulator's kernel times and residual; best K: the draft "
                        "length with the most tokens per second there.")) if rows else None
    return table, line


def _batch(c: CellFigures) -> int:
    """The decode batch a cell ran at: its concurrency (the scraped mean of running
    requests is too coarse for cells of a few seconds; see docs/speculative.md)."""
    return max(1, c.concurrency or 1)


def _advice(cross: int | None, limit: int, measured: list[tuple[int, float]],
            best: list[tuple[str, int]], k: int) -> str:
    parts = []
    if best:
        parts.append("advised K " + ", ".join(f"{bk} at {load}" for load, bk in best)
                     + (f" (of {k}: later positions do not pay for the verification they add)"
                        if min(bk for _, bk in best) < k else ""))
    if cross is None:
        parts.append(f"the simulation has it paying up to a decode batch of {limit}")
    elif cross == 1:
        parts.append("the simulation has it paying at no batch")
    else:
        parts.append(f"the simulation has it stop paying from a decode batch of {cross}")
    if measured:
        pays = [b for b, s in measured if s >= 1.0]
        loses = [b for b, s in measured if s < 1.0]
        if not loses:
            seen = f"measured: pays in every cell (batches up to {max(pays)})"
        elif not pays:
            seen = f"measured: pays in no cell (batches from {min(loses)})"
        else:
            seen = f"measured: pays at batches up to {max(pays)}, not at {min(loses)} and above"
        agree = (all(cross is None or b < cross for b in pays)
                 and all(cross is not None and b >= cross for b in loses))
        parts.append(seen + ("; agrees" if agree else "; disagrees"))
    return "; ".join(parts) + "."


def speculation_section(data: ExperimentData, spec: ExperimentSpec, gpu: str | None) -> tuple[list[Table], list[str]]:
    """Tables and advice lines for every speculative arm (none without one)."""
    arms = spec_arms(data)
    base = baseline_for(data)
    if not arms or base is None:
        return [], []
    tables: list[Table] = []
    lines: list[str] = []
    for wl in data.workloads:
        for arm in arms:
            t = spec_table(data, arm, wl, base)
            if t is not None:
                tables.append(t)
            if gpu is not None:
                pt, line = payoff_table(data, spec, arm, wl, base, gpu)
                if pt is not None:
                    tables.append(pt)
                lines.append(line)
    return tables, lines
