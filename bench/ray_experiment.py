"""Wall time of one six-arm experiment here, on a one-node Ray cluster and on a three-node one.

Six online-simulator arms of Qwen3-14B on H200s (`servelab sim serve` processes at
`--time-scale` of real time, each asking for two GPUs: three TP2, three PP2, with batch
limits above the load's concurrency so the arms of one kind do the same work) on local Ray
clusters whose nodes have two fake GPUs each, so one node runs one arm at a time and three
nodes run three. The same spec runs three
times in this command: without Ray (the baseline: one arm after another), on one node, on
three. Printed: each wall time, the speed-up of three nodes over one (target >= 2.5x: the work
fits, each arm waits on simulated GPU time rather than on this machine's CPUs), and Ray's
overhead per arm ((one-node wall - local wall) / arms: placement group, actor start,
connection), with each arm's seconds from asking for a placement to a started engine.

    .venv/bin/python bench/ray_experiment.py [--output-len 100] [--time-scale 0.25] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC = """\
name: bench-ray
engine: sim
sim: {mode: online, time_scale: SCALE}
hardware: {gpu: H200}
model: Qwen/Qwen3-14B
engine_defaults: {port_base: PORT, startup_timeout_s: 120, share_engine: false}
arms:
  - {name: tp2-a, tensor_parallel_size: 2, baseline: true}
  - {name: tp2-b, tensor_parallel_size: 2, args: {max_num_seqs: 64}}
  - {name: tp2-c, tensor_parallel_size: 2, args: {max_num_seqs: 32}}
  - {name: pp2-a, pipeline_parallel_size: 2, args: {max_num_seqs: 256}}
  - {name: pp2-b, pipeline_parallel_size: 2, args: {max_num_seqs: 64}}
  - {name: pp2-c, pipeline_parallel_size: 2, args: {max_num_seqs: 32}}
workloads:
  - {name: rnd, dataset_name: random, random_input_len: 64, random_output_len: OUTLEN}
loads:
  concurrency: [4, 8]
  num_prompts: 16
seed: 1
"""


def _run(spec: Path, out: Path, address: str | None) -> float:
    argv = [sys.executable, "-m", "servelab", "run", str(spec), "--out", str(out), "--no-report"]
    if address is not None:
        argv += ["--ray", address]
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"servelab run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall


def _on_cluster(nodes: int, spec: Path, out: Path) -> tuple[float, list[float]]:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 0})
    try:
        for _ in range(nodes):
            cluster.add_node(num_cpus=2, num_gpus=2)
        cluster.wait_for_nodes()
        wall = _run(spec, out, cluster.address)
    finally:
        cluster.shutdown()
    placement = json.loads((out / "manifest.json").read_text())["ray"]["placement_s"]
    return wall, placement


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-len", type=int, default=100, help="Output tokens per request.")
    parser.add_argument("--time-scale", type=float, default=0.25,
                        help="The simulated engines' speed vs real time (below 1: slower, so the "
                             "arms wait on simulated GPUs, not on this machine's CPUs).")
    parser.add_argument("--json", type=Path, help="Also write the figures here.")
    args = parser.parse_args()
    from servelab.storage import write_json_atomic
    from servelab.testing.ports import free_port_base

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        spec = root / "spec.yaml"
        spec.write_text(SPEC.replace("PORT", str(free_port_base(20))).replace("OUTLEN", str(args.output_len))
                        .replace("SCALE", repr(args.time_scale)))
        local = _run(spec, root / "local", None)
        one, place_one = _on_cluster(1, spec, root / "one")
        three, place_three = _on_cluster(3, spec, root / "three")
    arms = 6
    figures = {
        "local_wall_s": round(local, 2), "ray_1node_wall_s": round(one, 2),
        "ray_3node_wall_s": round(three, 2), "speedup_3_vs_1": round(one / three, 3),
        "speedup_3_vs_local": round(local / three, 3),
        "ray_overhead_per_arm_s": round((one - local) / arms, 3),
        "placement_to_started_s_1node": place_one, "placement_to_started_s_3node": place_three,
    }
    print(f"six arms here, one after another : {local:7.1f} s (baseline)")
    print(f"six arms on a 1-node Ray cluster  : {one:7.1f} s ({one / local:.2f}x the baseline's time)")
    print(f"six arms on a 3-node Ray cluster  : {three:7.1f} s")
    print(f"speed-up, 3 nodes vs 1            : {one / three:.2f}x (target >= 2.5x)")
    print(f"Ray overhead per arm              : {(one - local) / arms:.2f} s")
    print(f"placement -> started engine, s    : 1 node {place_one}; 3 nodes {place_three}")
    if args.json:
        write_json_atomic(args.json, figures)


if __name__ == "__main__":
    main()
