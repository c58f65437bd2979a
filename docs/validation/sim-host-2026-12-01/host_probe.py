"""What the H200 host's CPU spends launching a step outside CUDA graphs (issues 14 and 17).

Runs one synthetic model (dummy weights; `configs/`: Qwen3-0.6B's layer at 4 and 20
layers, Qwen3-30B-A3B's MoE layer at 4 and 16 layers: no model of any validation set) in
vLLM's offline engine in this process, with the server's limits (8,192 batched tokens,
1,024 sequences, so the largest captured graph is 512 tokens), no prefix cache. At batch 1
and one output token it times `generate` for prompts of
- `--eager-tokens` (768: beyond the captured sizes, every kernel launched from Python),
- `--piecewise-tokens` (256: piecewise graphs, one piece per layer, attention between),
median of `--runs`, fresh prompts each; then one profiled run of each, counting the
kernels the GPU ran and the launches the host made. The GPU time of these steps is a small
fraction of the CPU's (hidden 1,024 / 2,048 at <= 768 tokens), so the difference of the
walls between the two depths of one layer kind, over the layers added, is the CPU time of
one layer (`summarise.py` here derives the per-launch figures from it).
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
    ap.add_argument("--eager-tokens", type=int, default=768)
    ap.add_argument("--piecewise-tokens", type=int, default=256)
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()

    import torch
    import vllm
    from torch.profiler import ProfilerActivity, profile
    from vllm import LLM, SamplingParams

    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    t0 = time.monotonic()
    llm = LLM(model=args.model, load_format="dummy", seed=0, gpu_memory_utilization=0.5,
              max_model_len=2048, max_num_batched_tokens=8192, max_num_seqs=1024,
              enable_prefix_caching=False)
    start_s = time.monotonic() - t0
    one = SamplingParams(max_tokens=1, ignore_eos=True, temperature=0.0)
    rng = random.Random(1)

    def prompt(tokens: int) -> list[dict]:
        return [{"prompt_token_ids": [rng.randrange(100, 50_000) for _ in range(tokens)]}]

    def wall(tokens: int) -> float:
        ps = prompt(tokens)
        torch.cuda.synchronize()
        t = time.perf_counter()
        llm.generate(ps, one, use_tqdm=False)
        return time.perf_counter() - t

    out = {"model": os.path.basename(args.model.rstrip("/")), "layers": cfg["num_hidden_layers"],
           "architecture": cfg["architectures"][0], "vllm": vllm.__version__,
           "torch": torch.__version__, "start_s": round(start_s, 1), "runs": args.runs, "points": {}}
    for kind, tokens in (("eager", args.eager_tokens), ("piecewise", args.piecewise_tokens)):
        for _ in range(3):  # warm: Triton autotuning and graphs at this size
            wall(tokens)
        walls = [wall(tokens) for _ in range(args.runs)]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            llm.generate(prompt(tokens), one, use_tqdm=False)
        k = kernels_of(prof)
        out["points"][kind] = {
            "tokens": tokens, "wall_ms_median": round(statistics.median(walls) * 1e3, 3),
            "wall_ms": [round(w * 1e3, 3) for w in walls],
            "kernels": int(sum(v[0] for n, v in k.items() if not n.startswith("runtime:"))),
            "kernels_us": round(sum(v[1] for n, v in k.items() if not n.startswith("runtime:")), 1),
            "runtime_calls": {n[8:]: int(v[0]) for n, v in k.items() if n.startswith("runtime:")},
        }
        print(f"{out['model']} {kind} {tokens}: {out['points'][kind]['wall_ms_median']} ms, "
              f"{out['points'][kind]['kernels']} kernels ({out['points'][kind]['kernels_us']} us)", flush=True)
    write_json_atomic(Path(args.out), out)


if __name__ == "__main__":
    main()
