"""Which ceiling binds a run, with the numbers: the one diagnosis the report and sweeps share.

Checked in this order (the first that applies binds; latencies measured behind a queue
include the wait, so queue-type causes come first):
1. batch slots: the engine ran `max_num_seqs` requests at once (or, without `/metrics`, a
   closed loop had more clients than slots) and a queue lasted;
2. KV capacity: preemptions, or the KV pool peaked at >= `KV_FULL` of its blocks;
3. queueing: a queue lasted with batch slots and KV to spare (the per-step token budget
   or a prefill backlog holds it);
4. unknown: the target exposes no queue metrics, so queueing cannot be judged;
5. decode speed: no lasting queue; the mean ITL against the roofline decode step at the
   batch the engine ran says whether the step is bandwidth- or compute-bound, and how close.

"A queue lasted" reads the MEAN waiting count (`ServerSeries.mean_num_requests_waiting`:
while the engine had work, after its start-up ramp), not the peak: a closed-loop run
starts with every client's request at once, and with a small per-step token budget
prefill takes several steps, so the peak is that start-up burst. A record without the
mean (a stored cell without its series columns) is judged by its peak, with a note.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from servelab.metrics.server_figures import ServerFigures, lookups_per_prompt_token

KV_FULL = 0.95
LASTING_QUEUE = 1.0  # mean requests waiting at or above which the queue binds
# Prefix-cache lookups per prompt token above which the engine recounted lookups (the
# counters are read at two moments, so a few requests can straddle them).
RECOUNTED_LOOKUPS = 1.05


class Ceiling(StrEnum):
    """The binding ceiling, most severe first (an arm's headline over workloads is its most
    severe); the value is the machine-readable name sweeps write."""

    MAX_NUM_SEQS = "max_num_seqs"
    KV_FULL = "kv_full"
    QUEUEING = "queueing"
    UNKNOWN = "unknown"
    BANDWIDTH = "bandwidth"
    COMPUTE = "compute"
    DECODE = "decode"

    @property
    def label(self) -> str:
        """The report's heading for it."""
        return _LABELS[self]

    @property
    def severity(self) -> int:
        return list(Ceiling).index(self)


_LABELS = {
    Ceiling.MAX_NUM_SEQS: "batch slots (max_num_seqs)", Ceiling.KV_FULL: "KV capacity",
    Ceiling.QUEUEING: "queue (scheduler budget)", Ceiling.UNKNOWN: "unknown (no queue metrics)",
    Ceiling.BANDWIDTH: "decode bandwidth (roofline)", Ceiling.COMPUTE: "decode compute (roofline)",
    Ceiling.DECODE: "decode speed",
}


@dataclass(frozen=True, slots=True)
class RooflineStep:
    """The planner's roofline decode step at `batch` sequences of `context_tokens` each;
    `step_ms` is the time between two tokens of a sequence (with pipeline parallelism, every
    stage's micro-batch step), what mean ITL is compared with. `stage_ms` is one stage's
    step, `memory_ms` / `compute_ms` / `allreduce_ms` its terms (stage = max(memory,
    compute) + all-reduce); None where a cell stored only the step."""

    batch: int
    context_tokens: int
    step_ms: float
    bound: str  # "memory" or "compute": the roofline term that dominates
    stage_ms: float | None = None
    memory_ms: float | None = None
    compute_ms: float | None = None
    allreduce_ms: float = 0.0
    allreduce_traffic_ms: float = 0.0  # the part that grows with the rows (not the calls' latency)

    @classmethod
    def of(cls, step: dict[str, Any] | None) -> RooflineStep | None:
        """From `ArmPlanner.decode_step`'s dict (as cells store it); None passes through.
        Cells stored before `token_interval_ms` existed carry only `step_ms`."""
        if step is None:
            return None
        interval = step.get("token_interval_ms", step["step_ms"])
        terms = ("memory_ms", "compute_ms")
        split = all(isinstance(step.get(k), (int, float)) for k in terms)
        return cls(int(step["batch"]), int(step["context_tokens"]), float(interval), str(step["bound"]),
                   float(step["step_ms"]) if split else None,
                   float(step["memory_ms"]) if split else None,
                   float(step["compute_ms"]) if split else None,
                   float(step.get("allreduce_ms") or 0.0), float(step.get("allreduce_traffic_ms") or 0.0))

    def verifying(self, tokens: float) -> RooflineStep | None:
        """The same step verifying `tokens` per sequence (speculative decoding): the weights
        and the KV are read once for all of them, so the memory term stays; the GEMM and
        attention work and the all-reduce's traffic grow with the rows (x tokens), the
        all-reduce calls' latency does not (a cell stored without the traffic part keeps its
        all-reduce as it was). An MoE model's extra rows also touch more experts, reads this
        leaves out. None without the terms (a cell stored before they were)."""
        if self.stage_ms is None or self.memory_ms is None or self.compute_ms is None or self.stage_ms <= 0:
            return None
        compute = self.compute_ms * tokens
        allreduce = self.allreduce_ms + self.allreduce_traffic_ms * (tokens - 1.0)
        stage = max(self.memory_ms, compute) + allreduce
        return replace(self, step_ms=self.step_ms * stage / self.stage_ms, stage_ms=stage,
                       compute_ms=compute, allreduce_ms=allreduce,
                       allreduce_traffic_ms=self.allreduce_traffic_ms * tokens,
                       bound="memory" if self.memory_ms >= compute else "compute")


