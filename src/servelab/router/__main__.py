"""`python -m servelab.router ...` is `servelab route ...` without loading the other
commands (tests and benchmarks start the router this way)."""

import sys

import click
import typer
from rich.console import Console

from servelab.cli.route import route
from servelab.errors import ServelabError

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command()(route)

try:
    app(standalone_mode=False)
except ServelabError as exc:
    Console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False)
    sys.exit(2)
except click.exceptions.ClickException as exc:
    exc.show()
    sys.exit(exc.exit_code)
