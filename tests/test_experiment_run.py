"""Running experiments end to end: resume after SIGKILL, failed arms recorded, the store's
contents (the simulator offline, real processes for the CLI and the sim servers)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servelab.experiment import ExperimentStore, load_spec, run_experiment
from servelab.experiment.cells import all_cells
from servelab.testing.ports import free_port_base

pytestmark = pytest.mark.slow

SIM_SPEC = """\
name: resume
engine: sim
hardware: {gpu: L40S}
model: Qwen/Qwen3-0.6B
arms:
  - name: a
  - name: b
    args: {max_num_seqs: 4}
workloads:
  - name: rnd
    dataset_name: random
    random_input_len: 64
    random_output_len: 64
loads:
  concurrency: [1, 2, 4, 8]
  num_prompts: 300
seed: 7
"""


def _cells(root: Path) -> dict[str, dict]:
    out = {}
    for p in sorted((root / "cells").glob("*/*/*.json")):
        out[str(p.relative_to(root))] = json.loads(p.read_text())  # every file parses
    return out


def _figures(cell: dict) -> tuple:
    r = cell["result"]
    return (r["completed"], r["total_output_tokens"], r["duration"], r["mean_ttft_ms"],
            r["p99_itl_ms"], cell["cell"]["seed"])


def test_sigkill_midway_then_resume_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    spec_path = tmp_path / "resume.yaml"
    spec_path.write_text(SIM_SPEC)
    expected = {f"cells/{c.arm}/{c.workload}/{c.load.key}.json" for c in all_cells(load_spec(spec_path))}
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "servelab", "run", str(spec_path), "--out", str(killed), "--no-report"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not list((killed / "cells").glob("*/*/*.json")):
            assert proc.poll() is None, "the run ended before writing a cell"
            assert time.monotonic() < deadline, "no cell written within 120 s"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    before = _cells(killed)
    assert 1 <= len(before) < len(expected), "the kill must land mid-run"
    mtimes = {k: (killed / k).stat().st_mtime_ns for k in before}

    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    after = _cells(killed)
    assert set(after) == expected
    assert list(killed.rglob("*.tmp")) == []
    for k in before:  # cells stored before the kill were skipped, not redone
        assert (killed / k).stat().st_mtime_ns == mtimes[k]
        assert after[k] == before[k]

    fresh = tmp_path / "fresh"
    run_experiment(load_spec(spec_path), fresh)
    clean = _cells(fresh)
    assert set(clean) == expected
    # The simulator is deterministic per cell seed: resumed figures equal uninterrupted ones.
    assert {k: _figures(v) for k, v in after.items()} == {k: _figures(v) for k, v in clean.items()}


def test_force_redoes_cells_and_resume_skips_them(tmp_path: Path) -> None:
    spec_path = tmp_path / "s.yaml"
    spec_path.write_text(SIM_SPEC.replace("[1, 2, 4, 8]", "[2]").replace("300", "20"))
    spec = load_spec(spec_path)
    lines: list[str] = []
    run_experiment(spec, tmp_path / "out", echo=lines.append)
    store = ExperimentStore(tmp_path / "out")
    first = store.cell_path("a", "rnd", "c2").stat().st_mtime_ns
    lines.clear()
    run_experiment(spec, tmp_path / "out", echo=lines.append)
    assert lines == ["arm a: all 1 cells already stored, skipped",
                     "arm b: all 1 cells already stored, skipped"]
    run_experiment(spec, tmp_path / "out", echo=lines.append, force=True)
    assert store.cell_path("a", "rnd", "c2").stat().st_mtime_ns != first
    manifest = store.read_manifest()
    assert manifest["baseline"] == "a"
    assert manifest["planner"]["b"]["memory"]["max_num_seqs"] == 4
    cell = store.read_cell("b", "rnd", "c2")
    assert cell is not None and cell.engine_memory[0]["kv_cache_tokens"] == \
        manifest["planner"]["b"]["memory"]["kv_cache_tokens"]


def test_selected_cells_run_alone_and_the_rest_later_see_the_same_requests(tmp_path: Path) -> None:
    spec_path = tmp_path / "s.yaml"
    spec_path.write_text(SIM_SPEC.replace("[1, 2, 4, 8]", "[1, 2]").replace("300", "12"))
    cmd = [sys.executable, "-m", "servelab", "run", str(spec_path), "--out", str(tmp_path / "out"),
           "--no-report"]
    part = subprocess.run(cmd + ["--arm", "b", "--load", "c2"], capture_output=True, text=True, timeout=300)
    assert part.returncode == 0, part.stderr
    assert sorted(_cells(tmp_path / "out")) == ["cells/b/rnd/c2.json"]
    rest = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert rest.returncode == 0, rest.stderr
    cells = _cells(tmp_path / "out")
    assert len(cells) == 4
    # The cell measured alone has the seed (so the prompts) the full grid gives it.
    spec = load_spec(spec_path)
    seeds = {f"cells/{c.arm}/{c.workload}/{c.load.key}.json": c.seed for c in all_cells(spec)}
    assert {k: v["cell"]["seed"] for k, v in cells.items()} == seeds
    bad = subprocess.run(cmd + ["--load", "c3"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2
    assert "--load c3: the spec has c1, c2" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_changed_spec_is_refused_without_force(tmp_path: Path) -> None:
    from servelab.errors import ServelabError

    spec_path = tmp_path / "s.yaml"
    spec_path.write_text(SIM_SPEC.replace("[1, 2, 4, 8]", "[2]").replace("300", "10"))
    run_experiment(load_spec(spec_path), tmp_path / "out")
    spec_path.write_text(SIM_SPEC.replace("[1, 2, 4, 8]", "[2]").replace("300", "12"))
    with pytest.raises(ServelabError, match="different spec"):
        run_experiment(load_spec(spec_path), tmp_path / "out")


def _wait_health(url: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    import urllib.request

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        assert proc.poll() is None, "sim server exited"
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("sim server did not become healthy")


def test_failed_arms_are_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    port = free_port_base()
    server = subprocess.Popen(
        [sys.executable, "-m", "servelab.cli.sim_serve", "--model", "Qwen/Qwen3-0.6B",
         "--gpu", "L40S", "--port", str(port), "--time-scale", "50"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    dead = free_port_base()
    try:
        _wait_health(f"http://127.0.0.1:{port}", server)
        spec_path = tmp_path / "ext.yaml"
        spec_path.write_text(f"""\
