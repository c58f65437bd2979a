"""A short diagnosis per arm: which ceiling binds at each workload's heaviest load.

The rules are `servelab.diagnosis`'s (shared with sweeps); this module picks the cells
(each workload's highest load), gathers their inputs from the stored figures, the arm's
`max_num_seqs` and the baseline arm's TTFT at the same load, and names the arm's most
severe ceiling over its workloads as its headline.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.diagnosis import Ceiling, Diagnosis, DiagnosisInput, diagnose
from servelab.experiment.spec import DIRECT
from servelab.report.data import ArmInfo, CellFigures, ExperimentData

# Prefix-cache hit rate (fraction) by which another routing of the same engines must beat
# an arm's before the diagnosis names routing as a cause.
ROUTING_HIT_GAP = 0.10


@dataclass(frozen=True, slots=True)
class ArmDiagnosis:
    arm: str
    kind: Ceiling
    lines: tuple[str, ...]

    @property
    def binding(self) -> str:
        return self.kind.label

    def to_markdown(self) -> str:
        return f"**{self.arm}** (binds: {self.binding})\n" + "\n".join(f"- {x}" for x in self.lines)


def _max_num_seqs(data: ExperimentData, arm: str) -> int | None:
    info = data.arm_info(arm)
    value = (info.spec.get("args") or {}).get("max_num_seqs")
    if value is None and info.plan:
        value = info.plan["memory"].get("max_num_seqs")
    return int(value) if value is not None else None


def _heaviest(data: ExperimentData, arm: str, workload: str) -> CellFigures | None:
    """The arm's heaviest load on `workload` that completed a request: a cell whose every
    request was refused (e.g. longer than max_model_len) has no figures to diagnose."""
    cells = [c for c in data.cells if c.arm == arm and c.workload == workload and c.completed]
    return max(cells, key=lambda c: c.x_value) if cells else None


def _routing(arm: ArmInfo) -> str:
    return str(arm.spec.get("routing") or DIRECT)


def _engines(arm: ArmInfo) -> dict[str, object]:
    """What the arm launches: its spec less its name, baseline flag and routing."""
    return {k: v for k, v in arm.spec.items() if k not in ("name", "baseline", "routing")}


def routing_line(data: ExperimentData, c: CellFigures) -> str | None:
    """Names routing as a cause when another arm on the same engines (replicas behind a
    different policy) hit the prefix cache `ROUTING_HIT_GAP` more on the same traffic: a
    policy that sends a prefix to every replica makes every cache hold every prefix."""
    me = data.arm_info(c.arm)
    mine = c.server.prefix_hit_rate
    if int(me.spec.get("replicas") or 1) < 2 or mine is None:
        return None
    best: tuple[ArmInfo, CellFigures, float] | None = None
    for other in data.arms:
        if other.name == c.arm or _engines(other) != _engines(me):
            continue
        oc = data.cell(other.name, c.workload, c.load)
        hit = oc.server.prefix_hit_rate if oc is not None else None
        if oc is not None and hit is not None and (best is None or hit > best[2]):
            best = (other, oc, hit)
    if best is None or best[2] - mine < ROUTING_HIT_GAP:
        return None
    other, oc, hit = best
    return (f"routing: prefix cache hit rate {100 * mine:.0f} % behind {_routing(me)} vs "
            f"{100 * hit:.0f} % for arm {other.name} ({_routing(other)}) on the same engines "
            f"and traffic, with {oc.output_tok_s / c.output_tok_s:.2f}x the output tok/s: "
            f"{_routing(me)} sends a prefix to any replica, so every cache holds every prefix "
            f"and they crowd each other out")


# Relative difference in weight bytes per GPU above which the diagnosis explains an arm's
# gain or loss against the baseline by the bandwidth ceiling that moved.
WEIGHTS_GAP = 0.05


def weights_line(data: ExperimentData, c: CellFigures) -> str | None:
    """Explains an arm that reads other weight bytes than the baseline (another weight
    format) by the ceiling that moved: bytes per decode step, the roofline step at this
    load for both arms, and what was measured (mean ITL, output tok/s)."""
    if c.arm == data.baseline:
        return None
    me, base = data.arm_info(c.arm), data.arm_info(data.baseline)
    b = data.cell(data.baseline, c.workload, c.load)
    if not (me.plan and base.plan) or b is None or c.roofline is None or b.roofline is None:
        return None
    w, w0 = float(me.plan["memory"]["weights_gib"]), float(base.plan["memory"]["weights_gib"])
    if abs(w - w0) <= WEIGHTS_GAP * w0 or not (b.output_tok_s and b.mean_itl_ms):
        return None
    kernels = f" with {me.plan['kernels']}" if me.plan.get("kernels") else ""
    return (f"vs {data.baseline}: {w:.1f} GiB of weights per GPU instead of {w0:.1f} "
            f"({w0 / w:.2f}x {'fewer' if w < w0 else 'more'} bytes per decode step){kernels}: the "
            f"bandwidth ceiling's step at this load moves from {b.roofline.step_ms:.1f} to "
            f"{c.roofline.step_ms:.1f} ms; measured mean ITL {b.mean_itl_ms:.1f} -> "
            f"{c.mean_itl_ms:.1f} ms ({b.mean_itl_ms / c.mean_itl_ms:.2f}x), output tok/s "
            f"{c.output_tok_s / b.output_tok_s:.2f}x")


def diagnose_cell(data: ExperimentData, c: CellFigures) -> Diagnosis:
    """One cell's diagnosis; its first line names the workload and load."""
    base = data.cell(data.baseline, c.workload, c.load)
    base_ttft = base.mean_ttft_ms if base is not None and c.arm != data.baseline else None
    d = diagnose(DiagnosisInput(
        max_num_seqs=_max_num_seqs(data, c.arm), concurrency=c.concurrency, server=c.server,
        mean_itl_ms=c.mean_itl_ms, mean_ttft_ms=c.mean_ttft_ms, roofline=c.roofline,
        failed=c.failed, baseline_ttft_ms=base_ttft,
        tokens_per_step=c.spec.tokens_per_decode_step if c.spec is not None else 1.0))
    first, *rest = d.lines
    more = tuple(x for x in (weights_line(data, c), routing_line(data, c)) if x is not None)
    traps = tuple(f"measurement: {note}" for note in c.trap_notes)
    return Diagnosis(d.kind, (f"{c.workload} at {c.load}: {first}", *rest, *more, *traps))


def diagnose_arms(data: ExperimentData) -> list[ArmDiagnosis]:
    """One diagnosis per arm that has cells, from each workload's heaviest load."""
    out: list[ArmDiagnosis] = []
    for arm in data.arms:
        found = [diagnose_cell(data, c) for wl in data.workloads
                 if (c := _heaviest(data, arm.name, wl)) is not None]
        if found:
            kind = min((d.kind for d in found), key=lambda k: k.severity)
            out.append(ArmDiagnosis(arm.name, kind, tuple(x for d in found for x in d.lines)))
    return out
