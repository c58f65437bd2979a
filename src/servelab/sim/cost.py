"""How long one simulated engine step takes: the operator model's GPU time plus a residual.

step = PP x (GPU time of one stage x `gpu_time_scale`) + (PP - 1) activation hops + CPU:
- GPU time: `servelab.sim.operators.OperatorModel`, the kernels vLLM runs for the step,
  each timed from the GPU's kernel profile (`servelab sim profile`; the H200's ships with
  servelab) or, for a GPU without one, from its datasheet with kernel-family efficiencies
  (`servelab.sim.kernels`). Every prediction names which (`OperatorCostModel.source`);
- PP = n: as vLLM V1, up to n micro-batches are in flight: the step's sequences split into
  k = min(n, sequences) micro-batches, each crosses the n stages in turn, so a sequence
  advances one token per n x (stage time of 1/k of the step) + hops + the first and last
  stages' own work (embedding, final norm, LM head, sampler) once. At concurrency 1 that
  is n full stages (all bubbles); at high load each stage runs a k-th of the batch, which
  pays where the step is compute-bound (prefill) and not where weight reads dominate;
- CPU and graph residual (`Calibration`, one set per GPU class, the same for every model):
  a stage takes max(kernel time x `gpu_time_scale` + `per_prefill_token_us` x its prefill
  tokens, CPU launches x `launch_us`) (the GPU cannot run ahead of its launches; a full
  CUDA graph is one launch; a dense model on vLLM's V1 runner launches at `v1_launch_us`),
  then `step_overhead_ms` + `per_seq_us` x scheduled sequences; `request_overhead_ms` once
  per request before the engine sees it. `per_prefill_token_us` is GPU time a served
  prefill step spends beyond the profile's kernels on vLLM's V2 model runner (a GPU-bound
  6-8k-token step runs 13 % over their sum on Qwen3-4B; the V1 runner's show none:
  docs/validation/sim-steptrace-2026-12-07, `prefill.py`). The
  replica's API server is not a residual: its figures (`frontend_*`, `H200_API_SERVER`)
  are measured, and `servelab.sim.offline` runs it as vLLM's two workers (the tokenizer
  worker, one request at a time; the event loop: intake, hand-off, step outputs, chunks).
- the engine's CPU work per step (schedule, prepare inputs, process outputs: `cpu_step_ms`
  + `cpu_per_seq_us` x sequences) overlaps the GPU's under asynchronous scheduling (vLLM's
  default). vLLM 0.25.1 runs two model runners (`servelab.plan.args.uses_v1_model_runner`): dense models on
  its V2 runner, whose CPU work stays hidden (Qwen3-0.6B's batch-1 step, 1.72 ms, is its
  GPU path, sliding-window models included), and MoE models outside a short list and
  n-gram and draft-model speculation on the V1 runner (vLLM also puts Mamba-hybrid models
  there; the catalog has none), whose CPU work is a floor under every step: a step takes
  max(the GPU path above, the CPU's work). A model whose GPU step is shorter is CPU-bound
  (OLMoE-1B-7B at batch 1: 1.52 ms of kernels in the engine's own trace, a 2.06 ms step).
  Without asynchronous scheduling (`--no-async-scheduling`, n-gram and draft-model
  speculation) the two run one after the other and the CPU's work is added to every step,
  and a step on piecewise graphs adds `sync_piecewise_layer_us` per layer over a full
  graph (its graph pieces and the attention between them run from Python with nothing to
  hide behind; under asynchronous scheduling that work overlaps the previous step's);
- speculative decoding (`SpecCost`): the target verifies 1 + draft tokens per decoding
  sequence in one forward (GEMM and logit rows grow with the drafts, weight reads do not),
  on a full CUDA graph only when every sequence carries a whole draft (vLLM's uniform
  decode batch; any other batch replays piecewise graphs), then a draft model or EAGLE
  head runs its K forwards in the same step: the first over the step's tokens, the
  others over one token per sequence. An EAGLE-type head replays piecewise graphs (vLLM
  captures no full graph for drafters); a draft model gets none (vLLM 0.25.1 initialises
  the drafter's graph keys for EAGLE-type methods only) and launches every kernel, so a
  forward takes max(its kernels, its layers x `draft_layer_us`, the host's CPU time per
  drafter layer). A speculative step then adds `spec_step_us` + `spec_per_seq_us` x
  sequences, fitted per GPU host on the served cells of one arm (n-gram K = 2, c1-c64) and
  held out on the others. It is a residual, not the speculative path's CPU: timed inside
  vLLM, the runner's own speculative work (proposer, rejection-sampler launches, parsing and
  bookkeeping of the drafts) is up to 2 ms a step over the non-speculative CPU terms on both
  models tried, the n-gram proposer 0.1-1.2 ms. The rest is in the engine's step itself: on
  one machine the served step equals the offline one at the same shapes, and the operator
  model without the line lacks 2.3 / 5.2 / 9.9 / 15.2 ms at batch 16 / 64 / 128 / 256 on
  Llama-3.1-8B, cause not yet separated. That time grows less past ~128 and the line does
  not, so it overprices larger batches (docs/validation/spec-cpu-2026-12-03,
  docs/validation/spec-gil-2026-12-04).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servelab.errors import ServelabError
from servelab.hardware.catalog import GPUSpec, NodeLayout, match_gpu
from servelab.models.geometry import ModelGeometry
from servelab.plan.args import EngineArgs
from servelab.storage import read_json, write_atomic
from servelab.sim.kernel_profile import KernelProfile
from servelab.sim.kernels import DatasheetKernels, KernelTimes, ProfiledKernels
from servelab.sim.operators import OperatorModel, StepParts

PROFILE_DIR = Path(__file__).resolve().parent.parent / "data" / "profiles"
# The kernel profiles servelab ships, by GPU catalog name (measured with `servelab sim profile`).
SHIPPED_PROFILES: Mapping[str, str] = MappingProxyType({"H200": "h200.json", "H100-SXM": "h100-sxm.json"})


class StepCounts(Protocol):
    """What a step's cost depends on (the scheduler's `ScheduledStep` has them)."""

    decode_seqs: int
    decode_context_tokens: int
    prefill_tokens: int
    prefill_context_tokens: int
    prefill_seqs: int
    draft_tokens: int
    drafting_seqs: int


class CostModel(Protocol):
    """Anything that can price a step (seconds of virtual time) and say how it does.

    The price must depend on the step's counts alone (the engine memoises decode-only
    steps by their counts: `servelab.sim.engine.DecodeStepTimes`)."""

    @property
    def source(self) -> str: ...

    def step_duration_s(self, shape: StepCounts) -> float: ...


# The calibration's figures that are host CPU time (single-threaded Python, launches), so
# move with the host's speed (`Calibration.on_host`); every other field is the GPU's or a record.
HOST_CPU_FIELDS = (
    "step_overhead_ms", "per_seq_us", "launch_us", "v1_launch_us",
    "request_overhead_ms", "frontend_us_per_prompt_token", "frontend_us_per_output_token",
    "frontend_us_per_chunk", "frontend_us_per_request", "frontend_handoff_us",
    "frontend_tokenize_us", "cpu_step_ms", "cpu_per_seq_us", "draft_layer_us",
    "sync_piecewise_layer_us", "spec_step_us", "spec_per_seq_us")


class Calibration(BaseModel):
    """The residual the kernels leave, for one GPU class (JSON, written by `sim calibrate`).

    `request_overhead_ms` is the per-request time outside the engine's steps (HTTP, JSON,
    tokenisation, first SSE chunk), paid once before the request reaches the engine.
    `fit_error_pct` holds the remaining error per result:metric on the fitted cells,
    `held_out_error_pct` on cells of models the fit did not see.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_class: str = Field(description="GPU class these figures were fitted on, e.g. H200")
    gpu_time_scale: float = Field(1.0, gt=0.5, lt=2.0, description=(
        "measured step GPU time / the kernels' sum (clocks under sustained load, gaps)"))
    step_overhead_ms: float = Field(ge=0)
    per_seq_us: float = Field(ge=0)
    per_prefill_token_us: float = Field(0.0, ge=0, description=(
        "GPU time per prefill token beyond the profile's kernels, on a step's GPU path, "
        "vLLM's V2 runner only (measured from a fit model's GPU-bound prefill steps, not "
        "fitted from summaries)"))
    launch_us: float = Field(0.0, ge=0, description=(
        "CPU time per kernel or graph launch outside a full CUDA graph"))
    v1_launch_us: float = Field(0.0, ge=0, description=(
        "the same for a dense model on vLLM's V1 model runner (n-gram and draft-model "
        "speculation in 0.25.1), whose steps outside graphs cost the host less than the V2 runner's"))
    request_overhead_ms: float = Field(ge=0)
    frontend_us_per_prompt_token: float = Field(0.0, ge=0, description=(
        "API-server tokenizer time per prompt token, one request at a time per replica"))
    frontend_us_per_output_token: float = Field(0.0, ge=0, description=(
        "API-server event-loop time per output token of a step (detokenise, outputs)"))
    frontend_us_per_chunk: float = Field(0.0, ge=0, description=(
        "API-server event-loop time per SSE chunk sent; tokens waiting for a chunk join it"))
    frontend_us_per_request: float = Field(0.0, ge=0, description=(
        "API-server event-loop time per request before tokenising (HTTP, validation)"))
    frontend_handoff_us: float = Field(0.0, ge=0, description=(
        "API-server event-loop time per request after tokenising (hand-off to the engine)"))
    frontend_tokenize_us: float = Field(0.0, ge=0, description=(
        "API-server tokenizer time per request on top of the per-prompt-token time"))
    cpu_step_ms: float = Field(0.0, ge=0, description=(
        "the engine's CPU time per step (schedule, inputs, outputs): a floor under the step "
        "with async scheduling, added to it without"))
    cpu_per_seq_us: float = Field(0.0, ge=0, description=(
        "the same per scheduled sequence"))
    draft_layer_us: float = Field(0.0, ge=0, description=(
        "CPU time per drafter layer and forward where the drafter runs outside CUDA graphs "
        "(vLLM 0.25.1's draft_model method: every kernel launched from Python)"))
    sync_piecewise_layer_us: float = Field(0.0, ge=0, description=(
        "time per layer a step on piecewise CUDA graphs adds over a full graph when nothing "
        "overlaps it (synchronous scheduling): graph pieces and attention run from Python"))
    spec_step_us: float = Field(0.0, ge=0, description=(
        "time per step with speculative decoding on top of the engine's CPU terms: a "
        "residual fitted on served speculative cells (the runner's own speculative CPU is "
        "up to 2 ms of it; the rest is the engine step's, served or offline alike, its "
        "cause not yet separated)"))
    spec_per_seq_us: float = Field(0.0, ge=0, description=(
        "the same residual per sequence per step (fitted at batches up to 64; the measured "
        "residual grows less past ~128, so this overprices larger batches)"))
    host_cpu_scale: float = Field(1.0, gt=0, description=(
        "the factor the host-CPU figures carry against the host they were measured on "
        "(`on_host`; 1.5: priced for a host whose CPU work takes 1.5x as long)"))
    fitted_on: tuple[str, ...] = ()
    fit_error_pct: dict[str, float] = Field(default_factory=dict)
    held_out_error_pct: dict[str, float] = Field(default_factory=dict)

    def on_host(self, scale: float) -> Calibration:
        """These figures for a host whose CPU work takes `scale` times as long: every
        host-CPU figure (`HOST_CPU_FIELDS`: the API server, the tokenizer, the scheduler, the
        launches, the speculative residual) times `scale`; the GPU's (`gpu_time_scale`, the
        kernel profile) as they are. Two machines of one GPU kind differ here by up to 1.7x
        (docs/validation/spec-gil-2026-12-04)."""
        if not scale > 0:
            raise ValueError(f"host CPU scale {scale!r}: must be > 0")
        update: dict[str, float] = {f: getattr(self, f) * scale for f in HOST_CPU_FIELDS}
        update["host_cpu_scale"] = self.host_cpu_scale * scale
        return self.model_copy(update=update)

    @classmethod
    def load(cls, path: Path) -> Calibration:
        data = read_json(path, "--calibration")
        if isinstance(data, dict) and "bandwidth_frac" in data:
            raise ServelabError(f"--calibration: {path} is a roofline calibration (bandwidth_frac, "
                                "compute_frac) from before the operator cost model: fit it again "
                                "with `servelab sim calibrate`")
        if isinstance(data, dict):  # the names of these two fields before 2026-12-01
            for old, new in (("sync_step_overhead_ms", "cpu_step_ms"), ("sync_per_seq_us", "cpu_per_seq_us")):
                if old in data and new not in data:
                    data[new] = data.pop(old)
            # written before 2026-12-03, when every launch cost `launch_us`: price them so still
            if "v1_launch_us" not in data and isinstance(data.get("launch_us"), (int, float)):
                data["v1_launch_us"] = data["launch_us"]
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ServelabError(f"--calibration: {path} is not a calibration: {exc.errors()[0]['loc']}: "
                                f"{exc.errors()[0]['msg']}") from exc

    def save(self, path: Path) -> None:
        write_atomic(path, (json.dumps(self.model_dump(mode="json"), indent=2) + "\n").encode())


