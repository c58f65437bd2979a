"""Where a synchronous n-gram verification step's time goes inside vLLM 0.25.1's V1 model
runner (issue 17): CPU phases of the runner and the GPU's own time, per step, at fixed batches.

Like ../spec-batch-2026-12-02/step_probe.py (offline engine in this process, B prompts of
`--prompt-tokens` random ids, `--output-tokens` each, greedy, a warm-up run per B), plus:
- perf_counter around the runner's own methods (instance wrappers, no synchronisation added):
  `_update_states`, `_prepare_inputs`, `_build_attention_metadata`, `_model_forward`,
  `sample_tokens`, `_sample`, `_bookkeeping_sync`, `propose_draft_token_ids`, and the
  engine's `schedule` / `update_from_output` / `post_step`;
- CUDA events recorded on the current stream just before and after `_model_forward` and
  after `_sample`: the GPU's time from the forward's start to its end and to the sampler's
  end (read after the step's own synchronisation);
- with `--profile`, a second recorded run per B under torch.profiler: the sum of the kernel
  durations each step launched (CUPTI), kept as `kernel_ms` per step.
Writes one JSON (`--out`) with one record per engine step; `analyse.py` reads it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

RUNNER_PHASES = ("_update_states", "_prepare_inputs", "_build_attention_metadata", "_model_forward",
                 "sample_tokens", "_sample", "_bookkeeping_sync", "propose_draft_token_ids")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--speculative-config", default=None)
    ap.add_argument("--batches", default="1,16,64,100,128,192,256")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()

    import torch
    import vllm
    from vllm import LLM, SamplingParams

    cfg = json.loads(Path(a.model, "config.json").read_text())
    spec = json.loads(a.speculative_config) if a.speculative_config else None
    llm = LLM(model=a.model, load_format="dummy", seed=0, gpu_memory_utilization=0.9,
              max_model_len=a.max_model_len, max_num_batched_tokens=8192, max_num_seqs=1024,
              speculative_config=dict(spec) if spec else None)
    core = llm.llm_engine.engine_core.engine_core
    runner = core.model_executor.driver_worker.worker.model_runner
    cur: dict = {}
    steps: list[dict] = []

    def timed(obj, name, key=None):
        fn = getattr(obj, name)
        key = key or name

        def call(*args, **kwargs):
            t = time.perf_counter()
            if name == "_model_forward":
                ev0 = torch.cuda.Event(enable_timing=True)
                ev0.record()
                cur["ev"] = [ev0]
            out = fn(*args, **kwargs)
            if name in ("_model_forward", "_sample"):
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                cur.setdefault("ev", []).append(ev)
            cur.setdefault("ph", {})[key] = cur.get("ph", {}).get(key, 0.0) + (time.perf_counter() - t) * 1e3
            if name == "schedule":
                so = out
                cur["reqs"] = len(so.num_scheduled_tokens)
                cur["tokens"] = so.total_num_scheduled_tokens
                cur["spec"] = sum(len(v) for v in so.scheduled_spec_decode_tokens.values())
                cur["prefill"] = sum(1 for r, n in so.num_scheduled_tokens.items()
                                     if n > 1 + len(so.scheduled_spec_decode_tokens.get(r, ())))
            return out
        setattr(obj, name, call)

    for n in RUNNER_PHASES:
        timed(runner, n)
    timed(core.scheduler, "schedule")
    timed(core.scheduler, "update_from_output")
    post_step = core.post_step

    def post(*args, **kwargs):  # runs after the step's record: charge it to that step
        t = time.perf_counter()
        out = post_step(*args, **kwargs)
        if steps:
            steps[-1].setdefault("ph", {})["post_step"] = (time.perf_counter() - t) * 1e3
        return out
    core.post_step = post
    step_fn = core.step_fn
    prof_on = {"on": False}

    def step(*args, **kwargs):
        cur.clear()
        t0 = time.perf_counter()
        if prof_on["on"]:
            with torch.profiler.record_function(f"slstep{len(steps)}"):
                out = step_fn(*args, **kwargs)
        else:
            out = step_fn(*args, **kwargs)
        rec = {k: v for k, v in cur.items() if k != "ev"}
        rec["t0"], rec["t1"] = t0, time.perf_counter()
        ev = cur.get("ev", [])
        if len(ev) >= 2:
            torch.cuda.synchronize()
            rec["gpu_fwd_ms"] = ev[0].elapsed_time(ev[1])
            rec["gpu_fwd_sample_ms"] = ev[0].elapsed_time(ev[-1])
        steps.append(rec)
        return out
    core.step_fn = step

    params = SamplingParams(max_tokens=a.output_tokens, ignore_eos=True, temperature=0.0)
    rng = random.Random(1)

    def run(b: int) -> list[dict]:
        ps = [{"prompt_token_ids": [rng.randrange(100, min(50_000, cfg["vocab_size"])) for _ in range(a.prompt_tokens)]}
              for _ in range(b)]
        steps.clear()
        torch.cuda.synchronize()
        llm.generate(ps, params, use_tqdm=False)
        return list(steps)

    out = {"model": os.path.basename(a.model.rstrip("/")), "layers": cfg["num_hidden_layers"],
           "speculative_config": spec, "max_model_len": a.max_model_len, "vllm": vllm.__version__,
           "prompt_tokens": a.prompt_tokens, "output_tokens": a.output_tokens, "batches": {}}
    for b in (int(x) for x in a.batches.split(",")):
        run(b)
        recs = run(b)
        entry = {"steps": recs}
        if a.profile:
            from torch.profiler import ProfilerActivity, profile
            prof_on["on"] = True
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                precs = run(b)
            prof_on["on"] = False
            entry["kernel_ms"] = _kernels_per_step(prof, len(precs))
        out["batches"][str(b)] = entry
        dec = [r for r in recs if r.get("reqs") == b and not r.get("prefill")]
        med = sorted(r["t1"] - r["t0"] for r in dec)
        print(f"{out['model']} B={b}: {len(recs)} steps, decode {len(dec)}, step median "
              f"{1e3 * med[len(med) // 2] if med else float('nan'):.2f} ms", flush=True)
        tmp = Path(a.out).with_suffix(".tmp")
        tmp.write_text(json.dumps(out))
        os.replace(tmp, a.out)


def _kernels_per_step(prof, n: int) -> list[float | None]:
    """Per recorded step: the summed duration (ms) of the kernels its CPU range launched
    (graph launches included: CUPTI gives a graph's kernels the launch's correlation id)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    prof.export_chrome_trace(path)
    ev = json.loads(Path(path).read_text())["traceEvents"]
    os.unlink(path)
    ranges = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"][6:])) for e in ev
                    if e.get("ph") == "X" and str(e.get("name", "")).startswith("slstep"))
    corr_step: dict[int, int] = {}
    import bisect
    starts = [r[0] for r in ranges]
    for e in ev:
        # runtime launches (graphs, torch's kernels) and driver ones (Triton's cuLaunchKernel)
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            i = bisect.bisect_right(starts, e["ts"]) - 1
            if i >= 0 and e["ts"] <= ranges[i][1]:
                corr_step[e["args"]["correlation"]] = ranges[i][2]
    base = ranges[0][2] if ranges else 0
    sums = [0.0] * n
    for e in ev:
        if e.get("cat") == "kernel":
            s = corr_step.get(e.get("args", {}).get("correlation"))
            if s is not None and 0 <= s - base < n:
                sums[s - base] += e["dur"] / 1e3
    return sums


if __name__ == "__main__":
    main()
