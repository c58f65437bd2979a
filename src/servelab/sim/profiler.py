"""Measure a GPU's kernel profile (`servelab sim profile`): the operators of an engine step
timed over a grid of shapes, written as a `KernelProfile`.

Needs PyTorch with CUDA; uses vLLM's own kernels when vLLM imports (Marlin / Machete 4-bit
GEMMs, CUTLASS fp8, fused MoE, FlashAttention with paged KV, fused add + RMSNorm), else
torch's equivalents, and records which (`skipped` says why a family is missing). torch and
vLLM are optional dependencies of servelab, so they are imported here, in the one module
that needs them, when a profile is asked for.

How each point is timed (why it matches what a serving step sees):
- inside a CUDA graph of `reps` calls, replayed several times, median per call (decode
  steps run as CUDA graphs in vLLM, so launch gaps are not part of a kernel's time);
- weights rotated over enough copies that the set exceeds the L2 cache twice (a real
  step streams every layer's weights once, so none is in L2 when its GEMM runs);
- random inputs, never zeros (zeros run faster on tensor cores).
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from servelab.sim.kernel_profile import (
    AttentionDecodePoint,
    AttentionPrefillPoint,
    DeviceInfo,
    ElementwisePoint,
    GemmPoint,
    KernelProfile,
    MoePoint,
)


# Distinct routings a fused-MoE point cycles through (see `time_moe`).
MOE_ROUTINGS = 8


@dataclass(frozen=True, slots=True)
class ProfileGrid:
    """The shapes timed. `quick` is a smaller grid for a check run (a few seconds)."""

    # Past M = 64 a GEMM's time is a staircase (tiles per wave of SMs, and cuBLAS's kernel
    # choice per M), not a line: on the H200 Qwen3-14B's gate-up GEMM takes 1.47x at M = 320
    # what the log-log line between 256 and 512 gives, 1.13x at 448
    # (docs/validation/spec-verify-2026-12-06). Verification steps (K + 1 rows a sequence) and
    # mixed steps (a prefill chunk plus the decodes) land anywhere in it, so M runs every 64
    # up to 1,024, every 256 up to 2,048, then half octaves.
    gemm_m: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 96, *range(128, 1025, 64), 1280, 1536, 1792,
                               2048, 3072, 4096, 6144, 8192)
    # (N, K) per TP shard, spanning common projections: attention in/out, MLP in/out, LM head.
    gemm_nk: tuple[tuple[int, int], ...] = (
        (2048, 2048), (6144, 2048), (4096, 4096), (6144, 4096), (7168, 5120), (5120, 5120),
        (28672, 4096), (4096, 14336), (34816, 5120), (5120, 17408), (151936, 4096))
    quant_nk: tuple[tuple[int, int], ...] = (
        (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (7168, 5120), (34816, 5120),
        (5120, 17408))
    elementwise_tokens: tuple[int, ...] = (1, 4, 16, 64, 256, 1024, 4096, 8192)
    elementwise_hidden: int = 4096
    # (q_heads, kv_heads, head_dim): GQA 4 (Llama, Qwen), MHA (OLMoE), head_dim 256 (Gemma 3)
    attention_heads: tuple[tuple[int, int, int], ...] = ((32, 8, 128), (16, 16, 128), (16, 8, 256))
    decode_batch: tuple[int, ...] = (1, 4, 16, 64, 256)
    decode_context: tuple[int, ...] = (128, 512, 2048, 8192)
    # Query tokens per sequence of a speculative verification (K + 1 for K = 2, 4, 7), timed
    # over the decode's batches and contexts: the kernel reads the same KV but computes
    # K + 1 rows of scores per head, and its work split differs from the one-query decode's.
    verify_queries: tuple[int, ...] = (3, 5, 8)
    prefill_tokens: tuple[int, ...] = (64, 256, 1024, 4096, 8192)
    prefill_cached: tuple[int, ...] = (0, 4096)
    moe_tokens: tuple[int, ...] = (1, 4, 16, 64, 256, 1024, 4096, 8192)
    # (experts, topk, hidden, intermediate): Qwen3-30B-A3B, OLMoE-1B-7B, Mixtral-8x7B shapes
    moe_shapes: tuple[tuple[int, int, int, int], ...] = (
        (128, 8, 2048, 768), (64, 8, 2048, 1024), (8, 2, 4096, 14336))
    allreduce_bytes: tuple[int, ...] = (2**12, 2**14, 2**16, 2**18, 2**20, 2**22, 2**24, 2**26)
    reps: int = 20
    replays: int = 5

    @classmethod
    def quick(cls) -> ProfileGrid:
        return cls(gemm_m=(1, 64, 1024), gemm_nk=((2048, 2048), (4096, 4096)),
                   quant_nk=((4096, 4096),), elementwise_tokens=(1, 256),
                   attention_heads=((32, 8, 128),), decode_batch=(1, 16), decode_context=(512,),
                   verify_queries=(3,),
                   prefill_tokens=(256,), prefill_cached=(0,), moe_tokens=(1, 64),
                   moe_shapes=((64, 8, 2048, 1024),), allreduce_bytes=(2**16,), reps=4, replays=2)


class Timer:
    """Times a list of launches as one CUDA graph (falls back to eager launches where a
    kernel cannot be captured, and on CPU, where it only checks the code paths)."""

    def __init__(self, torch, grid: ProfileGrid) -> None:
        self.torch = torch
        self.grid = grid
        self.cuda = torch.cuda.is_available()
        self.l2_bytes = (torch.cuda.get_device_properties(0).L2_cache_size
                         if self.cuda else 64 * 2**20)

    def copies_for(self, nbytes: int) -> int:
        """How many copies of an operand of `nbytes` make a set twice the L2's size."""
        return max(1, min(64, math.ceil(2 * self.l2_bytes / max(nbytes, 1))))

    def per_call_us(self, calls: list[Callable[[], object]]) -> float:
        torch = self.torch
        for c in calls[:2]:  # warm: autotuning, lazy init, JIT
            c()
        if not self.cuda:
            t0 = time.perf_counter()
            for c in calls:
                c()
            return max((time.perf_counter() - t0) / len(calls) * 1e6, 1e-3)
        torch.cuda.synchronize()
        seq = [calls[i % len(calls)] for i in range(max(self.grid.reps, len(calls)))]
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for c in seq[:3]:
                    c()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for c in seq:
                    c()
            run = graph.replay
        except Exception:  # noqa: BLE001 - some kernels refuse capture: time them eagerly
            def run() -> None:
                for c in seq:
                    c()
        run()
        torch.cuda.synchronize()
        times = []
        for _ in range(self.grid.replays):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / len(seq))
        return max(statistics.median(times), 1e-3)


