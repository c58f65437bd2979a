"""How long one operator call takes on a GPU: from its kernel profile, else from the datasheet.

Two providers of the same `KernelTimes` interface (seconds per call):
- `ProfiledKernels`: interpolates a measured `KernelProfile` (`servelab sim profile`).
  GEMMs by efficiency against the datasheet roofline, interpolated in (log M, log N*K), so a
  shape that was not timed borrows the efficiency of its neighbours; elementwise kernels in
  log time over log bytes; decode attention over (batch, context) at equal KV bytes per
  sequence, and over the query tokens per sequence (a verification's K + 1) between the
  profile's query rows; prefill attention over (chunk, cached context) scaled by FLOPs; MoE over tokens
  at equal tokens per expert. Beyond the grid, time grows in proportion to the work; below
  it, it stays at the smallest point (a kernel's floor).
- `DatasheetKernels`: the roofline from the catalog's figures with kernel-family
  efficiencies per compute capability (`FAMILY_EFFICIENCY`, each sourced) and a per-kernel
  floor.

`kernel_family(weight_format, compute_capability)` is the kernel vLLM 0.25 picks for a weight
format on a GPU generation, which decides which efficiencies apply.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from servelab.hardware.catalog import GPUSpec
from servelab.sim.kernel_profile import KernelProfile

# Bytes per weight as the kernels read them (4-bit: 0.5 B + a 16-bit scale and zero per 128).
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp8_marlin": 1.0, "awq_marlin": 0.5 + 4 / 128,
                "awq_machete": 0.5 + 4 / 128}


def kernel_family(weight_format: str, compute_capability: str) -> str:
    """The GEMM kernel family vLLM 0.25.1 runs for `weight_format` on a GPU of this capability.

    4-bit weight-only (AWQ/GPTQ): Machete on Hopper (sm90; the H200 kit's AWQ server logs
    MacheteLinearKernel), Marlin on Ampere/Ada (sm80/86/89). fp8: native W8A8 CUTLASS on
    sm89/sm90 (fp8 tensor cores), weight-only fp8 Marlin on sm80/86 (no fp8 tensor cores).
    """
    major, _, minor = compute_capability.partition(".")
    cc = (int(major), int(minor or 0))
    fmt = weight_format.lower()
    if fmt in ("awq", "gptq", "int4"):
        return "awq_machete" if cc[0] == 9 else "awq_marlin"
    if fmt == "fp8":
        return "fp8" if cc >= (8, 9) else "fp8_marlin"
    return "bf16"


FAMILY_NAMES = {"bf16": "cuBLAS bf16", "fp8": "CUTLASS fp8 W8A8", "fp8_marlin": "Marlin fp8 weight-only",
                "awq_marlin": "Marlin 4-bit", "awq_machete": "Machete 4-bit"}


class KernelTimes(Protocol):
    """Seconds one operator call takes (the consumer, `operators.OperatorCostModel`, owns it)."""

    source: str

    def gemm_s(self, family: str, m: int, n: int, k: int) -> float: ...
    def elementwise_s(self, nbytes: float) -> float: ...
    def attn_decode_s(self, batch: int, context: float, q_heads: int, kv_heads: int,
                      head_dim: int, queries: float = 1.0) -> float: ...
    def attn_decode_fn(self, batch: int, q_heads: int, kv_heads: int,
                       head_dim: int, queries: float = 1.0) -> Callable[[float], float]: ...
    def attn_prefill_s(self, tokens: int, cached: float, q_heads: int, kv_heads: int,
                       head_dim: int) -> float: ...
    def moe_s(self, tokens: int, experts: int, topk: int, hidden: int, inter: int) -> float: ...


def gemm_bytes(family: str, m: int, n: int, k: int) -> float:
    """Bytes one GEMM moves: its weights in the family's format, 16-bit activations in and out."""
    return n * k * WEIGHT_BYTES.get(family, 2.0) + 2.0 * m * (n + k)


def tensor_peak_flops(gpu: GPUSpec, family: str) -> float:
    """FLOP/s of the tensor cores the family computes on (fp8 W8A8: fp8; the rest: 16-bit)."""
    peak = (gpu.dense_fp8_tflops or gpu.dense_bf16_tflops) if family == "fp8" else gpu.dense_bf16_tflops
    return peak * 1e12


