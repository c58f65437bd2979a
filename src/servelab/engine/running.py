"""A launched engine: replicas started wave by wave, their startup logs read, stopped as one.

`launch` is the one code path every process-based adapter (vllm, sglang, sim) ends in; its
`LaunchedEngine` is the `RunningEngine` the experiment runner holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence

from servelab.engine.logparse import StartupInfo, parse_startup_log
from servelab.engine.process import (
    ReplicaCommand,
    ServerProcess,
    check_ports_free,
    failure,
    http_get,
    http_post,
    wait_healthy,
)

__all__ = ["LaunchedEngine", "launch", "reset_prefix_cache", "server_version"]


def server_version(url: str) -> str | None:
    """What GET `url`/version says (vLLM and servelab's simulator serve it), or None."""
    answer = http_get(url.rstrip("/") + "/version")
    if answer is None or answer[0] != 200:
        return None
    try:
        version = json.loads(answer[1]).get("version")
    except (ValueError, AttributeError):
        return None
    return version if isinstance(version, str) else None


def reset_prefix_cache(urls: Sequence[str], path: str | None, deadline_s: float = 30.0, *,
                       clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], None] = time.sleep) -> str | None:
    """Empty every replica's prefix cache (POST `path`); None when done, else why not.

    An answer ``{"success": false}`` (vLLM: blocks still held by requests finishing) is
    retried until `deadline_s` seconds pass; a 200 without that key counts as done (older
    vLLM answers with an empty body). A 404 means the server does not offer the reset
    (vLLM only with ``VLLM_SERVER_DEV_MODE=1``).
    """
    if path is None:
        return "this engine offers no prefix-cache reset"
    deadline_at = clock() + deadline_s
    for url in urls:
        while True:
            answer = http_post(url.rstrip("/") + path)
            if answer is None:
                return f"{url}{path}: no answer"
            status, body = answer
            if status != 200:
                return f"{url}{path}: HTTP {status}"
            try:
                done = json.loads(body).get("success", True) if body.strip() else True
            except (ValueError, AttributeError):
                done = True
            if done:
                break
            if clock() >= deadline_at:
                return f"{url}{path}: still refused after {deadline_s:.0f} s (blocks in use)"
            sleep(0.5)
    return None


class LaunchedEngine:
    """A `RunningEngine` made of server processes this launch started; `reset_path` is the
    engine's prefix-cache reset endpoint (None: it has none)."""

    def __init__(self, processes: list[ServerProcess], version: str | None,
                 reset_path: str | None = None) -> None:
        self.processes = processes
        self.reset_path = reset_path
        self.replica_urls = [p.url for p in processes]
        self.base_url = self.replica_urls[0]
        self.log_paths = [p.log_path for p in processes]
        self.replica_startups: list[StartupInfo | None] = [
            parse_startup_log(p.log_path.read_text(encoding="utf-8", errors="replace")) for p in processes
        ]
        self.startup = self.replica_startups[0]
        self.version = version or server_version(self.base_url) or (self.startup.version if self.startup else None)

    def reset_prefix_cache(self, deadline_s: float = 30.0) -> str | None:
        """Empty every replica's prefix cache; None when done, else the reason it was not."""
        return reset_prefix_cache(self.replica_urls, self.reset_path, deadline_s)

    def stop(self, grace_s: float = 30.0) -> None:
        """Stop every replica's process group (SIGTERM, SIGKILL after `grace_s` s)."""
        for proc in self.processes:
            proc.stop(grace_s)


def launch(
    waves: Sequence[Sequence[ReplicaCommand]],
    deadline_s: float,
    *,
    version: str | None = None,
    reset_path: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    stop_grace_s: float = 10.0,
) -> LaunchedEngine:
    """Start replicas wave by wave (a wave starts once the previous one is healthy).

    Replicas that share a GPU go in separate waves: each must measure free memory while
    the others hold theirs. `deadline_s` bounds the whole launch. On any failure every
    process started here is stopped before `ServelabError` propagates.
    """
    check_ports_free([cmd for wave in waves for cmd in wave])
    deadline_at = clock() + deadline_s
    started: list[ServerProcess] = []
    try:
        for wave in waves:
            procs = []
            for cmd in wave:
                proc = ServerProcess(cmd)
                started.append(proc)
                procs.append(proc)
            wait_healthy(procs, deadline_at, clock=clock, sleep=sleep)
        for proc in started:
            code = proc.exit_code()
            if code is not None:  # something else answered /health on our port
                raise failure(proc, f"exited with code {code}")
        return LaunchedEngine(started, version, reset_path)
    except BaseException:
        for proc in started:
            proc.stop(stop_grace_s)
        raise
