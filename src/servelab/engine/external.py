"""Already-running servers: nothing is launched and nothing is stopped, only checked.

The URLs come from the launcher, or else from the arm's host and ports (replica r at
``port_base + r``). `start` waits for every URL's /health within the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from servelab.engine.adapter import ArmLaunch
from servelab.engine.logparse import StartupInfo
from servelab.engine.process import healthy
from servelab.engine.running import server_version
from servelab.errors import ServelabError

__all__ = ["ExternalEngine", "ExternalLauncher"]


def _root(url: str) -> str:
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServelabError(f"external URL {url!r}: give http(s)://HOST:PORT")
    return url


class ExternalEngine:
    """A `RunningEngine` over servers someone else runs; `stop` leaves them alone."""

    def __init__(self, urls: list[str], version: str | None) -> None:
        self.replica_urls = urls
        self.base_url = urls[0]
        self.startup: StartupInfo | None = None
        self.replica_startups: list[StartupInfo | None] = [None] * len(urls)
        self.version = version
        self.log_paths: list[Path] = []

    def reset_prefix_cache(self, deadline_s: float = 30.0) -> str | None:
        """Not attempted: servers someone else runs keep their state."""
        return "external servers are not reset"

    def stop(self, grace_s: float = 30.0) -> None:
        """Nothing to stop: these servers were not started here."""


class ExternalLauncher:
    """`EngineLauncher` for kind ``external``."""

    kind = "external"

    def __init__(
        self,
        urls: Sequence[str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.urls = [_root(u) for u in urls] if urls else None
        self._clock = clock
        self._sleep = sleep

    def start(self, arm: ArmLaunch, log_dir: Path, deadline_s: float) -> ExternalEngine:
        """Wait until every URL answers /health; `log_dir` is unused (no logs to read)."""
        urls = self.urls or [f"http://{arm.host}:{arm.port(r)}" for r in range(arm.replicas)]
        deadline_at = self._clock() + deadline_s
        pending = list(urls)
        while pending:
            pending = [u for u in pending if not healthy(u)]
            if not pending:
                break
            if self._clock() >= deadline_at:
                raise ServelabError(f"arm {arm.name}: external server(s) {', '.join(pending)} did not "
                                    f"answer /health within {deadline_s:.0f} s")
            self._sleep(0.5)
        return ExternalEngine(urls, server_version(urls[0]))
