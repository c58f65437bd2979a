"""Speculative decoding: the arm's config as each engine takes it, the simulator's
verification step, the planner's drafter memory, the counters and the report's advice."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from servelab.engine.adapter import ArmLaunch
from servelab.engine.sglang import SglangLauncher
from servelab.engine.sim import SimLauncher
from servelab.engine.vllm import VllmLauncher
from servelab.errors import ServelabError
from servelab.experiment.arms import arm_launch
from servelab.experiment.spec import ExperimentSpec
from servelab.experiment.specfile import load_spec
from servelab.hardware.catalog import get_gpu
from servelab.metrics.result_file import StoredResult
from servelab.metrics.scrape import parse_server_metrics, spec_decode_stats
from servelab.models import load_model
from servelab.plan import EngineArgs, plan_memory
from servelab.plan.memory import GIB, loaded_weights_bytes
from servelab.models.costs import kv_bytes_per_token_per_gpu
from servelab.report.data import ExperimentData, load_experiment
from servelab.report.speculation import payoff_table, refill_of
from servelab.sim.cost import AffineCost, default_calibration
from servelab.sim.engine import SimConfig, SimEngine, build_engine
from servelab.sim.scheduler import ScheduledStep
from servelab.sim.spec_payoff import PayoffModel, Refill, steady_prefills
from servelab.sim.speculative import SpecDecoder
from servelab.speculation import (SpeculativeConfig, accepted_length, parse_rates, split_acceptance,
                                  tokens_per_step)

from conftest import run_servelab

ROOT = Path(__file__).resolve().parents[1]
H200 = get_gpu("H200")
ARGS = EngineArgs(gpu_memory_utilization=0.9)


def _ngram(k: int, rates: list[float] | None = None, **kw) -> SpeculativeConfig:
    return SpeculativeConfig(method="ngram", num_speculative_tokens=k, acceptance=rates, **kw)


# -- the arm as each engine takes it ------------------------------------------------------
def test_vllm_gets_the_exact_speculative_config_json() -> None:
    spec = _ngram(4, [0.8, 0.7, 0.6, 0.5], prompt_lookup_min=2, prompt_lookup_max=4)
    args = VllmLauncher().engine_args(ArmLaunch(name="a", model="m", speculative=spec), 0)
    i = args.index("--speculative-config")
    # servelab's own keys (acceptance, proposal_rate) stay out of vLLM's JSON
    assert args[i + 1] == ('{"method":"ngram","num_speculative_tokens":4,'
                           '"prompt_lookup_min":2,"prompt_lookup_max":4}')


def test_a_spec_arm_renders_from_the_yaml(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nengine: vllm\nmodel: Qwen/Qwen3-14B\nhardware: {gpu: H200}\n"
        "arms:\n  - name: base\n  - name: draft\n    speculative:\n      method: draft_model\n"
        "      model: Qwen/Qwen3-0.6B\n      num_speculative_tokens: 3\n"
        "      rejection_sample_method: synthetic\n      synthetic_acceptance_rates: [0.9, 0.5, 0.25]\n"
        "workloads: [{name: r, dataset_name: random}]\nloads: {concurrency: [1]}\n")
    spec = load_spec(path)
    launch = arm_launch(spec, spec.arm("draft"))
    args = VllmLauncher().engine_args(launch, 0)
    assert json.loads(args[args.index("--speculative-config") + 1]) == {
        "method": "draft_model", "model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 3,
        "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.9, 0.5, 0.25]}
    assert "--speculative-config" not in VllmLauncher().engine_args(arm_launch(spec, spec.arm("base")), 0)


def test_sglang_gets_its_speculative_flags() -> None:
    spec = SpeculativeConfig(method="eagle3", model="/m/eagle3", num_speculative_tokens=3)
    args = SglangLauncher().engine_args(ArmLaunch(name="a", model="m", speculative=spec), 0)
    tail = args[args.index("--speculative-algorithm"):]
    assert tail == ["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "4",
                    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                    "--speculative-draft-model-path", "/m/eagle3"]
    with pytest.raises(ServelabError, match="prompt_lookup_max are vLLM's"):
        SglangLauncher().speculative_args(_ngram(2, prompt_lookup_max=3))


def test_the_simulator_server_gets_the_acceptance_too() -> None:
    args = SimLauncher("H200").speculative_args(_ngram(2, [0.75, 0.5], proposal_rate=0.9, proposal_tokens=1.5))
    assert args == ["--speculative-config", '{"method":"ngram","num_speculative_tokens":2,'
                    '"proposal_rate":0.9,"proposal_tokens":1.5}', "--spec-acceptance", "0.75,0.5"]
    # vLLM gets its own keys only
    assert _ngram(2, [0.75, 0.5], proposal_tokens=1.5).engine_json() == '{"method":"ngram","num_speculative_tokens":2}'


@pytest.mark.parametrize("bad, message", [
    ({"method": "draft_model", "num_speculative_tokens": 2}, "needs `model`"),
    ({"method": "ngram", "num_speculative_tokens": 2, "acceptance": [0.5, 0.6]}, "non-increasing"),
    ({"method": "ngram", "num_speculative_tokens": 3, "acceptance": [0.5, 0.4]}, "has 2 entries"),
    ({"method": "eagle", "model": "x", "num_speculative_tokens": 2, "prompt_lookup_max": 2}, "ngram only"),
    ({"method": "ngram", "num_speculative_tokens": 2, "synthetic_acceptance_rates": [0.5, 0.4]},
     "goes with rejection_sample_method"),
])
def test_inconsistent_configs_are_refused(bad: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SpeculativeConfig.model_validate(bad)


def test_a_bad_spec_arm_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nengine: sim\nmodel: Qwen/Qwen3-14B\nhardware: {gpu: H200}\n"
        "arms:\n  - name: base\n  - name: d\n    speculative: {method: draft_model, num_speculative_tokens: 2}\n"
        "workloads: [{name: r, dataset_name: random}]\nloads: {concurrency: [1]}\n")
    with pytest.raises(ServelabError, match=r"s\.yaml:8: arms\[1\]\.speculative.*needs `model`"):
        load_spec(path)


# -- acceptance arithmetic -------------------------------------------------------------------
def test_one_draw_keeps_positions_nested() -> None:
    rates = (0.8, 0.5, 0.2)
    assert [accepted_length(rates, u) for u in (0.0, 0.3, 0.6, 0.9)] == [3, 2, 1, 0]
    assert tokens_per_step(rates) == pytest.approx(2.5)
    assert parse_rates("0.8, 0.5,0.2", "--spec-acceptance") == rates
    with pytest.raises(ValueError, match="--spec-acceptance.*non-increasing"):
        parse_rates("0.2,0.5", "--spec-acceptance")


# -- the simulator's verification step ------------------------------------------------------
def _run_one(engine: SimEngine, prompt: int, max_tokens: int) -> tuple[int, list[int]]:
    engine.add("r", tuple(range(prompt)), max_tokens, 0.0)
    steps, emitted, t = 0, [], 0.0
    while engine.has_work():
        r = engine.step(t)
        t += r.duration_s
        steps += 1
        emitted += [e.num_tokens for e in r.events]
    return steps, emitted


def test_batch_one_full_acceptance_gives_k_plus_one_tokens_per_step_at_one_reads_cost() -> None:
    k = 4
    spec_engine = build_engine("Qwen/Qwen3-14B", "H200", None, ARGS, None, True, None, _ngram(k, [1.0] * k))
    steps, emitted = _run_one(spec_engine, 100, 1 + 5 * 12)
    assert steps == 13 and emitted == [1] + [k + 1] * 12  # prefill, then 12 verifications
    counters = spec_engine.stats.spec_decode
    assert (counters.num_drafts, counters.num_draft_tokens, counters.num_accepted_tokens) == (12, 48, 48)
    # One verification reads the weights once: its GEMMs cost what a one-token decode's do
    # (M = 5 rows stays on the weight-read floor), whatever the extra rows.
    ops = spec_engine.cost.ops
    assert ops.tokens_s(ops.padded(k + 1)) == pytest.approx(ops.tokens_s(ops.padded(1)), rel=0.03)


def test_rejected_drafts_give_their_kv_slots_back() -> None:
    cfg = SimConfig(num_gpu_blocks=64, block_size=16, max_num_seqs=4, max_num_batched_tokens=256,
                    max_model_len=512, async_scheduling=False, speculative=_ngram(3, [0.0, 0.0, 0.0]))
    engine = SimEngine(cfg, AffineCost(step_s=1e-3))
    engine.add("r", tuple(range(20)), 6, 0.0)
    engine.step(0.0)  # prefill: 1 token, then a 3-token draft
    req = engine.scheduler.running[0]
    assert (req.num_output, req.num_computed, req.num_draft) == (1, 20, 3)
    step = engine.scheduler.schedule()
    assert step.num_new == [4] and step.draft_tokens == 3 and step.drafting_seqs == 1
    req.accepted = 0
    engine.scheduler.finish_step(step)
    # all 3 drafts rejected: one token out, the KV of the verified input only
    assert (req.num_output, req.num_computed, req.num_new_output) == (2, 21, 1)


def test_simulated_acceptance_matches_the_configured_rates() -> None:
    rates = [0.9, 0.6, 0.3]
    engine = build_engine("Qwen/Qwen3-4B", "H200", None, ARGS, None, True, None, _ngram(3, rates))
    for i in range(64):
        engine.add(f"r{i}", tuple(range(i * 1000, i * 1000 + 50)), 200, 0.0)
    t = 0.0
    while engine.has_work():
        t += engine.step(t).duration_s
    c = engine.stats.spec_decode
    measured = spec_decode_stats(c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens,
                                 tuple(float(x) for x in c.accepted_per_pos))
    assert measured.num_drafts > 3000
    for got, want in zip(measured.per_position_acceptance, rates):
        assert got == pytest.approx(want, abs=0.03)
    # 64 x 200 tokens: the first of each from its prefill, the rest 1 + accepted per draft
    # (>=: a sequence's last draft may overrun its length, and vLLM caps what it emits)
    assert 64 + measured.num_drafts + measured.accepted_tokens >= 64 * 200
    assert engine.stats.generation_tokens_total == 64 * 200  # no token lost or added


def test_the_counters_split_into_proposal_lengths_and_acceptance() -> None:
    # dummy weights with n-gram K = 6 on an H200: positions 0-1 always accepted, 2-5 on
    # 89.5 % of drafts, 5.58 tokens per proposal: 10.5 % of proposals had 2 tokens, and
    # every token proposed was accepted
    measured = (1.0, 1.0, 0.895, 0.895, 0.895, 0.895)
    got = split_acceptance(measured, 5.58)
    assert got.survival == pytest.approx(measured) and got.accept == pytest.approx((1.0,) * 6)
    assert got.full_share(6) == pytest.approx(0.895) and got.mean_tokens(2) == pytest.approx(2.0)
    # proposals always whole: every missing position was rejected
    whole = split_acceptance((0.8, 0.6), 2.0)
    assert whole.survival == (1.0, 1.0) and whole.accept == pytest.approx((0.8, 0.6))
    # in between: the drop 1 -> 0.5 shared so that proposals average 1.75 tokens
    mid = split_acceptance((1.0, 0.5), 1.75)
    assert mid.survival == pytest.approx((1.0, 0.75)) and mid.accept == pytest.approx((1.0, 2 / 3))


def test_an_ngram_sequences_misses_come_first() -> None:
    # the H200 run's counters: 19 drafts per request, drafted on 90.5 % of decode steps,
    # 10.5 % of proposals 2 tokens long: 2 steps without a draft, then 2 short ones
    measured = [1.0, 1.0, 0.895, 0.895, 0.895, 0.895]
    ngram = _ngram(6).with_measured(measured, 0.905, 5.58, drafts_per_seq=19.0)
    assert ngram.warmup_steps == pytest.approx(19 * (1 / 0.905 - 1)) and ngram.short_steps == pytest.approx(1.995)
    exact = ngram.model_copy(update={"warmup_steps": 2.0, "short_steps": 2.0})
    proposals = exact.proposals()
    assert proposals is not None
    spec = SpecDecoder(exact, proposals, seed=1)
    assert [spec.propose(age) for age in range(8)] == [0, 0, 2, 2, 6, 6, 6, 6]
    # a model's drafts do not depend on the text so far: no order
    drafter = SpeculativeConfig(method="draft_model", model="Qwen/Qwen3-0.6B", num_speculative_tokens=6)
    assert not drafter.with_measured(measured, 0.905, 5.58, drafts_per_seq=19.0).misses_first


def test_without_async_scheduling_a_piecewise_step_pays_its_layers() -> None:
    cal = default_calibration("H200")
    sync = build_engine("Qwen/Qwen3-14B", "H200", None, ARGS, None, False)
    overlapped = build_engine("Qwen/Qwen3-14B", "H200", None, ARGS, None, True)
    layers = load_model("Qwen/Qwen3-14B").layers
    cpu = cal.cpu_step_ms * 1e-3
    decode = ScheduledStep([], [], 4, 2000, 0, 0, 0, 0)        # uniform: a full graph
    mixed = ScheduledStep([], [], 4, 2000, 16, 0, 0, 1)        # a prefill too: piecewise
    assert sync.cost.step_duration_s(decode) - overlapped.cost.step_duration_s(decode) == pytest.approx(
        cpu + 4 * cal.cpu_per_seq_us * 1e-6)
    assert sync.cost.step_duration_s(mixed) - overlapped.cost.step_duration_s(mixed) == pytest.approx(
        cpu + 5 * cal.cpu_per_seq_us * 1e-6 + layers * cal.sync_piecewise_layer_us * 1e-6)
    assert layers == 40 and cal.sync_piecewise_layer_us > 0


def test_short_proposals_verify_fewer_tokens_and_leave_the_full_graph() -> None:
    measured = [1.0, 1.0, 0.5, 0.5]  # half the proposals are 2 tokens long, all accepted
    spec = _ngram(4, rates=None).with_measured(measured, 1.0, 3.0)
    engine = build_engine("Qwen/Qwen3-4B", "H200", None, ARGS, None, True, None, spec)
    for i in range(32):
        engine.add(f"r{i}", tuple(range(i * 1000, i * 1000 + 50)), 200, 0.0)
    t = 0.0
    while engine.has_work():
        r = engine.step(t)
        t += r.duration_s
    c = engine.stats.spec_decode
    assert c.num_drafts > 1000
    assert c.num_draft_tokens / c.num_drafts == pytest.approx(3.0, abs=0.1)
    assert c.num_accepted_tokens == c.num_draft_tokens  # what was proposed was accepted
    for got, want in zip(c.accepted_per_pos, measured):
        assert got / c.num_drafts == pytest.approx(want, abs=0.03)
    # a batch with one short proposal replays piecewise graphs; all whole: the full graph
    whole = ScheduledStep([], [], 4, 400, 0, 0, 0, 0, 16, 4)
    short = ScheduledStep([], [], 4, 400, 0, 0, 0, 0, 14, 4)
    assert engine.cost.parts(whole).launches == 1 < engine.cost.parts(short).launches


def test_ngram_and_draft_models_lose_async_scheduling_eagle_keeps_it() -> None:
    ngram = build_engine("Qwen/Qwen3-4B", "H200", None, ARGS, None, True, None, _ngram(2, [0.5, 0.2]))
    eagle = build_engine("Qwen/Qwen3-4B", "H200", None, ARGS, None, True, None,
                         SpeculativeConfig(method="eagle", model="no/such-head", num_speculative_tokens=2,
                                           acceptance=[0.5, 0.2]))
    assert ngram.config.async_scheduling is False and eagle.config.async_scheduling is True


def test_a_draft_models_forwards_run_on_the_cpu_an_eagle_heads_replay_graphs() -> None:
    # vLLM 0.25.1 gives the drafter piecewise graphs for EAGLE-type methods only. With CPU
    # costs far above any kernel's time each drafter forward costs its CPU side: the host's
    # time per drafter layer for a draft model (every kernel launched from Python), a graph
    # piece and attention per layer at the launch cost for an EAGLE head.
    cal = default_calibration("H200").model_copy(update={"launch_us": 1000.0, "draft_layer_us": 2000.0})
    step = ScheduledStep(reqs=[], num_new=[], decode_seqs=1, decode_context_tokens=1000,
                         prefill_tokens=0, prefill_context_tokens=0, preempted=0,
                         draft_tokens=2, drafting_seqs=1)
    for method, per_forward_s in (("draft_model", 28 * 2e-3), ("eagle3", (2 * 28 + 8) * 1e-3)):
        cfg = SpeculativeConfig(method=method, model="Qwen/Qwen3-0.6B", num_speculative_tokens=2,
                                acceptance=[0.5, 0.2])
        engine = build_engine("Qwen/Qwen3-14B", "H200", None, ARGS, cal, True, None, cfg)
        assert engine.cost.spec.drafter.model.layers == 28
        assert engine.cost.draft_s(step) == pytest.approx(2 * per_forward_s, rel=1e-9)
    assert SpeculativeConfig(method="draft_model", model="x", num_speculative_tokens=2).drafter_on_graphs is False


def test_the_simulator_needs_an_acceptance() -> None:
    with pytest.raises(ServelabError, match="--spec-acceptance"):
        build_engine("Qwen/Qwen3-4B", "H200", None, ARGS, None, True, None, _ngram(2))


# -- the planner: drafter weights and KV ------------------------------------------------------
def test_a_draft_model_takes_its_weights_and_joins_every_kv_block() -> None:
    target, draft = load_model("Qwen/Qwen3-14B"), load_model("Qwen/Qwen3-0.6B")
    alone = plan_memory(target, H200, ARGS)
    both = plan_memory(target, H200, ARGS, draft=draft)
    w_draft = loaded_weights_bytes(draft, ARGS)
    per_token = kv_bytes_per_token_per_gpu(target, "auto", 1, 1) + kv_bytes_per_token_per_gpu(draft, "auto", 1, 1)
    assert both.draft_weights_gib == pytest.approx(w_draft / GIB)
    assert both.kv_bytes_per_token_per_gpu == per_token
    assert both.num_gpu_blocks == math.floor((alone.kv_cache_gib * GIB - w_draft) / (per_token * 16))


# -- where speculation pays ----------------------------------------------------------------------
def test_the_crossover_comes_from_the_cost_model() -> None:
    base = build_engine("Qwen/Qwen3-14B", "H200", None, ARGS, None)
    never = build_engine("Qwen/Qwen3-14B", "H200", None, ARGS, None, True, None, _ngram(2, [0.0, 0.0]))
    assert PayoffModel(base.cost, never.cost, split_acceptance((0.0, 0.0), 2)).crossover(500, 1024) == 1
    half = build_engine("Qwen/Qwen3-14B", "H200", None, ARGS, None, True, None, _ngram(1, [0.5]))
    model = PayoffModel(base.cost, half.cost, split_acceptance((0.5,), 1))
    p = model.at(1, 500)
    step = ScheduledStep([], [], 1, 500, 0, 0, 0, 0)
    verify = ScheduledStep([], [], 1, 500, 0, 0, 0, 0, 1, 1)
    assert p.speedup == pytest.approx(1.5 * base.cost.step_duration_s(step) / half.cost.step_duration_s(verify))
    cross = model.crossover(500, 1024)
    assert cross is not None and 1 < cross <= 1024
    assert model.at(cross - 1, 500).speedup >= 1.0 > model.at(cross, 500).speedup


def test_a_closed_loops_refill_puts_whole_prompts_in_a_share_of_the_steps() -> None:
    # Known answer: 4 sequences of 400 output tokens at one token a step finish 0.01
    # requests a step, independently, so a step carries j whole 100-token prompts (causal
    # context 100 x 101 / 2 each) with Poisson(0.01) odds, and the baseline's step is that
    # mixture of priced steps.
    refill = Refill(prompt_tokens=100, cached_tokens=0, output_tokens=400)
    shares = steady_prefills(refill, 4, 1.0)
    # two prompts in a step (odds 5e-5) are dropped: the shares of none and one, renormalised
    assert [p.prompts for _, p in shares] == [0, 1]
    (s0, p0), (s1, p1) = shares
    assert (s0, s1) == (pytest.approx(1 / 1.01), pytest.approx(0.01 / 1.01))
    assert (p1.tokens, p1.context_tokens) == (100, 5050)
    # 2.5 prompts a step on average: Poisson(2.5) shares (the counts with odds below 1e-4
    # dropped and the rest renormalised); cached tokens are attended
    many = steady_prefills(Refill(prompt_tokens=10, cached_tokens=20, output_tokens=40), 50, 2.0)
    assert sum(sh for sh, _ in many) == pytest.approx(1.0)
    # from the log of the mass: no underflow where exp(-r) is 0 (r = 1,000), about r prompts
    wide = steady_prefills(Refill(prompt_tokens=10, cached_tokens=0, output_tokens=1), 1000, 1.0)
    assert sum(sh for sh, _ in wide) == pytest.approx(1.0) and len(wide) <= 25
    assert sum(sh * pre.prompts for sh, pre in wide) == pytest.approx(1000, rel=1e-3)
    for j in range(5):
        sh, pre = many[j]
        assert sh == pytest.approx(math.exp(-2.5) * 2.5 ** j / math.factorial(j), rel=1e-3)  # tail < 1e-4 dropped
        assert (pre.prompts, pre.tokens, pre.context_tokens) == (j, 10 * j, j * (20 * 10 + 55))
    base = build_engine("Qwen/Qwen3-14B", "H200", None, ARGS, None)
    half = build_engine("Qwen/Qwen3-14B", "H200", None, ARGS, None, True, None, _ngram(1, [0.5]))
    model = PayoffModel(base.cost, half.cost, split_acceptance((0.5,), 1))
    decode = base.cost.step_duration_s(ScheduledStep([], [], 4, 2000, 0, 0, 0, 0))
    mixed = base.cost.step_duration_s(ScheduledStep([], [], 4, 2000, 100, 5050, 0, 1))
    assert model.base_step_s(4, 500, refill) == pytest.approx(s0 * decode + s1 * mixed)
    # a loop whose requests never end brings no prefill: the decode-only payoff
    endless = Refill(prompt_tokens=100, cached_tokens=0, output_tokens=1e12)
    assert model.at(64, 500, endless).speedup == pytest.approx(model.at(64, 500).speedup, rel=1e-6)


def test_a_loop_of_equal_outputs_prefills_in_waves() -> None:
    # Known answer: 16 sequences that each decode exactly 128 tokens finish together and
    # are replaced together, so every 128 / t steps one step prefills all 16 prompts
    # (200 tokens, causal context 200 x 201 / 2 each) and the decode steps between carry
    # none: each step costs its decode plus t / 128 of that prefill step.
    rates = (0.8, 0.6, 0.1, 0.02)
    base = build_engine("Qwen/Qwen3-14B", "H200", None, ARGS, None)
    spec = build_engine("Qwen/Qwen3-14B", "H200", None, ARGS, None, True, None, _ngram(4, list(rates)))
    model = PayoffModel(base.cost, spec.cost, split_acceptance(rates, 4))
    waves = Refill(prompt_tokens=200, cached_tokens=0, output_tokens=128, waves=True)
    prefill = ScheduledStep([], [], 0, 0, 16 * 200, 16 * (200 * 201 // 2), 0, 16)
    assert model.base_step_s(16, 264, waves) == pytest.approx(
        model.base_step_s(16, 264) + base.cost.step_duration_s(prefill) / 128)
    t = model.tokens_per_step(4)
    assert model.spec_step_s(16, 264, 4, waves) == pytest.approx(
        model.spec_step_s(16, 264, 4) + spec.cost.step_duration_s(prefill) * t / 128)
    # twice the output per request: one wave every twice as many steps, half the added time
    longer = Refill(prompt_tokens=200, cached_tokens=0, output_tokens=256, waves=True)
    added = model.base_step_s(16, 264, waves) - model.base_step_s(16, 264)
    assert model.base_step_s(16, 264, longer) - model.base_step_s(16, 264) == pytest.approx(added / 2)
    # every prompt token in the prefix cache: nothing to prefill, the decode step alone
    cached = Refill(prompt_tokens=0, cached_tokens=200, output_tokens=128, waves=True)
    assert model.spec_step_s(16, 264, 4, cached) == model.spec_step_s(16, 264, 4)


def test_the_report_prices_waves_only_where_every_request_decoded_one_length() -> None:
    # The same-machine run's low-acceptance cells: 128 tokens for every request of every
    # cell, so waves of 128. One cell with another fixed length, one request of another
    # length, lengths the stored copy dropped, or a single request: independent finishes.
    data = load_experiment(ROOT / "docs/validation/spec-cross-2026-12-07/results/exp")
    cells = [c for c in data.cells if c.arm == "ngram-k6-low"]
    refill = refill_of(cells)
    assert refill is not None and refill.waves and refill.output_tokens == 128
    first = cells[0]
    for other in (dataclasses.replace(first, output_lens=(64,) * len(first.output_lens)),
                  dataclasses.replace(first, output_lens=first.output_lens[:-1] + (127,)),
                  dataclasses.replace(first, output_lens=())):
        independent = refill_of([other] + cells[1:])
        assert independent is not None and not independent.waves
    alone = refill_of([dataclasses.replace(first, output_lens=(128,))])
    assert alone is not None and not alone.waves


def test_speculation_pays_less_where_its_sooner_finishes_bring_more_prefill() -> None:
    # With every draft accepted a sequence finishes t times sooner, so the speculative engine
    # prefills t times more per step than its baseline: at 64 in flight with 128-token
    # outputs that costs it more than the baseline, and the gain shrinks.
    rates = (1.0, 1.0, 1.0, 1.0)
    base = build_engine("Qwen/Qwen3-14B", "H200", None, ARGS, None)
    spec = build_engine("Qwen/Qwen3-14B", "H200", None, ARGS, None, True, None, _ngram(4, list(rates)))
    model = PayoffModel(base.cost, spec.cost, split_acceptance(rates, 4))
    refill = Refill(prompt_tokens=200, cached_tokens=0, output_tokens=128)
    assert model.at(64, 264, refill).speedup < model.at(64, 264).speedup
    assert model.at(1, 264, refill).speedup == pytest.approx(model.at(1, 264).speedup, rel=0.02)


def _committed_run(root: Path, sim: dict[str, Path]) -> tuple[ExperimentData, ExperimentSpec]:
    """A committed real run's experiment (`root`/results/exp) and its spec with the
    simulator's `sim` settings (calibration, profile) set. The served directory held the
    catalog model's own config: the catalog's is used, wherever the test runs."""
    data = load_experiment(root / "results/exp")
    stored = ExperimentSpec.from_stored(data.manifest["spec"])
    return data, stored.model_copy(update={
        "model": stored.model.model_copy(update={"path": None}),
        "sim": stored.sim.model_copy(update=sim)})


def test_the_payoff_table_matches_the_one_machine_runs_measured_speed_ups() -> None:
    # The committed one-machine run (docs/validation/spec-onehost-2026-12-05, its host's
    # figures): every n-gram cell's simulated speed-up within 15 % of the measured one. The
    # decode-only steady state (no refill) had c64 at x2.96 against a measured x1.73.
    root = ROOT / "docs/validation/spec-onehost-2026-12-05"
    data, spec = _committed_run(root, {"calibration": root / "host/host.json"})
    checked = 0
    for wl in ("sharegpt", "prefix"):
        for arm in ("ngram-k2", "ngram-k4", "ngram-k6"):
            table, _ = payoff_table(data, spec, arm, wl, "nospec", data.manifest["gpu"])
            assert table is not None
            for row in table.rows:
                sim, measured = float(row[2].lstrip("x")), float(row[3].lstrip("x"))
                assert abs(sim / measured - 1) <= 0.15, (wl, arm, row)
                checked += 1
    assert checked == 24


def test_the_payoff_places_the_same_machine_crossover_where_it_was_measured() -> None:
    # The committed same-machine run (docs/validation/spec-cross-2026-12-07: kernel profile
    # and cells on one H100, the host's figures fitted there on nospec and ngram-k2): the
    # low-acceptance arm measured paying at c16 (x1.05) and not at c32 (x0.96). Every request
    # decoded 128 tokens, so the loop runs in waves; priced so, every simulated speed-up is
    # within 10 % of the measured one and the crossover falls between the two loads. The
    # same cells priced as independent finishes (their output lengths dropped) put it
    # below c16.
    root = ROOT / "docs/validation/spec-cross-2026-12-07"
    data, spec = _committed_run(root, {"calibration": root / "fit/host.json",
                                       "profile": root / "results/profile.json"})
    table, line = payoff_table(data, spec, "ngram-k6-low", "sharegpt", "nospec", data.manifest["gpu"])
    assert table is not None and "prefilled again in waves" in table.note
    assert len(table.rows) == 5
    for row in table.rows:
        sim, measured = float(row[2].lstrip("x")), float(row[3].lstrip("x"))
        assert abs(sim / measured - 1) <= 0.10, row
    assert "measured: pays at batches up to 16, not at 32 and above; agrees" in line
    independent = dataclasses.replace(data, cells=[dataclasses.replace(c, output_lens=()) for c in data.cells])
    _, poisson = payoff_table(independent, spec, "ngram-k6-low", "sharegpt", "nospec", data.manifest["gpu"])
    assert "; disagrees" in poisson


# -- counters: vLLM's /metrics text, the simulator's, the report ----------------------------------
def test_a_real_vllm_dump_parses_to_its_acceptance() -> None:
    # vLLM 0.32.0 (CPU build), a tiny random Qwen3 with n-gram drafting, K = 3: four greedy
    # completions of a repeating prompt; the dump's counters say 20 drafts, 56 draft tokens,
    # 56 accepted, 20 / 20 / 16 accepted at positions 0 / 1 / 2.
    text = (ROOT / "tests" / "data" / "vllm-0.32.0-cpu-ngram-metrics.txt").read_text()
    snap = parse_server_metrics(text, "dump")
    stats = spec_decode_stats(snap.spec_num_drafts_total, snap.spec_num_draft_tokens_total,
                              snap.spec_num_accepted_tokens_total, snap.spec_accepted_per_pos_total)
    assert (stats.num_drafts, stats.draft_tokens, stats.accepted_tokens) == (20, 56, 56)
    assert stats.acceptance_rate_pct == pytest.approx(100.0)
    assert stats.acceptance_length == pytest.approx(1 + 56 / 20)
    assert stats.per_position_acceptance == pytest.approx((1.0, 1.0, 0.8))


def _ngram_experiment(tmp_path: Path, loads: str) -> Path:
    """A simulated experiment (Qwen3-4B on an H200: a baseline and an n-gram arm at K = 4)
    at `loads` (the spec's YAML), run by `servelab run`; its directory."""
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: s\nengine: sim\nmodel: Qwen/Qwen3-4B\nhardware: {gpu: H200}\n"
        "arms:\n  - name: base\n    baseline: true\n  - name: ng\n    speculative:\n"
        "      method: ngram\n      num_speculative_tokens: 4\n      acceptance: [0.8, 0.6, 0.1, 0.02]\n"
        "workloads: [{name: r, dataset_name: random, random_input_len: 256, random_output_len: 64}]\n"
        f"loads: {loads}\n")
    out = tmp_path / "out"
    proc = run_servelab("run", str(spec), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def test_a_sim_experiment_reports_speed_up_acceptance_advice_and_crossover(tmp_path: Path) -> None:
    out = _ngram_experiment(tmp_path, "{concurrency: [1, 8], num_prompts: {per_concurrency: 4, min: 8, max: 32}}")
    cell = json.loads((out / "cells" / "ng" / "r" / "c8.json").read_text())
    res = cell["result"]
    assert res["spec_decode_num_drafts"] > 0
    assert len(res["spec_decode_per_position_acceptance_rates"]) == 4
    md = (out / "report.md").read_text()
    assert "r: speculative arm ng vs base" in md and "r: where ng pays" in md
    line = next(x for x in md.splitlines() if x.startswith("- ng on r:"))
    assert "advised K" in line and "decode batch" in line
    # the random workload's outputs are all 64 tokens: the loop refills in waves
    assert "prefilled again in waves" in md
    # at batch 1 verifying more rows is free (the step reads the weights either way), so
    # every position pays
    assert "advised K 4 at c1" in line


def _costly_speculation(flag: str, tmp_path: Path) -> Path:
    """A file for `flag` under which no speculation pays: a calibration whose speculative
    path costs 50 ms a step (a 4B model's decode step is a few ms, at most 5 tokens a step),
    or the shipped H200 profile with every GEMM of two rows and more 50x as long (verifying
    K + 1 = 5 rows then costs far more than the one-row step it replaces, at batch 1 and
    above)."""
    if flag == "--calibration":
        path = tmp_path / "host.json"
        default_calibration("H200").model_copy(update={"spec_step_us": 50_000.0}).save(path)
        return path
    data = json.loads((ROOT / "src/servelab/data/profiles/h200.json").read_text())
    data["gemm"] = [{**g, "time_us": g["time_us"] * (50 if g["m"] >= 2 else 1)} for g in data["gemm"]]
    path = tmp_path / "slow-gemm.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("flag", "named"), [("--calibration", "calibration"), ("--profile", "profile")])
def test_the_report_prices_the_payoff_with_the_given_figures(tmp_path: Path, flag: str, named: str) -> None:
    # Known answer: under the costly file the payoff says the arm pays at no batch; the
    # experiment's own report (shipped figures and profile) has it pay at c1. The report
    # names the file; a missing one is named by its flag, and the flag is refused with
    # --csv.
    out = _ngram_experiment(tmp_path, "{concurrency: [1], num_prompts: 8}")
    shipped = next(x for x in (out / "report.md").read_text().splitlines() if x.startswith("- ng on r:"))
    assert "paying at no batch" not in shipped
    costly = _costly_speculation(flag, tmp_path)
    proc = run_servelab("report", str(out), flag, str(costly))
    assert proc.returncode == 0, proc.stderr
    md = (out / "report.md").read_text()
    assert f"The simulated payoff uses the {named} {costly}." in md
    line = next(x for x in md.splitlines() if x.startswith("- ng on r:"))
    assert "the simulation has it paying at no batch" in line
    bad = run_servelab("report", str(out), flag, str(tmp_path / "missing.json"))
    assert bad.returncode == 2 and flag in bad.stderr and "Traceback" not in bad.stderr
    csv = run_servelab("report", str(out), "--csv", str(tmp_path / "c.csv"), flag, str(costly))
    assert csv.returncode == 2 and f"{flag} is for the report" in csv.stderr


def test_the_advised_k_shrinks_as_verification_rows_stop_being_free() -> None:
    rates = (0.8, 0.6, 0.1, 0.02)
    base = build_engine("Qwen/Qwen3-4B", "H200", None, ARGS, None)
    spec = build_engine("Qwen/Qwen3-4B", "H200", None, ARGS, None, True, None, _ngram(4, list(rates)))
    model = PayoffModel(base.cost, spec.cost, split_acceptance(rates, 4))
    ks = [model.at(c, 300).best_k for c in (1, 8, 32, 64, 256)]
    assert ks[0] == 4 and ks[-1] < 4
    assert all(b <= a for a, b in zip(ks, ks[1:]))


def test_the_payoff_prices_each_draft_length_on_its_own_graphs() -> None:
    # vLLM's V1 runner captures multiples of K + 1: the payoff's K = 2 engine pads a
    # 303-token verification to 306 (multiples of 3, the largest 498), the arm's K = 4 one to 305.
    rates = (0.8, 0.6, 0.1, 0.02)
    base = build_engine("Qwen/Qwen3-4B", "H200", None, ARGS, None)
    spec = build_engine("Qwen/Qwen3-4B", "H200", None, ARGS, None, True, None, _ngram(4, list(rates)))
    model = PayoffModel(base.cost, spec.cost, split_acceptance(rates, 4))
    k2, k4 = model._cost(2).ops, model._cost(4).ops
    assert (k2.capture[-1], k2.padded(303)) == (498, 306)
    assert (k4.capture[-1], k4.padded(303)) == (500, 305)
    assert spec.cost.ops.capture[-1] == 500  # the arm's own model is left as it was


def test_sim_run_flags_report_the_acceptance(tmp_path: Path) -> None:
    proc = run_servelab("sim", "run", "--model", "Qwen/Qwen3-4B", "--gpu", "H200", "--dataset-name",
                        "random", "--random-input-len", "128", "--random-output-len", "32",
                        "--num-prompts", "8", "--max-concurrency", "2", "--speculative-config",
                        '{"method": "ngram", "num_speculative_tokens": 2}', "--spec-acceptance", "1,1")
    assert proc.returncode == 0, proc.stderr
    assert "Speculative Decoding" in proc.stdout
    assert "Acceptance length:                       3.00" in proc.stdout
    bad = run_servelab("sim", "run", "--model", "Qwen/Qwen3-4B", "--gpu", "H200", "--dataset-name",
                       "random", "--num-prompts", "4", "--spec-acceptance", "0.5")
    assert bad.returncode != 0 and "--spec-acceptance needs --speculative-config" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_the_experiment_planner_counts_a_draft_arms_drafter(tmp_path: Path) -> None:
    from servelab.experiment.planning import ArmPlanner

    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nengine: sim\nmodel: Qwen/Qwen3-14B\nhardware: {gpu: H200}\n"
        "arms:\n  - name: base\n  - name: d\n    speculative:\n      method: draft_model\n"
        "      model: Qwen/Qwen3-0.6B\n      num_speculative_tokens: 2\n      acceptance: [0.5, 0.2]\n"
        "workloads: [{name: r, dataset_name: random}]\nloads: {concurrency: [1]}\n")
    spec = load_spec(path)
    base = ArmPlanner.for_arm(spec, spec.arm("base"), "H200").memory()
    draft = ArmPlanner.for_arm(spec, spec.arm("d"), "H200").memory()
    assert base.draft_weights_gib == 0.0
    assert draft.weights_gib == pytest.approx(base.weights_gib + draft.draft_weights_gib)
    assert draft.kv_bytes_per_token_per_gpu == base.kv_bytes_per_token_per_gpu + 114_688  # 28 x 8 x 128 x 2 x 2 B


