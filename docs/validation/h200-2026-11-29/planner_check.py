"""Planner vs the logged memory lines of the H200 run (docs/validation/h200-2026-11-29).

    .venv/bin/python docs/validation/h200-2026-11-29/planner_check.py RUN_DIR OUT.json AWQ_DIR

RUN_DIR: the experiment directory or this folder's results/ (reads arms/*/status.json).
AWQ_DIR: the kit's AWQ model dir (`.gpu/dl/payload/qwen3-14b` copied, config.json merged
with `.gpu/bin/qwen3-14b-awq.json`, as `dev.sh awqdir` does on the device).
"""
import json, sys
from servelab.models import load_model
from servelab.hardware.catalog import get_gpu
from servelab.plan import EngineArgs, plan_memory, kv_tokens_from_available, kv_tokens_range_from_logged

run = sys.argv[1]
gpu = get_gpu("H200")
arms = {"bf16": ("/work/main/.gpu/dl/payload/qwen3-14b", {}),
        "awq": (sys.argv[3], {}),
        "awq-overtuned": (sys.argv[3], {"max_num_seqs": 8, "max_model_len": 1024})}
rows = []
for arm, (path, extra) in arms.items():
    st = json.load(open(f"{run}/arms/{arm}/status.json"))["startups"][0]
    model = load_model(path)
    args = EngineArgs(gpu_memory_utilization=st["gpu_memory_utilization"], **extra)
    p = plan_memory(model, gpu, args)
    logged_gib = st["available_kv_gib"]
    from_log = kv_tokens_from_available(model, args, logged_gib)
    lo, hi = kv_tokens_range_from_logged(model, args, logged_gib)
    row = dict(arm=arm, util=args.gpu_memory_utilization, block=args.block_size,
               kv_bytes_per_token=p.kv_bytes_per_token_per_gpu,
               weights_log=st["model_loading_gib"], weights_plan=round(p.weights_gib, 3),
               kv_gib_log=logged_gib, kv_gib_plan=round(p.kv_cache_gib, 3),
               kv_gib_err_pct=round(100 * (p.kv_cache_gib - logged_gib) / logged_gib, 2),
               tokens_log=st["kv_cache_tokens"], tokens_from_logged_gib=from_log,
               tokens_range=[lo, hi], tokens_exact=from_log == st["kv_cache_tokens"],
               tokens_in_range=lo <= st["kv_cache_tokens"] <= hi,
               blocks_log=st["kv_cache_tokens"] / args.block_size,
               tokens_plan=p.kv_cache_tokens,
               maxconc_log=st["max_concurrency"], maxconc_plan=round(p.max_concurrency, 2),
               max_model_len=p.max_model_len,
               graphs_log=st["cuda_graph_gib"], graphs_plan=round(p.cuda_graph_gib, 3),
               overhead_log=round(p.budget_gib - st["model_loading_gib"] - logged_gib, 3),
               overhead_plan=round(p.activation_gib + p.non_torch_gib, 3),
               budget=round(p.budget_gib, 3))
    rows.append(row)
    print(json.dumps(row))
json.dump(rows, open(sys.argv[2], "w"), indent=1)
