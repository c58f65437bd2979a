"""`servelab route`: the OpenAI-compatible router in front of several backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from servelab.errors import ServelabError
from servelab.routing.policies import POLICY_NAMES


def _param(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ServelabError(f"--policy-param {text!r}: expected KEY=VALUE")
    return key.strip(), value.strip()


def route(
    backend: list[str] = typer.Option(None, "--backend", help="Backend base URL "
                                      "(http://HOST:PORT); repeat for each replica."),
    policy: str = typer.Option(None, "--policy", help=f"One of: {', '.join(POLICY_NAMES)} "
                               "(default round_robin)."),
    port: int = typer.Option(None, "--port", help="Port to listen on (default 8000; 0 picks one)."),
    host: str = typer.Option(None, "--host", help="Address to bind (default 127.0.0.1)."),
    config: Path = typer.Option(None, "--config", help="YAML file with any of these settings "
                                "(flags given override it); see docs/router.md."),
    policy_param: list[str] = typer.Option(None, "--policy-param", help="KEY=VALUE policy "
                                           "setting, e.g. balance_abs_threshold=8; repeatable."),
    explain: bool = typer.Option(None, "--explain/--no-explain", help="Log why each request "
                                 "went where it did."),
    api_key: str = typer.Option(None, "--api-key", help="Require 'Authorization: Bearer KEY' "
                                "on /v1/* (never logged).", envvar="SERVELAB_ROUTER_API_KEY",
                                show_envvar=True),
    max_in_flight: int = typer.Option(None, "--max-in-flight", help="Refuse (503) beyond this "
                                      "many requests in flight (default 4096)."),
    max_body_bytes: int = typer.Option(None, "--max-body-bytes", help="Refuse (413) larger "
                                       "request bodies (default 8 MiB)."),
    request_timeout_s: float = typer.Option(None, "--request-timeout-s", help="Per-request "
                                            "timeout in seconds (default 600)."),
    max_retries: int = typer.Option(None, "--max-retries", help="Retries per request before "
                                    "its first byte (default 2)."),
    seed: int = typer.Option(None, "--seed", help="Seed of the random policies (default 0)."),
) -> None:
    """Run an OpenAI-compatible proxy that spreads requests over BACKENDs by a policy."""
    from servelab.router.config import build_config
    from servelab.router.serve import run

    overrides: dict[str, Any] = {
        "backends": backend or None, "policy": policy, "port": port, "host": host,
        "explain": explain, "api_key": api_key, "max_in_flight": max_in_flight,
        "max_body_bytes": max_body_bytes, "request_timeout_s": request_timeout_s,
        "max_retries": max_retries, "seed": seed,
        "policy_params": dict(_param(p) for p in policy_param) if policy_param else None,
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if config is None and "backends" not in overrides:
        raise ServelabError("--backend: give at least one backend URL (or --config FILE)")
    run(build_config(config, overrides))


def register(app: typer.Typer) -> None:
    app.command("route")(route)


def main() -> None:
    """`python -m servelab.cli.route ...` is `servelab route ...` without loading the other
    commands (the experiment runner, tests and benchmarks start the router this way)."""
    import sys

    import click
    from rich.console import Console

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


if __name__ == "__main__":
    main()