def test_the_sim_server_speculates_over_http_and_logs_vllms_rule(tmp_path: Path) -> None:
    from conftest import start_sim_server, stop_sim_server

    srv = start_sim_server("--model", "Qwen/Qwen3-4B", "--gpu", "H200", "--time-scale", "50",
                           "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}',
                           "--spec-acceptance", "1,1")
    try:
        assert ("Async scheduling not supported with ngram-based speculative decoding and will "
                "be disabled.") in srv.text()
        assert "Asynchronous scheduling is disabled." in srv.text()
        out = tmp_path / "r.json"
        proc = run_servelab("bench", "--base-url", srv.url, "--model", "Qwen/Qwen3-4B",
                            "--dataset-name", "random", "--random-input-len", "64",
                            "--random-output-len", "31", "--num-prompts", "4", "--max-concurrency", "2",
                            "--save-result", "--result-filename", str(out))
        assert proc.returncode == 0, proc.stderr
        res = json.loads(out.read_text())
    finally:
        stop_sim_server(srv)
    # acceptance 1: after each prefill token, ten verifications of 3 tokens each
    assert res["spec_decode_num_drafts"] == 4 * 10
    assert res["spec_decode_acceptance_length"] == pytest.approx(3.0)
    assert res["total_output_tokens"] == 4 * 31


