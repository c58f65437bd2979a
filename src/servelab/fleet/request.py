"""`servelab plan --search` as one request: traffic, SLO and space in; the outcome and its files out.

Files under `out` (each written atomically as soon as it is known): `search.json` (every
simulated deployment, every shape ruled out and why, the winner, the front), `front.png`
(tokens/s per GPU against tokens/s per user, the Pareto front drawn), `search.html` (the
table and the plot) and `winner.yaml` (the winning deployment as a spec arm, ready for
`servelab run`).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from servelab.errors import ServelabError
from servelab.fleet.evaluate import SimEvaluator, SimTarget
from servelab.fleet.search import Evaluation, Evaluator, SearchOutcome, search
from servelab.fleet.space import Ceilings, SearchSpace, Traffic, nearest_rank, read_ceilings
from servelab.hardware.catalog import get_gpu, node_layout
from servelab.sim.offline import prepare_workload
from servelab.storage import check_writable_dir, write_atomic, write_json_atomic
from servelab.sweep.plots import pareto_plot
from servelab.sweep.slo import Slo
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DatasetOptions


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One capacity search: `model` on `gpu` at `rate_rps` of `dataset` under `slo`."""

    model: str
    gpu: str
    rate_rps: float
    slo: Slo
    space: SearchSpace
    dataset: DatasetOptions
    seed: int = 0
    workers: int = 1
    out: Path | None = None
    num_prompts: int | None = None  # None: enough for the window rule (`window_prompts`)

    def check(self) -> None:
        """Refuse bad input before anything is simulated."""
        if not self.rate_rps > 0 or self.rate_rps == float("inf"):
            raise ServelabError(f"--rate {self.rate_rps:g}: must be a finite number of requests/s > 0")
        get_gpu(self.gpu)
        if self.out is not None:
            check_writable_dir(self.out, "--out")


PROBE_PROMPTS = 1000
MIN_WINDOW_S = 60.0
WINDOW_LATENCIES = 3.0
MAX_PROMPTS = 200_000
SLOW_TPOT_MS = 100.0  # without a TPOT (or e2el) SLO: a slow decode, 10 tokens/s, sizes the window


def window_prompts(rate_rps: float, output_lens: list[int], slo: Slo) -> int:
    """Requests for an arrival window long enough to tell a deployment that keeps up from one
    whose queue grows: three times the longest end-to-end latency a request meeting the SLO
    can have (e2el's SLO, else TTFT's plus the percentile output length at TPOT's; a
    request slower than that breaks the SLO anyway; without either, `SLOW_TPOT_MS` per output
    token), at least a minute of arrivals.
    A shorter window lets an overloaded deployment finish inside it before its batch
    stops growing, and the count of completions in its second half then means nothing."""
    limits = dict(slo.limits_ms)
    if "e2el" in limits:
        longest_ms = limits["e2el"]
    else:
        longest_ms = (limits.get("ttft", 0.0)
                      + nearest_rank(output_lens, slo.percentile) * limits.get("tpot", SLOW_TPOT_MS))
    window_s = max(MIN_WINDOW_S, WINDOW_LATENCIES * longest_ms / 1e3)
    return min(MAX_PROMPTS, max(1, round(rate_rps * window_s)))


@dataclass(slots=True)
class SearchRun:
    outcome: SearchOutcome
    traffic: Traffic
    request: SearchRequest


def run_search(req: SearchRequest, echo: Callable[[str], None] = lambda _l: None,
               evaluator: Callable[[SimTarget], Evaluator] | None = None) -> SearchRun:
    """Prepare the traffic, read every shape's ceilings, search, write the files;
    `evaluator` makes what simulates the deployments from their shared target (default:
    `SimEvaluator` in `req.workers` processes)."""
    req.check()
    arrivals = ArrivalOptions(request_rate=req.rate_rps)
    n = req.num_prompts
    if n is None:
        probe = prepare_workload(req.dataset.model_copy(update={"num_prompts": PROBE_PROMPTS}),
                                 req.seed, arrivals)
        n = window_prompts(req.rate_rps, [r.output_len for r in probe.requests], req.slo)
        echo(f"{n} requests per simulation ({n / req.rate_rps:.0f} s of arrivals at "
             f"{req.rate_rps:g} req/s: three times the longest latency the SLO allows)")
    wl = prepare_workload(req.dataset.model_copy(update={"num_prompts": n}), req.seed, arrivals)
    traffic = Traffic.of(req.rate_rps, [len(r.prompt_token_ids) for r in wl.requests],
                         [r.output_len for r in wl.requests], req.slo.percentile)
    gpu = get_gpu(req.gpu)
    slo_ms = dict(req.slo.limits_ms)
    ceilings = [read_ceilings(req.model, gpu, s, traffic, slo_ms, req.space.max_replicas(s))
                for s in req.space.shapes()]
    for c in ceilings:
        if c.reason is not None:
            echo(f"{c.shape.label}: not simulated: {c.reason}")
    sp = req.space
    nodes = node_layout(sp.gpus_per_node, "infiniband") if sp.max_gpus > sp.gpus_per_node else None
    target = SimTarget(req.model, gpu.name, wl, req.slo, req.seed,
                       round(traffic.mean_context_tokens), nodes)
    ev = evaluator(target) if evaluator is not None else SimEvaluator(target, req.workers)
    outcome = search(req.space, ceilings, ev, echo)
    run = SearchRun(outcome, traffic, req)
    if req.out is not None:
        write_files(run, req.out)
    return run


