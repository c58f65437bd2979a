"""An experiment as the simulator sees it: each arm's simulated deployment and each stored
cell as a calibration target (`servelab sim calibrate --experiment`, the validation checks).

An experiment (`servelab run SPEC --out DIR`) records its normalised spec in
`DIR/manifest.json` and one file per cell in `DIR/cells/<arm>/<workload>/<load>.json`, with
the bench result nested under `result` and the cell's workload, seed, load and warm-ups
under `cell`. Each cell becomes a `MeasuredCell` simulated on its own arm's deployment (the
arm's model, weight format and engine args, as `servelab run` gives a simulated arm), so one
calibration can be fitted across arms and workloads in one call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servelab.errors import ServelabError
from servelab.experiment.arms import node_layout_of, planner_args
from servelab.experiment.spec import DIRECT, ArmSpec, ExperimentSpec
from servelab.experiment.store import ExperimentStore
from servelab.metrics.result_file import StoredResult
from servelab.metrics.scrape import drafted_share, stored_spec_decode
from servelab.sim.calibrate import FIT_METRICS, MeasuredCell
from servelab.sim.offline import PreparedWorkload, prepare_workload
from servelab.sim.setup import SimOptions
from servelab.speculation import SpeculativeConfig
from servelab.workload.arrivals import ArrivalOptions


def _spec(root: Path) -> ExperimentSpec:
    manifest = ExperimentStore(root).read_manifest()
    try:
        return ExperimentSpec.from_stored(manifest["spec"])
    except (KeyError, ValidationError) as exc:
        raise ServelabError(f"{root / 'manifest.json'}: no valid experiment spec ({exc})") from None


def parse_arm_models(items: Sequence[str]) -> dict[str, tuple[str, str | None]]:
    """`ARM=MODEL[,QUANTIZATION]` flags -> {arm: (model, quantization)}."""
    out: dict[str, tuple[str, str | None]] = {}
    for item in items:
        arm, sep, rest = item.partition("=")
        if not sep or not arm or not rest:
            raise ServelabError(f"--arm-model {item!r}: expected ARM=MODEL[,QUANTIZATION]")
        model, _, quant = rest.partition(",")
        out[arm] = (model, quant or None)
    return out


def arm_options(spec: ExperimentSpec, arm: ArmSpec, override: tuple[str, str | None] | None,
                async_scheduling: bool) -> SimOptions:
    """The simulated deployment of `arm` (as `servelab run` builds it for `engine: sim`);
    engine args the planner does not model are left out (they reached the real engine)."""

    if spec.hardware.gpu is None:
        raise ServelabError("the experiment's spec names no hardware.gpu: the simulator needs one")
    model, quant = override if override else (arm.model or spec.model.name, arm.quantization)
    if override is None and arm.model and arm.model.startswith("/") and not Path(arm.model).exists():
        raise ServelabError(f"arm {arm.name}: its model {arm.model} is not on this machine; pass "
                            f"--arm-model {arm.name}=MODEL[,QUANTIZATION] (e.g. Qwen/Qwen3-14B,awq)")
    args = planner_args(spec, arm, strict=False)
    if quant is not None:
        args = args.model_copy(update={"quantization": quant})
    return SimOptions(model=model, gpu=spec.hardware.gpu, quantization=quant, engine_args=args,
                      replicas=arm.replicas,
                      # Direct arms are simulated split, as the client splits them
                      # (`MeasuredCell.direct`); the policy is then unused.
                      router_policy="round_robin" if arm.routing == DIRECT else arm.routing,
                      async_scheduling=async_scheduling and args.async_scheduling,
                      speculative=arm.speculative, nodes=node_layout_of(spec),
                      disaggregated=arm.disaggregated)


def measured_speculation(spec: SpeculativeConfig, result: StoredResult,
                         servers: list[dict[str, Any]]) -> SpeculativeConfig:
    """`spec` with the acceptance a measured cell counted, its share of drafted decode
    steps, its mean proposal length and its drafts per request (a text method's misses
    then come first in each sequence: `SpeculativeConfig.with_measured`): the simulator
    then draws what vLLM proposed and accepted."""
    sd = stored_spec_decode(result, servers)
    if sd is None:  # no counters (SGLang, a failed scrape): keep the arm's own acceptance
        return spec
    share = drafted_share(sd, float(result.total_output_tokens), float(result.completed))
    return spec.with_measured(sd.per_position_acceptance, share if share is not None else 1.0,
                              sd.draft_tokens / sd.num_drafts if sd.num_drafts else None,
                              sd.num_drafts / result.completed if result.completed else None)


def measured_cells(root: Path, arms: Sequence[str] = (), loads: Sequence[str] = (),
                       arm_models: dict[str, tuple[str, str | None]] | None = None,
                       async_scheduling: bool = True,
                       notes: list[str] | None = None,
                       workloads: Sequence[str] = ()) -> list[MeasuredCell]:
    """One `MeasuredCell` per finished cell of `root` (only `arms`, `loads` and `workloads`
    when given). Cells whose every request failed have no latency to fit and are skipped
    (named in `notes`). Raises `ServelabError` naming an unknown arm, workload or load, or a
    bad cell file."""

    spec = _spec(root)
    arm_names = [a.name for a in spec.arms]
    for name in list(arms) + list(arm_models or {}):
        if name not in arm_names:
            raise ServelabError(f"--arm {name}: the experiment has arms {', '.join(arm_names)}")
    workload_names = [w.name for w in spec.workloads]
    for name in workloads:
        if name not in workload_names:
            raise ServelabError(f"--workload {name}: the experiment has workloads "
                                f"{', '.join(workload_names)}")
    options: dict[str, SimOptions] = {}
    prepared: dict[tuple[str, str], PreparedWorkload] = {}
    targets: list[MeasuredCell] = []
    seen_loads: set[str] = set()
    for _, record in ExperimentStore(root).cells():
        cell, result = record.cell, record.result
        arm, workload, load = cell.arm, cell.workload, cell.load
        seen_loads.add(load)
        if (arms and arm not in arms) or (loads and load not in loads) or \
                (workloads and workload not in workloads):
            continue
        measured = {k: v for k in FIT_METRICS if (v := result.number(k)) is not None}
        if not result.completed or not measured:
            if notes is not None:
                notes.append(f"{arm}/{workload}/{load}: no completed request, skipped")
            continue
        if arm not in options:
            options[arm] = arm_options(spec, spec.arm(arm), (arm_models or {}).get(arm),
                                       async_scheduling)
        opts = options[arm]
        if opts.speculative is not None:  # the acceptance this cell measured
            opts = dataclasses.replace(opts, speculative=measured_speculation(
                opts.speculative, result, record.servers))
        key = (workload, load)
        if key not in prepared:
            tok = result.servelab.tokenizer if result.servelab else None
            tokenizer = tok if tok is not None and not tok.startswith("builtin:") else None
            dataset = spec.workload(workload).dataset(cell.num_prompts, tokenizer)
            arrivals = ArrivalOptions(request_rate=cell.request_rate, burstiness=cell.burstiness)
            prepared[key] = prepare_workload(dataset, cell.seed, arrivals)
        targets.append(MeasuredCell(f"{arm}/{workload}/{load}", measured, prepared[key], cell.seed,
                              cell.max_concurrency or None, cell.num_warmups,
                              opts, direct=spec.arm(arm).client_splits))
    for load in loads:
        if load not in seen_loads:
            raise ServelabError(f"--cells {load}: the experiment has loads {', '.join(sorted(seen_loads))}")
    if not targets:
        raise ServelabError(f"{root}: no finished cell with completed requests matches")
    return targets
