"""`engine: sim` with `sim: {mode: online}`: real `servelab sim serve` processes launched by the
sim adapter, measured over HTTP, one replica, two replicas split by the client, and two
replicas behind servelab's router; arms with the same launch share one engine, its prefix
cache emptied in between."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.experiment.store import ExperimentStore
from servelab.models import load_model
from servelab.hardware.catalog import get_gpu
from servelab.plan import EngineArgs, plan_memory
from servelab.testing.ports import free_port_base

pytestmark = pytest.mark.slow

SPEC = """\
name: online
engine: sim
sim: {mode: online, time_scale: 20}
hardware: {gpu: H200}
model: Qwen/Qwen3-0.6B
engine_defaults: {port_base: PORT, startup_timeout_s: 60}
arms:
  - name: one
    baseline: true
  - name: one-again
  - name: two-direct
    replicas: 2
  - name: two-rr
    replicas: 2
    routing: round_robin
workloads:
  - name: rnd
    dataset_name: random
    random_input_len: 48
    random_output_len: 12
loads:
  concurrency: [4]
  num_prompts: 16
seed: 3
"""


def test_online_sim_arms_run_over_http_and_stop(tmp_path: Path) -> None:
    spec = tmp_path / "online.yaml"
    spec.write_text(SPEC.replace("PORT", str(free_port_base(40))))
    run = subprocess.run([sys.executable, "-m", "servelab", "run", str(spec), "--out",
                          str(tmp_path / "out"), "--no-report"],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    store = ExperimentStore(tmp_path / "out")
    want = plan_memory(load_model("Qwen/Qwen3-0.6B"), get_gpu("H200"),
                       EngineArgs(gpu_memory_utilization=0.9))
    shared = {"one": None, "one-again": "one", "two-direct": None, "two-rr": "two-direct"}
    for arm, replicas in (("one", 1), ("one-again", 1), ("two-direct", 2), ("two-rr", 2)):
        status = store.read_arm_status(arm)
        assert status is not None and status.state == "done", (arm, status)
        assert status.engine_of == shared[arm], arm
        # Each replica printed vLLM-style startup lines that servelab's parser read back.
        assert len(status.startups) == replicas
        for startup in status.startups:
            assert startup is not None and startup["kv_cache_tokens"] == want.kv_cache_tokens
        cell = store.read_cell(arm, "rnd", "c4")
        assert cell is not None, arm
        r = cell.result.to_json()
        assert (r["completed"], r["failed"]) == (16, 0), arm
        assert r["total_output_tokens"] == 16 * 12
        assert r["servelab"]["peak_in_flight_requests"] <= 4
        # /metrics of every replica was sampled; the generation counters add up.
        # Direct splitting (request i to replica i mod n) and the round-robin router both
        # give each replica exactly its share.
        per_replica = [s["generation_tokens_delta"] for s in cell.servers]
        assert per_replica == [16 * 12 // replicas] * replicas, arm
        # Random prompts share no prefix, and the cache the previous arm filled with these
        # same prompts was emptied: an arm on a shared engine hits nothing either (2 of each
        # prompt's 3 blocks would hit without the reset).
        assert [s["prefix_cache_hit_rate"] for s in cell.servers] == [0.0] * replicas, arm
    # One log per launched replica (3: the shared arms launched nothing), in the experiment directory.
    logs = sorted(p.relative_to(tmp_path / "out" / "arms").as_posix()
                  for p in (tmp_path / "out" / "arms").glob("*/logs/*-replica*.log"))
    assert logs == ["one/logs/one-replica0.log", "two-direct/logs/two-direct-replica0.log",
                    "two-direct/logs/two-direct-replica1.log"]
    # The shared engines got a reset request each, logged as vLLM logs it.
    assert (tmp_path / "out/arms/one/logs/one-replica0.log").read_text().count("Resetting prefix cache") == 1
    assert [p.parent.parent.name for p in (tmp_path / "out" / "arms").glob("*/logs/*router*.log")] == ["two-rr"]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["spec"]["engine"] == "sim"