def summary(run: SearchRun) -> dict[str, object]:
    """The outcome as JSON-ready data (search.json)."""
    o, r = run.outcome, run.request
    return {
        "model": r.model, "gpu": r.gpu, "rate_rps": r.rate_rps, "slo": r.slo.describe(),
        "traffic": asdict(run.traffic),
        "space": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(r.space).items()},
        "simulations": o.simulations, "grid_size": o.grid_size,
        "winner": _row(o.winner) if o.winner is not None else None,
        "winner_arm": o.winner.deployment.arm_spec().model_dump(exclude_defaults=True)
        if o.winner is not None else None,
        "front": [_row(e) for e in o.front],
        "evaluations": [_row(e) for e in o.evaluations],
        "ruled_out": [_ruled(c) for c in o.ruled_out],
    }


def _row(e: Evaluation) -> dict[str, object]:
    d = e.deployment
    return {"deployment": d.label, "gpus": d.gpus, "replicas": d.replicas,
            "router_policy": d.router_policy, "quantization": d.shape.quantization,
            "tensor_parallel_size": d.shape.tensor_parallel_size,
            "pipeline_parallel_size": d.shape.pipeline_parallel_size,
            "max_num_seqs": d.shape.max_num_seqs,
            "max_num_batched_tokens": d.shape.max_num_batched_tokens,
            "meets_slo": e.meets_slo, "failed_why": e.failed_why,
            "ttft_ms_at_percentile": e.ttft_ms, "tpot_ms_at_percentile": e.tpot_ms,
            "mean_ttft_ms": e.mean_ttft_ms, "mean_tpot_ms": e.mean_tpot_ms,
            "output_tok_s": e.output_tok_s, "output_tok_s_per_gpu": e.tok_s_per_gpu,
            "tok_s_per_user": e.tok_s_per_user, "goodput_rps": e.goodput_rps,
            "binding": e.binding}


def _ruled(c: Ceilings) -> dict[str, object]:
    return {"shape": c.shape.label, "reason": c.reason,
            "min_tpot_ms": c.min_tpot_ms if c.runs else None,
            "min_ttft_ms": c.min_ttft_ms if c.runs else None,
            "replica_tok_s_ceiling": c.replica_tok_s if c.runs else None}


def write_files(run: SearchRun, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    data = summary(run)
    write_json_atomic(out / "search.json", data)
    o = run.outcome
    if o.winner is not None:
        arm = o.winner.deployment.arm_spec().model_dump(exclude_defaults=True)
        text = ("# The capacity search's winner (servelab plan --search): add it to a spec's "
                "arms and `servelab run` it.\n" + yaml.safe_dump({"arms": [arm]}, sort_keys=False))
        write_atomic(out / "winner.yaml", text.encode())
    points = [(e.tok_s_per_user, e.tok_s_per_gpu, e.deployment.label, e.meets_slo)
              for e in o.evaluations]
    best = (o.winner.tok_s_per_user, o.winner.tok_s_per_gpu) if o.winner is not None else None
    tpot = dict(run.request.slo.limits_ms).get("tpot")
    if points:
        pareto_plot(points, tpot, best, out / "front.png",
                    f"{run.request.model} on {run.request.gpu} at {run.request.rate_rps:g} req/s: "
                    f"{run.request.slo.describe()}")
    write_atomic(out / "search.html", _html(run, out / "front.png").encode())


def _html(run: SearchRun, png: Path) -> str:
    o, r = run.outcome, run.request
    cols = ("deployment", "gpus", "meets_slo", "ttft_ms_at_percentile", "tpot_ms_at_percentile",
            "goodput_rps", "output_tok_s_per_gpu", "tok_s_per_user", "binding", "failed_why")
    rows = sorted(o.evaluations, key=lambda e: (e.gpus, not e.meets_slo, -e.goodput_per_gpu))

    def cell(v: object) -> str:
        return f"{v:,.2f}" if isinstance(v, float) else html.escape("" if v is None else str(v))

    body = "".join("<tr>" + "".join(f"<td>{cell(_row(e)[c])}</td>" for c in cols) + "</tr>"
                   for e in rows)
    ruled = "".join(f"<li>{html.escape(c.shape.label)}: {html.escape(c.reason or '')}</li>"
                    for c in o.ruled_out)
    img = (f'<img alt="front" src="data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()}">'
           if png.exists() else "")
    win = html.escape(o.winner.deployment.label) if o.winner is not None else "none meets the SLO"
    return (f"<!doctype html><meta charset='utf-8'><title>capacity search</title>"
            f"<h1>{html.escape(r.model)} on {html.escape(r.gpu)} at {r.rate_rps:g} req/s</h1>"
            f"<p>{html.escape(r.slo.describe())}. Winner: <b>{win}</b>. "
            f"{o.simulations} simulations of a grid of {o.grid_size}.</p>{img}"
            f"<table border=1 cellspacing=0 cellpadding=3><tr>"
            + "".join(f"<th>{c}</th>" for c in cols) + f"</tr>{body}</table>"
            f"<h2>Not simulated (the planner's ceilings)</h2><ul>{ruled}</ul>")
