"""Experiments: the spec, the orchestrator (arms x workloads x loads) and the results store.

Public API: `load_spec` (a YAML file to a checked `ExperimentSpec`), `run_experiment`
(run or resume a spec into a directory), `ExperimentStore` (the directory's layout). See
docs/experiments.md.
"""

from servelab.experiment.orchestrator import run_experiment
from servelab.experiment.spec import ExperimentSpec
from servelab.experiment.specfile import load_spec
from servelab.experiment.store import ArmStatus, ExperimentStore

__all__ = ["ArmStatus", "ExperimentSpec", "ExperimentStore", "load_spec", "run_experiment"]
