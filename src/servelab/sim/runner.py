"""One offline simulation from flags to a `BenchResult` (used by `sim run` and `sim calibrate`), and the lines `sim run` prints beside it.

Arrival times are drawn exactly as the bench command draws them
(`schedule_s(workload, arrivals, numpy.random.default_rng(seed))`), so a simulated run and a
measured run with the same seed send the same requests at the same intended times.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from servelab.metrics.result import BenchResult, RunInfo
from servelab.metrics.summary import SummaryOptions, summarize
from servelab.sim.engine import SimEngine
from servelab.sim.offline import OfflineRequest, OfflineRun, simulate
from servelab.sim.scheduler import ScheduledStep
from servelab.sim.setup import SimOptions, build_cluster, offline_requests
from servelab.workload.arrivals import ArrivalOptions, schedule_s
from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.tokenizer import load_tokenizer

BACKEND = "servelab-sim"


@dataclass(frozen=True, slots=True)
class PreparedWorkload:
    """Requests as token ids plus their intended send times (s) and how they were made."""

    requests: list[OfflineRequest]
    intended_s: np.ndarray
    tokenizer_name: str
    tokenizer_source: str
    notes: tuple[str, ...]


def prepare_workload(dataset: DatasetOptions, seed: int, arrivals: ArrivalOptions) -> PreparedWorkload:
    tok = load_tokenizer(dataset.tokenizer)
    wl = build_workload(dataset, tok, seed)
    reqs = offline_requests(wl.requests, tok)
    intended = np.asarray(schedule_s(wl, arrivals, np.random.default_rng(seed)))
    return PreparedWorkload(reqs, intended, wl.tokenizer.name, wl.tokenizer.source, tuple(wl.notes))


@dataclass(slots=True)
class OfflineOutcome:
    result: BenchResult
    run: OfflineRun
    memory: Any
    max_model_len: int
    num_steps: int
    preemptions: int
    date: str
    notes: tuple[str, ...]
    cost_source: str  # which kernels priced the steps and where their times come from


class TraceWriter:
    """Per-step JSON lines: replica, start (s), duration (ms), batch, tokens (prefill,
    decode, verified drafts), KV, queues."""

    def __init__(self, fh: IO[str]) -> None:
        self._fh = fh

    def __call__(self, replica: int, start_s: float, duration_s: float, step: ScheduledStep,
                 engine: SimEngine) -> None:
        s = engine.scheduler
        self._fh.write(json.dumps({
            "replica": replica, "start_s": round(start_s, 6), "duration_ms": round(duration_s * 1e3, 4),
            "batch_size": len(step.reqs), "prefill_tokens": step.prefill_tokens,
            "decode_tokens": step.decode_seqs, "draft_tokens": step.draft_tokens,
            "kv_usage": round(engine.pool.usage_frac, 5),
            "running": len(s.running), "waiting": len(s.waiting), "preempted": step.preempted,
        }) + "\n")


def simulate_prepared(opts: SimOptions, wl: PreparedWorkload, seed: int,
                      max_concurrency: int | None, num_warmups: int,
                      trace: TraceWriter | None = None) -> tuple[OfflineRun, Any, int, int, str]:
    """(run, memory plan, max_model_len, preemptions, cost source) of one simulation with
    fresh engines."""
    cluster = build_cluster(opts, random.Random(seed))
    run = simulate(cluster, wl.requests, wl.intended_s, max_concurrency, num_warmups, trace)
    engine = cluster.engines[0]
    preemptions = sum(e.stats.num_preemptions_total for e in cluster.engines)
    return run, engine.memory, engine.config.max_model_len, preemptions, engine.cost.source


def run_offline(opts: SimOptions, dataset: DatasetOptions, seed: int, arrivals: ArrivalOptions,
                max_concurrency: int | None, num_warmups: int, summary_opts: SummaryOptions,
                trace_path: Path | None, date: str, label: str | None = None,
                metadata: dict[str, str] | None = None) -> OfflineOutcome:
    """Build the workload, simulate it, summarise it like a bench run."""
    wl = prepare_workload(dataset, seed, arrivals)
    if trace_path is not None:
        with trace_path.open("w") as fh:
            run, memory, mml, pre, source = simulate_prepared(opts, wl, seed, max_concurrency,
                                                              num_warmups, TraceWriter(fh))
    else:
        run, memory, mml, pre, source = simulate_prepared(opts, wl, seed, max_concurrency, num_warmups)
    info = RunInfo.now(backend=BACKEND, label=label, model_id=opts.model,
                       tokenizer_id=wl.tokenizer_name, num_prompts=len(wl.requests), metadata=metadata,
                       arrivals=arrivals, max_concurrency=max_concurrency, seed=seed,
                       tokenizer=wl.tokenizer_source, date=date)
    result = summarize(run.records, run.duration_s, summary_opts).with_run(info)
    if run.spec_decode is not None:
        result = result.model_copy(update={"engine_spec_decode": run.spec_decode})
    return OfflineOutcome(result, run, memory, mml, run.num_steps, pre, date, wl.notes, source)


# Text lines for `servelab sim run` beside bench's own result table.

def memory_lines(memory: Any, max_model_len: int, replicas: int) -> list[str]:
    """The planner's KV budget in the words vLLM's startup log uses (per replica)."""
    tokens = int(memory.kv_cache_tokens)
    return [
        f"memory budget per replica ({replicas} replica{'s' if replicas > 1 else ''}):",
        f"Model loading took {memory.weights_gib:.4f} GiB (simulated, per GPU)",
        f"Available KV cache memory: {memory.kv_cache_gib:.2f} GiB",
        f"GPU KV cache size: {tokens:,} tokens",
        f"Maximum concurrency for {max_model_len:,} tokens per request: "
        f"{memory.max_concurrency:.2f}x",
    ]


def sim_lines(num_steps: int, preemptions: int, duration_s: float, cost_source: str) -> list[str]:
    """What only a simulator knows: engine steps and preemptions over the run, and what
    priced the steps (kernel family; profiled GPU or datasheet)."""
    return [f"simulated {duration_s:.1f} s in {num_steps:,} engine steps; preemptions: {preemptions:,}",
            f"step costs: {cost_source}"]
