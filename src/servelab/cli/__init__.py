"""The `servelab` command line: thin commands that parse flags and call the packages.

Each sub-command lives in its own module and registers itself on `app` through
`register(app)`; this module only assembles them and turns `ServelabError` into a clear
message with exit code 2.
"""

from __future__ import annotations

import sys

import typer

from servelab import __version__
from servelab.cli.flags import expand_nargs
from servelab.cli.output import PIPE_WIDTH, WholeHelpGroup, make_console, print_error
from servelab.errors import ServelabError

# Help is click's plain formatter (rich_markup_mode=None), not typer's rich panels: the
# panels lay options out as a table that, at 80 columns, cuts long flag names
# (`--prefix-repetition-pr…`), and no typer setting widens that table short of a wider
# console. Click puts a long flag on a line of its own and wraps the help under it, at the
# terminal's width or `COLUMNS`, at most `max_content_width` (the tables' piped width).
app = typer.Typer(
    name="servelab",
    help="Find the best way to serve an LLM by measurement: bench, plan, simulate, compare.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
    context_settings={"max_content_width": PIPE_WIDTH},
    cls=WholeHelpGroup,
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
    # Sub-apps (`sim`, `data`) list their commands as the root does: set here, once, rather
    # than in each module's add_typer call.
    groups = list(app.registered_groups)
    while groups:
        info = groups.pop()
        info.cls = WholeHelpGroup
        groups += info.typer_instance.registered_groups if info.typer_instance else []


def main() -> None:
    """Console-script entry point."""
    _register_all()
    err = make_console(stderr=True)
    try:
        # Non-standalone click returns (not raises) the code of a command's typer.Exit.
        rc = app(args=expand_nargs(sys.argv[1:]), standalone_mode=False)
        if isinstance(rc, int) and rc != 0:
            sys.exit(rc)
    except ServelabError as exc:
        print_error(err, str(exc))
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
            print_error(err, _validation_message(exc))
            sys.exit(2)
        raise


def _validation_message(exc: "ValidationError") -> str:  # noqa: F821
    parts = []
    for e in exc.errors():
        where = ".".join(str(x) for x in e["loc"]) or exc.title
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)
