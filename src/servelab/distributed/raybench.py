"""`servelab bench --ray-workers N`: one schedule sent by client actors on several nodes.

For loads one client machine cannot generate. The bench run (`servelab.client.run`) owns
the `RemoteClients` interface; this is its Ray implementation, the cross-node twin of
`client.workers.send_schedule_processes`: request i goes to actor i mod N (Ray spreads the
actors over the nodes, one CPU each), the concurrency cap is split as evenly as integers
allow, each actor opens its connections and sends its share of the warm-ups, reports ready;
then the driver picks t0 on the wall clock a little ahead (`START_LEAD_S`: machines share no
monotonic clock) and every actor sends its share at t0 + intended, reading t0 on its own
`perf_counter`. The records come back merged in schedule order, times relative to t0, and
each actor's share says where it ran and how late it sent (its scheduling lag: a client
that cannot keep up, or a clock that is off, shows there).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servelab.client.sender import Ready, ScheduleSender, SendControls, SendStatus, release_heap
from servelab.client.target import TargetConfig
from servelab.client.workers import SenderShare, split_schedule
from servelab.distributed.raycluster import connect
from servelab.errors import ServelabError
from servelab.metrics.records import RequestRecord
from servelab.workload.request import RequestSpec

START_LEAD_S = 0.5  # wall-clock lead from the driver's "go" to t0: a call to every actor
POLL_S = 0.25


@dataclass(frozen=True, slots=True)
class ClientShare:
    """One actor's part of the run: where it ran, how many requests it sent, and its
    scheduling lag over them (ms: send time minus intended time)."""

    worker: int
    node_id: str
    requests: int
    sched_lag_mean_ms: float
    sched_lag_p99_ms: float
    sched_lag_max_ms: float

    def to_json(self) -> dict[str, Any]:
        return {"worker": self.worker, "node_id": self.node_id, "requests": self.requests,
                "sched_lag_ms": {"mean": self.sched_lag_mean_ms, "p99": self.sched_lag_p99_ms,
                                 "max": self.sched_lag_max_ms}}


class ClientWorker:
    """The actor of one client (made remote, async, by `RayClients`)."""

    def __init__(self) -> None:
        self.sender: ScheduleSender | None = None
        self.stop = asyncio.Event()
        self.share: SenderShare | None = None
        self.ready: Ready | None = None

    async def prepare(self, target: TargetConfig, share: SenderShare) -> str:
        """Open connections, send the warm-ups, encode; the node id, once ready."""
        import ray

        self.sender = ScheduleSender(target, share.max_concurrency)
        await self.sender.__aenter__()
        self.share = share
        self.ready = await self.sender.prepare(share.requests, share.warmups)
        return str(ray.get_runtime_context().get_node_id())

    async def go(self, t0_wall_s: float) -> list[RequestRecord]:
        """Send the share at t0 (a wall-clock time), return its records relative to t0."""
        assert self.sender is not None and self.share is not None and self.ready is not None
        t0 = time.perf_counter() + (t0_wall_s - time.time())
        warm = self.sender.begin(self.ready, t0)
        try:
            records = await self.sender.run(self.share.requests, self.ready.bodies, self.share.intended_s,
                                            t0, self.stop)
        finally:
            release_heap()
            await self.sender.__aexit__(None, None, None)
        return warm + records

    async def status(self) -> tuple[int, int, int, int]:
        s = self.sender.status if self.sender is not None else SendStatus()
        return s.done, s.failed, s.in_flight, s.output_tokens

    async def halt(self) -> None:
        self.stop.set()


class RayClients:
    """`RemoteClients` of `workers` client actors on the Ray cluster at `address`."""

    def __init__(self, address: str, workers: int) -> None:
        if workers < 1:
            raise ServelabError(f"--ray-workers {workers}: must be >= 1")
        self.ray = connect(address)
        self.workers = workers
        self.shares: list[ClientShare] = []

    async def send(self, target: TargetConfig, requests: Sequence[RequestSpec], intended_s: Sequence[float],
                   max_concurrency: int | None, num_warmups: int, controls: SendControls) -> list[RequestRecord]:
        ray = self.ray
        stop = controls.stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        shares = split_schedule(requests, intended_s, self.workers, max_concurrency, num_warmups)
        actor = ray.remote(ClientWorker).options(num_cpus=1, scheduling_strategy="SPREAD", max_restarts=0)
        actors = [actor.remote() for _ in shares]

        def get(refs: list[Any]) -> list[Any]:
            return ray.get(refs)

        try:
            nodes = await loop.run_in_executor(None, get, [
                a.prepare.remote(target, share) for a, share in zip(actors, shares)])
            if stop.is_set():
                return []
            if controls.before_t0 is not None:
                await controls.before_t0()
            t0_wall = time.time() + START_LEAD_S
            if controls.on_start is not None:
                controls.on_start(controls.clock() + START_LEAD_S)
            pending = [a.go.remote(t0_wall) for a in actors]
            halted = False
            while True:
                ready, _ = await loop.run_in_executor(None, lambda: ray.wait(pending, num_returns=len(pending),
                                                                             timeout=POLL_S))
                if len(ready) == len(pending):
                    break
                if stop.is_set() and not halted:
                    await loop.run_in_executor(None, get, [a.halt.remote() for a in actors])
                    halted = True
                counts = await loop.run_in_executor(None, get, [a.status.remote() for a in actors])
                sums = [sum(x) for x in zip(*counts)]
                if controls.on_progress is not None:
                    controls.on_progress(SendStatus(done=sums[0], failed=sums[1], in_flight=sums[2],
                                                    output_tokens=sums[3]))
            per_actor = await loop.run_in_executor(None, get, pending)
        except ray.exceptions.RayError as exc:
            raise ServelabError(f"--ray-workers: a client actor failed: {str(exc).splitlines()[0]}") from None
        finally:
            for a in actors:
                ray.kill(a, no_restart=True)
        self.shares = [_share(k, node, recs) for k, (node, recs) in enumerate(zip(nodes, per_actor))]
        records = [r for recs in per_actor for r in recs]
        records.sort(key=lambda r: (not r.warmup, r.intended_send_s, r.index))
        return records

    def shares_json(self) -> list[dict[str, object]]:
        """Each actor's share of the last `send`."""
        return [share.to_json() for share in self.shares]


def _share(worker: int, node_id: str, records: list[RequestRecord]) -> ClientShare:
    lags = np.asarray([r.sched_lag_ms for r in records if not r.warmup] or [0.0])
    return ClientShare(worker, node_id, sum(1 for r in records if not r.warmup), float(lags.mean()),
                       float(np.percentile(lags, 99)), float(lags.max()))