def test_a_measured_acceptance_becomes_the_simulators_input() -> None:
    synthetic = SpeculativeConfig(method="draft_model", model="Qwen/Qwen3-0.6B", num_speculative_tokens=4,
                                  rejection_sample_method="synthetic",
                                  synthetic_acceptance_rates=[0.8, 0.7, 0.6, 0.5])
    # counted rates: one short, one rising by rounding noise
    got = synthetic.with_measured((0.79, 0.70, 0.701), 0.9)
    assert got.acceptance == [0.79, 0.70, 0.70, 0.0]
    assert got.proposal_rate == 0.9
    assert got.rejection_sample_method is None and got.rates() == (0.79, 0.70, 0.70, 0.0)


def test_a_cell_without_counters_keeps_the_arms_own_acceptance() -> None:
    # an SGLang arm or a failed scrape stores no spec counters: the simulator must not read
    # that as "nothing accepted"
    from servelab.experiment.simulation import measured_speculation

    arm = SpeculativeConfig(method="draft_model", model="Qwen/Qwen3-0.6B", num_speculative_tokens=3,
                            rejection_sample_method="synthetic", synthetic_acceptance_rates=[0.8, 0.6, 0.4])
    result = StoredResult(duration=1.0, completed=2, total_input_tokens=10, total_output_tokens=100,
                          request_throughput=2.0, output_throughput=100.0, total_token_throughput=110.0)
    got = measured_speculation(arm, result, [])
    assert got.rates() == (0.8, 0.6, 0.4)


