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
) -> None:
    """Run every arm x workload x load cell of a spec; stored cells are skipped (resume)."""
    from servelab.cli.report import print_report
    from servelab.experiment import load_spec, run_experiment

    spec = load_spec(spec_file)
    root = out or spec.output_dir or Path("runs") / spec.name
    err = make_console(stderr=True)
    err.print(f"experiment {spec.name}: {len(spec.arms)} arms x {len(spec.workloads)} workloads "
              f"-> {root}", highlight=False)
    run_experiment(spec, root, force=force, spec_path=spec_file,
                   echo=lambda line: err.print(line, highlight=False, markup=False))
    if not no_report:
        print_report(root)


def register(app: typer.Typer) -> None:
    """Add `servelab run` to the app."""
    app.command("run")(run_cmd)
