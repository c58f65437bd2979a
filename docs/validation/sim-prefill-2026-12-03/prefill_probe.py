"""Prefill steps of vLLM 0.25.1 beyond the captured CUDA-graph sizes (issue 14, 2026-12-03):
what a served engine's 1k-8k-token prefill step costs on the GPU and on the host.

Runs one model (dummy weights) in vLLM's offline engine in this process with the server's
limits (8,192 batched tokens, 1,024 sequences; the largest captured graph is 512 tokens, so
every step here launches every kernel), no prefix cache. For n in `--prompts` it submits n
prompts of `--prompt-tokens` random ids at once with one output token: one engine step of
n x 1,024 prefill tokens. Per n: the wall of `generate` (median of `--runs`, fresh prompts,
after warm-ups), then one profiled run: the kernels' GPU time by name, and the host's
launches (count, time in the CUDA runtime). The wall minus the kernels' sum is what the
GPU waited for the host (or the generate call's own overhead, measured at n = 1 with a
64-token prompt, which a full graph runs). Writes one JSON (`--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sim-kernels-2026-12-01"))
from engine_trace import kernels_of  # noqa: E402

from servelab.storage import write_json_atomic  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompts", default="1,2,4,8")
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()

    import torch
    import vllm
    from torch.profiler import ProfilerActivity, profile
    from vllm import LLM, SamplingParams

    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    t0 = time.monotonic()
    llm = LLM(model=args.model, load_format="dummy", seed=0, gpu_memory_utilization=0.85,
              max_model_len=4096, max_num_batched_tokens=8192, max_num_seqs=1024,
              enable_prefix_caching=False)
    start_s = time.monotonic() - t0
    one = SamplingParams(max_tokens=1, ignore_eos=True, temperature=0.0)
    rng = random.Random(1)

    def prompts(n: int, tokens: int) -> list[dict]:
        return [{"prompt_token_ids": [rng.randrange(100, 30_000) for _ in range(tokens)]}
                for _ in range(n)]

    def wall(n: int, tokens: int) -> float:
        ps = prompts(n, tokens)
        torch.cuda.synchronize()
        t = time.perf_counter()
        llm.generate(ps, one, use_tqdm=False)
        return time.perf_counter() - t

    out = {"model": os.path.basename(args.model.rstrip("/")), "layers": cfg["num_hidden_layers"],
           "architecture": cfg["architectures"][0], "vllm": vllm.__version__,
           "torch": torch.__version__, "start_s": round(start_s, 1), "runs": args.runs, "points": {}}
    cases = [(1, 64)] + [(int(n), args.prompt_tokens) for n in args.prompts.split(",")]
    for n, tokens in cases:
        for _ in range(2):  # warm: Triton autotuning at this size
            wall(n, tokens)
        walls = [wall(n, tokens) for _ in range(args.runs)]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            llm.generate(prompts(n, tokens), one, use_tqdm=False)
        k = kernels_of(prof)
        kern = {name: v for name, v in k.items() if not name.startswith("runtime:")}
        top = sorted(kern.items(), key=lambda kv: -kv[1][1])[:25]
        point = {
            "prompts": n, "tokens": n * tokens,
            "wall_ms_median": round(statistics.median(walls) * 1e3, 3),
            "wall_ms": [round(w * 1e3, 3) for w in walls],
            "kernels": int(sum(v[0] for v in kern.values())),
            "kernels_us": round(sum(v[1] for v in kern.values()), 1),
            "runtime_calls": {name[8:]: [int(v[0]), round(v[1], 1)] for name, v in k.items()
                              if name.startswith("runtime:")},
            "top_kernels": [[name, int(v[0]), round(v[1], 1)] for name, v in top],
        }
        out["points"][f"{n}x{tokens}"] = point
        print(f"{out['model']} {n}x{tokens}: wall {point['wall_ms_median']} ms, "
              f"{point['kernels']} kernels {point['kernels_us'] / 1e3:.2f} ms GPU", flush=True)
        write_json_atomic(Path(args.out), out)


if __name__ == "__main__":
    main()