def gemm_ideal_s(gpu: GPUSpec, family: str, m: int, n: int, k: int) -> float:
    """Datasheet roofline of one GEMM: max(bytes / bandwidth, FLOPs / tensor peak)."""
    return max(gemm_bytes(family, m, n, k) / (gpu.memory_bandwidth_gbs * 1e9),
               2.0 * m * n * k / tensor_peak_flops(gpu, family))


def prefill_flops(tokens: int, cached: float, q_heads: int, head_dim: int) -> float:
    """Causal attention FLOPs of a chunk of `tokens` queries after `cached` tokens (QK and AV)."""
    return 4.0 * q_heads * head_dim * tokens * (cached + (tokens + 1) / 2.0)


class _Curve:
    """y(x) from points, linear in (log x, log y); below the first point y stays at the first
    y (a floor), beyond the last it grows in proportion to x (work beyond the grid)."""

    __slots__ = ("lx", "ly", "x0", "y0", "x1", "y1")

    def __init__(self, xs: list[float], ys: list[float]) -> None:
        pts = sorted(zip(xs, ys))
        merged: dict[float, list[float]] = defaultdict(list)
        for x, y in pts:
            merged[x].append(y)
        xs2 = sorted(merged)
        ys2 = [sum(merged[x]) / len(merged[x]) for x in xs2]
        self.lx = [math.log(x) for x in xs2]
        self.ly = [math.log(max(y, 1e-12)) for y in ys2]
        self.x0, self.y0, self.x1, self.y1 = xs2[0], ys2[0], xs2[-1], ys2[-1]

    def __call__(self, x: float) -> float:
        if x <= self.x0:
            return self.y0
        if x >= self.x1:
            return self.y1 * x / self.x1
        lx = math.log(x)
        i = bisect_right(self.lx, lx) - 1
        f = (lx - self.lx[i]) / (self.lx[i + 1] - self.lx[i])
        return math.exp(self.ly[i] + f * (self.ly[i + 1] - self.ly[i]))


class _EffCurve:
    """Efficiency (0..1] over log x, linear between points, held constant beyond the ends."""

    __slots__ = ("lx", "ys")

    def __init__(self, xs: list[float], ys: list[float]) -> None:
        pts = sorted(zip(xs, ys))
        self.lx = [math.log(x) for x, _ in pts]
        self.ys = [y for _, y in pts]

    def __call__(self, x: float) -> float:
        lx = math.log(x)
        if lx <= self.lx[0]:
            return self.ys[0]
        if lx >= self.lx[-1]:
            return self.ys[-1]
        i = bisect_right(self.lx, lx) - 1
        f = (lx - self.lx[i]) / (self.lx[i + 1] - self.lx[i])
        return self.ys[i] + f * (self.ys[i + 1] - self.ys[i])


@dataclass(frozen=True, slots=True)
class _Grid2:
    """Time over (a, b): one `_Curve` over b per profiled a, linear in log a between rows,
    proportional to a beyond the last row, the first row below the first."""

    rows_a: tuple[float, ...]
    curves: tuple[_Curve, ...]

    def at(self, a: float) -> Callable[[float], float]:
        """Time over b at this a, with a's row pair and weight worked out once (a decode
        step's batch is fixed while its context grows)."""
        ra, curves = self.rows_a, self.curves
        if a <= ra[0]:
            return curves[0]
        if a >= ra[-1]:
            top, last_a = curves[-1], ra[-1]
            return lambda b: top(b) * a / last_a
        i = bisect_right(ra, a) - 1
        f = (math.log(a) - math.log(ra[i])) / (math.log(ra[i + 1]) - math.log(ra[i]))
        lo_curve, hi_curve = curves[i], curves[i + 1]

        def between(b: float) -> float:
            lo, hi = lo_curve(b), hi_curve(b)
            return math.exp(math.log(lo) + f * (math.log(hi) - math.log(lo)))
        return between


