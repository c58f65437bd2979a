"""One `servelab sweep` as asked: the target, the level axis, the boundaries sought, the
requests per level; checked before any level runs, then run, with its files written.

The CLI parses flags into a `SweepRequest` and calls `run_sweep_request`; which target is
opened (a URL, the offline simulator, a spec's arm), the spec's SLO when none is given, and
the outputs under `--out` (`levels/`, `sweep.json`, `sweep.png`) are decided here. Copies of
the target on a cluster come in through `pool`: this package never imports Ray.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servelab.errors import ServelabError
from servelab.experiment.spec import NumPromptsRule
from servelab.storage import check_writable_dir, write_json_atomic
from servelab.sweep.levels import LevelAxis, Boundaries
from servelab.sweep.plots import sweep_plot
from servelab.sweep.report import outcome_json
from servelab.sweep.runner import Echo, LevelSource, OneTarget, SweepConfig, SweepOutcome, sweep_levels
from servelab.sweep.slo import Slo, parse_slo
from servelab.sweep.targets import ArmCopies, OpenTarget, SimCopies, open_arm, open_sim, open_url, spec_dataset
from servelab.sim.setup import SimOptions
from servelab.workload.datasets import DatasetOptions


@dataclass(frozen=True, slots=True)
class UrlTarget:
    """A running server: its URL, the served model, the client backend and per-request
    timeout (s); the GPU, `max_num_seqs` and GPU count it runs on, for the diagnosis."""

    url: str
    model: str | None
    backend: str = "openai"
    request_timeout_s: float = 600.0
    gpu: str | None = None
    max_num_seqs: int | None = None
    gpus: int = 1


@dataclass(frozen=True, slots=True)
class SweepRequest:
    """A sweep: exactly one target (`url`, `sim`, or an `arm` of the experiment `spec`), the
    axis (`mode`: concurrency or rate; levels `min_level`..`max_level`, `growth` between
    bracket levels, `rate_resolution`), the knee's and flatness' definitions, `repetitions`
    per level, requests per level (`prompts`), the SLO (from the spec's when None) and where
    to write (`out`)."""

    dataset: DatasetOptions
    seed: int
    url: UrlTarget | None = None
    sim: SimOptions | None = None
    spec: Path | None = None
    arm: str | None = None
    workload: str | None = None
    mode: str = "concurrency"
    min_level: float = 1.0
    max_level: float | None = None
    growth: float = 2.0
    rate_resolution: float = 0.05
    repetitions: int = 1
    knee_tolerance: float = 0.10
    flat_gain: float = 0.05
    max_levels: int = 40
    prompts: NumPromptsRule = NumPromptsRule(per_concurrency=5, per_rate_s=30.0, min=50, max=1000)
    num_warmups: int = 0
    burstiness: float = 1.0
    max_concurrency: int | None = None
    slo: Slo | None = None
    slo_percentile: float = 99.0
    out: Path | None = None

    def check(self) -> None:
        """Refuse a request that cannot run, naming the flag, before any level runs."""
        chosen = [n for n, on in (("--base-url", self.url is not None), ("--sim", self.sim is not None),
                                  ("--spec", self.spec is not None)) if on]
        if len(chosen) != 1:
            raise ServelabError("give exactly one target: --base-url URL, --sim (with --model, --gpu) or --spec FILE")
        if self.url is not None and not self.url.model:
            raise ServelabError("--base-url needs --model (the served model name)")
        if self.mode not in ("concurrency", "rate"):
            raise ServelabError(f"--mode {self.mode!r}: use concurrency or rate")
        for flag, value, low in (("--repetitions", self.repetitions, 1), ("--max-levels", self.max_levels, 2),
                                 ("--prompts-per-concurrency", self.prompts.per_concurrency, 1),
                                 ("--min-prompts", self.prompts.min, 1), ("--num-warmups", self.num_warmups, 0)):
            if value < low:
                raise ServelabError(f"{flag} {value}: must be >= {low}")
        if self.prompts.max < self.prompts.min:
            raise ServelabError(f"--max-prompts {self.prompts.max} is below --min-prompts {self.prompts.min}")
        if not 0 < self.knee_tolerance < 1 or not 0 < self.flat_gain < 1:
            raise ServelabError("--knee-tolerance and --flat-gain must be in (0, 1)")
        if self.prompts.per_rate_s <= 0 or self.burstiness <= 0:
            raise ServelabError("--rate-duration-s and --burstiness must be > 0")
        self.axis()  # the levels' own checks
        if self.out is not None:
            check_writable_dir(self.out, "--out")  # before the first level runs

    def axis(self) -> LevelAxis:
        hi = self.max_level if self.max_level is not None else (1024.0 if self.mode == "concurrency" else 100.0)
        return LevelAxis(self.mode, self.min_level, hi, self.growth, self.rate_resolution)  # type: ignore[arg-type]

    def config(self) -> SweepConfig:
        """The sweep's configuration: a spec's workload and SLO where the request names a spec."""
        dataset, slo = self.dataset, self.slo
        if self.spec is not None:
            dataset, spec = spec_dataset(self.spec, self.workload)
            if slo is None and spec.slo is not None:
                s = spec.slo
                items = [f"{m}:{v}" for m, v in (("ttft", s.ttft_ms), ("tpot", s.tpot_ms), ("e2el", s.e2el_ms)) if v]
                slo = parse_slo(items, s.percentile) if items else None
        return SweepConfig(
            axis=self.axis(), dataset=dataset,
            targets=Boundaries(knee=True, slo=slo is not None, saturation=self.mode == "rate",
                            knee_tolerance=self.knee_tolerance, flat_gain=self.flat_gain,
                            max_levels=self.max_levels),
            repetitions=self.repetitions, prompts=self.prompts, num_warmups=self.num_warmups,
            seed=self.seed, slo=slo, percentile=slo.percentile if slo else self.slo_percentile,
            burstiness=self.burstiness, max_concurrency=self.max_concurrency, bootstrap_seed=self.seed)

    def open(self) -> OpenTarget:
        """The one target, opened here (a spec's arm is launched)."""
        if self.spec is not None:
            return open_arm(self.spec, self.arm, (self.out or Path(".")) / "logs")
        if self.sim is not None:
            return open_sim(self.sim)
        u = self.url
        assert u is not None and u.model
        return open_url(u.url, u.model, u.backend, u.gpu, u.request_timeout_s, u.max_num_seqs, u.gpus)

    def copies(self) -> ArmCopies | SimCopies:
        """Copies of the target, one per place that measures levels (a cluster's)."""
        if self.url is not None:
            raise ServelabError("--ray with --base-url: levels measured at once would load the one server "
                                "together; give --sim or --spec (each copy is its own engine)")
        if self.spec is not None:
            _, spec = spec_dataset(self.spec, self.workload)
            return ArmCopies(spec, self.arm, (self.out or Path(".")) / "logs", str(self.spec))
        assert self.sim is not None
        return SimCopies(self.sim)


PoolOf = Callable[[ArmCopies | SimCopies], tuple[LevelSource, Callable[[], None]]]


def run_sweep_request(req: SweepRequest, echo: Echo = lambda _l: None, pool: PoolOf | None = None) -> SweepOutcome:
    """Check `req`, run its sweep (on copies from `pool` when given: a Ray cluster), write
    `sweep.json` and `sweep.png` under `req.out`; the outcome."""
    req.check()
    cfg = req.config()
    if pool is not None:
        copies = req.copies()
        planner, describe = copies.view()
        echo(f"sweeping {describe} on a cluster, seed {req.seed}")
        source, close = pool(copies)
    else:
        ot = req.open()
        planner, describe = ot.planner, ot.describe
        echo(f"sweeping {describe}, seed {req.seed}")
        source, close = OneTarget(ot, None, req.out), ot.close
    try:
        outcome = sweep_levels(source, cfg, planner, describe, req.out, echo)
    finally:
        close()
    if req.out is not None:
        write_json_atomic(req.out / "sweep.json", outcome_json(outcome))
        sweep_plot(outcome, req.out / "sweep.png")
    return outcome
