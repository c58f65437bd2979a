"""How long one simulated engine step takes: the planner's roofline plus the CPU around it.

step = GPU time + CPU time, where
- GPU time = `servelab.plan.roofline.step_time(...)` with the efficiency factors
  (`bandwidth_frac`, `compute_frac`): max(memory, compute) + `overlap_penalty` x
  min(memory, compute) + TP all-reduce over the interconnect, memory = bytes / (peak BW x
  bandwidth_frac), compute = FLOPs / (peak FLOP/s x compute_frac). The penalty term is
  what a pure roofline misses on mixed steps: a prefill chunk riding on a decode batch
  lengthens the step (seeds, L40S: p99 ITL 57-59 ms with 256-token chunks over a 43 ms
  decode step) even while the step is nominally memory-bound;
- PP = n: a step's batch crosses n stages one after another, each holding 1/n of the layers,
  plus (n - 1) activation hops; the simulator runs one batch at a time, so at any load the
  pipeline is as bubbly as at concurrency 1 (vLLM V1 overlaps up to n batches; see
  docs/simulator.md: PP throughput is a lower bound);
- CPU time = `step_overhead_ms` (scheduling, input preparation, launch, sampling,
  detokenising: what BLIS leaves out) + `per_seq_us` x scheduled sequences +
  `per_prefill_token_us` x prefill tokens.
Quantized weights stream at `bandwidth_frac` x a per-format factor (on Hopper, AWQ decode ran
at under half of bf16's effective bandwidth: seeds, and the H200 cells of
docs/validation/h200-2026-11-29); KV reads and writes keep the base `bandwidth_frac`.

For speed, the roofline is probed once per model/GPU/factors at construction and turned
into an exact linear form (`LinearCost`) when it is linear in the step's four counts (the
planner's roofline is); otherwise every step calls the planner (slower, same answer).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servelab.errors import ServelabError


class StepCounts(Protocol):
    """The four numbers a step's cost depends on (the planner's `StepShape` has them)."""

    decode_seqs: int
    decode_context_tokens: int
    prefill_tokens: int
    prefill_context_tokens: int


class CostModel(Protocol):
    """Anything that can price a step (seconds of virtual time)."""

    def step_duration_s(self, shape: StepCounts) -> float: ...


class Calibration(BaseModel):
    """Efficiency factors and overheads for one GPU class (saved as JSON by `sim calibrate`).

    `request_overhead_ms` is the per-request time outside the engine's steps (HTTP, JSON,
    tokenisation, first SSE chunk), paid once before the request reaches the engine; the
    time from a step's end to the client is taken as zero (it shifts every token alike, so
    ITL does not see it). `fit_error_pct` holds the remaining error per result:metric.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_class: str = Field(description="GPU class these factors were fitted on, e.g. L40S")
    bandwidth_frac: float = Field(gt=0, le=1.0)
    compute_frac: float = Field(gt=0, le=1.0)
    overlap_penalty: float = Field(0.5, ge=0, le=1.0, description=(
        "fraction of the smaller roofline term (memory or compute) not hidden under the larger"))
    step_overhead_ms: float = Field(ge=0)
    per_seq_us: float = Field(ge=0)
    per_prefill_token_us: float = Field(ge=0)
    request_overhead_ms: float = Field(ge=0)
    fitted_on: tuple[str, ...] = ()
    fit_error_pct: dict[str, float] = Field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Calibration:
        try:
            return cls.model_validate(json.loads(path.read_text()))
        except FileNotFoundError as exc:
            raise ServelabError(f"--calibration: {path} does not exist") from exc
        except json.JSONDecodeError as exc:
            raise ServelabError(f"--calibration: {path} line {exc.lineno}: not JSON ({exc.msg})") from exc
        except ValidationError as exc:
            raise ServelabError(f"--calibration: {path} is not a calibration: {exc.errors()[0]['loc']}: "
                                f"{exc.errors()[0]['msg']}") from exc

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.model_dump(mode="json"), indent=2) + "\n")
        tmp.replace(path)


# Defaults per GPU class. L40S: fitted by `servelab sim calibrate` on the seeds' ShareGPT row
# (docs/simulator.md, "Validation"); H200: fitted on half of the real H200 run's cells
# (docs/validation/h200-2026-11-29); the rest use the H200 figures for data-centre parts and
# L40S for PCIe parts.
DEFAULT_CALIBRATIONS: dict[str, Calibration] = {
    # `python bench/sim_validate.py --fit --tokenizer <Qwen3 tokenizer.json>` (80 simulations).
    "L40S": Calibration(gpu_class="L40S", bandwidth_frac=0.861, compute_frac=0.449,
                        overlap_penalty=0.598, step_overhead_ms=2.44, per_seq_us=20.0,
                        per_prefill_token_us=0.5, request_overhead_ms=3.16,
                        fitted_on=("seeds: L40S ShareGPT 2000 prompts, rate 10, c10",)),
    # Fitted by docs/validation/h200-2026-11-29/simcheck.py ("joint", 60 simulations) on 12
    # cells of the real H200 run (vLLM 0.25.1, Qwen3-14B): c1 and c32 of ShareGPT, prefix
    # repetition and random 1024/128, bf16 and AWQ (AWQ through WEIGHT_FORMAT_FACTOR). The
    # request overhead (~16 ms) carries what c1's TTFT holds beyond one prefill step.
    "H200": Calibration(gpu_class="H200", bandwidth_frac=0.673, compute_frac=0.853,
                        overlap_penalty=0.408, step_overhead_ms=0.24, per_seq_us=20.0,
                        per_prefill_token_us=0.5, request_overhead_ms=15.85,
                        fitted_on=("H200 vLLM 0.25.1, bf16 + AWQ: sharegpt/prefix/random c1, c32",)),
}
_CLASS_FALLBACK = "H200"
_PCIE_CLASSES = ("L40", "L4", "A10", "A40", "RTX", "T4")

