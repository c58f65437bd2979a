"""Engine lifecycle with real processes and sockets on 127.0.0.1.

Servers: servelab's token server, `servelab sim serve` (through `SimLauncher`), and small
Python programs written by the tests where a behaviour must be forced (exit at once,
never healthy, a child that ignores SIGTERM).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from servelab import __version__
from servelab.engine import ArmLaunch, ExternalLauncher, RunningEngine, SimLauncher
from servelab.engine.process import (
    ReplicaCommand,
    ServerProcess,
    group_alive,
    healthy,
    http_get,
    wait_healthy,
)
from servelab.engine.running import launch
from servelab.errors import ServelabError
from servelab.testing.ports import free_port_base

PY = sys.executable


def command(tmp_path: Path, argv: list[str], name: str = "r0", port: int | None = None,
            env: dict[str, str] | None = None) -> ReplicaCommand:
    port = port or free_port_base()
    return ReplicaCommand(name=name, argv=argv, env=env or {}, log_path=tmp_path / f"{name}.log",
                          url=f"http://127.0.0.1:{port}", host="127.0.0.1", port=port)


def token_server(tmp_path: Path, name: str = "r0") -> ReplicaCommand:
    port = free_port_base()
    argv = [PY, "-m", "servelab.testing.token_server", "--port", str(port), "--model", "tok"]
    return command(tmp_path, argv, name, port)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")


# A /health server whose child (same process group) ignores SIGTERM and writes its pid.
STUBBORN = textwrap.dedent("""
    import http.server, subprocess, sys
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('child ready', flush=True); time.sleep(600)"])
    open(sys.argv[2], "w").write(str(child.pid))
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404); self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")


def test_token_server_launched_serves_and_stops(tmp_path: Path) -> None:
    cmd = token_server(tmp_path)
    engine = launch([[cmd]], deadline_s=60, version="t1")
    try:
        assert isinstance(engine, RunningEngine)
        assert engine.base_url == cmd.url and engine.replica_urls == [cmd.url]
        assert engine.version == "t1"
        assert engine.log_paths == [cmd.log_path]
        status, body = http_get(cmd.url + "/v1/models")
        assert status == 200 and json.loads(body)["data"][0]["id"] == "tok"
        pgid = engine.processes[0].pgid
        assert pgid == engine.processes[0].pid and pgid != os.getpgid(0)
    finally:
        engine.stop(grace_s=10)
    assert not group_alive(pgid)
    assert not healthy(cmd.url)
    engine.stop()  # again: nothing left, no error


def test_early_death_reports_the_last_log_lines(tmp_path: Path) -> None:
    script = "import sys\nfor i in range(50): print(f'line {i}')\nprint('ValueError: bad flag --x', flush=True)\nsys.exit(3)"
    cmd = command(tmp_path, [PY, "-c", script], name="dies")
    with pytest.raises(ServelabError) as err:
        launch([[cmd]], deadline_s=60)
    message = str(err.value)
    assert "dies exited with code 3 before answering /health" in message
    assert str(cmd.log_path) in message
    assert message.endswith("line 49\nValueError: bad flag --x")
    assert "line 20\n" not in message  # only the tail (30 lines)


def test_health_deadline_stops_what_it_started(tmp_path: Path) -> None:
    script = "import os, time; print('pgid', os.getpgid(0), flush=True); time.sleep(600)"
    cmd = command(tmp_path, [PY, "-c", script], name="mute")
    with pytest.raises(ServelabError, match=r"mute did not answer http://127\.0\.0\.1:\d+/health before the deadline"):
        launch([[cmd]], deadline_s=1.5)
    line = next(ln for ln in cmd.log_path.read_text().splitlines() if ln.startswith("pgid "))
    assert not group_alive(int(line.split()[1]))


def test_stop_kills_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    port = free_port_base()
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    child_pid_file = tmp_path / "child.pid"
    cmd = command(tmp_path, [PY, str(script), str(port), str(child_pid_file)], name="stubborn", port=port)
    proc = ServerProcess(cmd)  # started by hand to keep its handle
    try:
        wait_healthy([proc], time.monotonic() + 60)
        child = int(child_pid_file.read_text())
        assert os.getpgid(child) == proc.pgid
    finally:
        proc.stop(grace_s=1.0)
    assert not pid_alive(child)
    assert not group_alive(proc.pgid)
    assert proc.exit_code() is not None


def test_a_busy_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        cmd = command(tmp_path, [PY, "-c", "raise SystemExit('must not run')"], port=port)
        with pytest.raises(ServelabError, match=f"port {port} on 127.0.0.1 is not free"):
            launch([[cmd]], deadline_s=10)
    assert not cmd.log_path.exists()


