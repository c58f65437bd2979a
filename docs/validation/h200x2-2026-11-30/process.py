"""From the device's directories to this folder: rooflines, planner check, client check, slim copies.

    .venv/bin/python docs/validation/h200x2-2026-11-30/process.py X2RUN OUT_DIR

X2RUN is the device's /tmp/x2run (fetched): x2/ and fp8/ experiment directories, client/,
probe files. Writes OUT_DIR/results/{x2,fp8}/ (cells without per-request lists, status,
manifest; logs copied by hand), OUT_DIR/planner_check.json and OUT_DIR/client_check.json,
and recomputes each cell's stored roofline decode step with this tree's planner (the
device ran the tree before `token_interval_ms`: for PP2 it compared ITL with one stage).
"""
import json
import shutil
import sys
from pathlib import Path

from servelab.experiment import load_spec
from servelab.experiment.planning import ArmPlanner
from servelab.hardware.catalog import get_gpu
from servelab.models import load_model
from servelab.plan import EngineArgs, kv_tokens_from_available, kv_tokens_range_from_logged, plan_memory

RUN, OUT = Path(sys.argv[1]), Path(sys.argv[2])
PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "errors", "generated_texts")
SERVELAB_PER_REQUEST = ("sched_lags_ms", "slot_waits_ms", "error_kinds")
BF16_DIR = Path(__file__).resolve().parents[3] / ".gpu/dl/payload/qwen3-14b"  # the kit's model dir


ROOT = Path(__file__).resolve().parents[3]
SPECS = {"x2": ROOT / "examples/h200x2-vllm.yaml", "fp8": ROOT / "examples/h200-vllm.yaml"}


def reroof(exp: Path) -> None:
    """Recompute every cell's `roofline` (same batch and context) with this tree's planner."""
    spec = load_spec(SPECS[exp.name])
    for cell_path in sorted((exp / "cells").glob("*/*/*.json")):
        cell = json.loads(cell_path.read_text())
        old = cell.get("roofline")
        if old is None:
            continue
        planner = ArmPlanner.for_arm(spec, spec.arm(cell["cell"]["arm"]), "H200")
        cell["roofline"] = planner.decode_step(old["batch"], old["context_tokens"])
        cell_path.write_text(json.dumps(cell))


def slim(exp: Path, dest: Path) -> None:
    """Copy manifest, arm status and cells without the per-request lists."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(exp / "manifest.json", dest / "manifest.json")
    for status in exp.glob("arms/*/status.json"):
        (dest / status.parent.relative_to(exp)).mkdir(parents=True, exist_ok=True)
        shutil.copy(status, dest / status.relative_to(exp))
    for cell_path in exp.glob("cells/*/*/*.json"):
        cell = json.loads(cell_path.read_text())
        r = cell["result"]
        removed = [k for k in PER_REQUEST if r.pop(k, None) is not None]
        removed += [f"servelab.{k}" for k in SERVELAB_PER_REQUEST if r["servelab"].pop(k, None) is not None]
        cell["stripped"] = removed
        out = dest / cell_path.relative_to(exp)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(cell, indent=1))


def planner_rows() -> list[dict]:
    gpu = get_gpu("H200")
    model_bf16 = load_model(str(BF16_DIR))
    arms = {  # arm -> (status file, EngineArgs besides util, model)
        "replicas2 (each replica)": ("x2/arms/replicas2-direct/status.json", {}, model_bf16),
        "tp2": ("x2/arms/tp2/status.json", {"tensor_parallel_size": 2}, model_bf16),
        "pp2": ("x2/arms/pp2/status.json", {"pipeline_parallel_size": 2}, model_bf16),
        "fp8 (one GPU)": ("fp8/arms/fp8/status.json", {"quantization": "fp8"},
                          load_model(str(BF16_DIR), "fp8")),
    }
    rows = []
    for arm, (status, extra, model) in arms.items():
        st = json.loads((RUN / status).read_text())["startups"][0]
        args = EngineArgs(gpu_memory_utilization=st["gpu_memory_utilization"], **extra)
        p = plan_memory(model, gpu, args)
        logged = st["available_kv_gib"]
        from_log = kv_tokens_from_available(model, args, logged)
        lo, hi = kv_tokens_range_from_logged(model, args, logged)
        rows.append(dict(
            arm=arm, weights_gib_log=st["model_loading_gib"], weights_gib_plan=round(p.weights_gib, 3),
            kv_gib_log=logged, kv_gib_plan=round(p.kv_cache_gib, 3),
            kv_gib_err_pct=round(100 * (p.kv_cache_gib - logged) / logged, 2),
            tokens_log=st["kv_cache_tokens"], tokens_from_logged_gib=from_log, tokens_range=[lo, hi],
            tokens_exact=from_log == st["kv_cache_tokens"], tokens_in_range=lo <= st["kv_cache_tokens"] <= hi,
            tokens_plan=p.kv_cache_tokens, graphs_gib_log=st["cuda_graph_gib"],
            graphs_gib_plan=round(p.cuda_graph_gib, 3),
            overhead_gib_log=round(p.budget_gib - st["model_loading_gib"] - logged, 3),
            overhead_gib_plan=round(p.activation_gib + p.non_torch_gib, 3)))
    return rows


CLIENT_KEYS = ("completed", "total_input_tokens", "total_output_tokens", "request_throughput",
               "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms",
               "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms",
               "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms")


def client_rows() -> dict:
    runs = {}
    for name in ("sg-vllm-1", "sg-servelab-1", "sg-servelab-2", "sg-vllm-2", "rnd-servelab-1", "rnd-vllm-1"):
        data = json.loads((RUN / "client" / f"{name}.json").read_text())
        runs[name] = {k: data[k] for k in CLIENT_KEYS}
    return runs


if __name__ == "__main__":
    for exp in ("x2", "fp8"):
        reroof(RUN / exp)
        slim(RUN / exp, OUT / "results" / exp)
    (OUT / "planner_check.json").write_text(json.dumps(planner_rows(), indent=1))
    (OUT / "client_check.json").write_text(json.dumps(client_rows(), indent=1))
    print(json.dumps(planner_rows(), indent=1))