# Residuals per GPU class, one set per GPU (never per model). H200: fitted by `sim
# calibrate`'s function on the cells of two models (Qwen3-4B, Llama-3.1-8B: random 1024/128
# at c1/c32/c64, ShareGPT at rate 10 and c64; real vLLM 0.25.1), the other four models of
# that run held out (docs/validation/sim-transfer-2026-12-01: `simcheck.py --fit`, which
# writes cal-h200.json). The H200's cpu_step_ms and cpu_per_seq_us: fitted by the same
# function on the synchronous arm of docs/validation/spec-decode-2026-12-01 (its first
# protocol); sync_piecewise_layer_us measured (below); spec_step_us and spec_per_seq_us on
# its n-gram K = 2 arm with those held (simcheck.py, the other speculative arms and the
# n-gram K = 6 arm of docs/validation/spec-steps-2026-12-02 held out): a residual of the
# engine's step, not the runner's speculative CPU (docs/validation/spec-cpu-2026-12-03,
# where a physical form was looked for and not found; spec-gil-2026-12-04: served = offline). L40S: no profile
# and no CPU figures of its host (sync
# and speculation costs 0: not measured); the seeds' row (docs/simulator.md, "Validation")
# with the H200 host's launch, drafter and frontend costs.
# vLLM 0.25.1's API server on the H200 host, measured where it binds (Qwen3-0.6B served;
# docs/validation/sim-frontend-2026-12-01, `summarise.py` derives these from its probes):
# one-output-token probes at 64 / 1,024 / 4,096 prompt tokens give the tokenizer worker's
# time (164 and 46 req/s at 1,024 and 4,096: 0.85 ms + 5.14 us per token) and the event
# loop's per request (436 req/s at 64 tokens: 2.3 ms, of which the part before tokenising
# is what a burst of 64 takes to first reach the engine, ~76 ms); 128 streams of 512 tokens
# saturate the loop at 20,626 tokens in 11,594 chunks per second while 64 streams keep up
# at 64 chunks per 4.53 ms step: 9.8 us per token, 61 us per chunk.
H200_API_SERVER: Mapping[str, float] = MappingProxyType(dict(
    frontend_tokenize_us=850.2, frontend_us_per_prompt_token=5.14,
    frontend_us_per_request=1186.3, frontend_handoff_us=1034.7,
    frontend_us_per_output_token=9.77, frontend_us_per_chunk=60.96))
