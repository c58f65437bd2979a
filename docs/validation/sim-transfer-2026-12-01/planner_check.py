"""The planner's memory budget vs vLLM's startup lines, per model of the transfer run.

    .venv/bin/python docs/validation/sim-transfer-2026-12-01/planner_check.py

Reads results/<model>/server.log (parsed by servelab's own startup-log parser) and the
served config.json, plans the same engine arguments (vLLM's defaults, the logged
gpu_memory_utilization) and writes planner_check.json: weights, available KV GiB, KV tokens,
planned vs logged, with the error of the available-KV estimate.
"""

from __future__ import annotations

import json
from pathlib import Path

from servelab.engine.logparse import parse_startup_log
from servelab.hardware.catalog import get_gpu
from servelab.models import load_model
from servelab.plan import EngineArgs, plan_memory
from servelab.storage import write_atomic

HERE = Path(__file__).resolve().parent


def main() -> None:
    gpu = get_gpu("H200")
    rows = []
    for mdir in sorted(p for p in (HERE / "results").iterdir() if (p / "server.log").exists()):
        st = parse_startup_log((mdir / "server.log").read_text(errors="replace"))
        if st.available_kv_gib is None:
            rows.append({"model": mdir.name, "error": "no 'Available KV cache memory' line"})
            continue
        model = load_model(str(mdir / "config.json"))
        util = st.gpu_memory_utilization or EngineArgs().gpu_memory_utilization
        plan = plan_memory(model, gpu, EngineArgs(gpu_memory_utilization=util))
        rows.append({
            "model": mdir.name, "moe": model.is_moe, "util": util,
            "weights_gib_log": st.model_loading_gib, "weights_gib_plan": round(plan.weights_gib, 3),
            "kv_gib_log": st.available_kv_gib, "kv_gib_plan": round(plan.kv_cache_gib, 3),
            "kv_gib_err_pct": round(100 * (plan.kv_cache_gib - st.available_kv_gib) / st.available_kv_gib, 2),
            "kv_tokens_log": st.kv_cache_tokens, "kv_tokens_plan": plan.kv_cache_tokens,
            "kv_tokens_err_pct": round(100 * (plan.kv_cache_tokens - st.kv_cache_tokens) / st.kv_cache_tokens, 2),
            "max_concurrency_log": st.max_concurrency, "max_concurrency_plan": round(plan.max_concurrency, 2),
            "overhead_gib_log": round(plan.budget_gib - (st.model_loading_gib or 0) - st.available_kv_gib, 3),
            "overhead_gib_plan": round(plan.activation_gib + plan.non_torch_gib, 3),
        })
    for r in rows:
        print(json.dumps(r))
    write_atomic(HERE / "planner_check.json", (json.dumps(rows, indent=1) + "\n").encode())


if __name__ == "__main__":
    main()
