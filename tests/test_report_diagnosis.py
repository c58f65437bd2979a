"""The one diagnosis (servelab.diagnosis) with known answers, and how the report and the
sweep feed it: a closed loop's start-up burst is not a queue; a lasting one is."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from servelab.diagnosis import Ceiling, DiagnosisInput, RooflineStep, diagnose
from servelab.metrics.server_figures import ServerFigures
from servelab.experiment.cellrecord import CellRecord
from servelab.report.data import cell_figures, load_experiment
from servelab.report.diagnose import diagnose_arms

ROOF = RooflineStep(batch=18, context_tokens=342, step_ms=30.0, bound="memory")


def _input(seqs: int | None = 256, conc: int | None = 32, **server: float | None) -> DiagnosisInput:
    figs = {"max_waiting": 23.0, "mean_waiting": 0.4, "max_running": 32.0, "mean_running": 18.0,
            "peak_kv_usage": 0.21, "preemptions": 0.0} | server
    return DiagnosisInput(max_num_seqs=seqs, concurrency=conc, server=ServerFigures(**figs),
                          mean_itl_ms=60.0, mean_ttft_ms=400.0, roofline=ROOF)


def test_a_closed_loop_start_up_burst_is_not_a_queue() -> None:
    d = diagnose(_input())
    assert d.kind is Ceiling.BANDWIDTH
    assert d.lines[0].startswith("no lasting queue (0.4 waiting on average (peak 23), 32 running")
    # 30 ms roofline step / 60 ms measured ITL
    assert "50 % of the bandwidth roofline" in d.lines[1]


def test_a_lasting_queue_binds() -> None:
    d = diagnose(_input(mean_waiting=5.0))
    assert d.kind is Ceiling.QUEUEING
    assert d.lines[0].startswith("5.0 waiting on average (peak 23) with 32 running at most")


def test_the_over_tuned_arm_binds_on_batch_slots() -> None:
    d = diagnose(_input(seqs=8, max_waiting=24.0, mean_waiting=24.0, max_running=8.0, mean_running=8.0,
                        peak_kv_usage=0.02))
    assert d.kind is Ceiling.MAX_NUM_SEQS
    assert d.lines[0].startswith("max_num_seqs 8 is below the load's concurrency 32: at most 8 "
                                 "running, 24.0 waiting on average (peak 24)")
    assert d.lines[1] == "KV pool peak 2 %: memory is not what limits it; raise max_num_seqs"


def test_slots_full_at_a_request_rate_with_a_queue() -> None:
    d = diagnose(_input(seqs=8, conc=None, max_running=8.0, mean_waiting=3.0))
    assert d.kind is Ceiling.MAX_NUM_SEQS and d.lines[0].startswith("max_num_seqs 8 slots all busy")


def test_kv_full_comes_before_queueing() -> None:
    d = diagnose(_input(mean_waiting=5.0, preemptions=12.0, peak_kv_usage=0.97))
    assert d.kind is Ceiling.KV_FULL
    assert d.lines[0].startswith("KV pool peak 97 %, 12 preemptions")


def test_without_a_mean_the_peak_judges_with_a_note() -> None:
    d = diagnose(_input(mean_waiting=None))
    assert d.kind is Ceiling.QUEUEING
    assert any(x.startswith("queue judged by its peak") for x in d.lines)


def test_without_queue_metrics() -> None:
    none = {"max_waiting": None, "mean_waiting": None, "max_running": None, "mean_running": None,
            "peak_kv_usage": None, "preemptions": None}
    # More closed-loop clients than slots must queue; otherwise queueing cannot be judged.
    assert diagnose(_input(seqs=8, **none)).kind is Ceiling.MAX_NUM_SEQS
    d = diagnose(_input(**none))
    assert d.kind is Ceiling.UNKNOWN
    assert not any(x.startswith("queue judged") for x in d.lines)


def test_severity_follows_the_rules_order() -> None:
    assert sorted(Ceiling, key=lambda k: k.severity)[:3] == [
        Ceiling.MAX_NUM_SEQS, Ceiling.KV_FULL, Ceiling.QUEUEING]
    assert Ceiling.MAX_NUM_SEQS.label == "batch slots (max_num_seqs)"


def _stored_cell(waiting: list[float], running: list[float]) -> dict:
    """A cell as stored before the mean figures existed: summary keys and columns only."""
    n = len(waiting)
    series = {"t_s": [0.5 * i for i in range(n)], "num_requests_waiting": waiting,
              "num_requests_running": running, "kv_cache_usage_perc": [0.2] * n}
    return {
        "cell": {"arm": "base", "workload": "chat", "load": "c32", "seed": 0, "num_prompts": 10,
                 "concurrency": 32, "request_rate": "inf"},
        "result": {"total_token_throughput": 1.0, "output_throughput": 1.0, "request_throughput": 1.0,
                   "mean_ttft_ms": 100.0, "mean_itl_ms": 60.0, "mean_tpot_ms": 60.0,
                   "duration": 10.0, "completed": 10, "failed": 0, "total_input_tokens": 5,
                   "total_output_tokens": 5},
        "servers": [{"url": "sim://offline/replica0", "available": True, "reason": None,
                     "failed_scrapes": 0, "max_num_requests_waiting": max(waiting),
                     "max_num_requests_running": max(running), "series": series}],
        "roofline": {"batch": 32, "context_tokens": 300, "step_ms": 30.0, "bound": "memory"},
    }


def test_a_cell_stored_without_means_gets_them_from_its_columns() -> None:
    # idle, the burst (23 waiting while 9 then 17 ran), 28 steady samples, idle: the ramp
    # ends when the queue first empties, so the mean is over the 28 steady samples.
    waiting = [0.0, 23.0, 15.0] + [0.0] * 27 + [1.0, 0.0]
    running = [0.0, 9.0, 17.0] + [32.0] * 28 + [0.0]
    c = cell_figures(CellRecord.parse(_stored_cell(waiting, running), "test"))
    assert c.server.max_waiting == 23
    assert c.server.mean_waiting == pytest.approx(1 / 28)
    assert c.server.mean_running == 32


def test_the_report_does_not_call_the_burst_a_queue(tmp_path: Path) -> None:
    manifest = {"baseline": "base", "planner": {},
                "spec": {"arms": [{"name": "base", "args": {"max_num_seqs": 256}}],
                         "workloads": [{"name": "chat"}]}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    path = tmp_path / "cells" / "base" / "chat" / "c32.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_stored_cell([23.0, 15.0] + [0.0] * 30, [9.0, 17.0] + [32.0] * 30)))
    (arm,) = diagnose_arms(load_experiment(tmp_path))
    assert arm.binding == "decode bandwidth (roofline)"
    assert arm.lines[0].startswith("chat at c32: no lasting queue (0.0 waiting on average (peak 23)")


def test_replicas_combine_peaks_means_and_counters() -> None:
    a = ServerFigures(max_waiting=4.0, mean_waiting=1.0, max_running=8.0, mean_running=6.0,
                      peak_kv_usage=0.5, preemptions=2.0, prefix_hit_rate=0.2)
    b = ServerFigures(max_waiting=2.0, mean_waiting=3.0, max_running=8.0, mean_running=4.0,
                      peak_kv_usage=0.9, preemptions=1.0, prefix_hit_rate=0.4)
    both = ServerFigures.over_replicas([a, b, ServerFigures()])
    assert both == ServerFigures(max_waiting=4.0, mean_waiting=2.0, max_running=8.0, mean_running=5.0,
                                 peak_kv_usage=0.9, preemptions=3.0, prefix_hit_rate=pytest.approx(0.3))
    assert ServerFigures.over_replicas([a, b], preemptions=7.0).preemptions == 7.0
    assert ServerFigures.over_repetitions([a, b]).preemptions == 2.0


def _routed_cell(arm: str, out_tok_s: float, hit_rates: list[float]) -> dict:
    """A cell of an arm with one replica per entry of `hit_rates` (summary keys only)."""
    return {
        "cell": {"arm": arm, "workload": "prefix", "load": "c64", "seed": 0, "num_prompts": 10,
                 "concurrency": 64, "request_rate": "inf"},
        "result": {"total_token_throughput": 1.0, "output_throughput": out_tok_s,
                   "request_throughput": 1.0, "mean_ttft_ms": 100.0, "mean_itl_ms": 20.0,
                   "mean_tpot_ms": 20.0, "duration": 10.0, "completed": 10, "failed": 0,
                   "total_input_tokens": 5, "total_output_tokens": 5},
        "servers": [{"available": True, "max_num_requests_waiting": 0.0,
                     "mean_num_requests_waiting": 0.0, "max_num_requests_running": 32.0,
                     "peak_kv_cache_usage_perc": 0.5, "preemptions_delta": 0.0,
                     "prefix_cache_hit_rate": h} for h in hit_rates],
    }


def test_routing_is_named_when_another_policy_on_the_same_engines_hits_more(tmp_path: Path) -> None:
    two = {"replicas": 2, "gpus": [0, 1], "args": {}}
    arms = [{"name": "rr", "baseline": True, "routing": "round_robin", **two},
            {"name": "cache", "routing": "cache_aware", **two},
            {"name": "near", "routing": "random", **two},
            # Other engines (TP2): never compared, however high its hit rate.
            {"name": "tp2", "tensor_parallel_size": 2, "gpus": [0, 1], "args": {}}]
    manifest = {"baseline": "rr", "planner": {},
                "spec": {"arms": arms, "workloads": [{"name": "prefix"}]}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    cells = {"rr": _routed_cell("rr", 1000.0, [0.2, 0.4]),
             "cache": _routed_cell("cache", 2200.0, [0.85, 0.89]),
             "near": _routed_cell("near", 1900.0, [0.8, 0.8]),
             "tp2": _routed_cell("tp2", 3000.0, [0.99])}
    for arm, cell in cells.items():
        path = tmp_path / "cells" / arm / "prefix" / "c64.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(cell))
    by_arm = {a.arm: a.lines for a in diagnose_arms(load_experiment(tmp_path))}
    routing = {arm: [x for x in lines if x.startswith("routing:")] for arm, lines in by_arm.items()}
    # rr: 30 % against the best same-engine arm, cache's 87 % (2.2x the output tok/s).
    assert routing["rr"] == [
        "routing: prefix cache hit rate 30 % behind round_robin vs 87 % for arm cache "
        "(cache_aware) on the same engines and traffic, with 2.20x the output tok/s: "
        "round_robin sends a prefix to any replica, so every cache holds every prefix and "
        "they crowd each other out"]
    # near (80 %) is within 10 points of cache (87 %); cache is the best; tp2 has one replica.
    assert routing["near"] == routing["cache"] == routing["tp2"] == []


def test_replicas_pool_the_hit_rate_by_queried_tokens() -> None:
    # Known answer, the H200 round-robin cell at c64 (docs/validation/h200x2-router-2026-11-30):
    # replica 0 thrashed (20.3 % of 1,000 tokens queried), replica 1 did not (50.7 % of 400):
    # pooled (203 + 202.8) / 1,400 = 29.0 %, not the 35.5 % average of the two rates.
    a = ServerFigures(prefix_hit_rate=0.203, prefix_queries=1000.0)
    b = ServerFigures(prefix_hit_rate=0.507, prefix_queries=400.0)
    both = ServerFigures.over_replicas([a, b])
    assert both.prefix_hit_rate == pytest.approx((203.0 + 202.8) / 1400.0)
    assert both.prefix_queries == 1400.0
    # A replica without a query count (SGLang's gauge): the plain average.
    c = ServerFigures(prefix_hit_rate=0.507)
    assert ServerFigures.over_replicas([a, c]).prefix_hit_rate == pytest.approx(0.355)


def test_recounted_lookups_are_named_with_the_bound_they_leave() -> None:
    # vLLM 0.25 counts a waiting request's lookup each time it is tried: 2,000 tokens
    # looked up for 1,000 prompt tokens, 600 hits -> 30 % measured, at most 60 % per request.
    inflated = diagnose(_input(prefix_hit_rate=0.3, prefix_queries=2000.0, prompt_tokens=1000.0))
    (line,) = [x for x in inflated.lines if x.startswith("prefix cache hit rate")]
    assert line.startswith("prefix cache hit rate 30 %, of 2.00x as many lookups as prompt tokens")
    assert "hits were 60 % of the prompt tokens" in line
    # One lookup per prompt token (newer vLLM, or no wait for KV): the rate alone.
    clean = diagnose(_input(prefix_hit_rate=0.3, prefix_queries=1000.0, prompt_tokens=1000.0))
    assert "prefix cache hit rate 30 %" in clean.lines
    # Over replicas the prompt tokens add up like the lookups.
    both = ServerFigures.over_replicas([
        ServerFigures(prefix_hit_rate=0.2, prefix_queries=3000.0, prompt_tokens=1000.0),
        ServerFigures(prefix_hit_rate=0.5, prefix_queries=1000.0, prompt_tokens=1000.0)])
    assert (both.prefix_queries, both.prompt_tokens) == (4000.0, 2000.0)


AWQ_SPEC = """\
name: awqgain
engine: sim
hardware: {gpu: L40S}
model: Qwen/Qwen3-14B
arms:
  - {name: bf16, baseline: true}
  - {name: awq, quantization: awq}