def _grid2(points: list[tuple[float, float, float]]) -> _Grid2:
    rows: dict[float, list[tuple[float, float]]] = defaultdict(list)
    for a, b, t in points:
        rows[a].append((b, t))
    keys = sorted(rows)
    return _Grid2(tuple(keys), tuple(_Curve([b for b, _ in rows[a]], [t for _, t in rows[a]])
                                     for a in keys))


# Decode attention curves `ProfiledKernels` keeps by (batch, layout, queries): a step's
# queries per sequence follow its drafts, so the key space is batch x drafts; past this many
# the memo starts again rather than grow with every new pair.
DECODE_FNS_KEPT = 1 << 16


class ProfiledKernels:
    """`KernelTimes` from a measured profile (see the module doc); families the profile
    lacks fall back to `fallback` (the datasheet provider of the same GPU)."""

    def __init__(self, profile: KernelProfile, gpu: GPUSpec, fallback: KernelTimes) -> None:
        self.profile = profile
        self.gpu = gpu
        self.fallback = fallback
        self._memo: dict[tuple[int, int, int, int], tuple[int, int, int]] = {}
        self._decode_fns: dict[tuple[int, int, int, int, float], Callable[[float], float]] = {}
        self.source = f"profiled {gpu.name} ({profile.device.gpu_name}, vLLM {profile.device.vllm})"
        self._gemm: dict[str, tuple[list[float], list[_EffCurve]]] = {}
        by_fam: dict[str, dict[tuple[int, int], list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
        for p in profile.gemm:
            eff = gemm_ideal_s(gpu, p.family, p.m, p.n, p.k) / (p.time_us * 1e-6)
            by_fam[p.family][(p.n, p.k)].append((p.m, eff))
        for fam, shapes in by_fam.items():
            keyed = sorted(shapes.items(), key=lambda kv: kv[0][0] * kv[0][1])
            lnk = [math.log(n * k) for (n, k), _ in keyed]
            curves = [_EffCurve([m for m, _ in pts], [e for _, e in pts]) for _, pts in keyed]
            self._gemm[fam] = (lnk, curves)
        self._elem = (_Curve([p.bytes for p in profile.elementwise], [p.time_us * 1e-6 for p in profile.elementwise])
                      if profile.elementwise else None)
        # per head layout: (query tokens per sequence profiled, a (batch, context) grid each)
        self._decode: dict[tuple[int, int, int], tuple[tuple[int, ...], tuple[_Grid2, ...]]] = {}
        groups: dict[tuple[int, int, int], dict[int, list[tuple[float, float, float]]]] = defaultdict(
            lambda: defaultdict(list))
        for p in profile.attention_decode:
            groups[(p.q_heads, p.kv_heads, p.head_dim)][p.queries].append(
                (p.batch, p.context, p.time_us * 1e-6))
        for key, by_q in groups.items():
            qs = tuple(sorted(by_q))
            self._decode[key] = (qs, tuple(_grid2(by_q[q]) for q in qs))
        pre: dict[tuple[int, int, int], list[tuple[float, float, float]]] = defaultdict(list)
        for p in profile.attention_prefill:
            # rows by cached context (+1: log axis), curve over chunk tokens
            pre[(p.q_heads, p.kv_heads, p.head_dim)].append((p.cached + 1.0, p.tokens, p.time_us * 1e-6))
        self._prefill: dict[tuple[int, int, int], tuple[list[float], list[_Curve]]] = {}
        for key, pts in pre.items():
            rows = sorted({c for c, _, _ in pts})
            self._prefill[key] = (rows, [_Curve([t for c, t, _ in pts if c == r],
                                                [s for c, _, s in pts if c == r]) for r in rows])
        moe: dict[tuple[int, int, int, int], list[tuple[float, float]]] = defaultdict(list)
        for p in profile.moe:
            moe[(p.experts, p.topk, p.hidden, p.intermediate)].append((p.tokens, p.time_us * 1e-6))
        self._moe = {key: _Curve([t for t, _ in pts], [s for _, s in pts]) for key, pts in moe.items()}

    def has_family(self, family: str) -> bool:
        return family in self._gemm

    def gemm_s(self, family: str, m: int, n: int, k: int) -> float:
        got = self._gemm.get(family)
        if got is None:
            return self.fallback.gemm_s(family, m, n, k)
        lnk, curves = got
        x = math.log(n * k)
        if x <= lnk[0]:
            eff = curves[0](m)
        elif x >= lnk[-1]:
            eff = curves[-1](m)
        else:
            i = bisect_right(lnk, x) - 1
            f = (x - lnk[i]) / (lnk[i + 1] - lnk[i]) if lnk[i + 1] > lnk[i] else 0.0
            eff = curves[i](m) + f * (curves[i + 1](m) - curves[i](m))
        return gemm_ideal_s(self.gpu, family, m, n, k) / max(eff, 1e-3)

    def elementwise_s(self, nbytes: float) -> float:
        if self._elem is None:
            return self.fallback.elementwise_s(nbytes)
        return self._elem(max(nbytes, 1.0))

    def _nearest(self, keys, q_heads: int, kv_heads: int, head_dim: int):
        """The profiled head layout closest to the model's: same head_dim first, then the
        GQA ratio (one model asks with one layout: the answer is memoised)."""
        memo = self._memo.get((id(keys), q_heads, kv_heads, head_dim))
        if memo is not None:
            return memo

        def dist(key):
            qh, kvh, d = key
            return (abs(math.log(d / head_dim)) * 4 + abs(math.log((qh / kvh) / (q_heads / kv_heads)))
                    + 0.1 * abs(math.log(qh / q_heads)))
        best = min(keys, key=dist)
        self._memo[(id(keys), q_heads, kv_heads, head_dim)] = best
        return best

    def attn_decode_s(self, batch: int, context: float, q_heads: int, kv_heads: int,
                      head_dim: int, queries: float = 1.0) -> float:
        return self.attn_decode_fn(batch, q_heads, kv_heads, head_dim, queries)(context)

    def attn_decode_fn(self, batch: int, q_heads: int, kv_heads: int,
                       head_dim: int, queries: float = 1.0) -> Callable[[float], float]:
        """Decode attention seconds over the context per sequence at this batch, head
        layout and query tokens per sequence (made once per batch, layout and queries,
        kept: a model asks with one layout).

        Between profiled query counts, linear in (log queries, log time); beyond the last,
        that row's time (a verification's KV bytes are the decode's; its extra score rows
        stay hidden under them at the K a drafter proposes). A profile without verification
        rows prices every query count as the decode (profiles before 2026-12-06); a layout
        profiled at verification rows alone prices a decode from its first row."""
        key5 = (batch, q_heads, kv_heads, head_dim, queries)
        got = self._decode_fns.get(key5)
        if got is not None:
            return got
        if not self._decode or batch <= 0:
            fallback = self.fallback
            got = lambda context: fallback.attn_decode_s(  # noqa: E731
                batch, context, q_heads, kv_heads, head_dim, queries)
        else:
            key = self._nearest(self._decode, q_heads, kv_heads, head_dim)
            qs, grids = self._decode[key]
            num, den = kv_heads * head_dim, key[1] * key[2]
            i = bisect_right(qs, queries) - 1
            # same KV bytes per sequence: the kernel streams blocks, its time follows the bytes
            if i < 0 or i == len(qs) - 1 or qs[i] == queries:
                grid = grids[max(i, 0)].at(batch)

                def got(context: float) -> float:
                    return grid(max(context, 1.0) * num / den)
            else:
                lo, hi = grids[i].at(batch), grids[i + 1].at(batch)
                f = math.log(queries / qs[i]) / math.log(qs[i + 1] / qs[i])

                def got(context: float) -> float:
                    c = max(context, 1.0) * num / den
                    a = math.log(lo(c))
                    return math.exp(a + f * (math.log(hi(c)) - a))
        if len(self._decode_fns) >= DECODE_FNS_KEPT:
            self._decode_fns.clear()
        self._decode_fns[key5] = got
        return got

    def attn_prefill_s(self, tokens: int, cached: float, q_heads: int, kv_heads: int,
                       head_dim: int) -> float:
        if not self._prefill or tokens <= 0:
            return self.fallback.attn_prefill_s(tokens, cached, q_heads, kv_heads, head_dim)
        key = self._nearest(self._prefill, q_heads, kv_heads, head_dim)
        rows, curves = self._prefill[key]
        # time at this chunk size for the profiled cached contexts, linear in cached between
        # (and beyond: each cached token adds the same QK/AV work per query)
        c = cached + 1.0
        if len(rows) == 1 or c <= rows[0]:
            base = curves[0](tokens)
        else:
            t_lo, t_hi = curves[0](tokens), curves[-1](tokens)
            base = t_lo + (t_hi - t_lo) * (c - rows[0]) / (rows[-1] - rows[0])
        qh_p, _, d_p = key
        return base * (q_heads * head_dim) / (qh_p * d_p)

    def moe_s(self, tokens: int, experts: int, topk: int, hidden: int, inter: int) -> float:
        if not self._moe or tokens <= 0:
            return self.fallback.moe_s(tokens, experts, topk, hidden, inter)

        def dist(key):
            e, k, h, i = key
            return (abs(math.log(e / experts)) + abs(math.log(k / topk))
                    + abs(math.log((h * i) / (hidden * inter))))
        key = min(self._moe, key=dist)
        e, k, h, i = key
        # same tokens per expert; work scaled by the experts' total size
        equiv = tokens * (topk / experts) / (k / e)
        return self._moe[key](max(equiv, 1.0)) * (experts * hidden * inter) / (e * h * i)


@dataclass(frozen=True, slots=True)
class FamilyEfficiency:
    """Fractions of the datasheet bandwidth and tensor peak one kernel family reaches."""

    bandwidth: float
    compute: float
    source: str


# Kernel-family efficiencies by compute-capability major (8: Ampere/Ada, 9: Hopper).
FAMILY_EFFICIENCY: dict[tuple[str, int], FamilyEfficiency] = {
    # cuBLAS bf16: large matrices at M <= 64 stream weights at 0.86-0.91 of the H200's
    # 4.8 TB/s and reach 0.70-0.81 of its 989 TFLOP/s at M >= 512 (profiled here,
    # docs/validation/sim-transfer-2026-12-01/profile-h200.json); L40S decode fitted 0.861
    # of 864 GB/s on the seeds' ShareGPT row (docs/simulator.md, "Validation").
    ("bf16", 8): FamilyEfficiency(0.86, 0.70, "seeds' L40S fit; H200 profile"),
    ("bf16", 9): FamilyEfficiency(0.88, 0.75, "H200 profile"),
    # CUTLASS fp8 W8A8 on the H200 profile: 0.73-0.75 of bandwidth at M <= 16 on large
    # shapes, 0.66-0.76 of the 1,979 TFLOP/s fp8 peak at M >= 1,024.
    ("fp8", 8): FamilyEfficiency(0.75, 0.65, "H200 profile, carried to Ada (same CUTLASS path)"),
    ("fp8", 9): FamilyEfficiency(0.75, 0.70, "H200 profile"),
    # Marlin on Ampere/Ada: near-ideal 4-bit speed-up (~3.9x over fp16) up to batch 16-32 on
    # an A10 (Frantar et al., "MARLIN: Mixed-Precision Auto-Regressive Parallel Inference
    # on Large Language Models", 2024, fig. 1), i.e. about fp16's own share of the
    # bandwidth; at large batch it approaches fp16 cuBLAS throughput (same paper) - taken
    # as 0.55 of peak. On Hopper it was written for Ampere: the H200 profile shows 0.43 of
    # bandwidth and 0.37 of peak.
    ("awq_marlin", 8): FamilyEfficiency(0.85, 0.55, "Marlin paper (A10)"),
    ("awq_marlin", 9): FamilyEfficiency(0.43, 0.37, "H200 profile"),
    ("fp8_marlin", 8): FamilyEfficiency(0.85, 0.55, "Marlin paper (A10), fp8 weights as 8-bit"),
    # Machete (Hopper only, wgmma): H200 profile 0.35 of bandwidth at M <= 32 on large shapes,
    # 0.75-0.78 of the bf16 peak at M >= 512 (Neural Magic's Machete write-up reports it
    # beating Marlin at large batch on H100, as here).
    ("awq_machete", 9): FamilyEfficiency(0.35, 0.75, "H200 profile"),
}
# Smallest time of a bandwidth-bound kernel inside a CUDA graph (H200 profile: fused add +
# RMSNorm of one token 2.5 us; the same order on any CUDA GPU: launch + one wave of blocks).
KERNEL_FLOOR_S = 2.5e-6
DECODE_ATTN_FLOOR_S = 8e-6      # H200 profile, FA3 decode of one short sequence
ATTN_BANDWIDTH = 0.9            # FA decode streams KV at 0.9-0.96 of the H200's bandwidth
ATTN_COMPUTE = 0.55             # FA3 prefill, 8k chunk: 0.59 of bf16 peak on the H200; FA2 ~0.5


class DatasheetKernels:
    """`KernelTimes` from the GPU catalog's datasheet figures and `FAMILY_EFFICIENCY`."""

    def __init__(self, gpu: GPUSpec) -> None:
        self.gpu = gpu
        self.major = int(gpu.compute_capability.partition(".")[0])
        self.source = f"datasheet {gpu.name}, not profiled"

    def efficiency(self, family: str) -> FamilyEfficiency:
        major = 9 if self.major >= 9 else 8
        got = FAMILY_EFFICIENCY.get((family, major)) or FAMILY_EFFICIENCY.get((family, 8))
        return got or FAMILY_EFFICIENCY[("bf16", major)]

    def gemm_s(self, family: str, m: int, n: int, k: int) -> float:
        eff = self.efficiency(family)
        return max(gemm_bytes(family, m, n, k) / (self.gpu.memory_bandwidth_gbs * 1e9 * eff.bandwidth),
                   2.0 * m * n * k / (tensor_peak_flops(self.gpu, family) * eff.compute), KERNEL_FLOOR_S)

    def elementwise_s(self, nbytes: float) -> float:
        return KERNEL_FLOOR_S + nbytes / (self.gpu.memory_bandwidth_gbs * 1e9 * 0.85)

    def attn_decode_s(self, batch: int, context: float, q_heads: int, kv_heads: int,
                      head_dim: int, queries: float = 1.0) -> float:
        """The KV read at the attention bandwidth, or the score and value FLOPs of
        `queries` tokens per sequence at the prefill's compute share, whichever is longer.
        A decode is compute-bound this way too where many query heads share few KV heads:
        an MLA model's 128 heads over one latent head at TP 1 on an A100."""
        kv = 2.0 * batch * context * kv_heads * head_dim * 2
        flops = 4.0 * batch * queries * context * q_heads * head_dim
        return DECODE_ATTN_FLOOR_S + max(
            kv / (self.gpu.memory_bandwidth_gbs * 1e9 * ATTN_BANDWIDTH),
            flops / (self.gpu.dense_bf16_tflops * 1e12 * ATTN_COMPUTE))

    def attn_decode_fn(self, batch: int, q_heads: int, kv_heads: int,
                       head_dim: int, queries: float = 1.0) -> Callable[[float], float]:
        """`attn_decode_s` over the context per sequence at this batch."""
        return lambda context: self.attn_decode_s(batch, context, q_heads, kv_heads, head_dim, queries)

    def attn_prefill_s(self, tokens: int, cached: float, q_heads: int, kv_heads: int,
                       head_dim: int) -> float:
        flops = prefill_flops(tokens, cached, q_heads, head_dim)
        return DECODE_ATTN_FLOOR_S + flops / (self.gpu.dense_bf16_tflops * 1e12 * ATTN_COMPUTE)

    def moe_s(self, tokens: int, experts: int, topk: int, hidden: int, inter: int) -> float:
        touched = experts * (1.0 - (1.0 - topk / experts) ** tokens)
        per = max(1, round(tokens * topk / touched))
        # grouped GEMMs (Triton): each touched expert's up/gate and down at its share of tokens
        gemm = touched * (self.gemm_s("bf16", per, 2 * inter, hidden) + self.gemm_s("bf16", per, hidden, inter))
        return gemm + 4 * KERNEL_FLOOR_S + self.elementwise_s(6.0 * tokens * topk * inter)
