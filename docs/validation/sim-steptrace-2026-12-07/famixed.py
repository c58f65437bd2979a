"""Does a decode row cost more inside a mixed FlashAttention call than in a decode-only one?
(issue 14, 2026-12-07; runs on the GPU machine with vLLM's kernels)

    python3 famixed.py > famixed.txt

vLLM's FlashAttention backend runs a step's decodes and prefill chunks in one varlen call over
the paged KV cache; servelab's kernel profile times decode-only calls (every query length 1)
and prefill-only calls, and the operator model adds the two for a mixed step. This times, per
head shape of the validation models, one call of P prompts of 1,024 tokens (no cached context)
beside N decodes at 1,100 tokens of context, against the prefill-only call and the decode-only
call alone, as the profiler calls the kernel (block 16, causal, bf16; CUDA events, the median
of 30 calls after 5). Prints one line per case: mixed, prefill alone, decodes alone (us), and
mixed minus the two.
"""
import math
import statistics

import torch
from vllm.vllm_flash_attn import FA3_AVAILABLE, flash_attn_varlen_func

VERSION = 3 if FA3_AVAILABLE and torch.cuda.get_device_capability(0)[0] == 9 else 2
BLOCK = 16
SHAPES = {"olmoe-1b-7b": (16, 16, 128), "qwen3-4b": (32, 8, 128), "qwen3-30b-a3b": (32, 4, 128),
          "gemma-3-12b": (16, 8, 256)}


def call(q_lens, k_lens, qh, kvh, d):
    dev = "cuda"
    blocks_per = [math.ceil(k / BLOCK) for k in k_lens]
    nblocks = sum(blocks_per) + 1
    q = torch.randn((sum(q_lens), qh, d), device=dev, dtype=torch.bfloat16)
    kc = torch.randn((nblocks, BLOCK, kvh, d), device=dev, dtype=torch.bfloat16)
    vc = torch.randn((nblocks, BLOCK, kvh, d), device=dev, dtype=torch.bfloat16)
    cu_q = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0).tolist()), device=dev, dtype=torch.int32)
    seqused = torch.tensor(k_lens, device=dev, dtype=torch.int32)
    table = torch.zeros((len(k_lens), max(blocks_per)), device=dev, dtype=torch.int32)
    start = 1
    for i, b in enumerate(blocks_per):
        table[i, :b] = torch.arange(start, start + b, device=dev, dtype=torch.int32)
        start += b
    out = torch.empty_like(q)
    return lambda: flash_attn_varlen_func(
        q=q, k=kc, v=vc, out=out, cu_seqlens_q=cu_q, max_seqlen_q=max(q_lens), seqused_k=seqused,
        max_seqlen_k=max(k_lens), softmax_scale=d ** -0.5, causal=True, block_table=table,
        fa_version=VERSION)


def time_us(fn):
    for _ in range(5):
        fn()
    out = []
    for _ in range(30):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3)
    return statistics.median(out)


def main():
    print(f"# {torch.cuda.get_device_name(0)}, FlashAttention {VERSION}")
    print("model qh kvh d | prompts decodes | mixed_us prefill_us decode_us | mixed-(prefill+decode)_us")
    for name, (qh, kvh, d) in SHAPES.items():
        for p in (1, 4, 8):
            pre = time_us(call([1024] * p, [1024] * p, qh, kvh, d))
            for n in (16, 32, 64):
                dec = time_us(call([1] * n, [1100] * n, qh, kvh, d))
                mix = time_us(call([1024] * p + [1] * n, [1024] * p + [1100] * n, qh, kvh, d))
                print(f"{name} {qh} {kvh} {d} | {p} {n} | {mix:.1f} {pre:.1f} {dec:.1f} | {mix - pre - dec:+.1f}",
                      flush=True)


if __name__ == "__main__":
    main()