# vLLM 0.25.1's draft-model drafter on the H200 host: its forwards launch every kernel
# (one CUDA-graph launch per step, the target's, in the engine's trace of a draft-model
# step); what a verification step leaves after the target's verification, per drafter layer
# and forward: 604 us at batch 1, 429 at batch 16 (611 / 440 before the speculative path's
# per-step CPU cost was priced, 2026-12-02; the mean 516.8 before the V1 runner's graph
# sizes were rounded to multiples of K + 1 and the speculative CPU refitted, 516.3 before
# that CPU was refitted again once the API server streamed each step's own tokens,
# 2026-12-03; 517.8 before the residual was refitted with the measured per-prefill-token
# time, 2026-12-08) (Qwen3-14B with a Qwen3-0.6B-shaped draft model, K = 4;
# docs/validation/sim-host-2026-12-01, `summarise.py`, which derives this mean).
H200_DRAFT_LAYER_US = 517.7
# vLLM 0.25.1 without asynchronous scheduling on the H200 host: what a step on piecewise
# CUDA graphs costs over the same step on a full graph, per layer. Qwen3-14B, n-gram K = 6,
# the prefix workload at c1..c16, forced to cudagraph_mode PIECEWISE vs FULL: mean chunk gap
# 13.62 vs 11.59 ms at c1 ... 16.73 vs 13.61 at c16, i.e. 51, 41, 41, 31, 78 us per layer
# over 40 layers, mean 48.4 (docs/validation/spec-steps-2026-12-02, `steps.py`).
H200_SYNC_PIECEWISE_LAYER_US = 48.4
# vLLM 0.25.1's V1 model runner on the H200 host, a step beyond the captured sizes (every
# kernel launched): 422 us per layer, from a 768-token prefill at 4 and 20 layers of a
# Qwen3-0.6B-shaped layer (no validation set's model), the V2 runner 622 us in the same run
# (docs/validation/spec-batch-2026-12-02, `summarise.py`); over the 13 kernels the operator
# model counts for that layer.
H200_V1_LAUNCH_US = 32.5
# The H100: the H200's residual (docs/validation/sim-transfer-h100-2026-12-06 sets it beside
# an H100 fit of its own on held-out models), and its own speculative line, fitted with the
# shipped H100 profile on the n-gram K = 2 arm of docs/validation/spec-cross-2026-12-07
# (c1-c64, five cells). The H200's line (740.5 + 94.61 x batch us) came from one H200 host;
# the H100 hosts fitted 3-14 us per sequence, another H200 host 9.8. Held out, on two other
# H100 hosts (spec-onehost-2026-12-05, spec-lowacc-2026-12-06): n-gram K = 2 / 4 / 6 TPOT
# and throughput within 15 % in 48 / 48 and 48 / 48 figures (max 14.8 %; the H200's line:
# 47 and 46 of 48, max 24.3 %). The drafter's figure stays the H200 host's.
# _H200_HOST: what the H200's and the H100's figures share, fitted where `fitted_on` says.
_H200_HOST: Mapping[str, float] = MappingProxyType(dict(
    gpu_time_scale=0.930, step_overhead_ms=0.395, per_seq_us=6.88, launch_us=74.6, per_prefill_token_us=1.57,
    v1_launch_us=H200_V1_LAUNCH_US, request_overhead_ms=9.13, **H200_API_SERVER,
    draft_layer_us=H200_DRAFT_LAYER_US, cpu_step_ms=2.081, cpu_per_seq_us=16.70,
    sync_piecewise_layer_us=H200_SYNC_PIECEWISE_LAYER_US))
