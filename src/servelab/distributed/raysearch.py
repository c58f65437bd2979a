"""`servelab plan --search --ray ADDRESS`: the capacity search's simulations as Ray tasks.

The search (`servelab.fleet.search`) owns the `Evaluator` interface; this is its Ray
implementation. The shared target (model, GPU, the prepared traffic, the SLO) goes to the
object store once; each deployment is one task of one CPU that simulates it with the same
function as the local evaluator (`servelab.fleet.evaluate.evaluate_one`), so the answers,
and the search's path through them, are those of a local run.
"""

from __future__ import annotations

from collections.abc import Sequence

from servelab.distributed.raycluster import connect
from servelab.errors import ServelabError
from servelab.fleet.deployment import Deployment
from servelab.fleet.evaluate import SimTarget, evaluate_one
from servelab.fleet.search import Evaluation


def _evaluate_on_node(target: SimTarget, d: Deployment) -> Evaluation:
    return evaluate_one(target, d)


class RayEvaluator:
    """Simulates deployments as Ray tasks, as many at once as the cluster has CPUs."""

    def __init__(self, address: str, target: SimTarget) -> None:
        self.ray = connect(address)
        self.width = int(self.ray.cluster_resources().get("CPU", 0.0))
        if self.width < 1:
            raise ServelabError(f"--ray {address}: the cluster has no CPU to simulate on")
        self._target = self.ray.put(target)
        self._task = self.ray.remote(num_cpus=1, max_retries=2)(_evaluate_on_node)

    def evaluate(self, deployments: Sequence[Deployment]) -> list[Evaluation]:
        return self.ray.get([self._task.remote(self._target, d) for d in deployments])
