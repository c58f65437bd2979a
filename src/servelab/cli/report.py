"""`servelab report DIR`: the report of an experiment directory (terminal, report.md,
report.html, plots/)."""

from __future__ import annotations

from pathlib import Path

import typer
from servelab.cli.output import make_console
from rich.markdown import Markdown


def print_report(root: Path) -> None:
    """Build the report of `root`, write its files there and print it as markdown."""
    from servelab.report import build_report, write_report

    report = build_report(root)
    paths = write_report(root, report)
    # Wide enough that no figure is cut to "…" (a narrow terminal wraps the lines instead).
    console = make_console()
    console.print(Markdown(report.to_markdown(with_plots=False)))
    html = next(p for p in paths if p.name == "report.html")
    make_console(stderr=True).print(f"report written to {html} ({len(report.plots)} plots)", highlight=False)


def report_cmd(
    directory: Path = typer.Argument(..., help="An experiment directory written by `servelab run`."),
) -> None:
    """Render an experiment's tables, diagnosis and plots (terminal, report.md, report.html)."""
    print_report(directory)


def register(app: typer.Typer) -> None:
    """Add `servelab report` to the app."""
    app.command("report")(report_cmd)
