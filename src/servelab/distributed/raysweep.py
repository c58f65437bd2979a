"""`servelab sweep --ray ADDRESS`: a sweep's levels measured by copies of its target at once.

The sweep (`servelab.sweep.runner`) owns the `LevelSource` interface; this is its Ray
implementation. `width` actors, as many as the cluster holds (each asks for the target's
GPUs: a launched arm's TP x PP x replicas, or one CPU for the offline simulator; at most
`MAX_COPIES`), each open their own copy of the target on their node once (a launched arm on
its own ports, its logs under `copy<i>/`) and measure one level per call. The sweep asks for
the levels it may need next together and takes them in its own order, so on a
deterministic target its path and outcome are a sequential sweep's; on a real engine each
level is measured on one of `width` identical engines instead of one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servelab.distributed.raycluster import connect
from servelab.engine.process import DIE_WITH_PARENT_ENV
from servelab.errors import ServelabError, failure_of
from servelab.sweep.runner import MeasuredLevel, SweepConfig, WorkloadCache, measure_level
from servelab.sweep.targets import OpenTarget

# Past three rounds of bisection (7 levels) a wider look-ahead measures mostly levels the
# search never takes.
MAX_COPIES = 8
Opener = Callable[[int], OpenTarget]  # copy index -> its open target


class LevelWorker:
    """The actor of one copy of the target (made remote by the pool): opens it on its
    node, measures levels, closes it."""

    def __init__(self, opener: Opener, copy: int) -> None:
        import os

        os.environ[DIE_WITH_PARENT_ENV] = "1"  # engines it starts die with it
        self.cache = WorkloadCache()
        self.error: str | None = None
        self.ot: OpenTarget | None = None
        try:
            self.ot = opener(copy)
        except ServelabError as exc:
            self.error = str(exc)

    def measure(self, cfg: SweepConfig, level: float) -> MeasuredLevel | str:
        """The level, or why it could not be measured."""
        if self.ot is None:
            return f"the target did not open: {self.error}"
        try:
            return measure_level(self.ot, cfg, level, self.cache)
        except ServelabError as exc:
            return str(exc)

    def close(self) -> str | None:
        ot, self.ot = self.ot, None
        return failure_of(ot.close if ot is not None else None)


class RayLevelPool:
    """`LevelSource` of `width` copies of a target on the Ray cluster at `address`."""

    def __init__(self, address: str, opener: Opener, gpus_per_copy: int, echo: Callable[[str], None] = lambda _l: None) -> None:
        self.ray = connect(address)
        res = self.ray.cluster_resources()
        have = res.get("GPU", 0.0) if gpus_per_copy else res.get("CPU", 0.0)
        fits = int(have // (gpus_per_copy or 1))
        if fits < 1:
            raise ServelabError(f"--ray {address}: a copy of the target asks for {gpus_per_copy} GPU(s); "
                                f"the cluster has {res.get('GPU', 0.0):g}")
        self.width = min(fits, MAX_COPIES)
        worker = self.ray.remote(LevelWorker).options(num_cpus=0 if gpus_per_copy else 1,
                                                      num_gpus=gpus_per_copy, max_restarts=0)
        self.actors: list[Any] = [worker.remote(opener, i) for i in range(self.width)]
        echo(f"  {self.width} copies of the target on the cluster")

    def measure(self, cfg: SweepConfig, levels: list[float]) -> list[MeasuredLevel]:
        from ray.exceptions import RayActorError, RayTaskError

        refs = [self.actors[i % self.width].measure.remote(cfg, x) for i, x in enumerate(levels)]
        try:
            done = self.ray.get(refs)
        except (RayActorError, RayTaskError) as exc:
            raise ServelabError(f"a copy of the target was lost on the cluster: {str(exc).splitlines()[0]}") from None
        for x, got in zip(levels, done):
            if isinstance(got, str):
                raise ServelabError(f"level {cfg.axis.key(x)}: {got}")
        return done

    def close(self) -> None:
        """Close every copy (stopping what it launched), then end its actor."""
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        errors = []
        for actor in self.actors:
            try:
                why = self.ray.get(actor.close.remote(), timeout=120)
                if why:
                    errors.append(why)
            except (RayActorError, RayTaskError, GetTimeoutError):
                pass
            self.ray.kill(actor, no_restart=True)
        self.actors = []
        if errors:
            raise ServelabError("; ".join(errors))


def pool_on(address: str, echo: Callable[[str], None] = lambda _l: None) -> Callable[[Any], tuple[RayLevelPool, Callable[[], None]]]:
    """What `sweep.request.run_sweep_request` takes as `pool`: copies of its target on the
    cluster at `address`, and how to end them."""

    def pool(copies: Any) -> tuple[RayLevelPool, Callable[[], None]]:
        p = RayLevelPool(address, copies, copies.gpus, echo)
        return p, p.close

    return pool
