"""`servelab run SPEC.yaml`: run (or resume) an experiment, then print its report."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from servelab.cli.output import make_console


def run_cmd(
    spec_file: Path = typer.Argument(..., help="Experiment spec (YAML); see docs/experiments.md."),
    out: Optional[Path] = typer.Option(None, "--out", help="Results directory (default: the spec's output_dir, else runs/<spec name>)."),
    force: bool = typer.Option(False, "--force", help="Redo cells already stored (default: skip them: resume)."),
    no_report: bool = typer.Option(False, "--no-report", help="Do not print or write the report at the end."),
    arm: list[str] = typer.Option([], "--arm", metavar="ARM", help="Run only this arm (repeatable; default: every arm)."),
    workload: list[str] = typer.Option([], "--workload", metavar="WORKLOAD", help="Run only this workload (repeatable)."),
    load: list[str] = typer.Option([], "--load", metavar="LOAD", help="Run only this load, by cell name: c10, r2.5, r2.5-c32 (repeatable)."),
    ray: Optional[str] = typer.Option(None, "--ray", metavar="ADDRESS", help="Run the arms on this Ray cluster (auto: the local one; default: the spec's cluster.ray, else here, one arm after another). Needs servelab[ray]."),
) -> None:
    """Run every arm x workload x load cell of a spec; stored cells are skipped (resume).

    --arm/--workload/--load measure a part of the grid; cell seeds do not depend on the
    selection, so parts measured in separate runs see the same requests. With --ray each
    arm runs as a placed Ray actor, arms in parallel where GPUs allow (docs/cluster.md).
    """
    from servelab.cli.report import print_report
    from servelab.experiment import load_spec, run_experiment
    from servelab.experiment.cells import CellSelection
    from servelab.storage import check_writable_dir

    spec = load_spec(spec_file)
    select = CellSelection(frozenset(arm), frozenset(workload), frozenset(load))
    select.check(spec)
    root = out or spec.output_dir or Path("runs") / spec.name
    check_writable_dir(root, "--out")  # before any arm starts
    err = make_console(stderr=True)
    err.print(f"experiment {spec.name}: {len(spec.arms)} arms x {len(spec.workloads)} workloads "
              f"-> {root}", highlight=False)
    echo = lambda line: err.print(line, highlight=False, markup=False)  # noqa: E731
    address = ray or spec.cluster.ray
    if address is not None:
        from servelab.distributed.raydriver import run_on_ray

        run_on_ray(spec, root, address, force=force, spec_path=spec_file, select=select, echo=echo)
    else:
        run_experiment(spec, root, force=force, spec_path=spec_file, select=select, echo=echo)
    if not no_report:
        print_report(root)


def register(app: typer.Typer) -> None:
    """Add `servelab run` to the app."""
    app.command("run")(run_cmd)
