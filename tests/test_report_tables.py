"""Report tables and diagnosis from hand-made cell files with known figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.report import build_report
from servelab.report.data import load_experiment
from servelab.report.diagnose import diagnose_arms
from servelab.report.tables import comparison_table, memory_table, ratio_table, slo_table

ARMS = [{"name": "base", "args": {}}, {"name": "tight", "args": {"max_num_seqs": 8}}]


def _cell(arm: str, load: str, conc: int, total: float, out: float, ttft: float, itl: float,
          duration: float, waiting: float, running: float, kv: float, failed: int = 0) -> dict:
    return {
        "cell": {"arm": arm, "workload": "chat", "load": load, "seed": 1, "num_prompts": 4,
                 "concurrency": conc, "request_rate": "inf", "max_concurrency": conc},
        "result": {"total_token_throughput": total, "output_throughput": out,
                   "request_throughput": 1.0, "request_goodput": 0.5,
                   "mean_ttft_ms": ttft, "p99_ttft_ms": 2 * ttft, "mean_itl_ms": itl,
                   "p99_itl_ms": 3 * itl, "mean_tpot_ms": itl, "p99_tpot_ms": itl,
                   "duration": duration, "completed": 4 - failed, "failed": failed,
                   "total_input_tokens": 400, "total_output_tokens": 16, "ttfts": [ttft / 1e3] * 4, "itls": [[itl / 1e3] * 3] * 4,
                   "errors": [""] * 4},
        "servers": [{"available": True, "peak_kv_cache_usage_perc": kv,
                     "max_num_requests_waiting": waiting, "max_num_requests_running": running,
                     "preemptions_delta": 0.0, "prefix_cache_hit_rate": None}],
        "engine_memory": [None],
        "roofline": {"batch": int(running), "context_tokens": 300, "step_ms": itl / 2,
                     "memory_ms": itl / 2, "compute_ms": itl / 10, "allreduce_ms": 0.0,
                     "bound": "memory", "bytes_read": 1.0},
        "extras": {}, "notes": [],
    }


def _plan(tokens: int, seqs: int, mml: int) -> dict:
    return {"memory": {"weights_gib": 27.5, "kv_cache_gib": 11.0, "kv_cache_tokens": tokens,
                       "max_concurrency": tokens / mml, "max_model_len": mml, "max_num_seqs": seqs}}


@pytest.fixture()
def exp_dir(tmp_path: Path) -> Path:
    manifest = {
        "servelab_version": "0", "baseline": "base", "gpu": "L40S", "engine_versions": {},
        "planner": {"base": _plan(72064, 256, 40960), "tight": _plan(72064, 8, 1024)},
        "spec": {"name": "fx", "engine": "vllm", "model": {"name": "M"}, "arms": ARMS,
                 "workloads": [{"name": "chat"}],
                 "slo": {"ttft_ms": 300, "tpot_ms": 50, "e2el_ms": None, "percentile": 99}},
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    status = {"state": "done", "reason": None, "version": "0.25.1", "startups": [
        {"model_loading_gib": 27.5185, "available_kv_gib": 11.0, "kv_cache_tokens": 72064,
         "max_concurrency": 1.76, "max_concurrency_context_tokens": 40960}]}
    for arm in ("base", "tight"):
        (tmp_path / "arms" / arm).mkdir(parents=True)
        (tmp_path / "arms" / arm / "status.json").write_text(json.dumps(status))
    cells = [
        _cell("base", "c1", 1, 100.0, 80.0, 50.0, 10.0, 40.0, 0, 1, 0.01),
        _cell("tight", "c1", 1, 125.0, 100.0, 40.0, 8.0, 32.0, 0, 1, 0.01),
        _cell("base", "c10", 10, 800.0, 400.0, 100.0, 20.0, 10.0, 0, 10, 0.2),
        _cell("tight", "c10", 10, 680.0, 340.0, 1000.0, 16.0, 12.5, 2, 8, 0.05, failed=1),
    ]
    for c in cells:
        path = tmp_path / "cells" / c["cell"]["arm"] / "chat" / f"{c['cell']['load']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(c))
    return tmp_path


def test_comparison_table_rows(exp_dir: Path) -> None:
    t = comparison_table(load_experiment(exp_dir), "chat")
    assert t.headers[:4] == ("load", "arm", "total tok/s", "output tok/s")
    assert t.rows[0] == ("c1", "base", "100.0", "80.0", "50.0", "100.0", "10.0", "30.0", "40.0", "0")
    assert t.rows[3][0:2] == ("c10", "tight") and t.rows[3][-1] == "1"


def test_ratios_against_the_baseline_are_exact(exp_dir: Path) -> None:
    t = ratio_table(load_experiment(exp_dir), "chat")
    assert [r[:2] for r in t.rows] == [("c1", "tight"), ("c10", "tight")]
    # 125/100, 100/80, 40/50, 80/100, 8/10, 24/30, 32/40
    assert t.rows[0][2:] == ("x1.25", "x1.25", "x0.80", "x0.80", "x0.80", "x0.80", "x0.80")
    # 680/800, 340/400, 1000/100, 2000/200, 16/20, 48/60, 12.5/10
    assert t.rows[1][2:] == ("x0.85", "x0.85", "x10.00", "x10.00", "x0.80", "x0.80", "x1.25")


def test_memory_table_sets_planner_beside_engine(exp_dir: Path) -> None:
    t = memory_table(load_experiment(exp_dir))
    assert t.rows[0] == ("base", "27.50 / 27.52", "11.00 / 11.00", "72,064 / 72,064",
                         "1.76 / 1.76", "40,960", "256")
    assert t.rows[1][4] == "70.38 / 1.76"  # plan: 72,064 / 1,024; the engine logged 1.76
    assert t.rows[1][6] == "8"


def test_slo_table_picks_best_load_meeting_it(exp_dir: Path) -> None:
    t = slo_table(load_experiment(exp_dir))
    assert t is not None
    # base: c10 p99 TTFT 200 <= 300 -> c10; tight: c10 has a failure and p99 TTFT 2000 -> c1.
    assert t.rows == (("chat", "base", "c10", "400.0", "0.50"), ("chat", "tight", "c1", "100.0", "0.50"))


def test_diagnosis_names_the_batch_slot_queue_of_the_tight_arm(exp_dir: Path) -> None:
    by_arm = {d.arm: d for d in diagnose_arms(load_experiment(exp_dir))}
    tight = by_arm["tight"]
    assert tight.binding == "batch slots (max_num_seqs)"
    assert ("chat at c10: max_num_seqs 8 is below the load's concurrency 10: at most 8 running, "
            "up to 2 waiting; mean TTFT 1,000.0 ms (10.0x the baseline's 100.0 ms)") in tight.lines[0]
    assert any("1 requests failed" in x for x in tight.lines)
    base = by_arm["base"]
    assert base.binding == "decode bandwidth (roofline)"
    assert any("mean ITL 20.00 ms vs the roofline decode step 10.00 ms at batch 10" in x
               and "50 % of the bandwidth roofline" in x for x in base.lines)


def test_markdown_holds_every_section(exp_dir: Path) -> None:
    md = build_report(exp_dir, plots=False).to_markdown()
    for title in ("### chat: arms x loads", "### chat: ratios vs baseline base",
                  "### memory budget per arm", "### SLO (p99", "## Diagnosis"):
        assert title in md


def test_diagnosis_skips_a_heavier_load_whose_every_request_failed(exp_dir: Path) -> None:
    # c32 of the tight arm: all 4 requests refused (longer than its max_model_len).
    dead = _cell("tight", "c32", 32, 0.0, 0.0, 0.0, 0.0, 0.3, 0, 0, 0.0, failed=4)
    path = exp_dir / "cells" / "tight" / "chat" / "c32.json"
    path.write_text(json.dumps(dead))
    tight = {d.arm: d for d in diagnose_arms(load_experiment(exp_dir))}["tight"]
    assert tight.lines[0].startswith("chat at c10: max_num_seqs 8 is below")
