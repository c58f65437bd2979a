"""Server processes in their own process groups: start, wait for /health, stop.

Every server is started with ``start_new_session=True``, so it leads a process group that
holds it and every worker it forks (vLLM's engine core, tensor-parallel ranks). Stopping
sends SIGTERM to that group, waits, then SIGKILLs the group: only what we started is
touched, never anything found by name.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from servelab.errors import ServelabError

__all__ = [
    "ReplicaCommand",
    "ServerProcess",
    "check_ports_free",
    "failure",
    "group_alive",
    "healthy",
    "http_get",
    "log_tail",
    "wait_healthy",
]

TAIL_LINES = 30
# Set (to "1") by servelab's Ray actors: a server they start is sent SIGTERM by the kernel
# when the actor's process dies (a killed actor cannot stop what it started).
DIE_WITH_PARENT_ENV = "SERVELAB_DIE_WITH_PARENT"
_PR_SET_PDEATHSIG = 1
_SECRET = re.compile(r"key|token|secret|password", re.IGNORECASE)
# No proxy for 127.0.0.1: a proxy from the environment would answer for our server.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True, slots=True)
class ReplicaCommand:
    """How to start one replica: argv, environment overrides, log file, root URL."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    url: str
    host: str
    port: int


def http_get(url: str, timeout_s: float = 2.0) -> tuple[int, bytes] | None:
    """GET `url`; (status, body), or None when nothing answered (refused, reset, timeout)."""
    return _http(url, None, timeout_s)


def http_post(url: str, timeout_s: float = 10.0) -> tuple[int, bytes] | None:
    """POST an empty body to `url`; (status, body), or None when nothing answered."""
    return _http(url, b"", timeout_s)


def _http(url: str, data: bytes | None, timeout_s: float) -> tuple[int, bytes] | None:
    try:
        request = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
        with _OPENER.open(request, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (OSError, ValueError):
        return None


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    """True when `url`/health answers 200."""
    answer = http_get(url.rstrip("/") + "/health", timeout_s)
    return answer is not None and answer[0] == 200


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a log file ('' when it does not exist)."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as f:
            return "".join(deque(f, maxlen=lines)).rstrip("\n")
    except FileNotFoundError:
        return ""


def group_alive(pgid: int) -> bool:
    """True while any live (non-zombie) process is in process group `pgid`."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    # killpg(0) also succeeds for zombies that no parent has reaped yet: look closer.
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent process dies (Linux prctl)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _redacted_argv(argv: Sequence[str]) -> str:
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("***")
            hide_next = False
        elif arg.startswith("-") and _SECRET.search(arg):
            name, eq, _ = arg.partition("=")
            out.append(f"{name}=***" if eq else arg)
            hide_next = not eq
        else:
            out.append(arg)
    return shlex.join(out)


def _env_line(env: Mapping[str, str]) -> str:
    return " ".join(f"{k}={'***' if _SECRET.search(k) else shlex.quote(v)}" for k, v in sorted(env.items()))


class ServerProcess:
    """One server process leading its own process group; its output goes to its log file."""

    def __init__(self, cmd: ReplicaCommand) -> None:
        self.cmd = cmd
        cmd.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = cmd.log_path.open("w", encoding="utf-8")
        # Header for whoever reads the log later; secrets never reach the file.
        self._log.write(f"# servelab launch: {_redacted_argv(cmd.argv)}\n")
        self._log.write(f"# servelab env: {_env_line(cmd.env)}\n")
        self._log.flush()
        try:
            self._popen = subprocess.Popen(
                cmd.argv,
                env={**os.environ, **cmd.env},
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent if os.environ.get(DIE_WITH_PARENT_ENV) == "1" else None,
            )
        except OSError as exc:
            self._log.close()
            raise ServelabError(f"{cmd.name}: cannot start {cmd.argv[0]!r}: {exc}") from None
        self.pid = self._popen.pid
        self.pgid = self.pid  # start_new_session: the child leads a new group
        self._stopped = False

    @property
    def log_path(self) -> Path:
        return self.cmd.log_path

    @property
    def url(self) -> str:
        return self.cmd.url

    def exit_code(self) -> int | None:
        """The leader's exit code, or None while it runs."""
        return self._popen.poll()

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM the process group, wait up to `grace_s` s for all of it, then SIGKILL it."""
        if self._stopped:
            return
        self._signal(signal.SIGTERM)
        if not self._wait_group(grace_s):
            self._signal(signal.SIGKILL)
            if not self._wait_group(10.0):
                raise ServelabError(f"{self.cmd.name}: process group {self.pgid} survived SIGKILL")
        self._popen.wait()
        self._log.close()
        self._stopped = True

    def _signal(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            pass

    def _wait_group(self, timeout_s: float) -> bool:
        end = time.monotonic() + timeout_s
        while True:
            self._popen.poll()  # reap the leader, or it counts as alive
            if not group_alive(self.pgid):
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(0.05)


def check_ports_free(commands: Sequence[ReplicaCommand]) -> None:
    """Refuse a port something already listens on: /health would answer for a stranger."""
    for cmd in commands:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((cmd.host, cmd.port))
            except OSError as exc:
                raise ServelabError(f"{cmd.name}: port {cmd.port} on {cmd.host} is not free ({exc.strerror})") from None


def failure(proc: ServerProcess, what: str) -> ServelabError:
    """The error for a replica that failed: what happened, its log path and last lines."""
    tail = log_tail(proc.log_path)
    return ServelabError(f"{proc.cmd.name} {what}; log {proc.log_path}, last lines:\n{tail}")


def wait_healthy(
    procs: Sequence[ServerProcess],
    deadline_at: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = 0.5,
) -> None:
    """Wait until every process answers /health, watching each for an early exit.

    `deadline_at` is a `clock()` reading. Raises `ServelabError` with the log's last lines
    when a process exits first or the deadline passes (processes are left running).
    """
    pending = list(procs)
    while True:
        for proc in list(pending):
            code = proc.exit_code()
            if code is not None:
                raise failure(proc, f"exited with code {code} before answering /health")
            if healthy(proc.url):
                pending.remove(proc)
        if not pending:
            return
        if clock() >= deadline_at:
            raise failure(pending[0], f"did not answer {pending[0].url}/health before the deadline")
        sleep(poll_s)
