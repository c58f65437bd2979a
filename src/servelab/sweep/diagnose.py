"""Why the curve bends: the ceiling that binds at a level (`servelab.diagnosis`'s rules,
shared with the experiment report), from its server figures and the planner's roofline."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.diagnosis import Ceiling, DiagnosisInput, RooflineStep, diagnose
from servelab.sweep.points import LevelSummary
from servelab.sweep.targets import PlannerView


@dataclass(frozen=True, slots=True)
class Bend:
    """The binding ceiling at `level` and the evidence in words."""

    level: float
    kind: Ceiling
    lines: tuple[str, ...]


def diagnose_level(lv: LevelSummary, planner: PlannerView, concurrency: bool) -> Bend:
    """The binding ceiling at one level (`concurrency`: the level is a client count, not a
    request rate). The roofline step is taken at the mean batch the engine ran."""
    s = lv.server
    batch = s.mean_running or s.max_running or lv.level
    d = diagnose(DiagnosisInput(
        max_num_seqs=planner.max_num_seqs, concurrency=int(lv.level) if concurrency else None,
        server=s, mean_itl_ms=lv.mean_ms("itl"), mean_ttft_ms=lv.mean_ms("ttft"),
        roofline=RooflineStep.of(planner.decode_step(batch, lv.mean_context_tokens)),
        failed=sum(p.result.failed for p in lv.points), saturated_reason=lv.saturated_reason))
    return Bend(lv.level, d.kind, d.lines)
