"""Why the curve bends: the ceiling that binds at a level, from server metrics and the planner.

Checked in this order at a level (the first that applies binds; latencies measured behind a
queue include the wait, so queue-type causes come first):
1. max_num_seqs cap: the engine ran `max_num_seqs` requests at once and others waited;
2. KV cache full: preemptions, or the KV pool peaked at >= `KV_FULL`;
3. queueing: requests waited with batch slots and KV to spare (the per-step token budget
   or a prefill backlog holds them);
4. decode speed: no queue; the mean ITL against the roofline decode step at the batch the
   engine ran says whether the step is bandwidth- or compute-bound, and how close to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.sweep.points import LevelSummary
from servelab.sweep.targets import PlannerView

KV_FULL = 0.95


@dataclass(frozen=True, slots=True)
class Bend:
    """The binding ceiling at `level` (`kind`: max_num_seqs, kv_full, queueing, bandwidth,
    compute, unknown) and the evidence in words."""

    level: float
    kind: str
    lines: tuple[str, ...]


def diagnose_level(lv: LevelSummary, planner: PlannerView) -> Bend:
    """The binding ceiling at one level."""
    s = lv.server
    lines: list[str] = []
    # A closed-loop level starts with every slot's request at once: the peak queue is that
    # burst. The queue that bends the curve is the one that persists (its mean over time).
    waited = (s.mean_waiting if s.mean_waiting is not None else (s.max_waiting or 0)) >= 1
    seqs = planner.max_num_seqs
    kv = f"KV pool peak {100 * s.peak_kv_usage:.0f} %" if s.peak_kv_usage is not None else "KV usage not reported"
    if seqs is not None and s.max_running is not None and s.max_running >= seqs and waited:
        kind = "max_num_seqs"
        lines.append(f"{s.max_running:.0f} running = max_num_seqs {seqs}, {s.mean_waiting or 0:.1f} "
                     f"waiting on average ({kv}): the batch-slot cap binds; raise max_num_seqs")
    elif (s.preemptions or 0) > 0 or (s.peak_kv_usage or 0) >= KV_FULL:
        kind = "kv_full"
        lines.append(f"{kv}, {s.preemptions or 0:.0f} preemptions: the KV pool is full (raise "
                     "gpu_memory_utilization, FP8 KV cache, more TP)")
    elif waited:
        kind = "queueing"
        lines.append(f"{s.mean_waiting or 0:.1f} requests waiting on average (peak {s.max_waiting:.0f}) "
                     f"with {s.max_running or 0:.0f} running and {kv}: the per-step token budget "
                     "(max_num_batched_tokens) or a prefill backlog holds them")
    elif s.max_waiting is None:
        kind = "unknown"
        lines.append("the target exposes no queue metrics (/metrics): queueing cannot be judged")
    else:
        kind = "decode"
        lines.append(f"no lasting queue ({s.mean_waiting or 0:.1f} waiting on average, "
                     f"{s.max_running or 0:.0f} running at most, {kv}): the step itself slows "
                     "as the batch grows")
    batch = s.mean_running or s.max_running or lv.level
    roof = planner.decode_step(batch, lv.mean_context_tokens)
    itl = lv.mean_ms("itl")
    if roof is not None and itl > 0:
        bound = "bandwidth" if roof["bound"] == "memory" else "compute"
        lines.append(f"mean ITL {itl:.2f} ms vs the roofline decode step {roof['step_ms']:.2f} ms at "
                     f"batch {roof['batch']} x {roof['context_tokens']} tokens ({bound}-bound step, "
                     f"{100 * roof['step_ms'] / itl:.0f} % of the roofline)")
        if kind == "decode":
            kind = bound
    if lv.saturated:
        lines.append(f"over-saturated: {lv.saturated_reason}")
    return Bend(lv.level, kind, tuple(lines))