# Weight-format factor on bandwidth_frac (quantized GEMMs reach less of the bandwidth).
WEIGHT_FORMAT_FACTOR: dict[str, float] = {"bf16": 1.0, "fp16": 1.0, "fp8": 0.9, "awq": 0.45,
                                          "gptq": 0.45, "int4": 0.45, "int8": 0.8}


def default_calibration(gpu_name: str) -> Calibration:
    """The shipped factors for `gpu_name` (matched by class name inside it, e.g. "L40S-48GB")."""
    key = gpu_name.upper().replace("NVIDIA", "").replace(" ", "")
    for cls_name in DEFAULT_CALIBRATIONS:
        if cls_name in key:
            return DEFAULT_CALIBRATIONS[cls_name]
    if any(p in key for p in _PCIE_CLASSES):
        return DEFAULT_CALIBRATIONS["L40S"].model_copy(update={"gpu_class": key})
    return DEFAULT_CALIBRATIONS[_CLASS_FALLBACK].model_copy(update={"gpu_class": key})


def weight_format_factor(quantization: str | None) -> float:
    if quantization is None:
        return 1.0
    return WEIGHT_FORMAT_FACTOR.get(quantization.lower(), 0.6)


def _extra_weight_seconds(model: Any, gpu: Any, args: Any, cal: Calibration,
                          quantization: str | None) -> Any:
    """Seconds a step's weight reads take beyond the base bandwidth, as a function of the
    step's token count: weight bytes / (peak x bandwidth_frac) x (1 / format factor - 1);
    None for 16-bit weights (factor 1)."""
    factor = weight_format_factor(quantization)
    if factor == 1.0:
        return None
    from servelab.models.costs import weights_read_bytes

    rate = gpu.memory_bandwidth_gbs * 1e9 * cal.bandwidth_frac
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size

    def extra(tokens: int) -> float:
        return weights_read_bytes(model, tokens, tp, pp) / rate * (1.0 / factor - 1.0)

    return extra


@dataclass(frozen=True, slots=True)
class LinearCost:
    """An exact linear roofline: GPU = max(memory, compute) + all-reduce, each affine in the
    step's counts (coefficients in seconds per unit), plus CPU overheads."""

    mem: tuple[float, float, float, float, float]      # const, d_seqs, d_ctx, p_tok, p_ctx
    comp: tuple[float, float, float, float, float]
    allreduce: tuple[float, float, float, float, float]
    pp_stages: int
    pp_hop_s: float
    step_overhead_s: float
    per_seq_s: float
    per_prefill_token_s: float
    overlap_penalty: float = 0.0  # share of min(memory, compute) not hidden under the max
    allreduce_fixed_s: float = 0.0  # TP all-reduce latency of a step that runs any token

    def gpu_s(self, shape: StepCounts) -> float:
        d, dc, p, pc = (shape.decode_seqs, shape.decode_context_tokens, shape.prefill_tokens,
                        shape.prefill_context_tokens)
        m, c, a = self.mem, self.comp, self.allreduce
        mem = m[0] + m[1] * d + m[2] * dc + m[3] * p + m[4] * pc
        comp = c[0] + c[1] * d + c[2] * dc + c[3] * p + c[4] * pc
        hi, lo = (mem, comp) if mem > comp else (comp, mem)
        ar = a[0] + a[1] * d + a[2] * dc + a[3] * p + a[4] * pc
        if d or p:
            ar += self.allreduce_fixed_s
        return hi + self.overlap_penalty * lo + ar

    def step_duration_s(self, shape: StepCounts) -> float:
        # With PP the batch crosses every stage in turn (no microbatch overlap: see module doc).
        gpu = self.pp_stages * self.gpu_s(shape) + (self.pp_stages - 1) * self.pp_hop_s
        seqs = shape.decode_seqs + (1 if shape.prefill_tokens else 0)
        return (gpu + self.step_overhead_s + self.per_seq_s * seqs
                + self.per_prefill_token_s * shape.prefill_tokens)


def _vec(st: Any) -> tuple[float, float, float]:
    return (st.memory_s, st.compute_s, st.allreduce_s)