def _device(torch) -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _rand(torch, shape, dtype, device):
    return (torch.randn(shape, device=device, dtype=torch.float32) * 0.1).to(dtype)


def time_gemm_bf16(torch, timer: Timer, m: int, n: int, k: int) -> float:
    dev = _device(torch)
    dt_ = torch.bfloat16 if dev == "cuda" else torch.float32
    a = _rand(torch, (m, k), dt_, dev)
    ws = [_rand(torch, (n, k), dt_, dev) for _ in range(timer.copies_for(n * k * 2))]
    return timer.per_call_us([(lambda w=w: torch.nn.functional.linear(a, w)) for w in ws])


def time_gemm_fp8(torch, timer: Timer, ops, m: int, n: int, k: int) -> float:
    dev = "cuda"
    a = _rand(torch, (m, k), torch.bfloat16, dev).to(torch.float8_e4m3fn)
    ws = [_rand(torch, (n, k), torch.bfloat16, dev).to(torch.float8_e4m3fn).t()
          for _ in range(timer.copies_for(n * k))]
    sa = torch.ones((1, 1), device=dev, dtype=torch.float32)
    sb = torch.ones((1, 1), device=dev, dtype=torch.float32)
    if ops is not None:
        return timer.per_call_us([(lambda w=w: ops.cutlass_scaled_mm(a, w, sa, sb, torch.bfloat16))
                                  for w in ws])
    sa1, sb1 = sa.reshape(()), sb.reshape(())
    return timer.per_call_us([(lambda w=w: torch._scaled_mm(a, w, sa1, sb1, out_dtype=torch.bfloat16))
                              for w in ws])


def _act_dtype(torch, act_dtype: str):
    return torch.float16 if act_dtype == "fp16" else torch.bfloat16