@dataclass(frozen=True, slots=True)
class DiagnosisInput:
    """What one run (a report cell, a sweep level) says about its ceilings.

    `concurrency` is the load's client count (None for a rate load); `baseline_ttft_ms`
    the baseline arm's mean TTFT at the same load, where there is one to compare with;
    `tokens_per_step` the mean tokens a sequence gains per decode step (with speculative
    decoding, the acceptance length weighted by the share of steps that drafted; 1 without)."""

    max_num_seqs: int | None
    concurrency: int | None
    server: ServerFigures
    mean_itl_ms: float
    mean_ttft_ms: float
    roofline: RooflineStep | None = None
    failed: int = 0
    baseline_ttft_ms: float | None = None
    saturated_reason: str | None = None
    tokens_per_step: float = 1.0


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The binding ceiling and the evidence in words."""

    kind: Ceiling
    lines: tuple[str, ...]


def _n(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _queue(s: ServerFigures) -> str:
    if s.mean_waiting is None:
        return f"up to {_n(s.max_waiting)} waiting"
    return f"{s.mean_waiting:,.1f} waiting on average (peak {_n(s.max_waiting)})"


def _at_slot_cap(d: DiagnosisInput) -> bool:
    seqs, s = d.max_num_seqs, d.server
    if seqs is None:
        return False
    if s.max_running is not None:
        return s.max_running >= seqs
    return d.concurrency is not None and d.concurrency > seqs


def _rule(d: DiagnosisInput) -> tuple[Ceiling, list[str]]:
    s = d.server
    queue = s.mean_waiting if s.mean_waiting is not None else s.max_waiting
    lasting = queue is not None and queue >= LASTING_QUEUE
    kv = f"KV pool peak {100 * s.peak_kv_usage:.0f} %" if s.peak_kv_usage is not None else "KV usage not reported"
    kv_full = (s.preemptions or 0) > 0 or (s.peak_kv_usage or 0) >= KV_FULL
    # Without queue metrics a closed loop with more clients than slots must still queue.
    if _at_slot_cap(d) and (lasting or queue is None):
        seqs = d.max_num_seqs
        if d.concurrency is not None and seqs is not None and d.concurrency > seqs:
            head = f"max_num_seqs {seqs} is below the load's concurrency {d.concurrency}"
        else:
            head = f"max_num_seqs {seqs} slots all busy"
        vs = ""
        if d.baseline_ttft_ms:
            vs = f" ({d.mean_ttft_ms / d.baseline_ttft_ms:.1f}x the baseline's {d.baseline_ttft_ms:,.1f} ms)"
        spare = "the KV pool is full too" if kv_full else "memory is not what limits it"
        return Ceiling.MAX_NUM_SEQS, [
            f"{head}: at most {_n(s.max_running)} running, {_queue(s)}; mean TTFT "
            f"{d.mean_ttft_ms:,.1f} ms{vs} is queueing, not prefill",
            f"{kv}: {spare}; raise max_num_seqs"]
    if kv_full:
        return Ceiling.KV_FULL, [f"{kv}, {_n(s.preemptions)} preemptions: the KV pool is full "
                                 "(raise gpu_memory_utilization, FP8 KV cache, more TP)"]
    if lasting:
        return Ceiling.QUEUEING, [f"{_queue(s)} with {_n(s.max_running)} running at most and {kv}: "
                                  "the per-step token budget (max_num_batched_tokens) or a prefill "
                                  "backlog holds them"]
    if queue is None:
        return Ceiling.UNKNOWN, ["no queue figures (the target exposes no /metrics, or no "
                                 "sample caught it busy: a run shorter than the scrape "
                                 "interval): queueing cannot be judged"]
    return Ceiling.DECODE, [f"no lasting queue ({_queue(s)}, {_n(s.max_running)} running at most, "
                            f"{kv}): capacity does not bind; the step itself slows as the batch grows"]


def _hit_rate_line(s: ServerFigures) -> str:
    rate = s.prefix_hit_rate or 0.0
    ratio = lookups_per_prompt_token(s)
    if ratio is None or ratio <= RECOUNTED_LOOKUPS:
        return f"prefix cache hit rate {100 * rate:.0f} %"
    hits_per_prompt_token = rate * ratio  # hits / lookups x lookups / prompt tokens
    return (f"prefix cache hit rate {100 * rate:.0f} %, of {ratio:.2f}x as many lookups as "
            f"prompt tokens: the engine counted waiting requests again each time it tried "
            f"them (vLLM 0.25 does, while the KV pool is full), so the rate understates; "
            f"hits were {100 * hits_per_prompt_token:.0f} % of the prompt tokens, the most "
            f"the rate per request can be")


def diagnose(d: DiagnosisInput) -> Diagnosis:
    """The binding ceiling of one run (see the module docstring for the rules)."""
    kind, lines = _rule(d)
    s = d.server
    if s.mean_waiting is None and s.max_waiting is not None:
        lines.append("queue judged by its peak: the record has no mean queue figure, and a "
                     "closed-loop start-up burst alone can set the peak")
    roof = d.roofline
    if roof is not None and d.mean_itl_ms > 0:
        # A verification step reads the weights and the KV once for all its tokens, so with
        # speculation the step (ITL x tokens per step), not the ITL, meets the roofline's step,
        # and the roofline's step verifies as many tokens (its compute grows, its reads do not).
        tokens = max(1.0, d.tokens_per_step)  # never less than one token a step
        verify = roof.verifying(tokens) if tokens > 1.0 else None
        if verify is not None:
            roof = verify
        bound = Ceiling.BANDWIDTH if roof.bound == "memory" else Ceiling.COMPUTE
        step_ms = d.mean_itl_ms * tokens
        measured = f"mean ITL {d.mean_itl_ms:,.2f} ms"
        if tokens > 1.0:
            measured += (f" x {tokens:.2f} tokens per step = "
                         f"{step_ms:,.2f} ms a step")
        what = "verification step" if verify is not None else "decode step"
        lines.append(f"{measured} vs the roofline {what} {roof.step_ms:,.2f} ms "
                     f"at batch {roof.batch} x {roof.context_tokens} tokens of context ({bound}-bound "
                     f"step): the engine runs at {100 * roof.step_ms / step_ms:.0f} % of the "
                     f"{bound} roofline")
        if verify is not None:
            grows = "compute and all-reduce traffic" if verify.allreduce_traffic_ms else "compute"
            lines.append(f"the roofline's step verifies {tokens:.2f} tokens per sequence: its "
                         f"{grows} x {tokens:.2f}, its weight and KV reads once")
        elif tokens > 1.0:
            lines.append("the roofline's step carries one token per sequence: a verification "
                         "step's other tokens add compute it does not count")
        if roof.step_ms > step_ms:
            # Faster than the datasheet's roofline: the target is not what the planner priced.
            lines.append(f"above 100 % the figures are inconsistent: tokens came faster than "
                         f"the {bound} roofline allows for this model on this GPU (another GPU, "
                         f"model or weight format than planned, or a simulator faster than the "
                         f"hardware); the roofline comparison does not hold")
        if kind is Ceiling.DECODE:
            kind = bound
    if d.failed:
        lines.append(f"{d.failed} requests failed (see the errors: e.g. prompt + output longer "
                     "than max_model_len is refused)")
    if s.prefix_hit_rate:
        lines.append(_hit_rate_line(s))
    if d.saturated_reason:
        lines.append(f"over-saturated: {d.saturated_reason}")
    return Diagnosis(kind, tuple(lines))
