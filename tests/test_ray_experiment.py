"""Experiments on a real local Ray cluster (`ray.cluster_utils.Cluster`: a head without GPUs
and three nodes with two fake GPUs each), started and stopped here: `servelab run --ray`
gives the cells a local run gives, arms run on different nodes, a pipeline arm is placed
across two nodes, an unplaceable arm is refused with what it asked for, `servelab probe
--ray` lists the nodes, a node removed mid-run loses no cell and duplicates none, and tune,
sweep and the capacity search give on the cluster what they give alone."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.experiment.store import ExperimentStore
from servelab.testing.ports import free_port_base

pytestmark = pytest.mark.slow

NODES, GPUS_PER_NODE = 3, 2


def _need_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        if os.environ.get("SERVELAB_REQUIRE_RAY") == "1":
            pytest.fail("SERVELAB_REQUIRE_RAY=1 but Ray is not installed: pip install -e '.[ray]'",
                        pytrace=False)
        pytest.skip("Ray is not installed (servelab[ray])")


class LocalCluster:
    """The test's Ray cluster: `address` for --ray, `nodes` the GPU nodes by node id."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 2, "num_gpus": 0})
        self.nodes = {}
        for _ in range(NODES):
            node = self.cluster.add_node(num_cpus=2, num_gpus=GPUS_PER_NODE)
            self.nodes[node.node_id] = node
        self.cluster.wait_for_nodes()
        self.address = self.cluster.address

    def remove(self, node_id: str) -> None:
        self.cluster.remove_node(self.nodes.pop(node_id))

    def shutdown(self) -> None:
        self.cluster.shutdown()


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    _need_ray()
    c = LocalCluster()
    try:
        yield c
    finally:
        c.shutdown()


SIX_ARMS = """\
name: six
engine: sim
sim: {mode: MODE, time_scale: 20}
hardware: {gpu: H200}
model: Qwen/Qwen3-0.6B
engine_defaults: {port_base: PORT, startup_timeout_s: 60}
arms:
  - {name: tp2-a, tensor_parallel_size: 2, baseline: true}
  - {name: tp2-b, tensor_parallel_size: 2, args: {max_num_seqs: 4}}
  - {name: tp2-c, tensor_parallel_size: 2, args: {max_num_seqs: 2}}
  - {name: pp2-a, pipeline_parallel_size: 2}
  - {name: pp2-b, pipeline_parallel_size: 2, args: {max_num_seqs: 4}}
  - {name: two, replicas: 2}
workloads:
  - {name: rnd, dataset_name: random, random_input_len: 48, random_output_len: 12}
loads:
  concurrency: [2, 4]
  num_prompts: 12
seed: 5
"""


def _run(spec: Path, out: Path, address: str | None, *extra: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "servelab", "run", str(spec), "--out", str(out), "--no-report", *extra]
    if address is not None:
        argv += ["--ray", address]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


def _figures(store: ExperimentStore) -> dict[str, dict]:
    """Each cell's result less the wall-clock date of the run."""
    out = {}
    for path in store.cell_files():
        data = json.loads(path.read_text())
        out[str(path.relative_to(store.root))] = {k: v for k, v in data["result"].items() if k != "date"}
    return out