_H200_FITS = ("H200 vLLM 0.25.1: Qwen3-4B, Llama-3.1-8B (10 cells)",
              "per_prefill_token_us: measured, Qwen3-4B's served prefill steps (H200)",
              "cpu_*: Qwen3-14B --no-async-scheduling (8 cells)")
DEFAULT_CALIBRATIONS: Mapping[str, Calibration] = MappingProxyType({
    "L40S": Calibration(gpu_class="L40S", step_overhead_ms=2.44, per_seq_us=20.0,
                        request_overhead_ms=3.16, launch_us=85.7, v1_launch_us=H200_V1_LAUNCH_US,
                        **H200_API_SERVER,
                        draft_layer_us=H200_DRAFT_LAYER_US,
                        fitted_on=("seeds: L40S ShareGPT 2000 prompts, rate 10, c10",)),
    "H200": Calibration(gpu_class="H200", **_H200_HOST, spec_step_us=740.5, spec_per_seq_us=94.61,
                        fitted_on=_H200_FITS + ("spec_step_us, spec_per_seq_us: Qwen3-14B n-gram K=2 (8 cells)",)),
    # an H100 PCIe (matched by "H100" too) gets the SXM host's line: no PCIe host measured
    "H100": Calibration(gpu_class="H100", **_H200_HOST, spec_step_us=1412.8, spec_per_seq_us=7.26,
                        fitted_on=_H200_FITS + ("spec_step_us, spec_per_seq_us: H100, Qwen3-14B n-gram K=2 (5 cells)",)),
})
_CLASS_FALLBACK = "H200"
# PCIe card families by name, for a GPU the catalog does not know: the family token must not
# run on into a digit ("A10" and "A10G" are PCIe cards, the A100 is not one of them).
_PCIE_FAMILY = re.compile(r"(L40|L4|A10|A40|RTX|T4)(?!\d)")


