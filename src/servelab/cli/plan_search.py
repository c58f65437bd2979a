"""`servelab plan --search`: its flags turned into a `SearchRequest`, and its tables."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console

from servelab.cli.output import make_console
from servelab.errors import ServelabError
from servelab.experiment.specfile import load_spec
from servelab.fleet.evaluate import SimTarget
from servelab.fleet.request import SearchRequest, SearchRun, run_search, summary
from servelab.fleet.space import SearchSpace
from servelab.sweep.slo import parse_slo
from servelab.textgrid import FitTable
from servelab.workload.datasets import DatasetOptions

_AXES = ("quantization", "tensor_parallel_size", "pipeline_parallel_size", "max_num_seqs",
         "max_num_batched_tokens", "router_policy", "expert_parallel", "pd_ratio")
_FIELD = {"quantization": "quantizations", "tensor_parallel_size": "tensor_parallel_sizes",
          "pipeline_parallel_size": "pipeline_parallel_sizes", "max_num_seqs": "max_num_seqs",
          "max_num_batched_tokens": "max_num_batched_tokens", "router_policy": "router_policies",
          "expert_parallel": "expert_parallel", "pd_ratio": "pd_ratios"}


def parse_axes(items: list[str], max_gpus: int, gpus_per_node: int, pd_link: str = "nvlink") -> SearchSpace:
    """``--axis NAME=V1,V2`` items over SearchSpace's defaults. For the limits ``default``
    is vLLM's default; for quantization ``bf16`` is the checkpoint as stored."""
    fields: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in _AXES:
            raise ServelabError(f"--axis {item!r}: expected NAME=V1,V2,... with NAME one of {', '.join(_AXES)}")
        values = [v.strip() for v in raw.split(",") if v.strip()]
        if not values:
            raise ServelabError(f"--axis {item!r}: no values")
        if _FIELD[name] in fields:
            raise ServelabError(f"--axis {name} given twice")
        fields[_FIELD[name]] = tuple(_axis_value(name, v, item) for v in values)
    if pd_link not in ("nvlink", "pcie", "infiniband", "roce", "ethernet"):
        raise ServelabError(f"--pd-link {pd_link!r}: one of nvlink, pcie, infiniband, roce, ethernet")
    return SearchSpace(**fields, max_gpus=max_gpus, gpus_per_node=gpus_per_node, pd_link=pd_link)  # type: ignore[arg-type]


def _axis_value(name: str, v: str, item: str) -> Any:
    if name == "router_policy":
        return v
    if name == "expert_parallel":
        if v.lower() not in ("true", "false"):
            raise ServelabError(f"--axis {item!r}: {v!r} is not true or false")
        return v.lower() == "true"
    if name == "pd_ratio":
        if v.lower() == "none":
            return None
        p, sep, d = v.partition(":")
        if not sep or not p.isdigit() or not d.isdigit() or int(p) < 1 or int(d) < 1:
            raise ServelabError(f"--axis {item!r}: {v!r} is not none or P:D (e.g. 1:3)")
        return (int(p), int(d))
    if name == "quantization":
        return None if v.lower() in ("bf16", "none") else v.lower()
    if v.lower() == "default" and name in ("max_num_seqs", "max_num_batched_tokens"):
        return None
    try:
        n = int(v)
    except ValueError:
        raise ServelabError(f"--axis {item!r}: {v!r} is not an integer") from None
    if n < 1:
        raise ServelabError(f"--axis {item!r}: {n} must be >= 1")
    return n


def workload_dataset(workload: str | None, num_prompts: int) -> DatasetOptions:
    """``SPEC.yaml[:NAME]`` (a spec's workload, its first without NAME) or ShareGPT."""
    if workload is None:
        return DatasetOptions(dataset_name="sharegpt", num_prompts=num_prompts)
    path, _, name = workload.partition(":")
    spec = load_spec(Path(path))
    if not spec.workloads:
        raise ServelabError(f"--workload {workload}: the spec has no workloads")
    names = [w.name for w in spec.workloads]
    if name and name not in names:
        raise ServelabError(f"--workload {workload}: no workload {name!r} (the spec has {', '.join(names)})")
    chosen = spec.workload(name) if name else spec.workloads[0]
    return chosen.dataset(num_prompts, spec.model.tokenizer)


