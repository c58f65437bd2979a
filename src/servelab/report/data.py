"""An experiment directory read back into typed records the report is computed from.

Figures come from each cell's result JSON (vLLM's keys), the engine state from its server
series (`ServerFigures`: recomputed from the stored columns, so cells stored before a
figure existed still get it; combined over replicas), the memory figures from the arm's
parsed startup lines and the manifest's planner figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from servelab.diagnosis import RooflineStep
from servelab.experiment.cellrecord import CellRecord
from servelab.experiment.store import ArmStatus, ExperimentStore
from servelab.metrics.result_file import StoredResult
from servelab.metrics.scrape import drafted_share, stored_spec_decode
from servelab.metrics.server_figures import ServerFigures

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SpecFigures:
    """A cell's speculative decoding, from vLLM's counters (vllm bench serve's keys):
    acceptance in %, mean tokens per verification, per-position acceptance (0..1), and the
    share of decode steps that carried a draft (n-gram drafting proposes only on a match)."""

    acceptance_rate_pct: float
    acceptance_length: float
    per_position: tuple[float, ...]
    num_drafts: int
    draft_tokens: int
    accepted_tokens: int
    proposal_rate: float | None

    @property
    def tokens_per_decode_step(self) -> float:
        """Mean tokens a sequence gains per decode step: a step that carried a draft gives
        the acceptance length, one without (n-gram drafts only on a match) one token."""
        if self.acceptance_length <= 1.0:
            return 1.0
        share = self.proposal_rate if self.proposal_rate is not None else 1.0
        return 1.0 + share * (self.acceptance_length - 1.0)


@dataclass(frozen=True, slots=True)
class CellFigures:
    """One cell's figures (latencies in ms, throughputs per second, duration in s)."""

    arm: str
    workload: str
    load: str
    concurrency: int | None
    request_rate: float
    total_tok_s: float
    output_tok_s: float
    request_s: float
    goodput_s: float | None
    mean_ttft_ms: float
    p99_ttft_ms: float
    mean_itl_ms: float
    p99_itl_ms: float
    mean_tpot_ms: float
    duration_s: float
    completed: int
    failed: int
    percentiles: dict[str, float] = field(default_factory=dict)  # "p90_ttft" -> ms
    ttfts_ms: tuple[float, ...] = ()
    itls_ms: tuple[float, ...] = ()
    server: ServerFigures = field(default_factory=ServerFigures)
    roofline: RooflineStep | None = None  # at the batch and context the cell ran
    trap_notes: tuple[str, ...] = ()  # the run's measurement traps (servelab.metrics.traps)
    mean_input_len: float = 0.0  # tokens per completed request
    mean_output_len: float = 0.0
    # tokens per completed request, one each; empty where the stored copy dropped them
    output_lens: tuple[int, ...] = ()
    spec: SpecFigures | None = None

    @property
    def x_value(self) -> float:
        return float(self.concurrency) if self.concurrency is not None else self.request_rate


@dataclass(slots=True)
class ArmInfo:
    """An arm's outcome and memory figures: `startup` is replica 0's parsed startup log,
    `plan` the planner's summary (or None with `plan_error`)."""

    name: str
    status: ArmStatus | None
    startup: dict[str, Any] | None
    plan: dict[str, Any] | None
    plan_error: str | None
    spec: dict[str, Any]


@dataclass(slots=True)
class ExperimentData:
    root: Path
    manifest: dict[str, Any]
    arms: list[ArmInfo]
    cells: list[CellFigures]

    @property
    def baseline(self) -> str:
        return str(self.manifest["baseline"])

    @property
    def workloads(self) -> list[str]:
        return [w["name"] for w in self.manifest["spec"]["workloads"]]

    @property
    def loads(self) -> list[str]:
        """Load keys in spec order (as stored cells name them)."""
        order: list[str] = []
        for c in self.cells:
            if c.load not in order:
                order.append(c.load)
        return sorted(order, key=lambda k: (k[0] != "c", self._x(k)))

    def _x(self, key: str) -> float:
        c = next(c for c in self.cells if c.load == key)
        return c.x_value

    def cell(self, arm: str, workload: str, load: str) -> CellFigures | None:
        return next((c for c in self.cells
                     if c.arm == arm and c.workload == workload and c.load == load), None)

    def arm_info(self, name: str) -> ArmInfo:
        return next(a for a in self.arms if a.name == name)


def cell_figures(record: CellRecord) -> CellFigures:
    """Figures of one stored cell."""
    cell, res = record.cell, record.result
    server = ServerFigures.over_replicas([ServerFigures.of_stored(s) for s in record.servers],
                                         record.extras.get("preemptions"))
    errors = res.errors or []
    return CellFigures(
        arm=cell.arm, workload=cell.workload, load=cell.load,
        concurrency=cell.concurrency, request_rate=cell.request_rate,
        total_tok_s=res.total_token_throughput, output_tok_s=res.output_throughput,
        request_s=res.request_throughput, goodput_s=res.request_goodput,
        mean_ttft_ms=_latency(res.mean_ttft_ms), p99_ttft_ms=_latency(res.number("p99_ttft_ms")),
        mean_itl_ms=_latency(res.mean_itl_ms), p99_itl_ms=_latency(res.number("p99_itl_ms")),
        mean_tpot_ms=_latency(res.mean_tpot_ms), duration_s=res.duration,
        completed=res.completed, failed=res.failed, percentiles=res.percentiles_ms(),
        ttfts_ms=tuple(t * 1e3 for t in _completed(res.ttfts or [], errors)),
        itls_ms=tuple(g * 1e3 for row in (res.itls or []) for g in row),
        server=server, roofline=RooflineStep.of(record.roofline),
        trap_notes=tuple(res.servelab.trap_notes if res.servelab else ()),
        mean_input_len=_per_request(res.total_input_tokens, res.completed),
        mean_output_len=_per_request(res.total_output_tokens, res.completed),
        output_lens=_completed(res.output_lens or [], errors),
        spec=_spec_figures(res, record.servers),
    )


def _latency(value: float | None) -> float:
    """A latency the result may not carry (not among --percentile-metrics) as NaN."""
    return math.nan if value is None else value


def _completed(values: Sequence[T], errors: list[str]) -> tuple[T, ...]:
    """The per-request `values` of the requests that completed: all of them where the
    result carries no error list (a stored copy may drop it), none where the two lists do
    not pair up (one entry per request each, as vLLM writes them)."""
    if not errors:
        return tuple(values)
    if len(errors) != len(values):
        return ()
    return tuple(v for v, e in zip(values, errors) if not e)


def _per_request(tokens: int, completed: int) -> float:
    """Tokens per completed request (0 without any completion)."""
    return float(tokens) / completed if completed else 0.0


def _spec_figures(res: StoredResult, servers: list[dict[str, Any]]) -> SpecFigures | None:
    sd = stored_spec_decode(res, servers)
    if sd is None:
        return None
    return SpecFigures(
        acceptance_rate_pct=sd.acceptance_rate_pct, acceptance_length=sd.acceptance_length,
        per_position=sd.per_position_acceptance, num_drafts=sd.num_drafts,
        draft_tokens=sd.draft_tokens, accepted_tokens=sd.accepted_tokens,
        proposal_rate=drafted_share(sd, res.total_output_tokens, res.completed))


def load_experiment(root: Path) -> ExperimentData:
    """Read an experiment directory (`ServelabError` when it is not one)."""
    store = ExperimentStore(Path(root))
    manifest = store.read_manifest()
    cells = [cell_figures(record) for _, record in store.cells()]
    arms = []
    for arm in manifest["spec"]["arms"]:
        name = arm["name"]
        status = store.read_arm_status(name)
        plan = manifest.get("planner", {}).get(name) or {}
        startup = status.startups[0] if status and status.startups else None
        arms.append(ArmInfo(name=name, status=status, startup=startup,
                            plan=plan if "memory" in plan else None,
                            plan_error=plan.get("error"), spec=arm))
    return ExperimentData(store.root, manifest, arms, cells)