workloads:
  - {name: rnd, dataset_name: random, random_input_len: 128, random_output_len: 32}
loads: {concurrency: [4], num_prompts: 12}
seed: 3
"""


def test_a_quantized_arm_is_explained_by_the_ceiling_that_moved(tmp_path: Path) -> None:
    from servelab.experiment import load_spec, run_experiment

    spec = tmp_path / "awq.yaml"
    spec.write_text(AWQ_SPEC)
    run_experiment(load_spec(spec), tmp_path / "run")
    data = load_experiment(tmp_path / "run")
    by_arm = {a.arm: a.lines for a in diagnose_arms(data)}
    w = {a.name: a.plan["memory"]["weights_gib"] for a in data.arms}
    line = next(x for x in by_arm["awq"] if x.startswith("vs bf16:"))
    # Known answer: the planner's weights per GPU and their ratio, and the kernel family
    # and source of the simulated AWQ GEMMs on an Ada GPU without a profile.
    assert line.startswith(f"vs bf16: {w['awq']:.1f} GiB of weights per GPU instead of "
                           f"{w['bf16']:.1f} ({w['bf16'] / w['awq']:.2f}x fewer bytes per decode step) "
                           "with Marlin 4-bit (datasheet L40S, not profiled)")
    awq, bf16 = data.cell("awq", "rnd", "c4"), data.cell("bf16", "rnd", "c4")
    assert f"output tok/s {awq.output_tok_s / bf16.output_tok_s:.2f}x" in line
    assert not any(x.startswith("vs bf16:") for x in by_arm["bf16"])


def test_a_share_above_the_roofline_says_the_figures_are_inconsistent() -> None:
    fast = DiagnosisInput(max_num_seqs=256, concurrency=32, server=ServerFigures(
        max_waiting=0.0, mean_waiting=0.0, max_running=32.0, mean_running=18.0, peak_kv_usage=0.21,
        preemptions=0.0), mean_itl_ms=2.0, mean_ttft_ms=40.0, roofline=ROOF)
    d = diagnose(fast)
    assert "1500 % of the bandwidth roofline" in d.lines[1]
    assert d.lines[2].startswith("above 100 % the figures are inconsistent")
    assert not any("inconsistent" in x for x in diagnose(_input()).lines)  # 50 %: no note


def test_scrapes_that_never_caught_the_engine_busy_give_no_figures() -> None:
    from servelab.metrics.scrape import ServerSeries, ServerSnapshot, TimedSnapshot

    idle = tuple(TimedSnapshot(t, ServerSnapshot(num_requests_running=0.0, num_requests_waiting=0.0,
                                                 kv_cache_usage_perc=0.0)) for t in (0.0, 1.0))
    series = ServerSeries(url="u", available=True, reason=None, failed_scrapes=0, samples=idle)
    assert series.max_num_requests_running is None and series.max_num_requests_waiting is None
    assert series.peak_kv_cache_usage_perc is None
    busy = idle + (TimedSnapshot(2.0, ServerSnapshot(num_requests_running=3.0, num_requests_waiting=0.0,
                                                     kv_cache_usage_perc=0.1)),)
    got = ServerSeries(url="u", available=True, reason=None, failed_scrapes=0, samples=busy)
    assert got.max_num_requests_running == 3.0 and got.peak_kv_cache_usage_perc == 0.1
    d = diagnose(DiagnosisInput(max_num_seqs=256, concurrency=8, server=ServerFigures.of_series(series),
                                mean_itl_ms=10.0, mean_ttft_ms=20.0))
    assert d.kind is Ceiling.UNKNOWN and "no queue figures" in d.lines[0]
    assert "0 running" not in " ".join(d.lines)


def test_the_report_names_a_cells_measurement_traps(tmp_path: Path) -> None:
    manifest = {"baseline": "base", "planner": {},
                "spec": {"arms": [{"name": "base", "args": {"max_num_seqs": 256}}],
                         "workloads": [{"name": "chat"}]}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    cell = _stored_cell([0.0] * 4, [32.0] * 4)
    note = "mean TPOT 83.5 ms is pulled up by 40 requests with 2-3 output tokens"
    cell["result"]["servelab"] = {"trap_notes": [note]}
    path = tmp_path / "cells" / "base" / "chat" / "c32.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(cell))
    (arm,) = diagnose_arms(load_experiment(tmp_path))
    assert arm.lines[-1] == f"measurement: {note}"


def test_a_speculative_cell_meets_the_roofline_by_its_step_not_its_itl() -> None:
    # 2 ms ITL alone would be 1500 % of a 30 ms roofline step; at 3 tokens per verification
    # the step is 6 ms: still above, and at 20 tokens per step 40 ms, 75 %, consistent.
    fast = DiagnosisInput(max_num_seqs=256, concurrency=32, server=ServerFigures(
        max_waiting=0.0, mean_waiting=0.0, max_running=32.0, mean_running=18.0, peak_kv_usage=0.21,
        preemptions=0.0), mean_itl_ms=2.0, mean_ttft_ms=40.0, roofline=ROOF, tokens_per_step=20.0)
    d = diagnose(fast)
    assert d.lines[1] == ("mean ITL 2.00 ms x 20.00 tokens per step = 40.00 ms a step vs "
                          "the roofline decode step 30.00 ms at batch 18 x 342 tokens of context "
                          "(bandwidth-bound step): the engine runs at 75 % of the bandwidth roofline")
    assert d.lines[2].startswith("the roofline's step carries one token per sequence")
    assert not any("inconsistent" in x for x in d.lines)
    three = diagnose(dataclasses.replace(fast, tokens_per_step=3.0))
    assert "500 % of the bandwidth roofline" in three.lines[1]
    assert any(x.startswith("above 100 % the figures are inconsistent") for x in three.lines)
    # fewer than one token a step is read as one
    none = diagnose(dataclasses.replace(fast, tokens_per_step=0.0))
    assert none.lines[1:] == diagnose(dataclasses.replace(fast, tokens_per_step=1.0)).lines[1:]
    assert "1500 % of the bandwidth roofline" in none.lines[1]


def test_a_verification_steps_roofline_grows_its_compute_not_its_reads() -> None:
    # Known answer: a stage of 9 ms weight and KV reads and 2 ms of GEMMs, 1 ms of all-reduce
    # on top of which 0.6 ms is traffic (0.4 ms the calls' latency), verifying 6 tokens per
    # sequence: compute 12 ms > reads 9 ms, so the step is compute-bound at 12 + 0.4 + 6 x 0.6
    # = 16 ms; at 3 tokens reads still bind: 9 + 0.4 + 3 x 0.6 = 11.2 ms.
    stored = {"batch": 64, "context_tokens": 300, "step_ms": 10.0, "token_interval_ms": 10.0,
              "memory_ms": 9.0, "compute_ms": 2.0, "allreduce_ms": 1.0, "allreduce_traffic_ms": 0.6,
              "bound": "memory"}
    roof = RooflineStep.of(stored)
    assert roof is not None
    six, three = roof.verifying(6.0), roof.verifying(3.0)
    assert six is not None and (six.step_ms, six.bound) == (pytest.approx(16.0), "compute")
    assert three is not None and (three.step_ms, three.bound) == (pytest.approx(11.2), "memory")
    # two pipeline stages: the token interval is twice the stage's step, before and after
    two = RooflineStep.of({**stored, "token_interval_ms": 20.0})
    assert two is not None and two.verifying(6.0).step_ms == pytest.approx(32.0)  # type: ignore[union-attr]
    # a cell stored without the traffic part keeps its all-reduce: 12 + 1 = 13 ms
    older = RooflineStep.of({k: v for k, v in stored.items() if k != "allreduce_traffic_ms"})
    assert older is not None and older.verifying(6.0).step_ms == pytest.approx(13.0)  # type: ignore[union-attr]
    # a cell stored with the step alone has nothing to verify with
    assert RooflineStep.of({"batch": 64, "context_tokens": 300, "step_ms": 10.0, "bound": "memory"}).verifying(6.0) is None  # type: ignore[union-attr]
    cell = DiagnosisInput(max_num_seqs=256, concurrency=64, server=ServerFigures(
        max_waiting=0.0, mean_waiting=0.0, max_running=64.0, mean_running=64.0, peak_kv_usage=0.2,
        preemptions=0.0), mean_itl_ms=4.0, mean_ttft_ms=40.0, roofline=roof, tokens_per_step=6.0)
    d = diagnose(cell)
    assert d.kind is Ceiling.COMPUTE
    assert d.lines[1] == ("mean ITL 4.00 ms x 6.00 tokens per step = 24.00 ms a step vs the roofline "
                          "verification step 16.00 ms at batch 64 x 300 tokens of context "
                          "(compute-bound step): the engine runs at 67 % of the compute roofline")
    assert d.lines[2] == ("the roofline's step verifies 6.00 tokens per sequence: its compute and "
                          "all-reduce traffic x 6.00, its weight and KV reads once")


def test_a_speculative_cell_is_diagnosed_by_its_tokens_per_decode_step() -> None:
    # The committed one-machine run (docs/validation/spec-onehost-2026-12-05): n-gram drafts
    # only on a match, so a decode step gains (output tokens after the first) / (decode
    # steps) tokens, the steps being those tokens less the accepted drafts that rode along.
    exp = Path(__file__).resolve().parent.parent / "docs/validation/spec-onehost-2026-12-05/results/exp"
    data = load_experiment(exp)
    cell = data.cell("ngram-k6", "sharegpt", "c64")
    assert cell is not None and cell.spec is not None
    raw = json.loads((exp / "cells/ngram-k6/sharegpt/c64.json").read_text())["result"]
    after_first = raw["total_output_tokens"] - raw["completed"]
    tokens = after_first / (after_first - raw["spec_decode_accepted_tokens"])
    assert tokens < cell.spec.acceptance_length  # fewer than per drafted step
    lines = {a.arm: a.lines for a in diagnose_arms(data)}["ngram-k6"]
    want = f"mean ITL {cell.mean_itl_ms:,.2f} ms x {tokens:.2f} tokens per step = {cell.mean_itl_ms * tokens:,.2f} ms a step"
    assert any(x.startswith(want) for x in lines)
