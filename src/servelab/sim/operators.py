"""The operator-level cost model: one engine step priced as the kernels vLLM runs for it.

For a step of the scheduler (decode sequences with their contexts, prefill chunks with the
context they attend), one GPU of a replica runs, per decoder layer of its pipeline stage:
- GEMMs with M = the step's tokens (padded to the CUDA-graph size vLLM captured, as it
  pads them) and N, K of its tensor-parallel shard: fused QKV, O, fused gate-up, down
  (MLA: each projection); MoE layers: the router GEMM and vLLM's fused MoE (top-k, two
  grouped GEMMs over the experts the batch touches, at the tokens each expert gets);
- attention: decode over each sequence's paged KV (bytes per sequence from kv heads, head
  dim, and the window on sliding layers), prefill over each chunk and its cached context;
- bandwidth-bound kernels: two fused residual-add + RMSNorms, q/k norm and rotary, the KV
  cache write, the MLP activation, fp8 activation quantization for W8A8 GEMMs;
- with TP, two all-reduces of M x hidden (ring: latency + 2(TP-1)/TP x bytes over the link);
- with expert parallelism (EP = TP x DP, vLLM's --enable-expert-parallel), a MoE layer on the
  busiest GPU: its whole local experts over the token-expert pairs of every DP rank (DP
  ranks equally loaded, a skew for the hottest GPU), and the all-to-all dispatch and
  combine of its tokens' hidden states to the other ranks over the link (NVLink in a node,
  the fabric when EP spans nodes);
then once per step: the embedding gather, the final norm, the LM head over the sequences
that sample (one row each: vLLM computes logits for every scheduled request's last
token) and the sampler over their logits.
Each kernel's time comes from a `KernelTimes` provider (`servelab.sim.kernels`: the GPU's
measured profile, else its datasheet with kernel-family efficiencies).

The CPU launches the kernels: a decode-only batch within vLLM's captured sizes replays one
full CUDA graph (one launch); a batch with a prefill within them replays a graph piece per
layer with attention launched between; a batch beyond them (more than 512 tokens by
default) launches every kernel. The GPU cannot run ahead of its launches, so a stage takes
max(kernel time, launches x the CPU's time per launch): small models' long prefill steps
are launch-bound (on the H200 host: Qwen3-4B's 1,024-token prefill takes ~40 ms where its
kernels take ~14 ms).

What the kernels leave out is a small residual per GPU (`Calibration`, fitted by `sim
calibrate` over several models at once, never per model): the CPU's time per launch, a
fixed CPU cost per step and per scheduled sequence, a global scale on kernel time
(clocks under sustained load vs the micro-benchmarks) and a per-request cost before the
engine sees a request.

Speed: everything that depends only on the step's token count is computed once per count
and cached (at most `max_num_batched_tokens` entries), a step's whole price but its decode
context once per shape (`_Shape`), and decode attention is interpolated per step.
"""

from __future__ import annotations

import copy
import math
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass

from servelab.hardware.catalog import GPUSpec, NodeLayout
from servelab.models.costs import kv_bytes_per_layer_token
from servelab.models.geometry import ModelGeometry
from servelab.errors import ServelabError
from servelab.plan.args import EngineArgs, cudagraph_capture_sizes, decode_graph_sizes, resolve_limits
from servelab.sim.kernels import FAMILY_NAMES, KernelTimes, kernel_family

ALLREDUCES_PER_LAYER = 2


@dataclass(frozen=True, slots=True)
class StepParts:
    """One step on one GPU of one stage: kernel seconds by kind (before the GPU scale) and
    the launches the CPU makes outside CUDA graphs."""

    linear_s: float       # GEMMs, MoE, elementwise kernels, all-reduce, LM head, sampler
    attention_s: float
    launches: int         # kernel or graph launches from the CPU (0: one full CUDA graph)
    pieces: int = 0       # layers run as piecewise CUDA graphs (0: a full graph, or eager)

    @property
    def total_s(self) -> float:
        """Kernel seconds (the GPU's work)."""
        return self.linear_s + self.attention_s


