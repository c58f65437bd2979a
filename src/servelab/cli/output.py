"""The consoles commands print to, how wide they are, and the help pages' group class.

Width, first rule that applies:
1. `COLUMNS` (a positive integer), terminal or not: a user or a script that sets it gets
   it, so `COLUMNS=80 servelab report DIR > report.txt` reads as an 80-column terminal;
2. on a terminal, the terminal's width;
3. piped or captured with `COLUMNS` unset: `PIPE_WIDTH` (100) columns, whatever
   terminal the command was started from, so a log reads the same from a shell or a
   runner. rich alone would take 80 or the size of any other terminal stream.
Tables fit any of these widths without cutting a figure (`servelab.textgrid.FitTable`:
one grid, column groups, or stacked rows).
"""

from __future__ import annotations

import os

import click
from rich.console import Console
from typer.core import TyperGroup

PIPE_WIDTH = 100


def columns_env() -> int | None:
    """`COLUMNS` as a width in columns, None when unset or not a positive integer."""
    value = os.environ.get("COLUMNS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def make_console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr) as wide as the module doc's rules say."""
    width = columns_env()
    if width is None:
        probe = Console(stderr=stderr)
        if probe.is_terminal:
            return probe
        width = PIPE_WIDTH
    return Console(stderr=stderr, width=width)


def print_error(console: Console, message: str) -> None:
    """`error: MESSAGE` as one line, never wrapped or cut at the console's width (scripts
    grep it; a terminal wraps it itself). markup=False: messages quote things like
    `servelab[sharegpt]` verbatim."""
    console.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)


class WholeHelpGroup(TyperGroup):
    """A command group whose help lists each command with its whole first sentence,
    wrapped, where click cuts it to the line's rest with `...`."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
