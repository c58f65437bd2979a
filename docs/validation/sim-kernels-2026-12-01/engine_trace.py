"""What the GPU runs in a real vLLM engine step, kernel by kernel (issue 14).

Runs one model in vLLM's offline engine in this process (so torch's profiler sees the
engine's CUDA kernels, CUDA-graph replays included), with the server's scheduling limits
(max_num_batched_tokens 8,192, max_num_seqs 1,024: the same captured graph sizes) and no
prefix cache (so every run prefills). Per batch size B it measures, with prompts of
`--context` random tokens:
- the wall time of `generate` at 1 output token and at `--steps` output tokens (median of
  three; fresh prompts each run), whose difference over steps - 1 is the engine's decode
  step without the API server;
- one profiled run of each, and per kernel name the GPU time and count of the difference:
  what one decode step at batch B runs; and of the 1-token run: the prefill.

Writes one JSON per model (`--out`); `summarise.py` here compares it with the simulator's
operator model.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import statistics
import tempfile
import time
from collections import defaultdict

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process


def prompts(batch: int, context: int, seed: int, vocab: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"prompt_token_ids": [rng.randrange(100, min(50_000, vocab)) for _ in range(context)]}
            for _ in range(batch)]


def kernels_of(prof) -> dict[str, list[float]]:
    """{kernel name: [count, total us]} from a finished torch profiler (its chrome trace)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            events = json.load(f)["traceEvents"]
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            row = out[e["name"][:160]]
            row[0] += 1
            row[1] += float(e.get("dur", 0.0))
        elif e.get("ph") == "X" and e.get("cat") == "cuda_runtime":
            # host-side launches (cudaLaunchKernel, cudaGraphLaunch...): how many and how
            # long the CPU spent in them, under the "runtime:" prefix
            row = out["runtime:" + e["name"][:60]]
            row[0] += 1
            row[1] += float(e.get("dur", 0.0))
    return dict(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--speculative-config", default=None,
                    help="vLLM's --speculative-config JSON (a drafter's forwards traced too)")
    args = ap.parse_args()

    import torch
    import vllm
    from torch.profiler import ProfilerActivity, profile
    from vllm import LLM, SamplingParams

    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    vocab = int(cfg.get("vocab_size") or cfg.get("text_config", {}).get("vocab_size", 50_000))
    t0 = time.monotonic()
    kw = {"gpu_memory_utilization": 0.85} if args.device == "cuda" else {}
    if args.speculative_config:
        kw["speculative_config"] = json.loads(args.speculative_config)
    llm = LLM(model=args.model, load_format="dummy", enforce_eager=args.eager, seed=0,
              max_model_len=args.context + args.steps + 64, max_num_batched_tokens=8192,
              max_num_seqs=1024, enable_prefix_caching=False, **kw)
    start_s = time.monotonic() - t0
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    one = SamplingParams(max_tokens=1, ignore_eos=True, temperature=0.0)
    many = SamplingParams(max_tokens=args.steps, ignore_eos=True, temperature=0.0)
    seed = 1
    result = {"model": args.model, "eager": args.eager,
              "speculative_config": args.speculative_config, "context": args.context,
              "steps": args.steps, "start_s": round(start_s, 1), "vllm": vllm.__version__,
              "torch": torch.__version__, "batches": {}}

    def wall(batch: int, params) -> float:
        nonlocal seed
        seed += 1
        ps = prompts(batch, args.context, seed, vocab)
        if args.device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        llm.generate(ps, params, use_tqdm=False)
        return time.perf_counter() - t

    def traced(batch: int, params) -> dict[str, list[float]]:
        nonlocal seed
        seed += 1
        ps = prompts(batch, args.context, seed, vocab)
        with profile(activities=acts) as prof:
            llm.generate(ps, params, use_tqdm=False)
        return kernels_of(prof)

    for b in (int(x) for x in args.batches.split(",")):
        wall(b, many)  # warm: Triton configs and graphs for this batch
        w1 = statistics.median(wall(b, one) for _ in range(3))
        wn = statistics.median(wall(b, many) for _ in range(3))
        k1, kn = traced(b, one), traced(b, many)
        per_step = {}
        for name in set(k1) | set(kn):
            c = (kn.get(name, [0, 0.0])[0] - k1.get(name, [0, 0.0])[0]) / (args.steps - 1)
            us = (kn.get(name, [0, 0.0])[1] - k1.get(name, [0, 0.0])[1]) / (args.steps - 1)
            if abs(us) > 0.01 or abs(c) > 0.01:
                per_step[name] = [round(c, 3), round(us, 3)]
        result["batches"][str(b)] = {
            "wall_1_s": round(w1, 5), "wall_n_s": round(wn, 5),
            "decode_step_ms": round((wn - w1) / (args.steps - 1) * 1e3, 4),
            "decode_kernels_us": round(sum(v[1] for k, v in per_step.items()
                                           if not k.startswith("runtime:")), 2),
            "decode_per_step": dict(sorted(per_step.items(), key=lambda kv: -kv[1][1])),
            "prefill_kernels_us": round(sum(v[1] for k, v in k1.items()
                                            if not k.startswith("runtime:")), 2),
            "prefill": {k: [v[0], round(v[1], 2)] for k, v in
                        sorted(k1.items(), key=lambda kv: -kv[1][1])},
        }
        print(f"batch {b}: decode step {result['batches'][str(b)]['decode_step_ms']} ms wall, "
              f"{result['batches'][str(b)]['decode_kernels_us']} us of kernels", flush=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