def test_one_failing_replica_stops_the_others(tmp_path: Path) -> None:
    good = token_server(tmp_path, "good")
    bad = command(tmp_path, [PY, "-c", "import time; time.sleep(1); raise SystemExit(5)"], name="bad")
    with pytest.raises(ServelabError, match="bad exited with code 5"):
        launch([[good, bad]], deadline_s=60)
    assert good.log_path.read_text().startswith("# servelab launch: ")
    assert not healthy(good.url)


def test_log_header_hides_secrets(tmp_path: Path) -> None:
    script = "import os, time; print('seen', os.environ['VLLM_CPU_KVCACHE_SPACE'], flush=True); time.sleep(60)"
    argv = [PY, "-c", script, "--api-key", "sekrit1", "--hf-token=sekrit2", "--port", "1"]
    cmd = command(tmp_path, argv, env={"OPENAI_API_KEY": "sekrit3", "VLLM_CPU_KVCACHE_SPACE": "7"})
    proc = ServerProcess(cmd)
    deadline = time.monotonic() + 30
    while "\nseen 7\n" not in cmd.log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.stop(grace_s=5)
    text = cmd.log_path.read_text()
    assert "\nseen 7\n" in text  # the environment reached the process
    assert "sekrit" not in text
    assert "--api-key '***'" in text and "--hf-token=***" in text and "OPENAI_API_KEY=***" in text
    assert "VLLM_CPU_KVCACHE_SPACE=7" in text


def test_sim_launcher_end_to_end(tmp_path: Path) -> None:
    port = free_port_base(2)
    arm = ArmLaunch(name="sim-a", model="Qwen/Qwen3-14B", served_model_name="q", replicas=2,
                    port_base=port, gpu_memory_utilization=0.8, extra_args=["--max-num-seqs", "8"])
    engine = SimLauncher(gpu="L40S").start(arm, tmp_path, deadline_s=120)
    try:
        assert engine.replica_urls == [f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"]
        assert engine.log_paths == [tmp_path / "sim-a-replica0.log", tmp_path / "sim-a-replica1.log"]
        assert engine.version is not None and engine.version.endswith("+servelab.sim")
        info = engine.startup
        assert info.gpu_memory_utilization == 0.8
        assert info.kv_cache_tokens and info.kv_cache_tokens > 0
        assert engine.replica_startups[1].kv_cache_tokens == info.kv_cache_tokens
        status, body = http_get(engine.replica_urls[1] + "/v1/models")
        assert json.loads(body)["data"][0]["id"] == "q"
        # External: the same servers, checked but not owned.
        ext = ExternalLauncher([u + "/v1" for u in engine.replica_urls]).start(arm, tmp_path, 10)
        assert ext.replica_urls == engine.replica_urls and ext.version == engine.version
        ext.stop()
        assert all(healthy(u) for u in engine.replica_urls)
        pgids = [p.pgid for p in engine.processes]
    finally:
        engine.stop(grace_s=10)
    assert not any(group_alive(g) for g in pgids)


def test_sim_launcher_refuses_a_bad_flag_before_starting(tmp_path: Path) -> None:
    arm = ArmLaunch(name="bad", model="Qwen/Qwen3-14B", port_base=free_port_base(), extra_args=["--max-num-seqz", "8"])
    with pytest.raises(ServelabError, match=r"--max-num-seqz \(closest: --max-num-seqs"):
        SimLauncher(gpu="L40S").start(arm, tmp_path, deadline_s=60)
    # nothing started: no replica log, only the server's --help the flags were checked against
    assert [p.name for p in tmp_path.iterdir()] == [f"servelab-{__version__}-sim-serve-help.txt"]


def test_external_launcher_deadline(tmp_path: Path) -> None:
    arm = ArmLaunch(name="ext", model="m", port_base=free_port_base())
    with pytest.raises(ServelabError, match=r"external server\(s\) http://127\.0\.0\.1:\d+ did not answer /health"):
        ExternalLauncher().start(arm, tmp_path, deadline_s=1.0)
    with pytest.raises(ServelabError, match="give http"):
        ExternalLauncher(["127.0.0.1:8000"])


def test_a_missing_engine_is_named(tmp_path: Path) -> None:
    from servelab.engine import VllmLauncher, VllmRuntime

    launcher = VllmLauncher(VllmRuntime(executable=str(tmp_path / "no-such" / "vllm")))
    arm = ArmLaunch(name="x", model="m", port_base=free_port_base())
    with pytest.raises(ServelabError, match=r"asking vLLM its version: '.*no-such/vllm' not found"):
        launcher.start(arm, tmp_path, deadline_s=30)