def default_calibration(gpu_name: str) -> Calibration:
    """The shipped residual for `gpu_name`: its class's where one ships (matched by class
    name inside it, e.g. "L40S-48GB"); else the PCIe host's (the L40S's) for a GPU on a PCIe
    card and the SXM host's (the H200's) for any other. The form factor is the catalog's
    interconnect where the catalog knows the GPU (an A100 SXM is an SXM part, an A100 PCIe a
    PCIe card), the name's family otherwise."""
    key = gpu_name.upper().replace("NVIDIA", "").replace(" ", "")
    for cls_name in DEFAULT_CALIBRATIONS:
        if cls_name in key:
            return DEFAULT_CALIBRATIONS[cls_name]
    spec = match_gpu(gpu_name)
    pcie = spec.interconnect.kind == "pcie" if spec is not None else _PCIE_FAMILY.search(key) is not None
    host = "L40S" if pcie else _CLASS_FALLBACK
    return DEFAULT_CALIBRATIONS[host].model_copy(update={"gpu_class": key})


def shipped_profile(gpu: GPUSpec) -> KernelProfile | None:
    """The kernel profile servelab ships for this catalog GPU, if any."""
    name = SHIPPED_PROFILES.get(gpu.name)
    return None if name is None else KernelProfile.load(PROFILE_DIR / name, flag="shipped profile")