@dataclass(frozen=True, slots=True)
class _Shape:
    """A step's price but for its decode sequences' context: what `OperatorModel.parts`
    works out once per shape (decode sequences, prefill tokens, their cached context and
    chunks, drafts, graphs) while the context grows from step to step."""

    linear_s: float
    decode: Callable[[int], float] | None  # decode attention over the context tokens in all
    prefill_s: tuple[float, ...]           # prefill attention's terms, added after it in order
    launches: int
    pieces: int

    def parts(self, decode_ctx: int) -> StepParts:
        t = self.decode(decode_ctx) if self.decode is not None else 0.0
        for term in self.prefill_s:
            t += term
        return StepParts(self.linear_s, t, self.launches, self.pieces)


# Shapes `OperatorModel.parts` keeps (a fleet's million requests make tens of thousands;
# beyond this many the memo starts again rather than grow with every step).
SHAPES_KEPT = 1 << 16
# Decode attention prices `OperatorModel.decode_attention` keeps by (sequences, drafts, context
# tokens); beyond this many it prices the rest each time.
ATTENTION_KEPT = 1 << 18


@dataclass(frozen=True, slots=True)
class _Gemm:
    """One GEMM of a layer on one TP shard: output N, inner K."""

    n: int
    k: int


class OperatorModel:
    """Per-kernel step pricing of one model on one GPU under `args` (see the module doc)."""

    def __init__(self, model: ModelGeometry, gpu: GPUSpec, args: EngineArgs,
                 kernels: KernelTimes, layout: NodeLayout | None = None,
                 expert_skew: float = 0.0, num_speculative_tokens: int = 0,
                 v1_runner: bool = False) -> None:
        self.model, self.gpu, self.kernels = model, gpu, kernels
        tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
        self.tp, self.pp = tp, pp
        # Expert parallelism: experts over EP = TP x DP ranks; every DP rank's tokens reach
        # the ranks of their experts (all-to-all dispatch and combine per MoE layer), the
        # DP ranks assumed equally loaded (vLLM runs them in lockstep); `expert_skew` is the
        # busiest GPU's extra share of token-expert pairs (0: uniform routing).
        self.ep = args.expert_parallel_size if model.is_moe else 1
        self.dp = args.data_parallel_size if self.ep > 1 else 1
        self.local_experts = (math.ceil((model.num_experts + args.num_redundant_experts) / self.ep)
                              if self.ep > 1 else model.num_experts)
        self.expert_skew = expert_skew
        ep_crosses = layout is not None and self.ep > layout.gpus_per_node
        self.ep_link = layout.link.as_interconnect() if ep_crosses and layout else gpu.interconnect
        # A TP group wider than a node all-reduces over the fabric between nodes.
        crosses = layout is not None and layout.tp_crosses(tp)
        self.tp_link = layout.link.as_interconnect() if crosses and layout else gpu.interconnect
        self.family = kernel_family(model.weight_format, gpu.compute_capability)
        stage = math.ceil(model.layers / pp)
        self.stage_frac = stage / model.layers
        self.stage_layers = stage
        self.q_heads = max(1, model.heads // tp)
        self.kv_heads = max(1, model.kv_heads // tp) if tp > 1 else model.kv_heads
        self.kv_layer_bytes = kv_bytes_per_layer_token(model, args.kv_cache_dtype, tp)
        self.full_layers = model.full_attention_layers * self.stage_frac
        self.sliding_layers = len(model.sliding_layers) * self.stage_frac
        self.window = model.sliding_window or 0
        limits = resolve_limits(model, gpu, args)
        # `capture`: the sizes a piecewise (mixed) batch pads to; `full_capture`: those of
        # the full graphs a uniform decode batch replays (multiples of K + 1 with K drafts)
        self.eager, self.v1_runner = args.enforce_eager, v1_runner
        self.limits = limits
        self.capture, self.full_capture = self._graph_sizes(num_speculative_tokens)
        self.attn_gemms, self.dense_gemms, self.moe_gemms = self._layer_gemms()
        self.dense_layers = (model.dense_layers if model.is_moe else model.layers) * self.stage_frac
        self.moe_layers = model.moe_layers * self.stage_frac
        self._per_tokens: dict[int, float] = {}
        self._per_seqs: dict[int, float] = {}
        self._decode_attn: dict[tuple[int, int], Callable[[int], float]] = {}
        self._attn_at: dict[tuple[int, int, int], float] = {}
        self._shapes: dict[tuple[int, int, int, int, int, bool | None], _Shape] = {}
        if model.is_mla:
            # MLA decode attends in the latent space: one "head" of the latent width per query
            self.attn_kv_heads, self.attn_head_dim = 1, model.kv_lora_rank + model.qk_rope_head_dim
        else:
            self.attn_kv_heads, self.attn_head_dim = self.kv_heads, model.head_dim

    def _graph_sizes(self, k: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(piecewise sizes, full decode-graph sizes) vLLM captures with k draft tokens."""
        if self.eager:
            return (), ()
        sizes = cudagraph_capture_sizes(self.limits.max_num_seqs, self.limits.max_num_batched_tokens, k)
        full = decode_graph_sizes(sizes, k)
        if not self.v1_runner or k == 0:
            return sizes, full
        if not full:  # vLLM's V1 runner: "No valid cudagraph sizes after rounding"
            raise ServelabError(
                f"vLLM refuses to start: no CUDA-graph size is a multiple of "
                f"num_speculative_tokens + 1 = {k + 1} within {sizes[-1]} tokens: raise "
                f"--max-num-batched-tokens or --max-num-seqs, lower num_speculative_tokens, "
                f"or --enforce-eager")
        return full, full  # the V1 runner rounds every graph

    def with_draft_length(self, k: int) -> OperatorModel:
        """This model with vLLM's graph sizes for k speculative tokens (the kernel-time
        caches, keyed by token counts, are shared; its steps' shapes pad and launch
        otherwise, so it keeps its own)."""
        other = copy.copy(self)
        other.capture, other.full_capture = self._graph_sizes(k)
        other._shapes = {}
        return other

    def describe(self) -> str:
        """Which kernels price the step and where their times come from."""
        return f"{FAMILY_NAMES.get(self.family, self.family)} GEMMs; {self.kernels.source}"

    # -- shapes ------------------------------------------------------------------------
    def _layer_gemms(self) -> tuple[list[_Gemm], list[_Gemm], list[_Gemm]]:
        """(attention GEMMs, dense-MLP GEMMs, shared-expert GEMMs) of one layer, with vLLM's
        fusions: q/k/v into one QKV GEMM, gate and up into one."""
        m, tp = self.model, self.tp
        fused: dict[str, list] = {"qkv": [], "gate_up": [], "shared_gate_up": []}
        attn: list[_Gemm] = []
        mlp: list[_Gemm] = []
        shared: list[_Gemm] = []
        for s in m.linear_shapes():
            out = s.out_features // tp if s.tp_split else s.out_features
            inner = s.in_features
            if s.tp_split and s.name.endswith(("o_proj", "down_proj")):
                out, inner = s.out_features, s.in_features // tp  # row-parallel: K is split
            if s.role == "expert":
                continue  # priced by the fused MoE kernel
            short = s.name.rsplit(".", 1)[-1]
            if s.role == "attention" and short in ("q_proj", "k_proj", "v_proj") and not m.is_mla:
                fused["qkv"].append((out, inner))
            elif short in ("gate_proj", "up_proj"):
                key = "shared_gate_up" if s.role == "shared_expert" else "gate_up"
                fused[key].append((out, inner))
            else:
                target = attn if s.role == "attention" else (shared if s.role == "shared_expert" else mlp)
                target.append(_Gemm(out, inner))
        for key, target in (("qkv", attn), ("gate_up", mlp), ("shared_gate_up", shared)):
            if fused[key]:
                target.append(_Gemm(sum(o for o, _ in fused[key]), fused[key][0][1]))
        return attn, mlp, shared

    def padded(self, tokens: int, uniform_decode: bool = False) -> int:
        """Tokens the kernels run: the smallest captured CUDA-graph size >= tokens (vLLM pads
        the batch to it), or the tokens themselves beyond the largest. A uniform decode
        batch pads to a full graph where one holds it, else to the piecewise sizes."""
        full = self.full_capture
        if uniform_decode and full and tokens <= full[-1]:
            return full[bisect_left(full, tokens)]
        cap = self.capture
        if not cap or tokens > cap[-1]:
            return tokens
        return cap[bisect_left(cap, tokens)]

    # -- per token count (cached) ------------------------------------------------------
    def _gemm(self, m: int, g: _Gemm, family: str | None = None) -> float:
        fam = family or self.family
        t = self.kernels.gemm_s(fam, m, g.n, g.k)
        if fam == "fp8":  # dynamic per-tensor activation quantization before each W8A8 GEMM
            t += self.kernels.elementwise_s(3.0 * m * g.k)
        return t

    def tokens_s(self, tokens: int) -> float:
        """Seconds of every kernel whose work depends only on the step's (padded) tokens."""
        got = self._per_tokens.get(tokens)
        if got is not None:
            return got
        m, k, M = self.model, self.kernels, tokens
        h = m.hidden
        act = 2.0  # bf16 activations
        layer = sum(self._gemm(M, g) for g in self.attn_gemms)
        qk = (self.q_heads + self.kv_heads) * m.head_dim
        layer += 2 * k.elementwise_s(4 * act * M * h)                     # fused add + RMSNorm
        layer += k.elementwise_s(2 * act * M * qk) * (2 if m.qk_norm else 1)  # q/k norm, rotary
        layer += k.elementwise_s(2.0 * M * self.kv_layer_bytes)           # KV cache write
        if self.tp > 1:
            link = self.tp_link
            wire = M * h * act * 2 * (self.tp - 1) / self.tp / (link.unidirectional_gbs * 1e9)
            layer += ALLREDUCES_PER_LAYER * (wire + link.allreduce_latency_us * 1e-6)
        total = layer * self.stage_layers
        if self.dense_layers:
            inter = m.intermediate // self.tp
            mlp = sum(self._gemm(M, g) for g in self.dense_gemms) + k.elementwise_s(3 * act * M * inter)
            total += mlp * self.dense_layers
        if self.moe_layers:
            moe = k.gemm_s("bf16", M, m.num_experts, h)  # router logits
            if self.ep > 1:
                # the busiest GPU's token-expert pairs, from every DP rank, on its local
                # experts (whole, not TP-split), then the dispatch and combine over the link
                pairs = math.ceil(M * self.dp * m.experts_per_token / self.ep * (1 + self.expert_skew))
                moe += k.moe_s(pairs, self.local_experts, 1, h, m.moe_intermediate)
                link = self.ep_link
                wire = self.all_to_all_bytes(M) / 2 / (link.unidirectional_gbs * 1e9)
                moe += 2 * (wire + link.allreduce_latency_us * 1e-6)
            else:
                moe += k.moe_s(M, m.num_experts, m.experts_per_token, h, m.moe_intermediate // self.tp)
            if self.moe_gemms:
                width = (m.shared_expert_intermediate or m.moe_intermediate) * m.shared_experts // self.tp
                moe += sum(self._gemm(M, g) for g in self.moe_gemms) + k.elementwise_s(3 * act * M * width)
            total += moe * self.moe_layers
        if self.pp == 1:
            total += self.ends_tokens_s(tokens)
        self._per_tokens[tokens] = total
        return total

    def all_to_all_bytes(self, tokens: int) -> float:
        """Bytes one GPU sends per MoE layer under EP for a step of `tokens` on its DP rank:
        its TP share of the tokens, each to its top-k experts' ranks, the share of them on
        other ranks ((EP - 1) / EP under uniform routing), 16-bit hidden states, dispatched
        and then combined back (x 2). 0 without EP."""
        if self.ep == 1:
            return 0.0
        m = self.model
        return 2.0 * tokens / self.tp * m.experts_per_token * m.hidden * 2.0 * (self.ep - 1) / self.ep

    def ends_tokens_s(self, tokens: int) -> float:
        """The embedding gather (first stage) and the final norm (last stage)."""
        act, h = 2.0, self.model.hidden
        return self.kernels.elementwise_s(act * tokens * h * 2) + self.kernels.elementwise_s(4 * act * tokens * h)

    def seqs_s(self, seqs: int) -> float:
        """LM head over `seqs` rows and the sampler over their logits (last stage)."""
        got = self._per_seqs.get(seqs)
        if got is not None:
            return got
        m, k = self.model, self.kernels
        vocab = m.vocab // self.tp
        t = k.gemm_s("bf16", seqs, vocab, m.hidden)
        # logits to fp32, greedy/top-k sampling, log-prob bookkeeping: three passes over them
        t += 3 * k.elementwise_s(seqs * vocab * 4.0 * 2)
        self._per_seqs[seqs] = t
        return t

    # -- per step -----------------------------------------------------------------------
    def _prefill_attention(self, prefill_tokens: int, prefill_ctx: int,
                           prefill_seqs: int) -> tuple[float, ...]:
        """A step's prefill attention seconds, full layers' then sliding layers' (each term
        there is), which `_Shape.parts` adds to its decode attention in that order."""
        if not prefill_tokens:
            return ()
        k = self.kernels
        qh, kvh = self.q_heads, self.attn_kv_heads
        chunks = max(1, prefill_seqs)
        q = max(1, round(prefill_tokens / chunks))
        cached = max(0.0, prefill_ctx / prefill_tokens - (q + 1) / 2.0)
        terms: list[float] = []
        if self.full_layers:
            terms.append(self.full_layers * chunks * k.attn_prefill_s(q, cached, qh, kvh, self.model.head_dim))
        if self.sliding_layers:
            win = min(cached, max(0.0, self.window - q)) if self.window else cached
            terms.append(self.sliding_layers * chunks * k.attn_prefill_s(q, win, qh, kvh, self.model.head_dim))
        return tuple(terms)

    def decode_attention(self, seqs: int, draft_tokens: int = 0) -> Callable[[int], float]:
        """Attention seconds of `seqs` decoding sequences on one GPU of one stage over their
        context tokens in all, with `draft_tokens` verified on top of one query each (the
        verification's queries per sequence, on average; made once per batch and drafts and
        kept, up to SHAPES_KEPT pairs: a decode run keeps its batch while its context grows)."""
        got = self._decode_attn.get((seqs, draft_tokens))
        if got is not None:
            return got
        if len(self._decode_attn) >= SHAPES_KEPT:  # batch x drafts pairs: bounded, not kept forever
            self._decode_attn.clear()
        k = self.kernels
        qh, kvh, hd = self.q_heads, self.attn_kv_heads, self.attn_head_dim
        full, sliding, window = self.full_layers, self.sliding_layers, self.window
        queries = 1.0 + draft_tokens / seqs
        per_layer = k.attn_decode_fn(seqs, qh, kvh, hd, queries)  # over the context per sequence
        # Kept by (sequences, drafts, context tokens): a fleet's mixed steps (one or two a request)
        # price the running batch's attention at contexts that its decode steps, and other
        # replicas' steps, have mostly priced before (its interpolation is most of a mixed
        # step's price).
        kept = self._attn_at

        def seconds(decode_ctx: int) -> float:
            key = (seqs, draft_tokens, decode_ctx)
            got = kept.get(key)
            if got is not None:
                return got
            t = 0.0
            ctx = decode_ctx / seqs
            if full:
                t += full * per_layer(ctx)
            if sliding:  # a sliding layer attends to its window at most
                t += sliding * per_layer(min(ctx, window))
            if len(kept) < ATTENTION_KEPT:
                kept[key] = t
            return t
        self._decode_attn[(seqs, draft_tokens)] = seconds
        return seconds

    def ends_s(self, tokens: int, seqs: int) -> float:
        """What only the first and last PP stages run, once per micro-batch: embedding, final
        norm, LM head and sampler (in `parts` already when there is one stage)."""
        return self.ends_tokens_s(self.padded(tokens)) + self.seqs_s(seqs)

    def kernels_per_step(self) -> int:
        """Kernels one step launches when nothing is captured (eager, torch.compile'd)."""
        m = self.model
        attn = 8 + (2 if m.qk_norm else 0)      # QKV, rope, KV write, attention, O, 2 add+norm
        tp = 2 if self.tp > 1 else 0             # all-reduces
        mlp = 3                                  # gate-up, activation, down
        moe = 7 + (3 if m.shared_experts else 0) + (2 if self.ep > 1 else 0)  # router, top-k, align,
        # 2 grouped GEMMs, act, sum (+ dispatch and combine with EP)
        layers = (self.stage_layers * (attn + tp) + self.dense_layers * mlp + self.moe_layers * moe)
        return round(layers) + 8                 # embedding, final norm, LM head, sampler

    def launches(self, tokens: int, piecewise: bool) -> tuple[int, int]:
        """(CPU launches, layers on piecewise graphs) of a step: 1 launch for a uniform
        decode batch that a full CUDA graph holds; a graph piece and the attention kernel
        per layer for any other batch within the captured sizes (vLLM's piecewise graphs,
        every layer one); every kernel beyond them (no graph)."""
        full = self.full_capture
        if not piecewise and full and tokens <= full[-1]:
            return 1, 0
        cap = self.capture
        if cap and tokens <= cap[-1]:
            return 2 * self.stage_layers + 8, self.stage_layers
        return self.kernels_per_step(), 0

    def parts(self, decode_seqs: int, decode_ctx: int, prefill_tokens: int, prefill_ctx: int,
              prefill_seqs: int, draft_tokens: int = 0, piecewise: bool | None = None) -> StepParts:
        """The step's kernel seconds and CPU launches on one stage (see `StepParts`).

        `draft_tokens` are speculative tokens verified on top of one per decode: they add
        GEMM rows and logit rows, and queries per sequence to the decode attention (the
        same KV bytes, more score rows: the profile's verification points). `piecewise` says the
        batch runs piecewise graphs (default: when it holds a prefill); vLLM replays a full
        graph only for uniform decode batches.

        All but the decode attention's context is worked out once per shape and kept
        (`_Shape`): a fleet prices a million prefill steps, mostly of shapes seen before.
        The sums are the same, in the same order, as without the memo."""
        key = (decode_seqs, prefill_tokens, prefill_ctx, prefill_seqs, draft_tokens, piecewise)
        shape = self._shapes.get(key)
        if shape is None:
            if len(self._shapes) >= SHAPES_KEPT:
                self._shapes.clear()
            shape = self._shape(decode_seqs, prefill_tokens, prefill_ctx, prefill_seqs,
                                draft_tokens, piecewise)
            self._shapes[key] = shape
        return shape.parts(decode_ctx)

    def _shape(self, decode_seqs: int, prefill_tokens: int, prefill_ctx: int, prefill_seqs: int,
               draft_tokens: int, piecewise: bool | None) -> _Shape:
        tokens = decode_seqs + draft_tokens + prefill_tokens
        if tokens == 0:
            return _Shape(0.0, None, (), 0, 0)
        mixed = prefill_tokens > 0 if piecewise is None else piecewise
        linear = self.tokens_s(self.padded(tokens, uniform_decode=not mixed))
        if self.pp == 1:  # with PP the first and last stages' own work is `ends_s`
            linear += self.seqs_s(decode_seqs + draft_tokens + prefill_seqs)
        decode = self.decode_attention(decode_seqs, draft_tokens) if decode_seqs else None
        prefill = self._prefill_attention(prefill_tokens, prefill_ctx, prefill_seqs)
        return _Shape(linear, decode, prefill, *self.launches(tokens, mixed))
