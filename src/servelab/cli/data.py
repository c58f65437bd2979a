"""`servelab data inspect`: build a workload and show what it holds before trusting a result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from servelab.cli.output import make_console
from rich.table import Table

from servelab.cli.flags import workload_flags
from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.inspect import (
    WorkloadSummary,
    histogram,
    plot_lengths,
    save_samples,
    summarize,
)
from servelab.workload.tokenizer import load_tokenizer
from servelab.storage import check_writable

_BAR_WIDTH = 40
_BINS = 12


def _stats_table(summary: WorkloadSummary) -> Table:
    table = Table(title="lengths (tokens)", title_justify="left")
    table.add_column("")
    for col in ("min", "max", "mean", "median", "std", "p90", "p99", "total"):
        table.add_column(col, justify="right")
    for label, s in (("prompt", summary.prompt_len), ("output", summary.output_len)):
        table.add_row(label, str(s.min), str(s.max), f"{s.mean:.1f}", f"{s.median:.1f}",
                      f"{s.std:.1f}", f"{s.p90:.1f}", f"{s.p99:.1f}", f"{s.total:,}")
    return table


def _histogram_table(label: str, values: list[int], bins: int) -> Table:
    table = Table(title=f"{label} length histogram", title_justify="left", box=None)
    table.add_column("tokens", justify="right")
    table.add_column("requests", justify="right")
    table.add_column("")
    rows = histogram(values, bins)
    peak = max(b.count for b in rows) or 1
    for b in rows:
        bar = "█" * round(_BAR_WIDTH * b.count / peak)
        table.add_row(f"{b.lo:,.0f}-{b.hi:,.0f}", str(b.count), f"[cyan]{bar}[/]")
    return table


def _render(console: Console, summary: WorkloadSummary, workload, bins: int) -> None:
    tok = summary.tokenizer
    console.print(f"[bold]dataset[/] {summary.dataset}   [bold]requests[/] {summary.requests:,}   "
                  f"[bold]seed[/] {summary.seed}")
    console.print(f"[bold]tokenizer[/] {tok.name} ({tok.source}, vocab {tok.vocab_size:,})")
    if summary.sessions is not None:
        console.print(f"[bold]sessions[/] {summary.sessions:,} (multi-turn: lengths are per turn)")
    if summary.images:
        console.print(f"[bold]images[/] {summary.images:,}")
    if summary.own_schedule_s is not None:
        console.print(f"[bold]send times[/] the trace's own, last at {summary.own_schedule_s:,.3f} s")
    for note in summary.notes:
        console.print(f"[yellow]note:[/] {note}")
    console.print(_stats_table(summary))
    console.print(_histogram_table("prompt", [r.prompt_len for r in workload.requests], bins))
    console.print(_histogram_table("output", [r.output_len for r in workload.requests], bins))


@workload_flags
def inspect_command(
    *,
    dataset: DatasetOptions,
    seed: int,
    as_json: bool = typer.Option(
        False, "--json", help="Print the summary as JSON (stdout holds only the JSON)."
    ),
    save_samples_to: Optional[Path] = typer.Option(
        None, "--save-samples", help="Write the requests as JSON Lines to this file."
    ),
    plot: Optional[Path] = typer.Option(
        None, "--plot", help="Save length histograms as an image (e.g. lengths.png)."
    ),
) -> None:
    """Build a workload and show its size, notes and prompt/output length distributions."""
    if save_samples_to is not None:
        check_writable(save_samples_to.expanduser(), "--save-samples")
    if plot is not None:
        check_writable(plot.expanduser(), "--plot")
    tokenizer = load_tokenizer(dataset.tokenizer)
    workload = build_workload(dataset, tokenizer, seed)
    summary = summarize(workload)
    if save_samples_to is not None:
        save_samples(workload, save_samples_to)
    if plot is not None:
        plot_lengths(workload, plot)
    if as_json:
        typer.echo(json.dumps(summary.to_json(), indent=2))
        return
    console = make_console()
    _render(console, summary, workload, _BINS)
    if save_samples_to is not None:
        console.print(f"samples: {save_samples_to}")
    if plot is not None:
        console.print(f"plot: {plot}")


def register(app: typer.Typer) -> None:
    """Add the `data` command group to the servelab CLI."""
    data_app = typer.Typer(help="Build and inspect workloads.", no_args_is_help=True)

    @data_app.callback()
    def _data() -> None:
        """Build and inspect workloads (datasets, tokenizers)."""

    data_app.command("inspect")(inspect_command)
    app.add_typer(data_app, name="data")