def kernel_times(gpu: GPUSpec, profile: KernelProfile | None) -> KernelTimes:
    """The kernel-time provider for `gpu`: `profile` (else the shipped one) or the datasheet.

    Raises ServelabError when `profile` was measured on another catalog GPU: its kernel times
    would price the simulated GPU as the one measured (a profile from a GPU the catalog does
    not know, a MIG slice say, is taken as given)."""
    datasheet = DatasheetKernels(gpu)
    if profile is not None:
        measured = match_gpu(profile.device.gpu_name, profile.device.memory_total_mib)
        if measured is not None and measured.name != gpu.name:
            raise ServelabError(
                f"the kernel profile (--profile, or a spec's sim.profile) was measured on "
                f"{profile.device.gpu_name} (catalog {measured.name}), "
                f"not on the simulated {gpu.name}: pass one measured on the simulated GPU "
                "(`servelab sim profile` there) or none")
    prof = profile if profile is not None else shipped_profile(gpu)
    if prof is None:
        return datasheet
    return ProfiledKernels(prof, gpu, datasheet)


@dataclass(frozen=True, slots=True)
class SpecCost:
    """What speculative decoding adds to a step's price: K draft tokens per sequence and,
    for model-based drafting, the drafter's kernels (None: n-gram, on the CPU), replayed on
    piecewise CUDA graphs (`drafter_graphs`: EAGLE-type heads) or launched one by one (a
    draft model, in vLLM 0.25.1)."""

    num_speculative_tokens: int
    drafter: OperatorModel | None
    drafter_graphs: bool = True


