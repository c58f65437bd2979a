"""`servelab report DIR`: the report of an experiment directory (terminal, report.md,
report.html, plots/), or with `--csv`/`--parquet` its cells as one table for other tools."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markdown import Markdown
from rich.text import Text

from servelab.cli.output import make_console
from servelab.errors import ServelabError


def print_report(root: Path, calibration: Path | None = None, profile: Path | None = None) -> None:
    """Build the report of `root` (`calibration`, `profile`: the simulator's figures and
    kernel profile for the speculative payoff), write its files there and print it (every
    table fits the console's width without cutting a figure: see servelab.textgrid)."""
    from servelab.report import build_report, write_report
    from servelab.sim.cost import Calibration
    from servelab.sim.kernel_profile import KernelProfile

    # a bad file is named before any work
    if calibration is not None:
        Calibration.load(calibration)
    if profile is not None:
        KernelProfile.load(profile, "--profile")
    report = build_report(root, calibration=calibration, profile=profile)
    paths = write_report(root, report)
    console = make_console()
    console.print(Text(report.title, style="bold"))
    for line in report.intro:
        console.print(line, highlight=False)
    for table in report.tables:
        console.print()
        console.print(table.to_text())
    if report.diagnoses:
        console.print()
        console.print(Text("Diagnosis", style="bold"))
        for d in report.diagnoses:
            console.print()
            console.print(Markdown(d.to_markdown()))
    html = next(p for p in paths if p.name == "report.html")
    make_console(stderr=True).print(f"report written to {html} ({len(report.plots)} plots)",
                                    highlight=False, soft_wrap=True)


def export_cells(root: Path, csv_path: Path | None, parquet_path: Path | None) -> None:
    """Check the output paths (and pyarrow for Parquet), then write one row per cell."""
    from servelab.report.export import PYARROW_HINT, export, pyarrow_available
    from servelab.storage import check_writable

    if csv_path is not None:
        check_writable(csv_path, "--csv")
    if parquet_path is not None:
        check_writable(parquet_path, "--parquet")
        if not pyarrow_available():
            raise ServelabError(PYARROW_HINT)
    rows = export(root, csv_path, parquet_path)
    written = " and ".join(str(p) for p in (csv_path, parquet_path) if p is not None)
    make_console(stderr=True).print(f"{rows} cells written to {written}", highlight=False,
                                    soft_wrap=True)


def report_cmd(
    directory: Path = typer.Argument(..., help="An experiment directory written by `servelab run`."),
    csv_path: Optional[Path] = typer.Option(
        None, "--csv", help="Write one row per cell (arm, workload, load, every scalar result key, "
        "the server figures) to this CSV file instead of the report."),
    parquet_path: Optional[Path] = typer.Option(
        None, "--parquet", help="As --csv, as a Parquet file (needs pyarrow)."),
    calibration: Optional[Path] = typer.Option(
        None, "--calibration", help="Calibration JSON (`servelab sim calibrate`, e.g. this host's "
        "--fit speculative) for the simulated payoff of speculative arms (default: the spec's "
        "sim.calibration, else the GPU's shipped figures)."),
    profile: Optional[Path] = typer.Option(
        None, "--profile", help="Kernel profile JSON (`servelab sim profile`, e.g. measured on the "
        "machine that ran the cells) for the simulated payoff of speculative arms (default: the "
        "spec's sim.profile, else the GPU's shipped profile)."),
) -> None:
    """Render an experiment's tables, diagnosis and plots (terminal, report.md, report.html),
    or with --csv / --parquet export its cells for pandas, spreadsheets and dashboards."""
    if csv_path is not None or parquet_path is not None:
        for flag, given in (("--calibration", calibration), ("--profile", profile)):
            if given is not None:
                raise ServelabError(f"{flag} is for the report, not for --csv / --parquet")
        export_cells(directory, csv_path, parquet_path)
    else:
        print_report(directory, calibration, profile)


def register(app: typer.Typer) -> None:
    """Add `servelab report` to the app."""
    app.command("report")(report_cmd)