def linearize_roofline(step_time_fn: Any, pp_stages: int, pp_hop_s: float,
                       cal: Calibration) -> LinearCost | None:
    """Fit `LinearCost` to `step_time_fn(d_seqs, d_ctx, p_tok, p_ctx) -> StepTime` from five
    probes; None when three other probes show the roofline is not linear in the counts."""
    base = _vec(step_time_fn(0, 0, 0, 0))
    d = [(x - b) / 64 for x, b in zip(_vec(step_time_fn(64, 0, 0, 0)), base)]
    dc = [(x - b - e) / 65536 for x, b, e in zip(_vec(step_time_fn(1, 65536, 0, 0)), base, d)]
    p = [(x - b) / 4096 for x, b in zip(_vec(step_time_fn(0, 0, 4096, 0)), base)]
    pc = [(x - b - e) / 65536 for x, b, e in zip(_vec(step_time_fn(0, 0, 1, 65536)), base, p)]
    # TP all-reduce: a latency per call once any token runs, plus wire time per token.
    ar1, ar65 = step_time_fn(1, 0, 0, 0).allreduce_s, step_time_fn(65, 0, 0, 0).allreduce_s
    ar_tok = (ar65 - ar1) / 64
    lin = LinearCost(
        mem=(base[0], d[0], dc[0], p[0], pc[0]), comp=(base[1], d[1], dc[1], p[1], pc[1]),
        allreduce=(0.0, ar_tok, 0.0, ar_tok, 0.0), allreduce_fixed_s=ar1 - ar_tok,
        pp_stages=pp_stages, pp_hop_s=pp_hop_s, step_overhead_s=cal.step_overhead_ms / 1e3,
        per_seq_s=cal.per_seq_us / 1e6, per_prefill_token_s=cal.per_prefill_token_us / 1e6)
    for shape in ((7, 9000, 300, 2000), (100, 120000, 2048, 30000), (1, 1024, 0, 0)):
        want = step_time_fn(*shape).total_s
        if abs(lin.gpu_s(_Counts(*shape)) - want) > 1e-9 + 1e-6 * want:
            return None
    return replace(lin, overlap_penalty=cal.overlap_penalty)


@dataclass(frozen=True, slots=True)
class _Counts:
    decode_seqs: int
    decode_context_tokens: int
    prefill_tokens: int
    prefill_context_tokens: int


class RooflineCostModel:
    """The planner's roofline for one model on one GPU with `EngineArgs`, plus CPU costs.

    `model`, `gpu`, `args` are the planner's `ModelGeometry`, `GPUSpec`, `EngineArgs`.
    """

    def __init__(self, model: Any, gpu: Any, args: Any, cal: Calibration,
                 quantization: str | None = None) -> None:
        from servelab.plan.roofline import Efficiency, StepShape, step_time

        self.calibration = cal
        eff = Efficiency(bandwidth_frac=cal.bandwidth_frac, compute_frac=cal.compute_frac)
        # The weight format slows the quantized GEMMs' weight streaming only: KV reads and
        # writes (attention kernels, 16-bit KV) run at the base bandwidth (H200 AWQ cells:
        # charging KV at AWQ's rate overpriced c64 decode steps by 14-18 %).
        extra_weight_s = _extra_weight_seconds(model, gpu, args, cal, quantization)

        def fn(d: int, dc: int, p: int, pc: int) -> Any:
            shape = StepShape(decode_seqs=d, decode_context_tokens=dc, prefill_tokens=p,
                              prefill_context_tokens=pc)
            st = step_time(model, gpu, args, shape, eff)
            if extra_weight_s is None:
                return st
            memory_s = st.memory_s + extra_weight_s(d + p)
            return replace(st, memory_s=memory_s,
                           total_s=max(memory_s, st.compute_s) + st.allreduce_s)

        pp = args.pipeline_parallel_size
        self._fn = fn
        self._lin = linearize_roofline(fn, pp, 0.0, cal)
        self._slow = LinearCost(mem=(0.0,) * 5, comp=(0.0,) * 5, allreduce=(0.0,) * 5,
                                overlap_penalty=cal.overlap_penalty, pp_stages=pp, pp_hop_s=0.0,
                                step_overhead_s=cal.step_overhead_ms / 1e3,
                                per_seq_s=cal.per_seq_us / 1e6,
                                per_prefill_token_s=cal.per_prefill_token_us / 1e6)

    @property
    def linear(self) -> LinearCost | None:
        """The exact linear form in use (None when every step calls the planner)."""
        return self._lin

    def step_duration_s(self, shape: StepCounts) -> float:
        """Seconds one step with these counts takes (GPU roofline + CPU overheads)."""
        if self._lin is not None:
            return self._lin.step_duration_s(shape)
        st = self._fn(shape.decode_seqs, shape.decode_context_tokens, shape.prefill_tokens,
                      shape.prefill_context_tokens)
        stage = st.total_s + self.calibration.overlap_penalty * min(st.memory_s, st.compute_s)
        return st.pipeline_stages * stage + self._slow.step_duration_s(shape)
