"""`load_spec`: a spec file in, a checked `ExperimentSpec` out, or an error naming the line.

Two passes: pydantic checks shapes and types (unknown keys, wrong types, ranges); then
`_checks` checks what needs the whole spec (unique names, one baseline, engine-specific
rules, catalog names, each workload at each load). Every problem is reported with the file,
the line and the field path, all of them at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servelab.errors import ServelabError
from servelab.experiment.arms import RESERVED_ARGS, ArgError, arm_urls, planner_args
from servelab.experiment.cells import load_points
from servelab.experiment.spec import DIRECT, ExperimentSpec
from servelab.experiment.yamlfile import LineMap, load_yaml

Problem = tuple[tuple[str | int, ...], str]


def _where(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _format(path: Path, lines: LineMap, problems: list[Problem]) -> str:
    rows = []
    for loc, message in problems:
        line = lines.line_of(loc)
        prefix = f"{path}:{line}" if line is not None else str(path)
        rows.append(f"{prefix}: {_where(_named(loc))}: {message}")
    head = "invalid spec" if len(rows) == 1 else f"invalid spec ({len(rows)} problems)"
    return head + "\n  " + "\n  ".join(rows)


def _named(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    # pydantic puts union-member tags in locations ("int", "NumPromptsRule"); drop them.
    return tuple(p for p in loc if not (isinstance(p, str) and p[:1].isupper() or p in ("int", "float", "str", "bool", "list[str]")))


def _pydantic_problems(exc: ValidationError) -> list[Problem]:
    problems: list[Problem] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden":
            message = f"unknown key {loc[-1]!r}"
        elif err["type"] == "missing":
            message = "required key missing"
        else:
            message = err["msg"].removeprefix("Value error, ")
            if "input" in err and not isinstance(err["input"], (dict, list)):
                message += f" (got {err['input']!r})"
        problems.append((loc, message))
    return problems


def load_spec(path: Path) -> ExperimentSpec:
    """Read and check an experiment spec (YAML); `ServelabError` names file, line, field."""
    data, lines = load_yaml(path)
    if not isinstance(data, dict):
        raise ServelabError(f"{path}:1: the spec must be a mapping of sections (name, engine, arms, ...)")
    try:
        spec = ExperimentSpec.model_validate(data)
    except ValidationError as exc:
        raise ServelabError(_format(path, lines, _pydantic_problems(exc))) from None
    problems = list(_checks(spec, data))
    if problems:
        raise ServelabError(_format(path, lines, problems))
    return spec


def _checks(spec: ExperimentSpec, data: dict[str, Any]) -> Iterator[Problem]:
    yield from _names(spec)
    yield from _hardware(spec)
    for i, arm in enumerate(spec.arms):
        yield from _arm(spec, i)
    for i, wl in enumerate(spec.workloads):
        for point in load_points(spec.loads):
            try:
                wl.dataset(point.num_prompts, spec.model.tokenizer)
            except (ValidationError, ValueError) as exc:
                msg = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
                yield ("workloads", i), f"at load {point.key}: {msg.removeprefix('Value error, ')}"
                break
    for i, p in enumerate(spec.metric_percentiles):
        if not 0 < p <= 100:
            yield ("metric_percentiles", i), f"{p} is outside (0, 100]"


def _names(spec: ExperimentSpec) -> Iterator[Problem]:
    for section, items in (("arms", spec.arms), ("workloads", spec.workloads)):
        seen: set[str] = set()
        for i, item in enumerate(items):
            if item.name in seen:
                yield (section, i, "name"), f"name {item.name!r} is used twice"
            seen.add(item.name)
    baselines = [i for i, a in enumerate(spec.arms) if a.baseline]
    for i in baselines[1:]:
        yield ("arms", i, "baseline"), "only one arm may be the baseline"


def _hardware(spec: ExperimentSpec) -> Iterator[Problem]:
    from servelab.hardware.catalog import get_gpu

    if spec.hardware.gpu is None:
        if spec.engine == "sim":
            yield ("hardware",), "engine sim needs hardware.gpu (a catalog GPU, e.g. L40S)"
        return
    try:
        get_gpu(spec.hardware.gpu)
    except ServelabError as exc:
        yield ("hardware", "gpu"), str(exc)


def _arm(spec: ExperimentSpec, i: int) -> Iterator[Problem]:
    from servelab.routing.policies import POLICY_NAMES

    arm = spec.arms[i]
    for key in arm.args:
        if key in RESERVED_ARGS:
            yield ("arms", i, "args", key), f"set it with the arm's `{RESERVED_ARGS[key]}` instead of args"
    if arm.routing != DIRECT and arm.routing not in POLICY_NAMES:
        yield ("arms", i, "routing"), (f"{arm.routing!r}: use direct or a router policy: "
                                       f"{', '.join(POLICY_NAMES)}")
    if arm.disaggregated is not None:
        if spec.engine != "sim":
            yield ("arms", i, "disaggregated"), (
                f"disaggregated arms run on the simulator (engine sim), not {spec.engine}: "
                "servelab does not launch vLLM's prefill/decode connector yet")
        elif spec.sim.mode != "offline":
            yield ("arms", i, "disaggregated"), ("disaggregated arms run on the offline simulator "
                                                 "(sim.mode offline): sim serve has no P/D proxy")
        clash = arm.disaggregated.conflict(arm.replicas, arm.tensor_parallel_size,
                                           arm.pipeline_parallel_size, arm.speculative is not None)
        if clash is not None:
            yield ("arms", i, "disaggregated"), clash
    if arm.args.get("enable_expert_parallel") and arm.replicas > 1 and spec.engine in ("vllm", "sglang"):
        yield ("arms", i, "replicas"), (
            "expert parallelism over DP ranks runs in one engine (vLLM's --data-parallel-size), "
            "and servelab launches replicas as separate servers: on a real engine use the arm's "
            "tensor_parallel_size for EP (EP = TP), or simulate DP ranks with engine sim")
    if spec.engine == "external":
        if not arm_urls(spec, arm):
            yield ("arms", i), "engine external needs urls (the arm's or engine_defaults.urls)"
        return
    if arm.urls is not None:
        yield ("arms", i, "urls"), f"urls are for engine external, not {spec.engine}"
    if spec.engine == "sim":
        yield from _sim_arm(spec, i)


def _sim_arm(spec: ExperimentSpec, i: int) -> Iterator[Problem]:
    from servelab.models import load_model

    arm = spec.arms[i]
    try:
        planner_args(spec, arm, strict=True)
    except ArgError as exc:
        loc = ("arms", i, "args", exc.key) if exc.key in arm.args else ("arms", i)
        yield loc, str(exc)
        return
    try:
        load_model(arm.model or spec.model.name, arm.quantization)
    except ServelabError as exc:
        loc = ("arms", i, "model") if arm.model else ("model", "name")
        yield loc, str(exc)
    sc = arm.speculative
    if sc is not None:
        if sc.rates() is None:
            yield ("arms", i, "speculative"), ("the simulator draws accepted drafts from `acceptance: "
                                               "[...]` (one rate per draft position); give it")
        if arm.pipeline_parallel_size > 1:
            yield ("arms", i, "speculative"), "the simulator models speculation at pipeline_parallel_size 1"
        if sc.uses_draft_model and sc.model is not None and sc.method == "draft_model":
            try:
                load_model(sc.model)
            except ServelabError as exc:
                yield ("arms", i, "speculative", "model"), str(exc)
