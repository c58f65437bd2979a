"""`servelab plan`: memory budget, KV pool, ceilings and what-if arms for a model on a GPU."""

from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer
from pydantic import ValidationError
from rich.console import Console

from servelab.cli.output import make_console
from servelab.errors import ServelabError
from servelab.hardware.catalog import get_gpu
from servelab.models import load_model
from servelab.plan import EngineArgs, plan_memory
from servelab.plan.compare import Arm, ArmReading, read_arm, verdict
from servelab.plan.roofline import decode_ceiling_tok_s, decode_step, mbu, prefill_time_s
from servelab.textgrid import FitTable

_ARG_FLAGS = {  # flag -> (EngineArgs field, type)
    "--tensor-parallel-size": ("tensor_parallel_size", int),
    "--pipeline-parallel-size": ("pipeline_parallel_size", int),
    "--replicas": ("data_parallel_size", int),
    "--data-parallel-size": ("data_parallel_size", int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--max-model-len": ("max_model_len", int),
    "--max-num-seqs": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--block-size": ("block_size", int),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--num-redundant-experts": ("num_redundant_experts", int),
}


class _ArmParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ServelabError(f"{self.prog}: {message}")


def _engine_args(values: dict[str, Any], where: str) -> EngineArgs:
    try:
        return EngineArgs(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(f"--{'-'.join(str(p) for p in e['loc']).replace('_', '-')}: "
                             f"{e['msg']}" for e in exc.errors())
        raise ServelabError(f"{where}: {problems}") from None


def _arm(spec: str, base: dict[str, Any]) -> Arm:
    name, sep, rest = spec.partition(":")
    if not sep or not name.strip():
        raise ServelabError(f"--what-if {spec!r}: expected 'NAME: --flag value ...'")
    parser = _ArmParser(prog=f"--what-if {name.strip()}", add_help=False)
    parser.add_argument("--model")
    parser.add_argument("--gpu")
    parser.add_argument("--quantization")
    for flag, (dest, kind) in _ARG_FLAGS.items():
        parser.add_argument(flag, dest=dest, type=kind)
    parser.add_argument("--enable-expert-parallel", dest="enable_expert_parallel", action="store_true",
                        default=None)
    parsed = vars(parser.parse_args(shlex.split(rest)))
    values = {**base, **{k: v for k, v in parsed.items() if v is not None}}
    return _build_arm(name.strip(), values, f"--what-if {name.strip()}")


def _build_arm(name: str, values: dict[str, Any], where: str) -> Arm:
    fields = {k: v for k, v in values.items() if k not in ("model", "gpu", "quantization")}
    args = _engine_args({**fields, "quantization": values.get("quantization")}, where)
    model = load_model(values["model"], values.get("quantization"))
    return Arm(name, model, get_gpu(values["gpu"]), args)


def _reading_row(r: ArmReading) -> dict[str, Any]:
    m = r.memory
    return {"arm": r.name, "gpus": r.gpus, "replicas": r.replicas,
            "tensor_parallel_size": m.tensor_parallel_size, "weights_gib": m.weights_gib,
            "kv_cache_gib": m.kv_cache_gib, "kv_cache_tokens": m.kv_cache_tokens,
            "requests_per_replica": r.requests_per_replica,
            "batch_per_replica": r.batch_per_replica, "holds_target": r.holds_target,
            "step_ms": r.step_ms, "decode_tok_s": r.decode_tok_s, "tok_per_gpu_s": r.tok_per_gpu_s,
            "decode_ceiling_tok_s": r.decode_ceiling_tok_s, "binding": r.binding}


def _render(out: dict[str, Any], console: Console) -> None:
    p = out["plan"]
    rows = [("budget GiB (CUDA total x util)", f"{p['budget_gib']:.2f}"),
            ("weights GiB", f"{p['weights_gib']:.2f}"),
            ("activation peak GiB (est.)", f"{p['activation_gib']:.2f}"),
            ("non-torch GiB (est.)", f"{p['non_torch_gib']:.2f}"),
            ("CUDA graphs GiB (est., outside budget)", f"{p['cuda_graph_gib']:.2f}"),
            ("available KV cache GiB", f"{p['kv_cache_gib']:.2f}"),
            ("KV bytes/token (model / per GPU)",
             f"{p['kv_bytes_per_token']:,} / {p['kv_bytes_per_token_per_gpu']:,}"),
            ("KV cache tokens", f"{p['kv_cache_tokens']:,}"),
            (f"max concurrency for {p['max_model_len']:,} tokens", f"{p['max_concurrency']:.2f}x"),
            *([("routed experts per GPU (EP "
                f"{p['expert_parallel_size']})", f"{p['experts_per_gpu']}")] if p.get("experts_per_gpu") else []),
            ("max_num_seqs / max_num_batched_tokens",
             f"{p['max_num_seqs']} / {p['max_num_batched_tokens']}"),
            ("decode ceiling, 1 request (tok/s)", f"{out['decode_ceiling_tok_s']:.1f}")]
    if "step" in out:
        s = out["step"]
        rows.append((f"decode step, batch {s['batch']} at {s['context']:,} tokens",
                     f"{s['total_s'] * 1e3:.2f} ms ({s['bound']}-bound)"))
    if "mbu" in out:
        rows.append(("MBU", f"{out['mbu']:.1%}"))
    # FitTable: at any width every figure stays whole (a grid, or stacked rows when narrow).
    console.print(FitTable(f"{p['model']} ({p['weight_format']}) on {p['gpu']}: per GPU, "
                           f"TP {p['tensor_parallel_size']} PP {p['pipeline_parallel_size']}",
                           ("figure", "value"), tuple(rows)))
    if out.get("mbu_note"):
        console.print(f"[red]{out['mbu_note']}[/]", highlight=False)
    colour = "green" if p["fits"] else "red"
    console.print(f"[{colour}]{p['reason']}[/]", highlight=False)
    if out.get("what_if"):
        # Short headers that wrap at their spaces ("KV tokens per replica") keep the grid
        # within 80 columns for the common arms; throughputs are decode tok/s.
        headers = ("arm", "GPUs", "KV tokens per replica", "requests per replica",
                   "batch per replica", "step ms", "tok/s", "tok/s per GPU", "1-req tok/s", "binds")
        rows = tuple((r["arm"], str(r["gpus"]), f"{r['kv_cache_tokens']:,}",
                      str(r["requests_per_replica"]), str(r["batch_per_replica"]),
                      f"{r['step_ms']:.2f}", f"{r['decode_tok_s']:,.0f}", f"{r['tok_per_gpu_s']:,.0f}",
                      f"{r['decode_ceiling_tok_s']:.1f}", r["binding"]) for r in out["what_if"])
        console.print()
        console.print(FitTable(f"what-if at {out['target_concurrency']} requests of "
                               f"{out['context']:,} tokens (decode, roofline)", headers, rows))
        for line in out["verdict"]:
            console.print(line, highlight=False)


def plan_command(
    model: str = typer.Option(..., "--model", help="Catalog name, alias (+ -AWQ/-FP8/...) or config.json path."),
    gpu: str = typer.Option(..., "--gpu", help="GPU catalog name (H200, L40S, H100, ...)."),
    quantization: Optional[str] = typer.Option(None, "--quantization", help="awq, gptq, fp8, int8/w8a8."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size"),
    pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size"),
    replicas: int = typer.Option(1, "--replicas", help="Replicas (vLLM --data-parallel-size)."),
    gpu_memory_utilization: float = typer.Option(0.92, "--gpu-memory-utilization", help="vLLM 0.25 default 0.92 (0.9 before)."),
    max_model_len: Optional[int] = typer.Option(None, "--max-model-len", help="Default: the model's."),
    max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs", help="Default: vLLM's per-GPU default."),
    max_num_batched_tokens: Optional[int] = typer.Option(None, "--max-num-batched-tokens"),
    block_size: int = typer.Option(16, "--block-size"),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="auto or fp8."),
    enable_expert_parallel: bool = typer.Option(False, "--enable-expert-parallel", help="MoE: experts over EP = TP x --replicas GPUs (vLLM's flag)."),
    num_redundant_experts: int = typer.Option(0, "--num-redundant-experts", help="MoE with EP: EPLB's copies of hot experts."),
    batch: Optional[int] = typer.Option(None, "--batch", help="Decode batch for the step time / MBU."),
    context: int = typer.Option(1024, "--context", help="Context tokens per request (step time, what-if, MBU)."),
    prefill_tokens: Optional[int] = typer.Option(None, "--prefill-tokens", help="Also time a prefill of N tokens."),
    what_if: Optional[list[str]] = typer.Option(None, "--what-if", help="'NAME: --flag value ...' (repeatable); compares arms."),
    target_concurrency: int = typer.Option(32, "--target-concurrency", help="Concurrent requests the what-if verdict aims at."),
    mbu_flag: bool = typer.Option(False, "--mbu", help="Turn --tpot-ms at --batch/--context into MBU."),
    tpot_ms: Optional[float] = typer.Option(None, "--tpot-ms", help="Measured TPOT for --mbu."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    search: bool = typer.Option(False, "--search", help="Capacity search: the deployments that meet --slo at --rate with the fewest GPUs, by simulation (docs/planner.md)."),
    rate: Optional[float] = typer.Option(None, "--rate", help="--search: requests/s (Poisson)."),
    slo: Optional[list[str]] = typer.Option(None, "--slo", help="--search: SLOs in ms, ttft:MS tpot:MS e2el:MS."),
    percentile: float = typer.Option(99.0, "--percentile", help="--search: percentile the SLO is judged at."),
    max_gpus: Optional[int] = typer.Option(None, "--max-gpus", help="--search: GPU budget."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="--search: TP stays within a node of this many GPUs."),
    axis: Optional[list[str]] = typer.Option(None, "--axis", help="--search: NAME=V1,V2 (repeat) over quantization (bf16,fp8,awq), tensor_parallel_size (1,2,4,8), pipeline_parallel_size (1,2), max_num_seqs / max_num_batched_tokens (default), router_policy (round_robin,least_requests), expert_parallel (false; true for MoE), pd_ratio (none; P:D prefill:decode replicas per unit, e.g. none,1:1,1:3)."),
    pd_link: str = typer.Option("nvlink", "--pd-link", help="--search: the KV link of P/D units (nvlink, pcie, infiniband, roce, ethernet)."),
    workload: Optional[str] = typer.Option(None, "--workload", help="--search: SPEC.yaml[:NAME], a spec's workload (default ShareGPT)."),
    num_prompts: Optional[int] = typer.Option(None, "--num-prompts", help="--search: requests per simulation (default: arrivals over three times the longest latency the SLO allows, >= 60 s)."),
    seed: int = typer.Option(0, "--seed", help="--search: workload and simulator seed."),
    workers: Optional[int] = typer.Option(None, "--workers", help="--search: simulations at once, in processes (default: the CPUs, at most 8); the outcome does not depend on it."),
    out: Optional[Path] = typer.Option(None, "--out", help="--search: folder for search.json, search.html, front.png, winner.yaml."),
    ray: Optional[str] = typer.Option(None, "--ray", help="--search: simulate on this Ray cluster (HOST:PORT or auto), one CPU per deployment; the same outcome (needs servelab[ray])."),
) -> None:
    """Plan vLLM's memory budget, KV pool, maximum concurrency and decode ceilings (per GPU);
    with --search, find the fewest GPUs that meet an SLO at a rate."""
    if search:
        # imported here: the search pulls in the simulator and matplotlib, which every
        # other command's start-up should not pay
        from servelab.cli.plan_search import search_command

        search_command(model=model, gpu=gpu, rate=rate, slo=list(slo or []), percentile=percentile,
                       max_gpus=max_gpus, gpus_per_node=gpus_per_node, axis=list(axis or []),
                       workload=workload, pd_link=pd_link, num_prompts=num_prompts, seed=seed, workers=workers,
                       out=out, json_out=json_out, ray=ray)
        return
    base: dict[str, Any] = {
        "model": model, "gpu": gpu, "quantization": quantization,
        "tensor_parallel_size": tensor_parallel_size, "pipeline_parallel_size": pipeline_parallel_size,
        "data_parallel_size": replicas, "gpu_memory_utilization": gpu_memory_utilization,
        "max_model_len": max_model_len, "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens, "block_size": block_size,
        "kv_cache_dtype": kv_cache_dtype, "enable_expert_parallel": enable_expert_parallel,
        "num_redundant_experts": num_redundant_experts}
    arm = _build_arm(_main_arm_name(quantization, tensor_parallel_size, pipeline_parallel_size,
                                    replicas), base, "servelab plan")
    mem = plan_memory(arm.model, arm.gpu, arm.args)
    out: dict[str, Any] = {"plan": mem.model_dump()}
    out.update({k: getattr(mem, k) for k in ("weights_gib", "kv_bytes_per_token", "kv_cache_gib",
                                              "kv_cache_tokens", "max_concurrency", "fits")})
    out["total_params"] = arm.model.total_params
    out["active_params"] = arm.model.active_params
    out["decode_ceiling_tok_s"] = decode_ceiling_tok_s(arm.model, arm.gpu, arm.args, context)
    if batch is not None:
        step = decode_step(arm.model, arm.gpu, arm.args, batch, context)
        out["step"] = {"batch": batch, "context": context, **asdict(step), "bound": step.bound}
    if prefill_tokens is not None:
        out["prefill_time_s"] = prefill_time_s(arm.model, arm.gpu, arm.args, prefill_tokens)
    if mbu_flag:
        if tpot_ms is None or batch is None:
            raise ServelabError("--mbu needs --tpot-ms and --batch (and --context)")
        if tpot_ms <= 0:
            raise ServelabError(f"--tpot-ms must be positive, got {tpot_ms}")
        out["mbu"] = mbu(arm.model, arm.gpu, arm.args, tpot_ms, batch, context)
        if out["mbu"] > 1.0:
            # A step cannot read its bytes faster than the memory's peak: the inputs disagree.
            out["mbu_note"] = (f"MBU above 100 % means the figures are inconsistent: reading this "
                               f"step's bytes at the {arm.gpu.name}'s peak takes "
                               f"{tpot_ms * out['mbu']:.2f} ms, longer than the {tpot_ms:g} ms "
                               "TPOT given; check --tpot-ms, --batch, --context, TP/PP, the "
                               "quantization and the GPU")
    if what_if:
        readings = [read_arm(a, target_concurrency, context)
                    for a in [arm, *(_arm(spec, base) for spec in what_if)]]
        out["target_concurrency"] = target_concurrency
        out["context"] = context
        out["what_if"] = [_reading_row(r) for r in readings]
        out["verdict"] = verdict(readings, target_concurrency)
    if json_out:
        typer.echo(json.dumps(out, indent=2, default=float))
    else:
        _render(out, make_console())


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_command)


def _main_arm_name(quantization: str | None, tp: int, pp: int, replicas: int) -> str:
    """Name the flags' own arm by what sets it apart, so a --what-if verdict reads well."""
    parts = [quantization or "bf16"]
    parts += [f"tp{tp}"] if tp > 1 else []
    parts += [f"pp{pp}"] if pp > 1 else []
    parts += [f"{replicas} replicas"] if replicas > 1 else []
    return " ".join(parts)