def search_command(*, model: str, gpu: str, rate: float | None, slo: list[str], percentile: float,
                   max_gpus: int | None, gpus_per_node: int, axis: list[str], workload: str | None,
                   pd_link: str,
                   num_prompts: int | None, seed: int, workers: int | None, out: Path | None, json_out: bool,
                   ray: str | None = None) -> None:
    """Parse `plan --search`'s flags, search, print the table, the front and the winner."""
    if rate is None or max_gpus is None or not slo:
        raise ServelabError("--search needs --rate REQ_PER_S, --slo ttft:MS tpot:MS and --max-gpus N")
    if workers is None:
        workers = min(8, os.cpu_count() or 1)
    if workers < 1:
        raise ServelabError(f"--workers {workers}: must be >= 1")
    req = SearchRequest(model=model, gpu=gpu, rate_rps=rate, slo=parse_slo(slo, percentile, "--percentile"),
                        space=parse_axes(axis, max_gpus, gpus_per_node, pd_link),
                        dataset=workload_dataset(workload, num_prompts or 1), seed=seed,
                        workers=workers, out=out, num_prompts=num_prompts)
    err = make_console(stderr=True)
    make = None
    if ray is not None:
        # Ray is an optional extra: imported only when asked for
        from servelab.distributed.raysearch import RayEvaluator

        def make(target: SimTarget) -> RayEvaluator:
            ev = RayEvaluator(ray, target)
            err.print(f"simulating on the Ray cluster at {ray}: up to {ev.width} deployments at once",
                      highlight=False, markup=False)
            return ev
    run = run_search(req, echo=lambda line: err.print(line, highlight=False, markup=False), evaluator=make)
    if json_out:
        typer.echo(json.dumps(summary(run), indent=1, default=float))
        return
    render(run, make_console())


def render(run: SearchRun, console: Console) -> None:
    o, r = run.outcome, run.request
    headers = ("deployment", "GPUs", "SLO", f"TTFT p{r.slo.percentile:g} ms",
               f"TPOT p{r.slo.percentile:g} ms", "goodput req/s", "tok/s per GPU",
               "tok/s per user", "binds")
    rows = tuple((e.deployment.label, str(e.gpus), "meets" if e.meets_slo else "breaks",
                  f"{e.ttft_ms:,.1f}", f"{e.tpot_ms:,.1f}", f"{e.goodput_rps:.2f}",
                  f"{e.tok_s_per_gpu:,.0f}", f"{e.tok_s_per_user:,.1f}", e.binding)
                 for e in sorted(o.evaluations, key=lambda e: (e.gpus, not e.meets_slo, -e.goodput_per_gpu)))
    console.print(FitTable(f"capacity search: {r.model} on {r.gpu} at {r.rate_rps:g} req/s, "
                           f"{r.slo.describe()}", headers, rows))
    front = " -> ".join(f"{e.deployment.label} ({e.tok_s_per_user:,.0f} tok/s/user, "
                        f"{e.tok_s_per_gpu:,.0f} tok/s/GPU)" for e in o.front)
    console.print(f"Pareto front (tokens/s per user vs per GPU): {front or 'empty'}", highlight=False)
    console.print(f"{o.simulations} simulations of a grid of {o.grid_size} "
                  f"({100 * o.simulations / max(1, o.grid_size):.0f} %); "
                  f"{len(o.ruled_out)} shapes ruled out by the planner's ceilings", highlight=False)
    if o.winner is None:
        console.print(f"[red]no deployment within {r.space.max_gpus} GPUs meets {r.slo.describe()} "
                      f"at {r.rate_rps:g} req/s[/]", highlight=False)
        return
    w = o.winner
    console.print(f"[green]winner: {w.deployment.label} on {w.gpus} GPUs (goodput {w.goodput_rps:.2f} "
                  f"req/s, {w.tok_s_per_gpu:,.0f} tok/s per GPU; binds: {w.binding})[/]", highlight=False)
    arm = w.deployment.arm_spec().model_dump(exclude_defaults=True)
    console.print("as a spec arm:\n" + yaml.safe_dump({"arms": [arm]}, sort_keys=False).rstrip(),
                  highlight=False, markup=False)
    if r.out is not None:
        console.print(f"files in {r.out}/ (search.json, search.html, front.png, winner.yaml)", highlight=False)
