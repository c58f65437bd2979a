"""Issue 17, on the device (2026-12-06): the verification step's kernels at the shapes of
spec.yaml's cells, timed the way `servelab sim profile` times its grid (the same Timer and
FlashAttention call, CUDA-graph replays, operands spread over twice the L2).

- FlashAttention (vLLM's, FA3 on Hopper) over a paged KV cache with K + 1 queries per
  sequence (q_len 1, 2, 3, 5, 7: decode and n-gram verification at K = 1, 2, 4, 6), causal,
  for Qwen3-14B's heads (40 q, 8 kv, 128) and the profile's GQA-4 row (32, 8, 128), at
  batches 1-256 and contexts 128-2048. The shipped profiles time q_len 1 only and the cost
  model prices a verification's attention as the decode's.
- bf16 GEMMs of Qwen3-14B's projections and LM head at the token counts between the
  profile's grid points (M 128-512) where c64 verification steps fall.

    PYTHONPATH=/tmp/slsrc:/tmp/site python3 kernels.py OUT.jsonl
"""

from __future__ import annotations

import json
import sys

import torch

from servelab.sim.profiler import ProfileGrid, Timer, _FlashAttention, time_gemm_bf16


def main() -> None:
    out = open(sys.argv[1], "w")
    timer = Timer(torch, ProfileGrid())
    fa = _FlashAttention(torch)
    print(fa.name, torch.cuda.get_device_name(0), flush=True)
    for qh, kvh, d in ((40, 8, 128), (32, 8, 128)):
        for b in (1, 4, 16, 32, 64, 128, 256):
            for c in (128, 512, 1024, 2048):
                for ql in (1, 2, 3, 5, 7):
                    kv = 2 * b * c * kvh * d * 2
                    us = timer.per_call_us(fa.call([ql] * b, [c] * b, qh, kvh, d, timer.copies_for(kv)))
                    rec = dict(kind="attn", q_heads=qh, kv_heads=kvh, head_dim=d, batch=b, context=c,
                               q_len=ql, time_us=round(us, 2))
                    out.write(json.dumps(rec) + "\n")
                print(qh, b, c, "done", flush=True)
    for n, k in ((7168, 5120), (5120, 5120), (34816, 5120), (5120, 17408), (151936, 5120)):
        for m in (128, 192, 256, 320, 384, 448, 512, 640, 768, 1024):
            us = time_gemm_bf16(torch, timer, m, n, k)
            out.write(json.dumps(dict(kind="gemm", m=m, n=n, k=k, time_us=round(us, 2))) + "\n")
        print("gemm", n, k, flush=True)
    out.close()


if __name__ == "__main__":
    main()
