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
_COMMAND_MODULES = (  # in the playbook's order, which is the order --help lists them
    "servelab.cli.probe",
    "servelab.cli.data",
    "servelab.cli.plan",
    "servelab.cli.bench",
    "servelab.cli.sim",
    "servelab.cli.run",
    "servelab.cli.report",
    "servelab.cli.sweep",
    "servelab.cli.tune",
    "servelab.cli.route",
)


def _register_all() -> None:
    import importlib

    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(app)


def main() -> None:
    """Console-script entry point."""
    _register_all()
    err = Console(stderr=True)
    try:
        # Non-standalone click returns (not raises) the code of a command's typer.Exit.
        rc = app(standalone_mode=False)
        if isinstance(rc, int) and rc != 0:
            sys.exit(rc)
    except ServelabError as exc:
        # markup=False: messages quote things like `servelab[sharegpt]` verbatim.
        err.print(f"error: {exc}", markup=False, highlight=False)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err.print("aborted")
        sys.exit(130)
    except Exception as exc:
        # Usage errors (unknown flag, bad type) come from the click typer bundles; they
        # know how to print themselves and carry click's exit code (2).
        if hasattr(exc, "show") and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            sys.exit(exc.exit_code)
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):
            err.print(f"error: {_validation_message(exc)}", markup=False, highlight=False)
            sys.exit(2)
        raise


def _validation_message(exc: "ValidationError") -> str:  # noqa: F821
    parts = []
    for e in exc.errors():
        where = ".".join(str(x) for x in e["loc"]) or exc.title
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)
