"""`servelab tune` on the simulator: the search against the grid it replaces, infeasible
configurations, resume, and the CLI's outputs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from servelab.errors import ServelabError
from servelab.experiment.spec import NumPromptsRule
from servelab.plan import EngineArgs
from servelab.sim.setup import SimOptions
from servelab.sweep.levels import LevelAxis, Boundaries
from servelab.sweep.runner import SweepConfig
from servelab.sweep.slo import parse_slo
from servelab.sweep.space import parse_space
from servelab.sweep.trials import TrialStore
from servelab.sweep.tune import TuneConfig, sim_opener, tune
from servelab.workload.datasets import DatasetOptions

BASE = SimOptions("Qwen/Qwen3-14B", "L40S", None, EngineArgs())
SLO = parse_slo(["ttft:1500", "tpot:60"], 99)
SWEEP = SweepConfig(
    axis=LevelAxis("concurrency", 1, 64),
    dataset=DatasetOptions(dataset_name="random", random_input_len=256, random_output_len=32),
    targets=Boundaries(knee=False, slo=True, saturation=False),
    prompts=NumPromptsRule(per_concurrency=2, min=16, max=128), seed=3, slo=SLO)
SPACE = parse_space(["max_num_seqs=4,8,16,32,64,128", "max_num_batched_tokens=256,512,1024,2048,4096"],
                    sorted(EngineArgs.model_fields))


def test_search_is_within_5_percent_of_the_grid_best_in_a_quarter_of_the_trials(tmp_path):
    opener, defaults = sim_opener(BASE)
    cfg = TuneConfig(SPACE, SWEEP, "goodput")
    assert SPACE.size >= 30 and cfg.budget == SPACE.size // 4
    grid = tune(cfg, opener, TrialStore(tmp_path / "grid"), defaults, grid=True)
    search = tune(cfg, opener, TrialStore(tmp_path / "search"), defaults)
    grid_best = max(t.objective for t in grid.trials if t.status == "ok")
    assert len(search.trials) <= SPACE.size / 4
    assert search.best.objective >= 0.95 * grid_best
    assert grid_best > min(t.objective for t in grid.trials)  # the space matters at all


def test_resume_reuses_every_stored_trial(tmp_path):
    opener, defaults = sim_opener(BASE)
    cfg = TuneConfig(SPACE, SWEEP, "goodput", max_trials=4)
    first = tune(cfg, opener, TrialStore(tmp_path), defaults)
    assert first.reused == 0 and len(list((tmp_path / "trials").glob("*.json"))) == len(first.trials)
    calls = []

    def counting(params):
        calls.append(params)
        return opener(params)

    again = tune(cfg, counting, TrialStore(tmp_path), defaults)
    assert calls == [] and again.reused == len(again.trials) == len(first.trials)
    assert again.best.params == first.best.params


def test_infeasible_configurations_are_stored_and_avoided(tmp_path):
    opener, defaults = sim_opener(BASE)
    space = parse_space(["gpu_memory_utilization=0.3,0.6,0.9", "max_num_seqs=8,16,32,64"],
                        sorted(EngineArgs.model_fields))
    res = tune(TuneConfig(space, SWEEP, "goodput", max_trials=8), opener, TrialStore(tmp_path), defaults)
    bad = [t for t in res.trials if t.status == "infeasible"]
    # 14B bf16 weights (~28 GiB) do not fit in 0.6 x 48 GiB with a KV pool: the planner refuses.
    assert bad and all(t.params["gpu_memory_utilization"] == 0.6 for t in bad)
    assert all("Qwen/Qwen3-14B on L40S" in t.reason for t in bad)
    # Learned: past an infeasible value the line search does not go further that way.
    assert not any(t.params.get("gpu_memory_utilization") == 0.3 for t in res.trials)
    # The best trial is a feasible one (0.9, or vLLM's default where the search kept it).
    assert res.best.status == "ok" and res.best.params.get("gpu_memory_utilization", 0.9) == 0.9
    assert (tmp_path / "trials").exists() and len(list((tmp_path / "trials").glob("*.json"))) == len(res.trials)


def test_a_different_search_refuses_the_folder(tmp_path):
    store = TrialStore(tmp_path)
    store.bind({"a": 1})
    store.bind({"a": 1})
    with pytest.raises(ServelabError, match="different search"):
        store.bind({"a": 2})


def test_space_parsing_names_bad_params():
    with pytest.raises(ServelabError, match="max_num_seq"):
        parse_space(["max_num_seq=1,2"], sorted(EngineArgs.model_fields))
    with pytest.raises(ServelabError, match="repeat"):
        parse_space(["max_num_seqs=1,1"], None)
    assert parse_space(["a=1,2", "b=0.5,x"], None).size == 4


def test_cli_tune_writes_trials_pareto_and_reports_the_margin(tmp_path):
    args = [sys.executable, "-m", "servelab", "tune", "--sim", "--model", "Qwen/Qwen3-14B", "--gpu", "L40S",
            "--dataset-name", "random", "--random-input-len", "128", "--random-output-len", "16",
            "--seed", "1", "--param", "max_num_seqs=4,8,16,32", "--param", "max_num_batched_tokens=512,2048",
            "--slo", "ttft:2000", "--slo", "tpot:80", "--out", str(tmp_path), "--max-level", "32",
            "--prompts-per-concurrency", "2", "--min-prompts", "16", "--max-prompts", "64", "--json"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["grid_size"] == 8 and out["trials_spent"] <= 2
    assert (tmp_path / "pareto.png").stat().st_size > 0
    assert "margin over the engine's defaults" in p.stderr
    p2 = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert json.loads(p2.stdout)["trials_reused"] == out["trials_spent"]