name: ext
engine: external
model: Qwen/Qwen3-0.6B
engine_defaults: {{startup_timeout_s: 2}}
arms:
  - name: gone
    urls: ["http://127.0.0.1:{dead}/v1"]
  - name: live
    urls: ["http://127.0.0.1:{port}"]
workloads:
  - name: rnd
    dataset_name: random
    random_input_len: 32
    random_output_len: 8
loads:
  concurrency: [2]
  num_prompts: 6
""")
        run = subprocess.run([sys.executable, "-m", "servelab", "run", str(spec_path),
                              "--out", str(tmp_path / "out")], capture_output=True, text=True,
                             timeout=120)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    assert run.returncode == 0, run.stderr
    store = ExperimentStore(tmp_path / "out")
    gone = store.read_arm_status("gone")
    assert gone is not None and gone.state == "failed"
    assert f"127.0.0.1:{dead}" in (gone.reason or "")
    live = store.read_arm_status("live")
    assert live is not None and live.state == "done"
    cell = store.read_cell("live", "rnd", "c2")
    assert cell is not None and cell.result.completed == 6
    assert cell.servers[0]["available"] is True  # /metrics of the sim server was sampled
    assert store.read_cell("gone", "rnd", "c2") is None
    assert "failed arms" in run.stdout and "gone" in run.stdout


def test_vllm_arm_with_missing_executable_fails_with_reason(tmp_path: Path) -> None:
    spec_path = tmp_path / "v.yaml"
    spec_path.write_text(f"""\
name: v
engine: vllm
model: Qwen/Qwen3-0.6B
engine_defaults: {{executable: {tmp_path}/no-such-vllm, startup_timeout_s: 5}}
arms:
  - name: a
workloads:
  - name: rnd
    dataset_name: random
loads:
  concurrency: [1]
  num_prompts: 5
""")
    lines: list[str] = []
    run_experiment(load_spec(spec_path), tmp_path / "out", echo=lines.append)
    status = ExperimentStore(tmp_path / "out").read_arm_status("a")
    assert status is not None and status.state == "failed"
    assert "no-such-vllm" in (status.reason or "")
    assert any("FAILED to start" in line for line in lines)


def test_offline_direct_split_is_two_independent_replicas_with_half_the_cap() -> None:
    """`routing: direct` in the offline simulator sends request i to replica i mod n with the
    cap and warm-ups split, as the HTTP client does: each replica's requests then time
    exactly as a one-replica simulation of its share alone."""
    import dataclasses
    import random as _random

    from servelab.experiment.targets import OfflineSimTarget
    from servelab.metrics.summary import SummaryOptions, summarize
    from servelab.plan import EngineArgs
    from servelab.sim.offline import offline_requests, simulate
    from servelab.sim.setup import SimOptions, build_cluster
    from servelab.workload.datasets import DatasetOptions, build_workload
    from servelab.workload.tokenizer import load_tokenizer

    tok = load_tokenizer(None)
    work = build_workload(DatasetOptions(dataset_name="random", num_prompts=21, random_input_len=64,
                                         random_output_len=48, random_range_ratio=0.5), tok, 3)
    opts = SimOptions(model="Qwen/Qwen3-0.6B", gpu="L40S", quantization=None,
                      engine_args=EngineArgs(data_parallel_size=2), replicas=2)
    intended = [0.0] * len(work.requests)
    got = OfflineSimTarget(opts, direct=True).measure(work.requests, tok, intended, 5, 3, seed=9)
    measured = [r for r in got.records if not r.warmup]
    assert [r.index for r in measured] == list(range(21))
    assert [s.url for s in got.servers] == ["sim://offline/replica0", "sim://offline/replica1"]
    offline = offline_requests(work.requests, tok)
    one = dataclasses.replace(opts, replicas=1)
    for k, cap, warm in ((0, 3, 2), (1, 2, 1)):  # cap 5 -> 3 + 2, 3 warm-ups -> 2 + 1
        alone = simulate(build_cluster(one, _random.Random(9)), offline[k::2], intended[k::2], cap, warm)
        want = [(r.ttft_ms, r.e2el_ms) for r in alone.records if not r.warmup]
        assert [(r.ttft_ms, r.e2el_ms) for r in measured[k::2]] == want
    summary = summarize(got.records, got.duration_s, SummaryOptions())
    assert summary.peak_in_flight_requests <= 5
