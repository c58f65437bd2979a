"""From options to a runnable simulation: replicas, router, requests (the CLI's and calibrate's one path).

`SimOptions` names the deployment (model, GPU, vLLM engine args, replicas, policy,
calibration); `build_cluster` builds it; `offline_requests` turns a workload into the
token ids the engines see.

Prompt token ids: each prompt's text is tokenised with the workload's tokenizer and then
fitted to the workload's own `prompt_len` (the count the bench client reports): cut, or
padded with ids unique to the request (so padding never fakes a prefix-cache hit). They
are kept as compact arrays (`array.array`), not tuples of Python ints.
"""

from __future__ import annotations

import dataclasses
import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servelab.disaggregation import DisaggregatedConfig, KvTransfer, kv_link
from servelab.errors import ServelabError
from servelab.hardware.catalog import NodeLayout, get_gpu
from servelab.models import load_model
from servelab.models.costs import kv_bytes_per_layer_token
from servelab.routing.records import RoutingPolicy
from servelab.sim.cluster import Cluster, DecodePool, NetworkCosts
from servelab.sim.cost import Calibration, default_calibration
from servelab.sim.engine import SimEngine, build_engine
from servelab.sim.kernel_profile import KernelProfile
from servelab.speculation import SpeculativeConfig

ROUTER_HOP_MS = 0.5


@dataclass(frozen=True, slots=True)
class SimOptions:
    """One simulated deployment: `replicas` copies of (model on gpu with engine_args)."""

    model: str
    gpu: str
    quantization: str | None
    engine_args: Any  # the planner's EngineArgs
    replicas: int = 1
    router_policy: str = "round_robin"
    calibration: Calibration | None = None
    async_scheduling: bool = True  # vLLM's --async-scheduling (on by default since V1)
    profile: KernelProfile | None = None  # None: the GPU's shipped profile, else its datasheet
    speculative: SpeculativeConfig | None = None  # with its per-position acceptance
    nodes: NodeLayout | None = None  # None: a replica's GPUs share one node
    disaggregated: DisaggregatedConfig | None = None  # prefill and decode pools (replicas 1)
    expert_skew: float = 0.0  # EP: the busiest GPU's extra share of token-expert pairs

    @property
    def resolved_calibration(self) -> Calibration:
        return self.calibration if self.calibration is not None else default_calibration(self.gpu)


def build_cluster(opts: SimOptions, rng: random.Random) -> Cluster:
    """Fresh engines (empty caches) for every replica, behind `opts.router_policy`."""
    from servelab.routing.policies import make_policy

    if opts.replicas < 1:
        raise ValueError("replicas must be >= 1")
    cal = opts.resolved_calibration
    network = _network(cal)
    pd = opts.disaggregated
    if pd is None:
        args = opts.engine_args
        if args.enable_expert_parallel:
            # the replicas are the DP ranks of one expert-parallel engine: EP = TP x replicas
            args = args.model_copy(update={"data_parallel_size": opts.replicas})
        engines = _pool(opts, args, opts.replicas, cal)
        policy = make_policy(opts.router_policy, rng) if opts.replicas > 1 else None
        return Cluster(engines, policy, network)
    args = opts.engine_args
    clash = pd.conflict(opts.replicas, args.tensor_parallel_size, args.pipeline_parallel_size,
                        opts.speculative is not None)
    if clash is not None:
        raise ServelabError(f"disaggregated deployment: {clash}")
    prefill = _pool(opts, args.model_copy(update={"tensor_parallel_size": pd.prefill.tp}),
                    pd.prefill.replicas, cal)
    decode = _pool(opts, args.model_copy(update={"tensor_parallel_size": pd.decode.tp}),
                   pd.decode.replicas, cal)
    transfer = kv_transfer(opts.model, opts.quantization, opts.gpu, args, pd)

    def policy_for(n: int) -> RoutingPolicy | None:
        return make_policy(opts.router_policy, rng) if n > 1 else None
    return Cluster(prefill, policy_for(pd.prefill.replicas), network,
                   DecodePool(decode, policy_for(pd.decode.replicas), transfer))


def kv_transfer(model_name: str, quantization: str | None, gpu: str, args: Any,
                pd: DisaggregatedConfig) -> KvTransfer:
    """The KV transfer between `pd`'s pools for this model and GPU."""
    model = load_model(model_name, quantization)
    ranks = min(pd.prefill.tp, pd.decode.tp)
    # each rank moves its own KV: its heads' share, or whole where heads are replicated
    # (fewer KV heads than ranks) and for MLA's latent, which TP does not split
    moved = ranks * model.layers * kv_bytes_per_layer_token(model, args.kv_cache_dtype, ranks)
    return KvTransfer(moved, model.layers, kv_link(pd.link, get_gpu(gpu)), ranks, pd.layerwise)


def _pool(opts: SimOptions, args: Any, replicas: int, cal: Calibration) -> list[SimEngine]:
    """`replicas` fresh engines of one shape; each draws acceptance from its own stream;
    they share one cost model and its memo of decode-step times."""
    first = build_engine(opts.model, opts.gpu, opts.quantization, args, cal,
                         opts.async_scheduling, opts.profile, opts.speculative, layout=opts.nodes,
                         expert_skew=opts.expert_skew)
    return [first] + [SimEngine(dataclasses.replace(first.config, seed=r), first.cost,
                                  first.decode_times)
                      for r in range(1, replicas)]


def _network(cal: Calibration) -> NetworkCosts:
    return NetworkCosts(
        request_overhead_ms=cal.request_overhead_ms, router_hop_ms=ROUTER_HOP_MS,
        frontend_us_per_prompt_token=cal.frontend_us_per_prompt_token,
        frontend_us_per_output_token=cal.frontend_us_per_output_token,
        frontend_us_per_chunk=cal.frontend_us_per_chunk,
        frontend_us_per_request=cal.frontend_us_per_request,
        frontend_tokenize_us=cal.frontend_tokenize_us, frontend_handoff_us=cal.frontend_handoff_us)


def fit_token_ids(ids: Sequence[int], prompt_len: int, index: int) -> array:
    """`ids` cut or padded to `prompt_len`, as an `array` (not a tuple of ints: a million
    prompts' ids would take gigabytes): `ids` itself, not a copy, when it is an array of
    that length already; padding ids are negative and unique to `index`."""
    if len(ids) >= prompt_len:
        if isinstance(ids, array):
            return ids if len(ids) == prompt_len else ids[:prompt_len]
        return array("q", ids[:prompt_len])
    base = -(index + 1) * 1_000_000
    out = array("q", ids)
    out.extend(range(base, base - (prompt_len - len(ids)), -1))
    return out
