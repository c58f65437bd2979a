"""The capacity search's evaluator: each deployment simulated at the search's traffic.

Every deployment sees the same requests at the same intended times (one prepared
workload, Poisson at the search's rate), so their figures differ only by the deployment.
A deployment meets the SLO when every objective holds at the percentile and the run kept up
with its arrivals (`servelab.sweep.points.saturation_reason`: a queue still growing in
the second half of the arrival window is not a steady value). Deployments run in a process
pool of `workers` (1: in this process); the order of the answers is the order asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import math

from servelab.errors import ServelabError
from servelab.fleet.deployment import Deployment
from servelab.fleet.search import Evaluation
from servelab.hardware.catalog import NodeLayout, get_gpu
from servelab.metrics.summary import SummaryOptions, summarize
from servelab.models import load_model
from servelab.plan.compare import Arm, read_arm
from servelab.sim.offline import PreparedWorkload, simulate_prepared
from servelab.sweep.points import percentile_ms, saturation_reason
from servelab.sweep.slo import Slo, SloLevel, breaches


@dataclass(frozen=True, slots=True)
class SimTarget:
    """What every evaluation shares: model and GPU (catalog names), the prepared traffic,
    the SLO, the simulator's seed and how GPUs sit in nodes."""

    model: str
    gpu: str
    workload: PreparedWorkload
    slo: Slo
    seed: int
    context_tokens: int  # a decoding request's mean context (`Traffic.mean_context_tokens`)
    nodes: NodeLayout | None = None  # None: every deployment within one node


def evaluate_one(target: SimTarget, d: Deployment) -> Evaluation:
    """Simulate `d` at the target's traffic and judge it against the SLO; a deployment
    vLLM would refuse (it does not fit) fails with the reason."""
    try:
        run, *_ = simulate_prepared(d.sim_options(target.model, target.gpu, target.nodes),
                                    target.workload, target.seed, None, 0)
    except ServelabError as exc:
        inf = math.inf
        return Evaluation(d, False, inf, inf, inf, inf, 0.0, 0.0, f"does not start: {exc}", "capacity")
    slo = target.slo
    p = slo.percentile
    result = summarize(run.records, run.duration_s, SummaryOptions(
        percentile_metrics=("ttft", "tpot", "itl", "e2el"), metric_percentiles=(p,),
        goodput=slo.goodput_slo(), per_request_itls=False))  # no result file is written
    latency = {m: percentile_ms(result, m, p) for m in ("ttft", "tpot", "e2el")}
    saturated = saturation_reason(run.records, result, open_loop=True)
    broken = breaches(slo, SloLevel(0.0, latency, result.output_throughput,
                                    result.request_goodput, saturated is not None))
    why = "; ".join(broken + ([saturated] if saturated else [])) or None
    return Evaluation(
        deployment=d, meets_slo=why is None, ttft_ms=latency["ttft"], tpot_ms=latency["tpot"],
        mean_ttft_ms=result.ttft.mean_ms, mean_tpot_ms=result.tpot.mean_ms,
        output_tok_s=result.output_throughput, goodput_rps=result.request_goodput or 0.0,
        failed_why=why, binding=_binding(target, d, result.request_throughput, result.e2el.mean_ms))


def _binding(target: SimTarget, d: Deployment, rps: float, e2el_ms: float) -> str:
    """The planner's binding ceiling at the concurrency the run held (Little's law)."""
    concurrency = max(1, round(rps * e2el_ms / 1e3))
    s = d.shape
    # a P/D deployment's decode pool is where the concurrency sits
    copies = d.replicas * (s.pd_ratio[1] if s.pd_ratio else 1)
    args = s.engine_args(d.replicas).model_copy(update={"data_parallel_size": copies})
    arm = Arm(d.label, load_model(target.model, s.quantization), get_gpu(target.gpu), args)
    return read_arm(arm, concurrency, target.context_tokens).binding


class SimEvaluator:
    """`servelab.fleet.search.Evaluator` by the offline simulator, `workers` processes."""

    def __init__(self, target: SimTarget, workers: int = 1) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.target = target
        self.workers = workers

    def evaluate(self, deployments: Sequence[Deployment]) -> list[Evaluation]:
        if self.workers == 1 or len(deployments) == 1:
            return [evaluate_one(self.target, d) for d in deployments]
        with ProcessPoolExecutor(max_workers=min(self.workers, len(deployments))) as pool:
            return list(pool.map(evaluate_one, [self.target] * len(deployments), deployments))