def test_a_speculative_engine_without_acceptance_is_refused() -> None:
    cfg = SimConfig(num_gpu_blocks=64, block_size=16, max_num_seqs=4, max_num_batched_tokens=256,
                    max_model_len=512, speculative=_ngram(2))
    with pytest.raises(ValueError, match="per-position acceptance"):
        SimEngine(cfg, AffineCost(step_s=1e-3))


def test_a_multi_token_chunk_splits_its_gap_as_the_client_counts_it() -> None:
    cfg = SimConfig(num_gpu_blocks=64, block_size=16, max_num_seqs=4, max_num_batched_tokens=256,
                    max_model_len=512, async_scheduling=False, speculative=_ngram(2, [1.0, 1.0]))
    engine = SimEngine(cfg, AffineCost(step_s=6e-3))
    from servelab.sim.cluster import Cluster, NetworkCosts
    from servelab.sim.offline import OfflineRequest, simulate

    run = simulate(Cluster([engine], None, NetworkCosts(0.0, 0.0, 0.0, 0.0)),
                   [OfflineRequest(0, tuple(range(20)), 7)], [0.0])
    rec = run.records[0]
    # prefill step (6 ms) gives token 1; two verifications of 3 tokens, 6 ms each: ITLs 2 ms
    assert rec.output_len == 7 and rec.ttft_ms == pytest.approx(6.0)
    assert rec.itl_ms == pytest.approx([2.0] * 6)
    assert rec.chunks == 3  # 1 + 3 + 3 tokens: what the multi-token-chunk warning counts
    assert run.spec_decode.num_drafts == 2 and run.spec_decode.acceptance_length == pytest.approx(3.0)


def test_a_sim_spec_arm_without_acceptance_is_refused_before_anything_runs(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nengine: sim\nmodel: Qwen/Qwen3-14B\nhardware: {gpu: H200}\n"
        "arms:\n  - name: base\n  - name: ng\n    speculative: {method: ngram, num_speculative_tokens: 2}\n"
        "workloads: [{name: r, dataset_name: random}]\nloads: {concurrency: [1]}\n")
    with pytest.raises(ServelabError, match=r"s\.yaml:8: arms\[1\]\.speculative: the simulator draws"):
        load_spec(path)
