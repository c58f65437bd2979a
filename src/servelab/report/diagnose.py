"""A short diagnosis per arm: which ceiling binds at its heaviest load, with the numbers.

Read at each workload's highest load, in this order (the first that applies binds):
1. batch slots: the load's concurrency exceeds the arm's `max_num_seqs` and requests waited
   (the seeds' over-tuned arm: a queue, while the log's "maximum concurrency" looked great);
2. KV capacity: preemptions, or the KV pool peaked at >= `KV_FULL` of its blocks;
3. queue: requests waited for another reason (token budget, prefill backlog);
4. otherwise decode speed: the measured mean ITL against the roofline decode step at the
   batch the engine ran: memory-bound (bandwidth) or compute-bound as the roofline says.
Latencies measured behind a queue include the wait, so the queue is named first.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.report.data import CellFigures, ExperimentData
from servelab.report.tables import fmt

KV_FULL = 0.95


@dataclass(frozen=True, slots=True)
class Diagnosis:
    arm: str
    binding: str
    lines: tuple[str, ...]

    def to_markdown(self) -> str:
        return f"**{self.arm}** (binds: {self.binding})\n" + "\n".join(f"- {x}" for x in self.lines)


def _max_num_seqs(data: ExperimentData, arm: str) -> int | None:
    info = data.arm_info(arm)
    value = (info.spec.get("args") or {}).get("max_num_seqs")
    if value is None and info.plan:
        value = info.plan["memory"].get("max_num_seqs")
    return int(value) if value is not None else None


def _heaviest(data: ExperimentData, arm: str, workload: str) -> CellFigures | None:
    cells = [c for c in data.cells if c.arm == arm and c.workload == workload]
    return max(cells, key=lambda c: c.x_value) if cells else None


def diagnose_cell(data: ExperimentData, c: CellFigures) -> tuple[str, list[str]]:
    """(binding ceiling, lines) for one cell."""
    lines: list[str] = []
    seqs = _max_num_seqs(data, c.arm)
    load = c.concurrency if c.concurrency is not None else None
    waited = (c.max_waiting or 0) > 0
    base = data.cell(data.baseline, c.workload, c.load)
    vs_base = ""
    if base is not None and c.arm != data.baseline and base.mean_ttft_ms > 0:
        vs_base = f" ({c.mean_ttft_ms / base.mean_ttft_ms:.1f}x the baseline's {fmt(base.mean_ttft_ms)} ms)"
    kv = f"KV pool peak {fmt(100 * c.peak_kv_usage, 0)} %" if c.peak_kv_usage is not None else "KV usage not reported"
    if seqs is not None and load is not None and seqs < load and (waited or c.max_waiting is None):
        binding = "batch slots (max_num_seqs)"
        lines.append(f"{c.workload} at {c.load}: max_num_seqs {seqs} is below the load's concurrency "
                     f"{load}: at most {fmt(c.max_running, 0)} running, up to {fmt(c.max_waiting, 0)} "
                     f"waiting; mean TTFT {fmt(c.mean_ttft_ms)} ms{vs_base} is queueing, not prefill")
        lines.append(f"{kv}: memory is not what limits it; raise max_num_seqs")
    elif (c.preemptions or 0) > 0 or (c.peak_kv_usage or 0) >= KV_FULL:
        binding = "KV capacity"
        lines.append(f"{c.workload} at {c.load}: {kv}, {fmt(c.preemptions, 0)} preemptions: the KV pool "
                     "is full (raise gpu_memory_utilization, FP8 KV cache, more TP)")
    elif waited:
        binding = "queue (scheduler budget)"
        lines.append(f"{c.workload} at {c.load}: up to {fmt(c.max_waiting, 0)} requests waited with "
                     f"{kv} and {fmt(c.max_running, 0)} running: the per-step token budget "
                     "(max_num_batched_tokens) or prefill backlog holds them")
    else:
        binding = "decode speed"
        lines.append(f"{c.workload} at {c.load}: no queue ({fmt(c.max_running, 0)} running at most, "
                     f"{kv}): capacity does not bind")
    roof = c.roofline
    if roof:
        share = roof["step_ms"] / c.mean_itl_ms if c.mean_itl_ms > 0 else None
        kind = "bandwidth" if roof["bound"] == "memory" else "compute"
        lines.append(f"mean ITL {fmt(c.mean_itl_ms, 2)} ms vs the roofline decode step "
                     f"{fmt(roof['step_ms'], 2)} ms at batch {roof['batch']} x {roof['context_tokens']} "
                     f"tokens of context ({kind}-bound step): the engine runs at "
                     f"{fmt(100 * share if share else None, 0)} % of the {kind} roofline")
        if binding == "decode speed":
            binding = f"decode {kind} (roofline)"
    if c.failed:
        lines.append(f"{c.failed} requests failed (see the cell's errors: e.g. prompt + output "
                     "longer than max_model_len is refused)")
    if c.prefix_hit_rate is not None and c.prefix_hit_rate > 0:
        lines.append(f"prefix cache hit rate {fmt(100 * c.prefix_hit_rate, 0)} %")
    return binding, lines


_ORDER = ("batch slots", "KV capacity", "queue", "decode")


def _severity(binding: str) -> int:
    """The arm's headline is its most severe ceiling over workloads (rules' order)."""
    return next(i for i, prefix in enumerate(_ORDER) if binding.startswith(prefix))


def diagnose(data: ExperimentData) -> list[Diagnosis]:
    """One diagnosis per arm that has cells, from each workload's heaviest load."""
    out: list[Diagnosis] = []
    for arm in data.arms:
        bindings: list[str] = []
        lines: list[str] = []
        for wl in data.workloads:
            c = _heaviest(data, arm.name, wl)
            if c is None:
                continue
            b, ls = diagnose_cell(data, c)
            bindings.append(b)
            lines += ls
        if lines:
            binding = min(bindings, key=_severity)
            out.append(Diagnosis(arm.name, binding, tuple(lines)))
    return out
