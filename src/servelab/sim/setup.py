"""From options to a runnable simulation: replicas, router, requests (the CLI's and calibrate's one path).

`SimOptions` names the deployment (model, GPU, vLLM engine args, replicas, policy,
calibration); `build_cluster` builds it; `offline_requests` turns a workload into the
token ids the engines see.

Prompt token ids: each prompt's text is tokenised with the workload's tokenizer and then
fitted to the workload's own `prompt_len` (the count the bench client reports): cut, or
padded with ids unique to the request (so padding never fakes a prefix-cache hit).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servelab.hardware.catalog import NodeLayout
from servelab.sim.cluster import Cluster, NetworkCosts
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

    @property
    def resolved_calibration(self) -> Calibration:
        return self.calibration if self.calibration is not None else default_calibration(self.gpu)


def build_cluster(opts: SimOptions, rng: random.Random) -> Cluster:
    """Fresh engines (empty caches) for every replica, behind `opts.router_policy`."""
    from servelab.routing.policies import make_policy

    if opts.replicas < 1:
        raise ValueError("replicas must be >= 1")
    cal = opts.resolved_calibration
    first = build_engine(opts.model, opts.gpu, opts.quantization, opts.engine_args, cal,
                         opts.async_scheduling, opts.profile, opts.speculative, layout=opts.nodes)
    # Each replica draws acceptance from its own stream.
    engines = [first] + [SimEngine(dataclasses.replace(first.config, seed=r), first.cost)
                         for r in range(1, opts.replicas)]
    policy = make_policy(opts.router_policy, rng) if opts.replicas > 1 else None
    network = NetworkCosts(
        request_overhead_ms=cal.request_overhead_ms, router_hop_ms=ROUTER_HOP_MS,
        frontend_us_per_prompt_token=cal.frontend_us_per_prompt_token,
        frontend_us_per_output_token=cal.frontend_us_per_output_token,
        frontend_us_per_chunk=cal.frontend_us_per_chunk,
        frontend_us_per_request=cal.frontend_us_per_request,
        frontend_tokenize_us=cal.frontend_tokenize_us, frontend_handoff_us=cal.frontend_handoff_us)
    return Cluster(engines, policy, network)


def fit_token_ids(ids: Sequence[int], prompt_len: int, index: int) -> tuple[int, ...]:
    """`ids` cut or padded to `prompt_len`; padding ids are negative and unique to `index`."""
    if len(ids) >= prompt_len:
        return tuple(ids[:prompt_len])
    base = -(index + 1) * 1_000_000
    return tuple(ids) + tuple(base - j for j in range(prompt_len - len(ids)))