def time_gemm_marlin(torch, timer: Timer, m: int, n: int, k: int, act_dtype: str = "bf16") -> float:
    """vLLM's Marlin kernel on AWQ-shaped 4-bit weights (uint4 + zero points, group 128) with
    `act_dtype` activations and scales. Weight bits are random: the kernel's time depends on
    shapes, not values."""
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.quantization.utils.marlin_utils import marlin_make_workspace_new
    from vllm.scalar_type import scalar_types

    dev, g, dt_ = "cuda", 128, _act_dtype(torch, act_dtype)
    a = _rand(torch, (m, k), dt_, dev)
    sets = []
    for _ in range(timer.copies_for(n * k // 2)):
        qw = torch.randint(-2**31, 2**31 - 1, (k // 16, n * 16 // 8), device=dev, dtype=torch.int32)
        s = (torch.rand((k // g, n), device=dev) * 0.01 + 0.001).to(dt_)
        zp = torch.randint(-2**31, 2**31 - 1, (k // g, n // 8), device=dev, dtype=torch.int32)
        sets.append((qw, s, zp))
    ws = marlin_make_workspace_new(torch.device(dev))
    return timer.per_call_us([
        (lambda qw=qw, s=s, zp=zp: ops.marlin_gemm(a, None, qw, None, s, None, None, zp, None, None,
                                                   ws, scalar_types.uint4, m, n, k, is_k_full=True))
        for qw, s, zp in sets])


def time_gemm_machete(torch, timer: Timer, m: int, n: int, k: int, act_dtype: str = "bf16") -> float:
    """vLLM's Machete kernel (Hopper) on AWQ-shaped 4-bit weights, group 128, zero points,
    `act_dtype` activations, scales and zero points (Machete is compiled per dtype)."""
    from vllm import _custom_ops as ops
    from vllm.scalar_type import scalar_types

    dev, g, dt_ = "cuda", 128, _act_dtype(torch, act_dtype)
    a = _rand(torch, (m, k), dt_, dev)
    sets = []
    for _ in range(timer.copies_for(n * k // 2)):
        raw = torch.randint(-2**31, 2**31 - 1, (k // 8, n), device=dev, dtype=torch.int32)
        bq = ops.machete_prepack_B(raw.t().contiguous().t(), dt_, scalar_types.uint4, dt_)
        s = (torch.rand((k // g, n), device=dev) * 0.01 + 0.001).to(dt_)
        z = (torch.rand((k // g, n), device=dev) * -0.08).to(dt_)
        sets.append((bq, s, z))
    return timer.per_call_us([
        (lambda bq=bq, s=s, z=z: ops.machete_mm(a, bq, scalar_types.uint4, None, s, z, g))
        for bq, s, z in sets])


def time_elementwise(torch, timer: Timer, ops, tokens: int, hidden: int) -> tuple[int, float]:
    """Fused residual add + RMSNorm (read x and residual, write both): the commonest
    per-layer bandwidth-bound kernel. Returns (bytes moved, us)."""
    dev = _device(torch)
    dt_ = torch.bfloat16 if dev == "cuda" else torch.float32
    copies = timer.copies_for(tokens * hidden * 4)
    xs = [_rand(torch, (tokens, hidden), dt_, dev) for _ in range(copies)]
    rs = [_rand(torch, (tokens, hidden), dt_, dev) for _ in range(copies)]
    w = _rand(torch, (hidden,), dt_, dev)
    nbytes = 4 * tokens * hidden * (2 if dev == "cuda" else 4)
    if ops is not None:
        calls = [(lambda x=x, r=r: ops.fused_add_rms_norm(x, r, w, 1e-6)) for x, r in zip(xs, rs)]
    else:
        def norm(x, r):
            r.add_(x)
            x.copy_(r * torch.rsqrt(r.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(r.dtype) * w)
        calls = [(lambda x=x, r=r: norm(x, r)) for x, r in zip(xs, rs)]
    return nbytes, timer.per_call_us(calls)


def time_kernel_floor(torch, timer: Timer) -> float:
    dev = _device(torch)
    x = torch.zeros(8, device=dev)
    return timer.per_call_us([lambda: x.add_(1.0)])


def copy_bandwidth_gbs(torch, timer: Timer) -> float:
    dev = _device(torch)
    n = 2**28 if dev == "cuda" else 2**22  # 1 GiB of fp32 on the GPU
    a, b = torch.empty(n, device=dev), torch.empty(n, device=dev)
    us = timer.per_call_us([lambda: b.copy_(a)])
    return 2 * 4 * n / (us * 1e-6) / 1e9


class _FlashAttention:
    """vLLM's FlashAttention over a paged KV cache (block 16), as its attention backend calls it."""

    name = "vllm-flash-attn"
    block = 16

    def __init__(self, torch) -> None:
        from vllm.vllm_flash_attn import flash_attn_varlen_func

        from vllm.vllm_flash_attn import FA3_AVAILABLE

        self.torch, self.fn = torch, flash_attn_varlen_func
        # vLLM runs FA3 on Hopper (the H200 kit carries no FA2), FA2 elsewhere.
        self.version = 3 if FA3_AVAILABLE and torch.cuda.get_device_capability(0)[0] == 9 else 2
        self.name = f"vllm-flash-attn{self.version}"

    def call(self, q_lens: list[int], k_lens: list[int], qh: int, kvh: int, d: int,
             copies: int) -> list[Callable[[], object]]:
        torch = self.torch
        dev = "cuda"
        blocks_per = [math.ceil(k / self.block) for k in k_lens]
        nblocks = sum(blocks_per) + 1
        q = _rand(torch, (sum(q_lens), qh, d), torch.bfloat16, dev)
        cu_q = torch.tensor([0, *_cumsum(q_lens)], device=dev, dtype=torch.int32)
        seqused = torch.tensor(k_lens, device=dev, dtype=torch.int32)
        width = max(blocks_per)
        table = torch.zeros((len(k_lens), width), device=dev, dtype=torch.int32)
        start = 1
        for i, b in enumerate(blocks_per):
            table[i, :b] = torch.arange(start, start + b, device=dev, dtype=torch.int32)
            start += b
        out = torch.empty_like(q)
        calls = []
        for _ in range(copies):
            kc = _rand(torch, (nblocks, self.block, kvh, d), torch.bfloat16, dev)
            vc = _rand(torch, (nblocks, self.block, kvh, d), torch.bfloat16, dev)
            calls.append(lambda kc=kc, vc=vc: self.fn(
                q=q, k=kc, v=vc, out=out, cu_seqlens_q=cu_q, max_seqlen_q=max(q_lens),
                seqused_k=seqused, max_seqlen_k=max(k_lens), softmax_scale=d ** -0.5,
                causal=True, block_table=table, fa_version=self.version))
        return calls


class _SdpaAttention:
    """torch's scaled_dot_product_attention, contiguous KV (where vLLM is absent)."""

    name = "torch-sdpa"

    def __init__(self, torch) -> None:
        self.torch = torch

    def call(self, q_lens: list[int], k_lens: list[int], qh: int, kvh: int, d: int,
             copies: int) -> list[Callable[[], object]]:
        torch = self.torch
        dev = _device(torch)
        dt_ = torch.bfloat16 if dev == "cuda" else torch.float32
        b, ql, kl = len(q_lens), q_lens[0], k_lens[0]
        q = _rand(torch, (b, qh, ql, d), dt_, dev)
        calls = []
        for _ in range(copies):
            k = _rand(torch, (b, kvh, kl, d), dt_, dev).repeat_interleave(qh // kvh, dim=1)
            v = _rand(torch, (b, kvh, kl, d), dt_, dev).repeat_interleave(qh // kvh, dim=1)
            calls.append(lambda k=k, v=v: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=ql > 1 and ql == kl))
        return calls


def _cumsum(xs: Iterable[int]) -> list[int]:
    out, t = [], 0
    for x in xs:
        t += x
        out.append(t)
    return out


def time_moe(torch, timer: Timer, tokens: int, experts: int, topk: int, hidden: int,
             inter: int) -> float:
    """Router top-k + vLLM's fused experts (Triton), uniform random routing.

    Each call routes afresh (its own gate logits): in a step every MoE layer reads its own
    experts, so a call must not find the experts the previous call read still in L2 (at one
    token the 8 experts it touches can be ~100 MB, of the order of the L2 itself)."""
    from vllm.model_executor.layers.fused_moe import fused_experts, fused_topk

    dev = "cuda"
    x = _rand(torch, (tokens, hidden), torch.bfloat16, dev)
    per = experts * 3 * hidden * inter * 2
    sets = [(_rand(torch, (experts, 2 * inter, hidden), torch.bfloat16, dev),
             _rand(torch, (experts, hidden, inter), torch.bfloat16, dev))
            for _ in range(max(1, min(4, timer.copies_for(per))))]
    gates = [_rand(torch, (tokens, experts), torch.bfloat16, dev) for _ in range(MOE_ROUTINGS)]

    def call(gate, w1, w2):
        weights, ids, _ = fused_topk(x, gate, topk, renormalize=True)
        return fused_experts(x, w1, w2, weights, ids)

    calls = [(lambda g=gates[i % len(gates)], w=sets[i % len(sets)]: call(g, *w))
             for i in range(max(len(gates), len(sets)))]
    return timer.per_call_us(calls)


def _try(skipped: dict[str, str], family: str, fn: Callable[[], object]) -> object | None:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a family that fails is recorded, not fatal
        skipped[family] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        return None


def _device_info(torch, vllm_version: str | None) -> DeviceInfo:
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        driver = None
        try:
            import pynvml

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            driver = driver.decode() if isinstance(driver, bytes) else driver
        except Exception:  # noqa: BLE001 - the driver version is informative only
            driver = None
        return DeviceInfo(gpu_name=p.name, compute_capability=f"{p.major}.{p.minor}",
                          sm_count=p.multi_processor_count, memory_total_mib=p.total_memory // 2**20,
                          driver=driver, cuda=torch.version.cuda, torch=torch.__version__,
                          vllm=vllm_version)
    return DeviceInfo(gpu_name="cpu", compute_capability="0.0", sm_count=1, memory_total_mib=1,
                      torch=torch.__version__, vllm=vllm_version)


def measure_quant_gemms(torch, timer: Timer, ops, grid: ProfileGrid, skipped: dict[str, str],
                        log: Callable[[str], None], act_dtype: str = "bf16") -> list[GemmPoint]:
    """The fp8 and 4-bit GEMM families this GPU runs, over `grid.quant_nk` x `grid.gemm_m`,
    the 4-bit ones with `act_dtype` activations. The profile times bf16: on the H200 the
    fp16 builds of Machete and Marlin take the same time (median ratio 1.00-1.04 over the
    grid, docs/validation/sim-host-2026-12-01), so an fp16 (AWQ) model reads the same points."""
    cuda = torch.cuda.is_available()
    families: list[tuple[str, Callable[[int, int, int], float]]] = []
    if cuda and (torch.cuda.get_device_capability(0) >= (8, 9)):
        families.append(("fp8", lambda m, n, k: time_gemm_fp8(torch, timer, ops, m, n, k)))
    else:
        skipped["fp8"] = "no fp8 tensor cores (compute capability < 8.9)" if cuda else "no GPU"
    if cuda and ops is not None:
        families.append(("awq_marlin", lambda m, n, k: time_gemm_marlin(torch, timer, m, n, k, act_dtype)))
        if torch.cuda.get_device_capability(0)[0] == 9:
            families.append(("awq_machete", lambda m, n, k: time_gemm_machete(torch, timer, m, n, k, act_dtype)))
        else:
            skipped["awq_machete"] = "Machete runs on Hopper (sm90) only"
    else:
        for fam in ("awq_marlin", "awq_machete"):
            skipped.setdefault(fam, "needs vLLM's kernels on a GPU")
    out: list[GemmPoint] = []
    for fam, fn in families:
        before = len(out)
        for n, k in grid.quant_nk:
            for m in grid.gemm_m:
                us = _try(skipped, fam, lambda: fn(m, n, k))
                if us is None:
                    break
                out.append(GemmPoint(family=fam, m=m, n=n, k=k, time_us=us))
            if fam in skipped:
                break
        log(f"{fam} gemm ({act_dtype}): {len(out) - before} points" + (f" ({skipped[fam]})" if fam in skipped else ""))
    return out


def measure(grid: ProfileGrid, log: Callable[[str], None]) -> KernelProfile:
    """Time every family of `grid` on GPU 0 (see the module doc)."""
    import torch

    t0 = time.monotonic()
    skipped: dict[str, str] = {}
    vllm_version, ops = None, None
    try:
        import vllm
        from vllm import _custom_ops as vllm_ops

        vllm_version, ops = vllm.__version__, vllm_ops
    except Exception as exc:  # noqa: BLE001 - profile with torch alone
        skipped["vllm"] = f"vLLM not importable ({type(exc).__name__}): torch kernels only"
    cuda = torch.cuda.is_available()
    torch.manual_seed(0)
    timer = Timer(torch, grid)
    info = _device_info(torch, vllm_version)
    log(f"device {info.gpu_name} sm {info.compute_capability} torch {info.torch} vllm {vllm_version}")
    bw = copy_bandwidth_gbs(torch, timer)
    floor = time_kernel_floor(torch, timer)
    log(f"copy {bw:.0f} GB/s, kernel floor {floor:.2f} us")

    gemm: list[GemmPoint] = []
    for n, k in grid.gemm_nk:
        for m in grid.gemm_m:
            us = _try(skipped, "bf16", lambda: time_gemm_bf16(torch, timer, m, n, k))
            if us is None:
                break
            gemm.append(GemmPoint(family="bf16", m=m, n=n, k=k, time_us=us))
    log(f"bf16 gemm: {len(gemm)} points")
    gemm.extend(measure_quant_gemms(torch, timer, ops, grid, skipped, log))

    elementwise = []
    for t in grid.elementwise_tokens:
        got = _try(skipped, "elementwise",
                   lambda: time_elementwise(torch, timer, ops if cuda else None, t, grid.elementwise_hidden))
        if got is not None:
            elementwise.append(ElementwisePoint(bytes=got[0], time_us=got[1]))
    log(f"elementwise: {len(elementwise)} points")

    backend = None
    if cuda and ops is not None:
        backend = _try(skipped, "flash_attn", lambda: _FlashAttention(torch))
    if backend is None:
        backend = _SdpaAttention(torch)
    decode: list[AttentionDecodePoint] = []
    prefill: list[AttentionPrefillPoint] = []
    for qh, kvh, d in grid.attention_heads:
        for ql in (1, *grid.verify_queries):
            for b in grid.decode_batch:
                for c in grid.decode_context:
                    kv_bytes = 2 * b * c * kvh * d * 2
                    calls = _try(skipped, f"decode_{backend.name}", lambda: backend.call(
                        [ql] * b, [c] * b, qh, kvh, d, timer.copies_for(kv_bytes)))
                    us = (_try(skipped, f"decode_{backend.name}", lambda: timer.per_call_us(calls))
                          if calls else None)
                    if us is not None:
                        decode.append(AttentionDecodePoint(
                            backend=backend.name, batch=b, context=c, queries=ql, q_heads=qh,
                            kv_heads=kvh, head_dim=d, time_us=us))
        for t in grid.prefill_tokens:
            for cached in grid.prefill_cached:
                if not isinstance(backend, _FlashAttention) and cached:
                    continue  # SDPA's causal mask assumes no cached context
                calls = _try(skipped, f"prefill_{backend.name}", lambda: backend.call(
                    [t], [t + cached], qh, kvh, d, 2))
                us = _try(skipped, f"prefill_{backend.name}", lambda: timer.per_call_us(calls)) if calls else None
                if us is not None:
                    prefill.append(AttentionPrefillPoint(backend=backend.name, tokens=t, cached=cached,
                                                         q_heads=qh, kv_heads=kvh, head_dim=d, time_us=us))
    log(f"attention ({backend.name}): {len(decode)} decode, {len(prefill)} prefill points")

    moe: list[MoePoint] = []
    if cuda and ops is not None:
        for e, topk, h, inter in grid.moe_shapes:
            for t in grid.moe_tokens:
                us = _try(skipped, "moe", lambda: time_moe(torch, timer, t, e, topk, h, inter))
                if us is None:
                    break
                moe.append(MoePoint(tokens=t, experts=e, topk=topk, hidden=h, intermediate=inter, time_us=us))
    else:
        skipped.setdefault("moe", "needs vLLM's fused MoE kernel on a GPU")
    log(f"moe: {len(moe)} points")
    if cuda and torch.cuda.device_count() < 2:
        skipped["allreduce"] = "one GPU: all-reduce priced from the catalog's link figures"
    elif cuda:
        # One process per GPU (torchrun) is what NCCL needs; this command runs in one process.
        skipped["allreduce"] = "not measured (needs one process per GPU): priced from the link figures"
    return KernelProfile(
        device=info, measured_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        took_s=round(time.monotonic() - t0, 1), copy_bandwidth_gbs=bw, kernel_floor_us=floor,
        gemm=gemm, elementwise=elementwise, attention_decode=decode, attention_prefill=prefill,
        moe=moe, allreduce=[], skipped=skipped)