class OperatorCostModel:
    """Prices a step for the engine: `OperatorModel` on one GPU + the `Calibration` residual."""

    def __init__(self, model: ModelGeometry, gpu: GPUSpec, args: EngineArgs, cal: Calibration,
                 kernels: KernelTimes, spec: SpecCost | None = None,
                 async_scheduling: bool = True, v1_runner: bool = False,
                 layout: NodeLayout | None = None, expert_skew: float = 0.0) -> None:
        self.calibration = cal
        # with K drafts vLLM's decode graphs are multiples of K + 1 (`decode_graph_sizes`),
        # every graph on the V1 runner
        self.ops = OperatorModel(model, gpu, args, kernels, layout, expert_skew,
                                 num_speculative_tokens=spec.num_speculative_tokens if spec else 0,
                                 v1_runner=v1_runner)
        self.pp = args.pipeline_parallel_size
        self.spec = spec
        self._scale = cal.gpu_time_scale
        # The V1 runner launches a dense layer's kernels for less CPU than the V2 runner
        # (`H200_V1_LAUNCH_US`). MoE layers keep `launch_us`: on the V1 runner their launches
        # measured 47.5 us per kernel (docs/validation/sim-host-2026-12-01) on a host where
        # the V2 runner's dense ones took 85, and the served MoE cells' prefills already come
        # out faster than measured at `launch_us` (issue 14).
        self._launch_s = (cal.v1_launch_us if v1_runner and not model.is_moe else cal.launch_us) * 1e-6
        self._draft_layer_s = cal.draft_layer_us * 1e-6
        # Without asynchronous scheduling each layer of a piecewise step adds host time the
        # GPU waits for (graph piece, attention in Python); with it, that work overlaps the
        # previous step's kernels (served async cells show no such cost).
        self._piece_s = 0.0 if async_scheduling else cal.sync_piecewise_layer_us * 1e-6
        self._async = async_scheduling
        self._cpu_floor = v1_runner  # the V1 runner's CPU work is not hidden behind the GPU
        self._step_s = cal.step_overhead_ms * 1e-3 + (cal.spec_step_us * 1e-6 if spec is not None else 0.0)
        self._seq_s = (cal.per_seq_us + (cal.spec_per_seq_us if spec is not None else 0.0)) * 1e-6
        self._cpu_step_s = cal.cpu_step_ms * 1e-3
        self._cpu_seq_s = cal.cpu_per_seq_us * 1e-6
        # Measured on the V2 runner's GPU-bound prefill steps (dense models: Qwen3-4B 1.57 us a
        # token, the figure, 1.56 against the residual refitted with it; gemma-3-12b, held out,
        # 1.86). The only V1-runner steps timed, OLMoE-1B-7B's (MoE), show none (0.22,
        # interquartile -0.58 to 0.61): docs/validation/sim-steptrace-2026-12-07. A drafter's
        # forward (`draft_s`) does not get it: measured on targets only.
        self._ptok_s = 0.0 if v1_runner else cal.per_prefill_token_us * 1e-6
        # decode-only steps by batch size: (kernels that do not attend, launches, graph
        # pieces, attention over the context) (`decode_step_s`)
        self._decode_parts: dict[int, tuple[float, int, int, Callable[[int], float]]] = {}
        # one stage's activations to the next: M x hidden bf16 over the link
        link = gpu.interconnect
        self._hop_s_per_token = model.hidden * 2 / (link.unidirectional_gbs * 1e9)
        self._hop_latency_s = link.allreduce_latency_us * 1e-6
        # hops between stages on different nodes go over the fabric (`NodeLayout`)
        self._node_hops = layout.node_hops(args.tensor_parallel_size, self.pp) if layout else 0
        if layout is not None:
            self._node_hop_s_per_token = model.hidden * 2 / (layout.link.bandwidth_gbs * 1e9)
            self._node_hop_latency_s = layout.link.latency_us * 1e-6

    @property
    def source(self) -> str:
        """e.g. "Machete 4-bit GEMMs; profiled H200 (...)" or "...; datasheet L40S, not
        profiled", with "; host CPU figures x1.5" where they were scaled (`on_host`)."""
        scale = self.calibration.host_cpu_scale
        return self.ops.describe() + (f"; host CPU figures x{scale:g}" if scale != 1.0 else "")

    def parts(self, shape: StepCounts) -> StepParts:
        spec = self.spec
        if spec is None:
            return self.ops.parts(shape.decode_seqs, shape.decode_context_tokens, shape.prefill_tokens,
                                  shape.prefill_context_tokens, shape.prefill_seqs)
        uniform = (shape.prefill_tokens == 0 and shape.drafting_seqs == shape.decode_seqs
                   and shape.draft_tokens == spec.num_speculative_tokens * shape.decode_seqs)
        return self.ops.parts(shape.decode_seqs, shape.decode_context_tokens, shape.prefill_tokens,
                              shape.prefill_context_tokens, shape.prefill_seqs,
                              draft_tokens=shape.draft_tokens, piecewise=not uniform)

    def _stage_s(self, parts: StepParts, prefill_tokens: float = 0.0) -> float:
        return self._stage(parts.total_s, parts.launches, parts.pieces, prefill_tokens)

    def _stage(self, kernels_s: float, launches: int, pieces: int, prefill_tokens: float = 0.0) -> float:
        """One stage: its kernels x the GPU scale plus its GPU time per prefill token
        (`prefill_tokens`: the step's prefill tokens x the stage's share of the layers), no
        faster than the CPU launches them, plus the piecewise graphs' host time (without
        async scheduling)."""
        gpu = kernels_s * self._scale + self._ptok_s * prefill_tokens
        return max(gpu, launches * self._launch_s) + pieces * self._piece_s

    def _with_host(self, gpu: float, seqs: int) -> float:
        """A step whose GPU path takes `gpu` s: that path plus the step's residual, against
        the engine's CPU work (after it without async scheduling, a floor under it on the
        V1 runner, hidden otherwise)."""
        gpu_path = gpu + self._step_s + self._seq_s * seqs
        cpu = self._cpu_step_s + self._cpu_seq_s * seqs
        if not self._async:
            return gpu_path + cpu
        return max(gpu_path, cpu) if self._cpu_floor else gpu_path

    def draft_s(self, shape: StepCounts) -> float:
        """Seconds the drafter adds to a step (0 without a drafter): its first forward
        over the step's tokens, then K - 1 forwards of one token per sequence."""
        spec = self.spec
        if spec is None or spec.drafter is None:
            return 0.0
        d = spec.drafter
        seqs = shape.decode_seqs + shape.prefill_seqs
        first = d.parts(shape.decode_seqs, shape.decode_context_tokens, shape.prefill_tokens,
                        shape.prefill_context_tokens, shape.prefill_seqs,
                        draft_tokens=shape.draft_tokens, piecewise=True)
        ctx = shape.decode_context_tokens + shape.prefill_tokens
        rest = d.parts(seqs, ctx, 0, 0, 0, piecewise=True)
        if spec.drafter_graphs:
            return self._stage_s(first) + (spec.num_speculative_tokens - 1) * self._stage_s(rest)
        # every kernel of every forward launched from the CPU, one after the GPU's work
        # (no asynchronous scheduling with a draft model): the host's time per drafter layer
        cpu = d.stage_layers * self._draft_layer_s
        return (max(first.total_s * self._scale, cpu)
                + (spec.num_speculative_tokens - 1) * max(rest.total_s * self._scale, cpu))

    def decode_step_s(self, seqs: int, context_tokens: int) -> float:
        """`step_duration_s` of a decode-only step (one token for each of `seqs` sequences,
        `context_tokens` attended in all) on one stage without speculation: the same
        float operations, with what depends on the batch alone worked out once per batch."""
        got = self._decode_parts.get(seqs)
        if got is None:
            parts = self.ops.parts(seqs, 0, 0, 0, 0)  # (its attention is priced below)
            got = (parts.linear_s, parts.launches, parts.pieces, self.ops.decode_attention(seqs))
            self._decode_parts[seqs] = got
        linear, launches, pieces, attention = got
        return self._with_host(self._stage(linear + attention(context_tokens), launches, pieces), seqs)

    def step_duration_s(self, shape: StepCounts) -> float:
        """Seconds one step takes (kernels x scale per stage, micro-batches through the
        stages, CPU residual); see the module doc for PP."""
        if (self.pp == 1 and self.spec is None and not shape.prefill_tokens and not shape.prefill_seqs
                and not shape.draft_tokens and shape.decode_seqs):
            return self.decode_step_s(shape.decode_seqs, shape.decode_context_tokens)
        seqs = shape.decode_seqs + shape.prefill_seqs
        tokens = shape.decode_seqs + shape.prefill_tokens
        if self.pp == 1:
            gpu = self._stage_s(self.parts(shape), shape.prefill_tokens) + self.draft_s(shape)
        else:
            k = max(1, min(self.pp, seqs))
            micro = self.ops.parts(-(-shape.decode_seqs // k), shape.decode_context_tokens // k,
                                   -(-shape.prefill_tokens // k), shape.prefill_context_tokens // k,
                                   -(-shape.prefill_seqs // k))
            hop = self._hop_latency_s + tokens / k * self._hop_s_per_token
            hops = (self.pp - 1 - self._node_hops) * hop
            if self._node_hops:
                hops += self._node_hops * (self._node_hop_latency_s + tokens / k * self._node_hop_s_per_token)
            ends = self.ops.ends_s(-(-tokens // k), -(-seqs // k)) * self._scale
            # each stage holds 1/pp of the layers and runs a k-th of the step's prefill tokens
            gpu = self.pp * self._stage_s(micro, -(-shape.prefill_tokens // k) / self.pp) + ends + hops
        return self._with_host(gpu, seqs)


@dataclass(frozen=True, slots=True)
class AffineCost:
    """A step cost affine in the step's counts (seconds): a closed-form stand-in for the
    operator model where a test or a what-if needs step times known in advance."""

    step_s: float = 0.0
    per_decode_seq_s: float = 0.0
    per_decode_context_token_s: float = 0.0
    per_prefill_token_s: float = 0.0
    per_prefill_context_token_s: float = 0.0

    @property
    def source(self) -> str:
        return "affine step cost (closed form)"

    def step_duration_s(self, shape: StepCounts) -> float:
        return (self.step_s + self.per_decode_seq_s * shape.decode_seqs
                + self.per_decode_context_token_s * shape.decode_context_tokens
                + self.per_prefill_token_s * shape.prefill_tokens
                + self.per_prefill_context_token_s * shape.prefill_context_tokens)
