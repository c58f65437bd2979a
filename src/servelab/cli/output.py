"""The consoles commands print to.

Without a terminal (output piped to a file or captured by a runner), rich falls back to 80
columns and cuts table cells short ("NVID…"); a wide fixed width keeps every figure readable
in a log. On a terminal the terminal's width rules.
"""

from __future__ import annotations

from rich.console import Console

PIPE_WIDTH = 160


def make_console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr), `PIPE_WIDTH` columns wide when not a terminal."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=PIPE_WIDTH)
    return console
