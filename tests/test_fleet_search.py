"""The capacity search (`servelab plan --search`): its rules on planted optima, the planner's
ceilings, the window rule, and the search against the brute-force grid on the simulator."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
import subprocess
import sys

from servelab.errors import ServelabError
from servelab.experiment.spec import ArmSpec
from servelab.fleet.deployment import Deployment, Shape
from servelab.fleet.evaluate import SimEvaluator, SimTarget
from servelab.fleet.request import SearchRequest, run_search, window_prompts
from servelab.fleet.search import Evaluation, best_of, grid, pareto_front, search
from servelab.fleet.space import Ceilings, SearchSpace, Traffic, read_ceilings
from servelab.hardware.catalog import get_gpu
from servelab.sim.offline import prepare_workload
from servelab.sweep.slo import parse_slo
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DatasetOptions


def _servelab(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servelab", *argv], capture_output=True,
                          text=True, timeout=300, env={"COLUMNS": "200", "PATH": ""})


class Planted:
    """A deployment meets the SLO when replicas x its shape's capacity covers the demand;
    goodput per GPU falls with spare capacity. Counts what it was asked."""

    def __init__(self, capacity: dict[Shape, float], demand: float) -> None:
        self.capacity, self.demand, self.asked = capacity, demand, []

    def evaluate(self, deployments: Sequence[Deployment]) -> list[Evaluation]:
        out = []
        for d in deployments:
            self.asked.append(d)
            cap = self.capacity[d.shape] * d.replicas
            ok = cap >= self.demand
            bonus = 0.01 if d.router_policy == "least_requests" else 0.0
            out.append(Evaluation(d, ok, 100.0, 20.0, 50.0, 10.0, min(cap, self.demand) * 100,
                                  (self.demand if ok else 0.0) + bonus, None if ok else "short",
                                  "memory"))
        return out


def _ceilings(space: SearchSpace, lo: dict[Shape, int] | None = None) -> list[Ceilings]:
    return [Ceilings(s, True, None, 10.0, 100.0, 1.0, (lo or {}).get(s, 1)) for s in space.shapes()]


def test_the_search_finds_a_planted_optimum_in_fewer_simulations_than_the_grid():
    space = SearchSpace(quantizations=(None, "fp8", "awq"), tensor_parallel_sizes=(1, 2, 4),
                        pipeline_parallel_sizes=(1,), max_gpus=16)
    # Demand 12 units. fp8 TP2 carries 3.1 per replica: 4 replicas, 8 GPUs. Every other shape
    # needs more: bf16 / awq TP1 (1.4 / 1.45) 9 GPUs, bf16 / awq TP2 (2.5 / 2.9) 10, fp8 TP4
    # (5.0) 12, the rest (1.0) 12. least_requests adds 0.01 to goodput: it breaks the tie.
    capacity = {s: 1.0 for s in space.shapes()}
    capacity.update({Shape(None, 1): 1.4, Shape("awq", 1): 1.45, Shape("fp8", 2): 3.1,
                     Shape("fp8", 4): 5.0, Shape(None, 2): 2.5, Shape("awq", 2): 2.9})
    ev = Planted(capacity, demand=12.0)
    outcome = search(space, _ceilings(space), ev)
    brute = Planted(capacity, demand=12.0)
    every = brute.evaluate(grid(space, _ceilings(space)))
    want = best_of(every)
    assert want is not None and want.deployment == Deployment(Shape("fp8", 2), 4, "least_requests")
    assert outcome.winner is not None and outcome.winner.deployment == want.deployment
    assert len(ev.asked) == len(set(ev.asked)) == outcome.simulations
    assert outcome.simulations <= 0.25 * len(every)


def test_the_gpu_count_is_bisected_and_a_shapes_answers_are_reused():
    space = SearchSpace(quantizations=(None, "awq"), tensor_parallel_sizes=(1,),
                        pipeline_parallel_sizes=(1,), router_policies=("round_robin",), max_gpus=8)
    ev = Planted({Shape(None): 1.0, Shape("awq"): 3.0}, demand=6.0)
    ceil = [Ceilings(Shape("awq"), True, None, 1, 1, 3.0, 1), Ceilings(Shape(None), True, None, 1, 1, 1.0, 1)]
    outcome = search(space, ceil, ev)
    assert outcome.winner.deployment == Deployment(Shape("awq"), 2)
    # Bisecting [1, 8]: G = 4 (awq passes, bf16 fails), G = 2 (awq passes; bf16's fail at 4
    # answers 2), G = 1 (awq fails; bf16 answered): the fewest is 2, bf16 simulated once.
    assert [d.replicas for d in ev.asked if d.shape == Shape("awq")] == [4, 2, 1]
    assert [d.replicas for d in ev.asked if d.shape == Shape(None)] == [4]


def test_shapes_the_ceilings_rule_out_are_never_simulated():
    space = SearchSpace(quantizations=(None,), tensor_parallel_sizes=(1, 2),
                        pipeline_parallel_sizes=(1,), max_gpus=2)
    ceil = [Ceilings(Shape(None, 1), True, "TPOT floor", 1, 1, 1.0, 1),
            Ceilings(Shape(None, 2), True, None, 1, 1, 1.0, 1)]
    ev = Planted({Shape(None, 1): 10.0, Shape(None, 2): 10.0}, demand=1.0)
    outcome = search(space, ceil, ev)
    assert {d.shape for d in ev.asked} == {Shape(None, 2)}
    assert [c.shape for c in outcome.ruled_out] == [Shape(None, 1)]


def test_pareto_front_keeps_only_undominated_passing_points():
    def e(label_tp: int, per_user_tpot: float, out_tok_s: float, ok: bool = True) -> Evaluation:
        return Evaluation(Deployment(Shape(None, label_tp)), ok, 1, 1, 1, per_user_tpot, out_tok_s, 1,
                          None, "memory")
    a, b, c, d = e(1, 10.0, 100.0), e(2, 5.0, 120.0), e(4, 8.0, 50.0), e(8, 2.0, 999.0, ok=False)
    # tokens/s per user, per GPU: a 100, 100; b 200, 60; c 125, 12.5 (b is faster on both:
    # dominated); d breaks the SLO. The front, fastest per user first: b, then a.
    assert pareto_front([a, b, c, d]) == [b, a]


def test_the_window_is_three_longest_latencies_the_slo_allows():
    slo = parse_slo(["ttft:500", "tpot:50"], 99.0)
    lens = list(range(1, 1001))
    # nearest rank: the p99 of 1..1000 is 990 tokens; 0.5 s + 990 x 50 ms = 50.0 s, x3 = 150 s
    # at 10 req/s -> 1,500 requests
    assert window_prompts(10.0, lens, slo) == 1500
    assert window_prompts(10.0, [10] * 100, slo) == 600  # at least 60 s of arrivals
    assert window_prompts(2.0, lens, parse_slo(["e2el:30000"], 99.0)) == 180


def test_ceilings_rule_out_a_tpot_floor_and_start_replicas_at_the_rate():
    gpu = get_gpu("L40S")
    traffic = Traffic(rate_rps=40.0, mean_prompt_tokens=200, mean_output_tokens=200,
                      percentile_prompt_tokens=1000)
    tight = read_ceilings("Qwen/Qwen3-14B", gpu, Shape(None), traffic, {"tpot": 5.0}, 8)
    assert tight.runs and tight.reason is not None and "TPOT floor" in tight.reason
    # 14B bf16 reads ~29.5 GB per step at 864 GB/s: >= 34 ms per token, the floor above 5 ms
    assert tight.min_tpot_ms > 30
    ok = read_ceilings("Qwen/Qwen3-14B", gpu, Shape("awq"), traffic, {"tpot": 50.0}, 8)
    assert ok.reason is None
    assert ok.min_replicas == max(1, -(-int(40 * 200) // int(ok.replica_tok_s)))
    wide = read_ceilings("Qwen/Qwen3-14B", gpu, Shape(None, 3), traffic, {}, 8)
    assert not wide.runs and "must be divisible by tensor parallel size (3)" in wide.reason


def test_on_the_simulator_the_search_picks_the_brute_force_winner():
    space = SearchSpace(quantizations=(None, "awq"), tensor_parallel_sizes=(1, 2),
                        pipeline_parallel_sizes=(1,), router_policies=("round_robin", "least_requests"),
                        max_gpus=4)
    slo = parse_slo(["ttft:1000", "tpot:60"], 90.0)
    ds = DatasetOptions(dataset_name="random", random_input_len=256, random_output_len=64,
                        random_range_ratio=0.5, num_prompts=240)
    wl = prepare_workload(ds, 0, ArrivalOptions(request_rate=12.0))
    traffic = Traffic.of(12.0, [len(r.prompt_token_ids) for r in wl.requests],
                         [r.output_len for r in wl.requests], 90.0)
    target = SimTarget("Qwen/Qwen3-14B", "L40S", wl, slo, 0, round(traffic.mean_context_tokens))
    ceil = [read_ceilings("Qwen/Qwen3-14B", get_gpu("L40S"), s, traffic, dict(slo.limits_ms),
                          space.max_replicas(s)) for s in space.shapes()]
    outcome = search(space, ceil, SimEvaluator(target))
    every = SimEvaluator(target).evaluate(grid(space, ceil))
    want = best_of(every)
    assert want is not None and outcome.winner is not None
    assert outcome.winner.deployment == want.deployment
    assert outcome.simulations < len(every)
    # the same deployment simulated twice gives the same figures (the search's figures are
    # the brute force's)
    again = {e.deployment: e for e in every}[outcome.winner.deployment]
    assert again == outcome.winner


def test_plan_search_command_writes_the_winner_as_a_spec_arm(tmp_path: Path):
    out = tmp_path / "search"
    res = _servelab([
        "plan", "--search", "--model", "Qwen/Qwen3-14B", "--gpu", "L40S", "--rate", "4",
        "--slo", "ttft:2000", "tpot:80", "--max-gpus", "2", "--num-prompts", "120",
        "--axis", "quantization=awq", "--axis", "tensor_parallel_size=1", "--axis",
        "pipeline_parallel_size=1", "--out", str(out)])
    assert res.returncode == 0, res.stderr
    assert "winner: awq on 1 GPUs" in res.stdout
    data = json.loads((out / "search.json").read_text())
    # the planner's bound (one GPU) is tried first; it passes, nothing is left to try
    assert [e["deployment"] for e in data["evaluations"]] == ["awq"]
    assert data["winner"]["deployment"] == "awq"
    arm = yaml.safe_load((out / "winner.yaml").read_text())["arms"][0]
    assert ArmSpec(**arm) == ArmSpec(name="awq", quantization="awq")
    assert (out / "front.png").stat().st_size > 0
    assert "<table" in (out / "search.html").read_text()


@pytest.mark.parametrize("argv, message", [
    (["--rate", "4", "--max-gpus", "2"], "--search needs --rate"),
    (["--rate", "4", "--slo", "tpot:50", "--max-gpus", "2", "--axis", "tp=1"], "--axis 'tp=1'"),
    (["--rate", "4", "--slo", "tpot:50", "--max-gpus", "2", "--axis", "tensor_parallel_size=x"],
     "is not an integer"),
    (["--rate", "0", "--slo", "tpot:50", "--max-gpus", "2"], "--rate 0"),
    (["--rate", "4", "--slo", "tpot:50", "--max-gpus", "2", "--axis", "router_policy=fastest"],
     "unknown policy 'fastest'"),
])
def test_plan_search_refuses_bad_flags_by_name(argv: list[str], message: str):
    res = _servelab(["plan", "--search", "--model", "Qwen/Qwen3-14B", "--gpu", "L40S", *argv])
    assert res.returncode == 2
    assert message in res.stderr
    assert "Traceback" not in res.stderr


def test_search_request_refuses_an_unknown_gpu_before_simulating():
    req = SearchRequest("Qwen/Qwen3-14B", "B999", 1.0, parse_slo(["tpot:50"], 99), SearchSpace(),
                        DatasetOptions(num_prompts=10))
    with pytest.raises(ServelabError, match="B999"):
        run_search(req)


def test_pd_units_and_ep_shapes_become_the_simulators_deployments_and_spec_arms():
    from servelab.cli.plan_search import parse_axes

    space = parse_axes(["quantization=bf16", "tensor_parallel_size=2", "pipeline_parallel_size=1",
                        "expert_parallel=false,true", "pd_ratio=none,1:3"], 16, 8, "infiniband")
    labels = [s.label for s in space.shapes()]
    assert labels == ["bf16-tp2", "bf16-tp2-pd1to3", "bf16-tp2-ep"]  # P/D without EP, as simulated
    pd = next(s for s in space.shapes() if s.pd_ratio)
    assert pd.gpus == 8  # (1 + 3) replicas of TP2
    d = Deployment(pd, 2, "least_requests")
    opts = d.sim_options("Qwen/Qwen3-30B-A3B", "H200")
    assert opts.replicas == 1 and opts.disaggregated is not None
    assert (opts.disaggregated.prefill.replicas, opts.disaggregated.decode.replicas) == (2, 6)
    assert opts.disaggregated.link == "infiniband" and opts.disaggregated.gpus == d.gpus == 16
    arm = d.arm_spec()
    assert arm.disaggregated == opts.disaggregated and arm.routing == "least_requests"
    ep = Deployment(next(s for s in space.shapes() if s.expert_parallel), 4)
    eo = ep.sim_options("Qwen/Qwen3-30B-A3B", "H200")
    assert eo.replicas == 4 and eo.engine_args.enable_expert_parallel
    assert eo.engine_args.expert_parallel_size == 8  # TP2 x 4 DP ranks
    assert ep.arm_spec().args == {"enable_expert_parallel": True}
    with pytest.raises(ServelabError, match="is not none or P:D"):
        parse_axes(["pd_ratio=1-3"], 8, 8)