def test_an_address_nothing_answers_on_is_refused_at_once(tmp_path: Path) -> None:
    _need_ray()
    port = free_port_base(1)
    probe = subprocess.run([sys.executable, "-m", "servelab", "probe", "--ray", f"127.0.0.1:{port}"],
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 2
    assert f"error: --ray 127.0.0.1:{port}: no Ray head answers there (Connection refused)" in probe.stderr
    spec = tmp_path / "six.yaml"
    spec.write_text(SIX_ARMS.replace("MODE", "offline").replace("PORT", "8100"))
    run = _run(spec, tmp_path / "out", "head-without-port")
    assert run.returncode == 2
    assert "error: --ray head-without-port: give HOST:PORT of the cluster's head (or auto)" in run.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_offline_arms_on_ray_give_the_cells_of_a_local_run(cluster: LocalCluster, tmp_path: Path) -> None:
    spec = tmp_path / "six.yaml"
    spec.write_text(SIX_ARMS.replace("MODE", "offline").replace("PORT", "8100"))
    local = _run(spec, tmp_path / "local", None)
    assert local.returncode == 0, local.stderr
    on_ray = _run(spec, tmp_path / "ray", cluster.address)
    assert on_ray.returncode == 0, on_ray.stderr
    a, b = ExperimentStore(tmp_path / "local"), ExperimentStore(tmp_path / "ray")
    fa, fb = _figures(a), _figures(b)
    assert len(fa) == 12 and fa == fb
    for path in b.cell_files():
        placement = json.loads(path.read_text())["placement"]
        assert placement["attempt"] == 1 and len(placement["node_ids"]) == 1
        assert placement["node_ids"][0] in cluster.nodes


def test_online_arms_run_on_every_node_and_a_pipeline_spans_two(cluster: LocalCluster, tmp_path: Path) -> None:
    spec = tmp_path / "six.yaml"
    text = SIX_ARMS.replace("MODE", "online").replace("PORT", str(free_port_base(20)))
    text = text.replace("arms:\n", "cluster: {gpus_per_node: 2}\narms:\n  - {name: pp4, pipeline_parallel_size: 4}\n"
                        "  - {name: pp8, pipeline_parallel_size: 8}\n", 1)
    spec.write_text(text)
    run = _run(spec, tmp_path / "out", cluster.address)
    assert run.returncode == 0, run.stderr
    store = ExperimentStore(tmp_path / "out")
    nodes_of: dict[str, set[str]] = {}
    for path in store.cell_files():
        data = json.loads(path.read_text())
        arm = path.parent.parent.name
        nodes_of.setdefault(arm, set()).update(data["placement"]["node_ids"])
        assert data["result"]["completed"] == 12
    # every two-GPU arm fills one whole node; three run at once, so all three nodes serve
    assert set().union(*nodes_of.values()) == set(cluster.nodes)
    assert len(nodes_of["pp4"]) == 2  # two bundles of two GPUs, STRICT_SPREAD
    assert "pp8" not in nodes_of  # refused, and said so
    status = store.read_arm_status("pp8")
    assert status is not None and status.state == "failed"
    assert status.reason == ("cannot be placed: arm pp8 asks for 8 GPUs: 4 bundles of 2/2/2/2 GPUs on "
                             "separate nodes; the cluster's nodes have 2, 2, 2, 0 GPUs")
    assert "arm pp8: FAILED: cannot be placed" in run.stderr
    for arm in ("tp2-a", "tp2-b", "tp2-c", "pp2-a", "pp2-b", "two", "pp4"):
        assert store.read_arm_status(arm).state == "done"


def test_probe_lists_every_node_with_its_resources(cluster: LocalCluster) -> None:
    run = subprocess.run([sys.executable, "-m", "servelab", "probe", "--ray", cluster.address, "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    nodes = json.loads(run.stdout)
    gpus = sorted(n["ray_gpus"] for n in nodes)
    assert gpus == [0.0] + [float(GPUS_PER_NODE)] * len(cluster.nodes)
    assert {n["node_id"] for n in nodes} >= set(cluster.nodes)
    assert all(n["probe"]["source"] == "none" for n in nodes)  # this machine has no GPU


def _tune(out: Path, *extra: str) -> tuple[dict, list[str], str]:
    args = [sys.executable, "-m", "servelab", "tune", "--sim", "--model", "Qwen/Qwen3-14B", "--gpu", "L40S",
            "--dataset-name", "random", "--random-input-len", "128", "--random-output-len", "16",
            "--seed", "1", "--param", "max_num_seqs=4,8,16,32", "--param", "max_num_batched_tokens=512,2048",
            "--slo", "ttft:2000", "--slo", "tpot:80", "--out", str(out), "--max-level", "32",
            "--max-trials", "6", "--prompts-per-concurrency", "2", "--min-prompts", "16",
            "--max-prompts", "64", "--json", *extra]
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    trials = [line.split(":", 1)[1] for line in p.stderr.splitlines() if line.startswith("trial ")]
    return json.loads(p.stdout), trials, p.stderr


def test_tune_trials_on_ray_follow_the_sequential_path(cluster: LocalCluster, tmp_path: Path) -> None:
    """Batches of trials as Ray tasks: the same trials in the same order, the same best."""
    alone, path_alone, log_alone = _tune(tmp_path / "alone")
    on_ray, path_ray, log_ray = _tune(tmp_path / "ray", "--ray", cluster.address)
    assert "trials at once" in log_ray and "trials at once" not in log_alone
    assert path_ray == path_alone and len(path_alone) == alone["trials_spent"] >= 3
    assert on_ray["best"] == alone["best"] and on_ray["trials_spent"] == alone["trials_spent"]
    # the prefetched points the search did not reach are stored too, for a later run
    stored = len(list((tmp_path / "ray" / "trials").glob("*.json")))
    assert stored >= len(list((tmp_path / "alone" / "trials").glob("*.json")))


def _sweep(out: Path, *extra: str) -> tuple[dict, list[str], str]:
    args = [sys.executable, "-m", "servelab", "sweep", "--sim", "--model", "Qwen/Qwen3-14B", "--gpu", "L40S",
            "--max-num-seqs", "12", "--dataset-name", "random", "--random-input-len", "128",
            "--random-output-len", "16", "--seed", "2", "--max-level", "32", "--slo", "tpot:60",
            "--prompts-per-concurrency", "2", "--min-prompts", "16", "--max-prompts", "64",
            "--out", str(out), "--json", *extra]
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    steps = [line.split("[")[0].strip() + " " + line.split("]")[0].split("[")[1]
             for line in p.stderr.splitlines() if re.match(r"^\s+c\d+ \[", line)]
    return json.loads(p.stdout), steps, p.stderr


def test_sweep_levels_on_ray_follow_the_sequential_path(cluster: LocalCluster, tmp_path: Path) -> None:
    """Copies of the simulator measure the levels the search may need next at once; the
    search takes them in its own order: the same levels, knee, capacity and level files."""
    alone, steps_alone, log_alone = _sweep(tmp_path / "alone")
    on_ray, steps_ray, log_ray = _sweep(tmp_path / "ray", "--ray", cluster.address)
    assert "levels at once" in log_ray and "levels at once" not in log_alone
    assert steps_ray == steps_alone and len(steps_alone) >= 5
    for key in ("knee", "capacity", "levels"):
        assert on_ray[key] == alone[key], key
    def files(d: Path) -> list[str]:
        return sorted(p.name for p in (d / "levels").glob("*.json"))
    assert files(tmp_path / "ray") == files(tmp_path / "alone")  # levels the search never took are not written


def _search(*extra: str) -> tuple[dict, str]:
    args = [sys.executable, "-m", "servelab", "plan", "--search", "--model", "Qwen/Qwen3-14B",
            "--gpu", "L40S", "--rate", "6", "--slo", "ttft:2000", "tpot:60", "--max-gpus", "4",
            "--num-prompts", "120", "--axis", "quantization=bf16,awq", "--axis",
            "tensor_parallel_size=1,2", "--axis", "pipeline_parallel_size=1", "--workers", "1",
            "--json", *extra]
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), p.stderr


def test_plan_search_on_ray_gives_the_local_outcome(cluster: LocalCluster) -> None:
    """The capacity search's simulations as Ray tasks: the same deployments in the same
    order with the same figures, the same winner."""
    alone, log_alone = _search()
    on_ray, log_ray = _search("--ray", cluster.address)
    assert "deployments at once" in log_ray and "deployments at once" not in log_alone
    assert on_ray["evaluations"] == alone["evaluations"] and len(alone["evaluations"]) >= 2
    assert on_ray["winner"] == alone["winner"] is not None


def test_bench_with_ray_workers_splits_one_schedule_over_nodes(cluster: LocalCluster, token_server,
                                                                tmp_path: Path) -> None:
    """Three client actors on three nodes send one schedule from one start: every request
    once, the concurrency cap split 2 + 2 + 2 (the server saw 6 at most, and 6), one
    timeline (the server's TTFTs bound the client's), each actor's share and lag reported."""
    srv = token_server(ttft_ms=20, itl_ms=5)
    run = subprocess.run(
        [sys.executable, "-m", "servelab", "bench", "--base-url", srv.url, "--model", "M",
         "--dataset-name", "random", "--random-input-len", "16", "--random-output-len", "8",
         "--num-prompts", "30", "--max-concurrency", "6", "--ignore-eos", "--no-progress",
         "--ray-workers", "3", "--ray", cluster.address, "--save-result", "--result-dir", str(tmp_path),
         "--result-filename", "r.json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    truth, streams = srv.stats(), [q["truth"] for q in srv.requests()][1:]  # less the test request
    r = json.loads((tmp_path / "r.json").read_text())
    assert (r["completed"], r["failed"], r["total_output_tokens"]) == (30, 0, 240)
    assert truth["max_in_flight"] == 6 and len(streams) == 30
    assert 30 * r["mean_ttft_ms"] >= sum(t["ttft_ms"] for t in streams)
    assert r["request_throughput"] == pytest.approx(30 / r["duration"])
    shares = r["servelab"]["client_workers"]
    assert [s["requests"] for s in shares] == [10, 10, 10]
    assert len({s["node_id"] for s in shares}) == 3  # spread: one actor per node
    assert all(s["sched_lag_ms"]["max"] >= s["sched_lag_ms"]["mean"] >= 0 for s in shares)
    assert run.stdout.count("client worker ") == 3


SGLANG_ACROSS_NODES = """\
name: sgl
engine: sglang
hardware: {gpu: H200}
model: Qwen/Qwen3-0.6B
cluster: {gpus_per_node: 2}
engine_defaults:
  python: INTERPRETER
  port_base: PORT
  startup_timeout_s: 120
  env: {PYTHONPATH: STANDIN}
arms:
  - {name: tp2pp2, tensor_parallel_size: 2, pipeline_parallel_size: 2, baseline: true}
workloads:
  - {name: rnd, dataset_name: random, random_input_len: 16, random_output_len: 8}
loads: {concurrency: [2], num_prompts: 4}
seed: 3
"""


def _sglang_standin(root: Path) -> Path:
    """`sglang.launch_server` as servelab's stand-in (`servelab.testing.sglang_standin`),
    with a `sglang` distribution's metadata so the adapter can ask its version."""
    pkg = root / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text("from servelab.testing.sglang_standin import main\n\nmain()\n")
    meta = root / "sglang-0.5.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.0\n")
    return root


def test_an_sglang_replica_across_two_nodes_runs_one_rank_per_node(cluster: LocalCluster, tmp_path: Path) -> None:
    """TP2 x PP2 on nodes of two GPUs: one SGLang process per node with its --node-rank, both
    pointed at one --dist-init-addr on rank 0's node, rank 0 serving the cells once rank 1
    has joined, and both processes gone when the arm ends."""
    spec = tmp_path / "sgl.yaml"
    spec.write_text(SGLANG_ACROSS_NODES.replace("INTERPRETER", sys.executable)
                    .replace("PORT", str(free_port_base(2)))
                    .replace("STANDIN", str(_sglang_standin(tmp_path / "standin"))))
    run = _run(spec, tmp_path / "out", cluster.address)
    assert run.returncode == 0, run.stderr
    assert "stopping its engine" not in run.stderr  # the stop went as planned
    store = ExperimentStore(tmp_path / "out")
    [cell] = store.cell_files()
    data = json.loads(cell.read_text())
    assert data["result"]["completed"] == 4
    assert data["placement"]["strategy"] == "STRICT_SPREAD"
    nodes = data["placement"]["node_ids"]
    assert len(set(nodes)) == 2 and set(nodes) <= set(cluster.nodes)
    logs = store.log_dir("tp2pp2")
    rank0 = (logs / "tp2pp2-replica0.log").read_text()
    rank1 = (logs / "tp2pp2-replica0-node1.log").read_text()
    launch0, launch1 = rank0.splitlines()[0], rank1.splitlines()[0]
    address = re.search(r"--dist-init-addr (\S+)", launch0).group(1)
    assert f"--nnodes 2 --node-rank 0 --dist-init-addr {address}" in launch0
    assert f"--nnodes 2 --node-rank 1 --dist-init-addr {address}" in launch1
    assert "--tp-size 2 --pp-size 2" in launch0 and "--tp-size 2 --pp-size 2" in launch1
    # each process saw its own node's two GPUs; rank 0 served only after rank 1 joined
    joined = re.search(r"rank 1 joined \(pid (\d+), CUDA_VISIBLE_DEVICES=(\d+,\d+)\)", rank0)
    assert joined is not None, rank0
    assert rank0.index("rank 1 joined") < rank0.index("all 2 ranks joined; serving")
    assert re.search(r"rank 0 of 2 \(pid (\d+), CUDA_VISIBLE_DEVICES=\d+,\d+\)", rank0)
    for pid in (int(joined.group(1)), int(re.search(r"rank 0 of 2 \(pid (\d+)", rank0).group(1))):  # stopped with the arm
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert store.read_arm_status("tp2pp2").state == "done"


def test_a_node_lost_mid_run_loses_and_duplicates_no_cell(cluster: LocalCluster, tmp_path: Path) -> None:
    """Runs last: it removes a node. The lost arm's finished cells stay, the rest are
    measured after a second placement on a node still there."""
    spec = tmp_path / "lost.yaml"
    text = SIX_ARMS.replace("MODE", "online").replace("PORT", str(free_port_base(20)))
    text = text.replace("concurrency: [2, 4]", "concurrency: [1, 2, 3, 4]").replace("time_scale: 20", "time_scale: 2")
    spec.write_text(text)
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "servelab", "run", str(spec), "--out", str(out), "--no-report",
            "--ray", cluster.address, "--arm", "tp2-a", "--arm", "tp2-b"]
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        store = ExperimentStore(out)
        first = None
        while first is None and proc.poll() is None:
            files = store.cell_files()
            first = next(iter(files), None)
            time.sleep(0.05)
        assert first is not None, (tmp_path / "run.log").read_text()
        victim_arm = first.parent.parent.name
        victim = json.loads(first.read_text())["placement"]["node_ids"][0]
        cluster.remove(victim)
        assert proc.wait(timeout=300) == 0, (tmp_path / "run.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    text_log = (tmp_path / "run.log").read_text()
    assert f"arm {victim_arm}: its actor was lost" in text_log
    cells = {p.relative_to(out).as_posix() for p in store.cell_files()}
    assert cells == {f"cells/{a}/rnd/c{c}.json" for a in ("tp2-a", "tp2-b") for c in (1, 2, 3, 4)}
    stored_lines = [line for line in text_log.splitlines() if line.startswith("  tp2-")]
    assert len(stored_lines) == 8  # each cell written once
    attempts = {json.loads((out / c).read_text())["placement"]["attempt"]
                for c in cells if f"/{victim_arm}/" in c}
    assert attempts == {1, 2}
    later = [json.loads((out / c).read_text())["placement"] for c in cells if f"/{victim_arm}/" in c]
    assert all(victim not in p["node_ids"] for p in later if p["attempt"] == 2)
    assert store.read_arm_status(victim_arm).state == "done"
