"""Sweeps on the offline simulator (deterministic under seeds): the adaptive knee agrees with
an exhaustive fine sweep; the CLI's answers, files and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

from servelab.experiment.spec import NumPromptsRule
from servelab.plan import EngineArgs
from servelab.sim.setup import SimOptions
from servelab.sweep.knee import find_knee
from servelab.sweep.levels import LevelAxis, Boundaries
from servelab.sweep.runner import SweepConfig, WorkloadCache, measure_level, run_sweep
from servelab.sweep.targets import open_sim
from servelab.workload.datasets import DatasetOptions

DATASET = DatasetOptions(dataset_name="random", random_input_len=256, random_output_len=32)


def test_adaptive_knee_agrees_with_the_exhaustive_sweep_within_one_step(tmp_path):
    # max_num_seqs 12 caps the batch: throughput flattens near concurrency 12.
    ot = open_sim(SimOptions("Qwen/Qwen3-14B", "L40S", None, EngineArgs(max_num_seqs=12)))
    cfg = SweepConfig(axis=LevelAxis("concurrency", 1, 32), dataset=DATASET,
                      targets=Boundaries(slo=False, saturation=False),
                      prompts=NumPromptsRule(per_concurrency=3, min=24, max=96), seed=5)
    cache = WorkloadCache()
    o = run_sweep(ot, cfg, tmp_path, cache=cache)
    assert o.knee is not None
    full = [float(c) for c in range(1, 33)]
    ts = [(o.levels.get(c) or measure_level(ot, cfg, c, cache).summary).throughput for c in full]
    exh = find_knee(full, ts, cfg.targets.knee_tolerance)
    assert abs(o.knee.level - exh.level) <= 1
    assert len(o.levels) < len(full) / 2
    # Every measured point was written as it was produced, with vLLM's keys.
    files = sorted((tmp_path / "levels").glob("*.json"))
    assert len(files) == len(o.levels)
    data = json.loads(files[0].read_text())
    assert "output_throughput" in data and data["servelab"]["sweep"]["mode"] == "concurrency"
    # The bend past the knee: batch slots (running == max_num_seqs with a queue).
    assert o.bends[-1].kind == "max_num_seqs"


def test_repetitions_use_distinct_seeds_and_give_an_interval():
    ot = open_sim(SimOptions("Qwen/Qwen3-14B", "L40S", None, EngineArgs(max_num_seqs=8)))
    cfg = SweepConfig(axis=LevelAxis("concurrency", 2, 16), dataset=DATASET, repetitions=3,
                      targets=Boundaries(slo=False, saturation=False),
                      prompts=NumPromptsRule(per_concurrency=3, min=16, max=48), seed=2)
    o = run_sweep(ot, cfg)
    lv = next(iter(o.levels.values()))
    assert len({p.seed for p in lv.points}) == 3
    assert o.knee is not None and o.interval is not None
    assert o.interval.low <= o.knee.level + 1 and o.interval.high >= o.knee.level - 1


def _sweep(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servelab", "sweep", *args], capture_output=True,
                          text=True, timeout=300)


SIM = ["--sim", "--model", "Qwen/Qwen3-14B", "--gpu", "L40S", "--max-num-seqs", "8",
       "--dataset-name", "random", "--random-input-len", "128", "--random-output-len", "16",
       "--seed", "4", "--prompts-per-concurrency", "2", "--min-prompts", "16", "--max-prompts", "64",
       "--max-level", "32"]


def test_cli_no_level_meets_the_slo_is_a_clear_answer_with_exit_0(tmp_path):
    p = _sweep(*SIM, "--slo", "ttft:1", "--json", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["capacity"]["level"] is None
    assert out["capacity"]["message"].startswith("no level meets ttft p99 <= 1 ms; the lowest level (concurrency 1) gave ttft p99")
    assert (tmp_path / "sweep.png").stat().st_size > 0 and (tmp_path / "sweep.json").exists()


def test_cli_capacity_and_knee(tmp_path):
    p = _sweep(*SIM, "--slo", "tpot:1000,ttft:100000", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["knee"] is not None and out["capacity"]["level"] is not None
    levels = {lv["level"]: lv for lv in out["levels"]}
    cap = out["capacity"]["level"]
    assert levels[cap]["meets_slo"] is True


def test_cli_bad_input_exits_2_naming_the_flag():
    p = _sweep("--sim", "--model", "Qwen/Qwen3-14B", "--gpu", "L40S", "--slo", "ttft")
    assert p.returncode == 2 and "--slo" in p.stderr and "Traceback" not in p.stderr
    p = _sweep("--model", "x")
    assert p.returncode == 2 and "exactly one target" in p.stderr
    p = _sweep(*SIM, "--mode", "closed")
    assert p.returncode == 2 and "--mode" in p.stderr
