"""The `servelab` command line: thin commands that parse flags and call the packages.

Each sub-command lives in its own module and registers itself on `app` through
`register(app)`; this module only assembles them and turns `ServelabError` into a clear
message with exit code 2.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from servelab import __version__
from servelab.errors import ServelabError

app = typer.Typer(
    name="servelab",
    help="Find the best way to serve an LLM by measurement: bench, plan, simulate, compare.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"servelab {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """servelab: measure, plan and simulate LLM serving."""


# One line per command module; each module owns its flags and exposes register(app).
_COMMAND_MODULES = (
    "servelab.cli.data",
)


def _register_all() -> None:
    import importlib

    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(app)


def main() -> None:
    """Console-script entry point."""
    _register_all()
    try:
        app(standalone_mode=False)
    except ServelabError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        Console(stderr=True).print("aborted")
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
