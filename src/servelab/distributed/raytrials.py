"""`servelab tune --ray ADDRESS`: trials as Ray tasks, as many at once as the cluster holds.

The tuner (`servelab.sweep.tune`) owns the `TrialRunner` interface; this is its Ray
implementation. Each trial is one task that asks for the GPUs its configuration needs (the
arm's TP x PP; none for the offline simulator, which needs one CPU), opens the target on
its node (a launched engine pinned by the `CUDA_VISIBLE_DEVICES` Ray gives the task), sweeps
it and returns the trial; the driver stores it. The search consumes the batch in its
sequential order, so the outcome equals a sequential run's.
"""

from __future__ import annotations

from servelab.distributed.raycluster import connect
from servelab.errors import ServelabError
from servelab.sweep.space import Value
from servelab.sweep.trials import Trial
from servelab.sweep.tune import Opener, TuneConfig, run_trial


def _trial_on_node(cfg: TuneConfig, opener: Opener, params: dict[str, Value]) -> Trial:
    return run_trial(cfg, opener, params)


class RayTrialRunner:
    """Runs a batch of trials as Ray tasks of `gpus_per_trial` GPUs (0: one CPU each)."""

    def __init__(self, address: str, gpus_per_trial: int) -> None:
        self.ray = connect(address)
        self.gpus = gpus_per_trial
        res = self.ray.cluster_resources()
        have = res.get("GPU", 0.0) if gpus_per_trial else res.get("CPU", 0.0)
        self.width = int(have // (gpus_per_trial or 1))
        if self.width < 1:
            raise ServelabError(f"--ray {address}: a trial asks for {gpus_per_trial} GPU(s); "
                                f"the cluster has {res.get('GPU', 0.0):g}")

    def run_batch(self, cfg: TuneConfig, opener: Opener, points: list[dict[str, Value]]) -> list[Trial]:
        task = self.ray.remote(num_cpus=0 if self.gpus else 1, num_gpus=self.gpus, max_retries=2)(_trial_on_node)
        return self.ray.get([task.remote(cfg, opener, p) for p in points])
